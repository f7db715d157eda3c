"""Real 4-rank gloo jobs (tests/scenarios_fr/) that really hang or really fail, dumped through the
rank-side trigger (boot/_hangkit_fr.py) and hpc_hangkit.flightrec.dump_ranks, then analysed.

Scenarios are those of the project's hang-scenario list: 1 (size mismatch at one line), 2 (an extra
metrics all_reduce on some ranks), 5 (a TP sub-group splits), 6 (an extra all_to_all in a CP group).
gloo raises on a size mismatch instead of hanging (1 and 2): the scenario keeps the raising ranks
alive, the rank that gloo aborted gets a dump_error file, and the test checks that it says so.
"""
import os
import subprocess
import sys
import time

import pytest

from hpc_hangkit.flightrec import dump_ranks, read_dumps, section_from_dir, write_torchfrtrace

from conftest import free_port

pytest.importorskip("torch", reason="the scenarios are real torch.distributed gloo jobs")

HERE = os.path.dirname(os.path.abspath(__file__))
SC = os.path.join(HERE, "scenarios_fr")
BOOT = os.path.join(os.path.dirname(HERE), "hpc_hangkit", "boot")


def line_of(script, marker):
    with open(os.path.join(SC, script)) as f:
        for i, line in enumerate(f, 1):
            if marker in line:
                return i
    raise AssertionError(marker)


def run_scenario(spawn, tmp_path, script, settle_s=4.0, budget_s=60.0):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    port = free_port()
    procs, outs = [], []
    for r in range(4):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="4", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   HANGKIT_MODE="observe", HANGKIT_SCRATCH_DIR=str(scratch), TORCH_FR_BUFFER_SIZE="2000",
                   PYTHONPATH=BOOT)
        out = tmp_path / ("out%d.txt" % r)
        outs.append(out)
        procs.append(spawn([sys.executable, os.path.join(SC, "launch.py"), os.path.join(SC, script)], env=env,
                           stdout=open(out, "w"), stderr=subprocess.STDOUT))
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        texts = [o.read_text() for o in outs]
        if all("step 3" in t for t in texts):
            break
        time.sleep(0.5)
    else:
        raise AssertionError("scenario did not reach step 3: %s" % [o.read_text()[-300:] for o in outs])
    time.sleep(settle_s)   # let the divergent step block (or raise)
    assert not any("done" in o.read_text() for o in outs), "the job finished: no hang"
    hd = tmp_path / "hang_detector"
    t0 = time.monotonic()
    written = dump_ranks(str(scratch), str(hd), ranks=range(4), timeout_s=30)
    took = time.monotonic() - t0
    assert sorted(written) == [0, 1, 2, 3]
    return hd, [o.read_text() for o in outs], took


@pytest.mark.timeout(150)
def test_scenario1_size_mismatch_same_line(spawn, tmp_path):
    hd, outs, _ = run_scenario(spawn, tmp_path, "s1_size_mismatch.py")
    sec = section_from_dir(str(hd))
    assert sec["verdict"] == "SAME_LINE_DIFFERENT_ARGS" and sec["suspect_ranks"] == [0]
    (pg,) = [p for p in sec["pgs"] if p["kind"] == "args"]
    line = line_of("s1_size_mismatch.py", "SYNC_LINE")
    sizes = {tuple(g["ranks"]): g["sizes"] for g in pg["groups"]}
    assert sizes[(0,)] == [[2048]] and [[1024]] in sizes.values()
    assert all(g["where"].endswith("s1_size_mismatch.py:%d (sync)" % line) for g in pg["groups"])
    # gloo raised instead of hanging: the report must say so, not claim a silent hang
    assert any("Received data size doesn't match" in o or "collective raised" in o for o in outs)
    txt = "\n".join(sec["text"])
    assert "no dump" in txt  # the rank gloo aborted cannot be dumped; its file says why


@pytest.mark.timeout(150)
def test_scenario2_extra_metrics_collective_is_split_by_line(spawn, tmp_path):
    hd, outs, _ = run_scenario(spawn, tmp_path, "s2_extra_collective.py")
    sec = section_from_dir(str(hd))
    assert sec["verdict"] == "SPLIT"
    (pg,) = [p for p in sec["pgs"] if p["kind"] in ("line", "args", "type")]
    m = line_of("s2_extra_collective.py", "METRICS_LINE")
    t = line_of("s2_extra_collective.py", "TRAIN_LINE")
    wheres = {g["where"].rsplit("/", 1)[-1]: g for g in pg["groups"]}
    metrics = wheres["s2_extra_collective.py:%d (log_metrics)" % m]
    train = wheres["s2_extra_collective.py:%d (train_step)" % t]
    assert set(metrics["ranks"]) <= {0, 1} and set(train["ranks"]) <= {2, 3}
    assert metrics["sizes"] == [[1025]] and train["sizes"] == [[65536]]


