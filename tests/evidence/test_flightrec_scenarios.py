"""Real 4-rank gloo jobs (tests/scenarios_fr/) that really hang or really fail, dumped through the
rank-side trigger (boot/_hangkit_fr.py) and hpc_hangkit.flightrec.dump_ranks, then analysed.

Scenarios are those of the project's hang-scenario list: 1 (size mismatch at one line), 2 (an extra
metrics all_reduce on some ranks), 5 (a TP sub-group splits), 6 (an extra all_to_all in a CP group).
gloo raises on a size mismatch instead of hanging (1 and 2): the scenario keeps the raising ranks
alive, the rank that gloo aborted gets a dump_error file, and the test checks that it says so.
"""
from testlib import TESTS, blocked_in, dump_samples, wait_for
import os
import subprocess
import sys
import time

import pytest

from hpc_hangkit.evidence.flightrec import dump_ranks, read_dumps, section_from_dir, write_torchfrtrace

from conftest import free_port

pytest.importorskip("torch", reason="the scenarios are real torch.distributed gloo jobs")

HERE = TESTS
SC = os.path.join(HERE, "scenarios_fr")
BOOT = os.path.join(os.path.dirname(HERE), "hpc_hangkit", "boot")


def line_of(script, marker):
    with open(os.path.join(SC, script)) as f:
        for i, line in enumerate(f, 1):
            if marker in line:
                return i
    raise AssertionError(marker)


def marks(script):
    """``{marker: (file name, line)}`` for the ``# <NAME>_LINE`` comments of ``script`` and _common.py."""
    out = {}
    for name in (script, "_common.py"):
        with open(os.path.join(SC, name)) as f:
            for i, line in enumerate(f, 1):
                tag = line.rsplit("# ", 1)[-1].strip() if "# " in line else ""
                if tag.endswith("_LINE"):
                    out[tag] = (name, i)
    return out


def _samples_by_pid(scratch):
    """``{pid: stack samples}`` in the ranks' watchdog logs (``rank_<r>.pid<pid>.log``)."""
    n = {}
    for name, k in dump_samples(str(scratch / "watchdog")).items():
        pid = int(name.rsplit(".pid", 1)[-1].split(".", 1)[0])
        n[pid] = n.get(pid, 0) + k
    return n


def _positions(scratch, ranks, script):
    """One on-demand watchdog dump of every live rank of ``ranks`` (``{rank: Popen}``), then
    ``{rank: (file name, line)}``: the innermost frame of the scenario's own files in the main
    thread of that fresh dump (None when the dump has none: it was cut short). Ranks that
    exited are left out."""
    from hpc_hangkit.arm.watchdog import request_dump
    from hpc_hangkit.parse.faulthandler import parse_faulthandler
    from hpc_hangkit.rollcall import main_thread

    before = _samples_by_pid(scratch)
    asked = {}
    for r, p in ranks.items():
        if p.poll() is not None:
            continue
        try:
            request_dump(p.pid, "SIGURG")
            asked[r] = p
        except ProcessLookupError:
            pass
    wait_for(lambda: all(_samples_by_pid(scratch).get(p.pid, 0) > before.get(p.pid, 0) or p.poll() is not None
                         for p in asked.values()), 30, 0.05,
             what="one more watchdog dump from ranks %s" % sorted(asked), detail=lambda: "samples per pid before %s, now %s" % (before, _samples_by_pid(scratch)))
    out = {}
    for r, p in asked.items():
        if p.poll() is not None:
            continue
        (log,) = (scratch / "watchdog").glob("rank_%d.pid%d.log" % (r, p.pid))
        samples = parse_faulthandler(log.read_bytes(), log.name).samples
        t = main_thread(samples[-1]) if samples else None
        own = [f for f in (t.frames if t else ()) if os.path.basename(f.file) in (script, "_common.py")]
        out[r] = (os.path.basename(own[0].file), own[0].line) if own else None
    return out


