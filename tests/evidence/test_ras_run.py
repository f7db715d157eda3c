"""End to end: ``hpc-hangkit run`` on a real 4-rank gloo job that hangs, with the ncclras stand-in on
PATH replaying the real-format b_history polls (RAS needs GPUs; the stand-in replays its format).

The report must show the RAS view (communicator, ranks behind, AllReduce) beside the stack view.
The replay is held at its first poll until the stack source suspects the gloo hang, so both views
describe the same moment of the run.
"""
from testlib import TESTS, wait_for
import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="the job is a real torch.distributed gloo job")

HERE = TESTS
REPO = os.path.dirname(HERE)
NCCL = os.path.join(HERE, "fixtures", "nccl")
STANDIN_DIR = os.path.join(HERE, "ncclras_standin")


def events(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


@pytest.mark.timeout(240)
def test_run_confirms_and_report_shows_ras_beside_stacks(spawn, tmp_path):
    polls = tmp_path / "polls"
    shutil.copytree(os.path.join(NCCL, "b_history"), polls)
    hold = tmp_path / "release"
    out = tmp_path / "out"
    env = dict(os.environ, PATH=STANDIN_DIR + os.pathsep + os.environ.get("PATH", ""),
               NCCLRAS_STANDIN_DIR=str(polls), NCCLRAS_STANDIN_STATE=str(tmp_path / "state"),
               NCCLRAS_STANDIN_HOLD=str(hold), NCCLRAS_STANDIN_LOG=str(tmp_path / "argv.log"),
               NCCLRAS_STANDIN_TEXT=os.path.join(NCCL, "b_allreduce_rank5_behind.txt"),
               HANGKIT_SCRATCH_DIR=str(tmp_path / "scratch"))
    env.pop("NCCL_RAS_ADDR", None)
    argv = [sys.executable, "-m", "hpc_hangkit", "run", "--mode", "observe", "--poll-interval", "1",
            "--suspect-after", "1", "--confirm-duration", "10", "--watchdog-period", "1",
            "--out", str(out), "--",
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
            "--master-port", str(_port()), os.path.join(REPO, "examples", "gloo_divergent.py")]
    p = spawn(argv, env=env, stdout=open(tmp_path / "stdout.txt", "w"), stderr=open(tmp_path / "stderr.txt", "w"))
    ev_path = out / "hang_detector" / "events.jsonl"
    report = out / "hang_detector" / "report.txt"
    stderr_tail = lambda: (tmp_path / "stderr.txt").read_text()[-3000:]  # noqa: E731

    def suspected():
        assert p.poll() is None, stderr_tail()
        return any(e.get("kind") == "suspected" and e.get("key") == "stacks" for e in events(ev_path))

    wait_for(suspected, 160, 0.3, what="the stack source to suspect the hang", detail=stderr_tail)
    hold.write_text("go")
    # the "report" event follows report.txt and report.json, written after the capture
    wait_for(lambda: any(e.get("kind") == "report" for e in events(ev_path)), 60, 0.5,
             what="the report event in %s" % ev_path, detail=stderr_tail)
    assert report.exists(), stderr_tail()
    text = report.read_text()
    # stack view: ranks 0,2,3 wait in sync_grads' all_reduce, rank 1 elsewhere
    assert "sync_grads" in text
    # RAS view: communicator, the rank behind, the collective type
    assert "9a1c3f0e5b7d2468" in text and "AllReduce" in text and "ranks behind: 5" in text
    rep = json.loads((out / "hang_detector" / "report.json").read_text())
    ras = rep["sections"]["nccl_ras"]
    assert ras["communicators"][0]["behind_comm_ranks"] == [5]
    hd = out / "hang_detector" / "nccl_ras"
    assert (hd / "ncclras_report.txt").exists()
    assert "Rank 5 has launched up to operation 15233" in (hd / "ncclras_report.txt").read_text()
    assert len(list(hd.glob("ncclras_*.json"))) >= 5
    argv_seen = json.loads(open(tmp_path / "argv.log").readline())
    assert argv_seen[:2] == ["-f", "json"] and "-h" in argv_seen and "-p" in argv_seen
    kinds = {(e.get("kind"), e.get("key")) for e in events(ev_path)}
    assert ("confirmed", "stacks") in kinds or ("confirmed", "0x9a1c3f0e5b7d2468") in kinds


def _port():
    from conftest import free_port
    return free_port()