@pytest.mark.timeout(150)
def test_scenario5_subgroup_split_with_world_downstream(spawn, tmp_path):
    hd, _, _ = run_scenario(spawn, tmp_path, "s5_subgroup_split.py")
    sec = section_from_dir(str(hd))
    assert sec["verdict"] == "SPLIT" and not sec["suspect_ranks"]
    by_kind = {p["kind"]: p for p in sec["pgs"]}
    sub = by_kind["type"]
    ops = {g["op"]: g for g in sub["groups"]}
    assert ops["all_gather"]["ranks"] == [2] and ops["all_reduce"]["ranks"] == [3]
    assert ops["all_gather"]["where"].endswith(":%d (tp_step)" % line_of("s5_subgroup_split.py", "TP_GATHER_LINE"))
    world = by_kind["seq"]
    assert world["desc"] == "default_pg"
    ahead = world["groups"][0]
    assert ahead["ranks"] == [0, 1] and ahead["pending"]
    assert any("(downstream)" in g["role"] and g["ranks"] == [0, 1] for g in sec["groups"])
    # PyTorch's own analyser reads the copies we write
    dumps, _ = read_dumps(str(hd / "flight_recorder"))
    out = tmp_path / "torchfrtrace"
    write_torchfrtrace(dumps, str(out))
    r = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(out), "-p", "rank_"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.timeout(150)
def test_scenario6_extra_all_to_all_rank3_one_ahead(spawn, tmp_path):
    hd, _, took = run_scenario(spawn, tmp_path, "s6_extra_all_to_all.py")
    sec = section_from_dir(str(hd))
    assert sec["verdict"] == "MISSED" and sec["suspect_ranks"] == [3]
    cp = [p for p in sec["pgs"] if p["desc"] != "default_pg"][0]
    assert cp["kind"] == "seq"
    top = cp["groups"][0]
    assert top["ranks"] == [3] and top["op"] == "all_to_all" and top["seq"] == cp["groups"][1]["seq"] + 1
    assert top["where"].endswith(":%d (cp_exchange)" % line_of("s6_extra_all_to_all.py", "CP_LINE"))
    print("dump_ranks took %.2f s" % took)


@pytest.mark.timeout(60)
def test_trigger_costs_nothing_without_torch_distributed(tmp_path):
    """Armed, a process that never initialises torch.distributed starts no thread and writes nothing."""
    code = ("import os, sys, threading, _hangkit_fr; _hangkit_fr.arm(os.environ);"
            "import torch; torch.ones(3).sum();"
            "print(threading.active_count(), any(t.name == 'hangkit-fr' for t in threading.enumerate()))")
    env = dict(os.environ, HANGKIT_MODE="observe", HANGKIT_SCRATCH_DIR=str(tmp_path), PYTHONPATH=BOOT,
               TORCH_FR_BUFFER_SIZE="2000")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=50)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == "False"
    assert not (tmp_path / "flight_recorder").exists()


def _one_rank(spawn, tmp_path, mode, fr_buffer="2000"):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               HANGKIT_MODE="observe", HANGKIT_SCRATCH_DIR=str(scratch), TORCH_FR_BUFFER_SIZE=fr_buffer,
               PYTHONPATH=BOOT)
    out = tmp_path / "out.txt"
    spawn([sys.executable, os.path.join(SC, "launch.py"), os.path.join(SC, "one_rank_block.py"), mode], env=env,
          stdout=open(out, "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while "ready" not in out.read_text():
        assert time.monotonic() < deadline, out.read_text()
        time.sleep(0.2)
    time.sleep(0.5)
    return scratch


@pytest.mark.timeout(90)
def test_rank_holding_the_gil_gets_a_dump_error_file(spawn, tmp_path):
    scratch = _one_rank(spawn, tmp_path, "gil")
    hd = tmp_path / "hd"
    t0 = time.monotonic()
    written = dump_ranks(str(scratch), str(hd), ranks=[0], timeout_s=3)
    assert time.monotonic() - t0 < 10
    import json
    doc = json.loads(open(written[0]).read())
    assert list(doc) == ["dump_error"] and "GIL" in doc["dump_error"]
    sec = section_from_dir(str(hd))
    assert "rank 0: no dump:" in "\n".join(sec["text"]) and sec["verdict"] is None


@pytest.mark.timeout(90)
def test_flight_recorder_off_gives_dump_error_not_silence(spawn, tmp_path):
    scratch = _one_rank(spawn, tmp_path, "sleep", fr_buffer="0")
    written = dump_ranks(str(scratch), str(tmp_path / "hd"), ranks=[0], timeout_s=3)
    import json
    doc = json.loads(open(written[0]).read())
    assert list(doc) == ["dump_error"] and "TORCH_FR_BUFFER_SIZE=0" in doc["dump_error"]


@pytest.mark.timeout(90)
def test_live_rank_dump_has_entries_and_frames(spawn, tmp_path):
    scratch = _one_rank(spawn, tmp_path, "sleep")
    written = dump_ranks(str(scratch), str(tmp_path / "hd"), ranks=[0], timeout_s=20)
    dumps, warns = read_dumps(str(tmp_path / "hd" / "flight_recorder"))
    (d,) = dumps
    assert not warns and d.error is None and d.entries[-1].op == "all_reduce"
    assert d.entries[-1].where().endswith("one_rank_block.py:%d (<module>)" % line_of("one_rank_block.py", "ONE_LINE"))
    assert os.path.exists(str(tmp_path / "hd" / "flight_recorder" / "rank_0.pickle"))