def run_scenario(spawn, tmp_path, script, blocked_at, gloo_aborts=False, budget_s=60.0):
    """Start the 4 ranks of ``script``, wait until the divergent step has settled, dump them.

    Settled: every rank has exited (gloo aborted it), or printed ``collective raised`` (gloo
    raised and the rank lingers), or is blocked at its marker in ``blocked_at`` (``{rank:
    (marker, ...)}``), seen in a watchdog dump taken after every rank printed ``step 3``;
    with ``gloo_aborts``, at least one rank exited and one raised.
    """
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
    wait_for(lambda: all("step 3" in o.read_text() for o in outs), budget_s, interval_s=0.5,
             what="every rank of %s to reach step 3" % script,
             detail=lambda: "outputs: %s" % [o.read_text()[-300:] for o in outs])
    where = marks(script)
    last = {}

    def settled():
        raised = {r for r, o in enumerate(outs) if "collective raised" in o.read_text()}
        exited = {r for r, p in enumerate(procs) if p.poll() is not None}
        if gloo_aborts and not (raised and exited):
            last["state"] = "raised %s, exited %s" % (sorted(raised), sorted(exited))
            return False
        pos = _positions(scratch, {r: p for r, p in enumerate(procs) if r not in raised | exited}, script)
        last["state"] = "raised %s, exited %s, at %s" % (sorted(raised), sorted(exited), pos)
        return all(r in raised or r in exited or pos.get(r) in [where[m] for m in blocked_at[r]] for r in range(4))

    wait_for(settled, budget_s, 0.5, what="the divergent step of %s to settle (ranks at %s)" % (script, blocked_at),
             detail=lambda: "%s\noutputs: %s" % (last.get("state"), [o.read_text()[-300:] for o in outs]))
    assert not any("done" in o.read_text() for o in outs), "the job finished: no hang"
    hd = tmp_path / "hang_detector"
    t0 = time.monotonic()
    written = dump_ranks(str(scratch), str(hd), ranks=range(4), timeout_s=30)
    took = time.monotonic() - t0
    assert sorted(written) == [0, 1, 2, 3]
    return hd, [o.read_text() for o in outs], took


@pytest.mark.timeout(150)
def test_scenario1_size_mismatch_same_line(spawn, tmp_path):
    hd, outs, _ = run_scenario(spawn, tmp_path, "s1_size_mismatch.py",
                                {r: ("SYNC_LINE",) for r in range(4)}, gloo_aborts=True)
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
    hd, outs, _ = run_scenario(spawn, tmp_path, "s2_extra_collective.py",
                                {0: ("METRICS_LINE",), 1: ("METRICS_LINE",), 2: ("TRAIN_LINE",), 3: ("TRAIN_LINE",)},
                                gloo_aborts=True)
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
    hd, _, _ = run_scenario(spawn, tmp_path, "s5_subgroup_split.py",
                             {0: ("WORLD_LINE",), 1: ("WORLD_LINE",), 2: ("TP_GATHER_LINE",),
                              3: ("TP_REDUCE_LINE",)})
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
    hd, _, took = run_scenario(spawn, tmp_path, "s6_extra_all_to_all.py",
                                {0: ("WORLD_LINE",), 1: ("WORLD_LINE",), 2: ("WORLD_LINE",), 3: ("CP_LINE",)})
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
    p = spawn([sys.executable, os.path.join(SC, "launch.py"), os.path.join(SC, "one_rank_block.py"), mode], env=env,
              stdout=open(out, "w"), stderr=subprocess.STDOUT)
    wait_for(lambda: "ready" in out.read_text(), 60, interval_s=0.2, what="the rank to print ready")
    # after "ready" the rank only calls its sleep (ctypes sleep() with the GIL held, or time.sleep)
    wait_for(lambda: blocked_in(p.pid) in ("nanosleep", "clock_nanosleep"), 30, 0.05,
             what="the rank's main thread in its sleep", detail=lambda: "blocked in: %s" % blocked_in(p.pid))
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
