"""`collect JOBID` on a running job: the node side is `hpc-hangkit slurm-capture`
(run on each node by `srun --overlap`); here it runs for real against three
real armed ranks on this machine (rank 1 parked elsewhere), and the collector
merges its framed answer into a tree whose roll call names rank 1. (The srun
fan-out itself is exercised on the 2-node test cluster.)
"""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from testlib import dump_samples, validate_report, wait_for
from hpc_hangkit import config, gather, wire
from hpc_hangkit.collect.attempt import collect_attempt

RANKS = 3
SCRIPT = textwrap.dedent("""
    import os, time
    def wait_in_allreduce():
        while True:
            time.sleep(0.05)
    def wait_in_barrier():
        while True:
            time.sleep(0.05)
    if os.environ["RANK"] == "1":
        wait_in_barrier()
    else:
        wait_in_allreduce()
""")


def _job_env(scratch, rank):
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("HANGKIT_") and k not in ("PYTHONPATH", "HPC_HANGKIT_CONFIG")}
    s = config.load_settings(env={"HANGKIT_WATCHDOG_PERIOD_S": "0.5"}, path=os.devnull)
    env = s.to_env(str(scratch), base_env=base)
    env.update(RANK=str(rank), WORLD_SIZE=str(RANKS), LOCAL_RANK=str(rank))
    return env


@pytest.mark.timeout(120)
def test_live_capture_answer_merges_into_a_roll_call(spawn, tmp_path):
    scratch = tmp_path / "job_7" / "attempt_0"
    scratch.mkdir(parents=True)
    script = tmp_path / "ranks.py"
    script.write_text(SCRIPT)
    for r in range(RANKS):
        spawn([sys.executable, str(script)], env=_job_env(scratch, r),
              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: len(list((scratch / "heartbeats").glob("*.hb"))) == RANKS and
             len(list((scratch / "watchdog").glob("*.log"))) == RANKS, 30, interval_s=0.2,
             what="%d ranks to arm (heartbeat and watchdog log each)" % RANKS)
    wait_for(lambda: (lambda n: len(n) == RANKS and min(n.values()) >= 3)(dump_samples(str(scratch / "watchdog"))),
             30, interval_s=0.2, what="3 stall dumps per rank")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_")}
    env["HPC_HANGKIT_CONFIG"] = os.devnull
    p = subprocess.run([sys.executable, "-m", "hpc_hangkit", "slurm-capture", "--scratch",
                        str(scratch)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=90)
    assert p.returncode == 0, p.stderr
    # srun -l labels each line with the task number: the collector must cope
    text = "\n".join("0: " + ln for ln in p.stdout.decode().splitlines())
    hd = tmp_path / "got" / "hang_detector"
    g = gather.merge_answers(text, str(hd))
    n, notes, hosts = g.files, g.notes, g.hosts
    assert n >= 2 * RANKS and len(hosts) == 1, (n, notes)
    assert len(list((hd / "watchdog").glob("rank_*.log"))) == RANKS
    from hpc_hangkit.rollcall import report_from_dir

    rep = report_from_dir(str(hd))
    assert rep.suspect_ranks == [1], (rep.verdict, rep.suspect_ranks, rep.warnings)

    # the job ends: its epilog stores the scratch (job user root here), and
    # `hpc-hangkit collect` reads storage -- also by its array-task name
    storage = tmp_path / "storage"
    res = collect_attempt(str(tmp_path), "7", 0, "file://%s" % storage, uid=0, gid=0,
                          user="root", deadline=time.monotonic() + 30, host="hk1")
    assert res["status"] == "complete", res
    (storage / "5_1.jobid").write_text("7\n")
    empty = tmp_path / "otherscratch"
    empty.mkdir()
    cfg = tmp_path / "site.toml"
    cfg.write_text('scratch_dir = "%s"\nstorage_url = "file://%s"\n' % (empty, storage))
    env["HPC_HANGKIT_CONFIG"] = str(cfg)
    for jid in ("7", "5_1"):
        c = subprocess.run([sys.executable, "-m", "hpc_hangkit", "collect", jid, "--stored",
                            "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=60)
        assert c.returncode == 0, c.stderr
        assert validate_report(c.stdout, "collect %s --stored --json" % jid)["suspect_ranks"] == [1], \
            c.stdout[:2000]
    c = subprocess.run([sys.executable, "-m", "hpc_hangkit", "collect", "7", "--stored"],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert c.returncode == 0 and b"wait_in_barrier" in c.stdout, c.stdout


def test_unsafe_names_in_an_answer_are_ignored(tmp_path):
    import base64
    import io

    buf = io.StringIO()
    files = {"../../evil": b"x", "/etc/passwd": b"y", "watchdog/rank_0.pid1.log": b"ok\n",
             "hang_detector/report.txt": b"r\n"}
    wire.emit_doc({"host": "hk2", "files": {k: {"size": len(v), "offset": 0,
                                                 "b64": base64.b64encode(v).decode()}
                                             for k, v in files.items()}}, buf)
    hd = tmp_path / "hd"
    g = gather.merge_answers(buf.getvalue(), str(hd))
    n, notes, hosts = g.files, g.notes, g.hosts
    assert n == 2 and hosts == ["hk2"]
    assert (hd / "watchdog" / "rank_0.pid1.log").read_bytes() == b"ok\n"
    assert (hd / "report.txt").read_bytes() == b"r\n"
    assert not (tmp_path / "evil").exists()
    assert sum("unsafe" in x for x in notes) == 2, json.dumps(notes)


def test_monitor_copies_in_the_batch_node_answer_do_not_duplicate_ranks(tmp_path):
    import base64
    import io

    def doc(host, files):
        buf = io.StringIO()
        wire.emit_doc({"host": host, "files": {k: {"size": len(v), "offset": 0,
                                                    "b64": base64.b64encode(v).decode()}
                                                for k, v in files.items()}}, buf)
        return buf.getvalue()

    owner = b"Stack (most recent call first):\n  File 'x.py', line 4 in f\n" * 3
    text = (doc("hk1", {"watchdog/rank_2.pid7.log": owner[:50], "heartbeats/h.hb": b"A"})
            + doc("hk2", {"watchdog/rank_2.pid7.log": owner, "heartbeats/h.hb": b"B"}))
    hd = tmp_path / "hd"
    g = gather.merge_answers(text, str(hd))
    n, notes, hosts = g.files, g.notes, g.hosts
    assert sorted(os.listdir(hd / "watchdog")) == ["rank_2.pid7.log"]
    assert (hd / "watchdog" / "rank_2.pid7.log").read_bytes() == owner
    assert sorted(os.listdir(hd / "heartbeats")) == ["h.hb", "h.hk2.hb"]
