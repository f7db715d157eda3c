"""Eight hang shapes from public bug reports (each program's header links its report), as real
4-rank gloo jobs under ``hpc-hangkit run --mode fail``.

Each test runs ``python -m hpc_hangkit run`` in its own session (``spawn``: the whole group is
killed in teardown, pass or fail) with short windows (poll 1 s, confirm 6 s, watchdog period
1 s) and the default settings (auto check-in on, Flight Recorder on): the job really hangs, the
monitor confirms it, captures, writes report.json and ends the job (exit 3). The test then reads
the stored report: verdict, exact suspects, the line where the majority waits, the suspect's
line and the branch line with the rule that found it. Lines come from the ``# <NAME>_LINE``
comments of the programs, never from constants here.
"""
import json
import os
import subprocess
import sys

import pytest

from testlib import TESTS

pytest.importorskip("torch", reason="the scenarios are real torch.distributed gloo jobs")

HERE = os.path.join(TESTS, "scenarios20")
EXIT_HANG = 3
FAST = ["--poll-interval", "1", "--confirm-duration", "6", "--suspect-after", "2", "--report-every", "3",
        "--watchdog-period", "1", "--grace", "5", "--mode", "fail"]


def marks(script):
    """``{NAME: line}`` for the ``# NAME_LINE`` comments of ``script``."""
    out = {}
    with open(os.path.join(HERE, script)) as f:
        for i, line in enumerate(f, 1):
            tag = line.rsplit("# ", 1)[-1].split()[0] if "# " in line else ""
            if tag.endswith("_LINE"):
                out[tag[:-5]] = i
    return out


def hang(spawn, tmp_path, port, script):
    """Run ``script`` under ``hpc-hangkit run`` until it confirms the hang and ends the job;
    returns (report.json as a dict, report.txt)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HANGKIT_", "TORCH_FR"))}
    cfg = tmp_path / "config.toml"
    cfg.write_text("# empty site config: the defaults are under test\n")
    env.update(HPC_HANGKIT_CONFIG=str(cfg), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    out = tmp_path / "out"
    err = tmp_path / "run.stderr"
    argv = [sys.executable, "-m", "hpc_hangkit", "run"] + FAST + ["--out", str(out), "--", sys.executable,
                                                                   os.path.join(HERE, "launch4.py"), str(port),
                                                                   os.path.join(HERE, script)]
    proc = spawn(argv, env=env, cwd=str(tmp_path), stdout=open(tmp_path / "run.stdout", "wb"),
                 stderr=open(err, "wb"))
    try:
        rc = proc.wait(timeout=150)
    except subprocess.TimeoutExpired:
        raise AssertionError("hpc-hangkit run did not end in 150 s:\n%s" % err.read_text()[-4000:])
    assert rc == EXIT_HANG, "exit %s, expected a confirmed hang:\n%s" % (rc, err.read_text()[-4000:])
    hd = out / "hang_detector"
    kinds = [json.loads(ln)["kind"] for ln in (hd / "events.jsonl").read_text().splitlines() if ln.strip()]
    assert "confirmed" in kinds and "captured" in kinds, kinds
    # the capture's own I/O (every rank's Flight Recorder dump) is not progress
    assert "recovered" not in kinds[kinds.index("confirmed"):], kinds
    return json.loads((hd / "report.json").read_text()), (hd / "report.txt").read_text()


def group(rep, rank):
    (g,) = [g for g in rep["groups"] if rank in g["ranks"]]
    return g


def at(g, script, line, function=None):
    """``g`` stands at ``script:line`` (its user frame)."""
    f = g["frame"]
    return f is not None and os.path.basename(f["file"]) == script and f["line"] == line and (
        function is None or f["function"] == function)


def check_branch(g, script, line, rule, text_line):
    b = g["branch"]
    assert b is not None, g
    assert (os.path.basename(b["file"]), b["line"], b["rule"]) == (script, line, rule), b
    with open(os.path.join(HERE, script)) as f:
        assert b["text"] == f.read().splitlines()[line - 1].strip(), b
    assert "split at  %s:%d" % (script, line) in text_line


@pytest.mark.torch
@pytest.mark.timeout(200)
def test_early_return_from_a_helper_the_others_are_inside(spawn, tmp_path, port):
    s = "early_return.py"
    m = marks(s)
    rep, txt = hang(spawn, tmp_path, port, s)
    assert rep["verdict"] == "SPLIT" and rep["suspect_ranks"] == [2], txt
    waiting, left = group(rep, 0), group(rep, 2)
    assert waiting["ranks"] == [0, 1, 3] and at(waiting, s, m["HELPER"], "sync_stats"), txt
    assert left["ranks"] == [2] and at(left, s, m["TRAIN"], "train"), txt
    # the early return is inside sync_stats, which rank 2 left and the others are still in
    check_branch(left, s, m["BRANCH"], "inside_left_function", txt)
    assert left["branch"]["kind"] == "early_exit" and left["branch"]["rank_dependent"]


@pytest.mark.torch
@pytest.mark.timeout(200)
def test_bincount_sizes_differ_at_one_line(spawn, tmp_path, port):
    s = "bincount.py"
    m = marks(s)
    rep, txt = hang(spawn, tmp_path, port, s)
    assert rep["verdict"] == "SAME_LINE_DIFFERENT_ARGS" and rep["suspect_ranks"] == [1], txt
    # every rank stands at the one all_reduce line: the line to change is there, no branch
    (g,) = rep["groups"]
    assert g["ranks"] == [0, 1, 2, 3] and at(g, s, m["SYNC"], "class_histogram") and g.get("branch") is None, txt
    fr = rep["sections"]["flight_recorder"]
    (args,) = [p for p in fr["pgs"] if p["kind"] == "args"]
    sizes = {tuple(x["ranks"]): x["sizes"] for x in args["groups"]}
    assert sizes == {(0, 2, 3): [[8]], (1,): [[7]]}, args
    assert all(x["where"].endswith("%s:%d (class_histogram)" % (s, m["SYNC"])) for x in args["groups"])
    assert "ranks 0,2-3 sizes [[8]]; rank 1 sizes [[7]]" in txt


#: one rank held outside the collective by its own code, inside a rank-dependent block:
#: (program, held rank, its line's mark, its function)
HELD = [("child_wait.py", 0, "CHILD", "run_eval_tool"),      # waits on a child process
        ("py_deadlock.py", 1, "LOCK", "flush_metrics")]      # a Python lock it already holds


@pytest.mark.torch
@pytest.mark.timeout(200)
@pytest.mark.parametrize("s, held, mark, func", HELD, ids=[h[0][:-3] for h in HELD])
def test_one_rank_held_by_its_own_code(spawn, tmp_path, port, s, held, mark, func):
    m = marks(s)
    rep, txt = hang(spawn, tmp_path, port, s)
    assert rep["verdict"] == "MISSED" and rep["suspect_ranks"] == [held], txt
    others = [r for r in range(4) if r != held]
    waiting, stuck = group(rep, others[0]), group(rep, held)
    assert waiting["ranks"] == others and at(waiting, s, m["TRAIN"], "train"), txt
    assert stuck["ranks"] == [held] and at(stuck, s, m[mark], func), txt
    check_branch(stuck, s, m["BRANCH"], "own_frames", txt)


@pytest.mark.torch
@pytest.mark.timeout(200)
def test_rank_killed_by_a_signal_in_a_rank_dependent_block(spawn, tmp_path, port):
    s = "signal_kill.py"
    m = marks(s)
    rep, txt = hang(spawn, tmp_path, port, s)
    assert rep["verdict"] == "GONE" and rep["suspect_ranks"] == [3], txt
    dead, waiting = group(rep, 3), group(rep, 0)
    assert dead["ranks"] == [3] and dead["exit"]["how"] == "vanished", txt
    # its last sample, not where the signal found it
    assert at(dead, s, m["GROW"], "build_cache"), txt
    assert "last seen at   %s:%d in build_cache" % (s, m["GROW"]) in txt
    # gloo failed the ring neighbours' all_reduce (ranks 0, 2); rank 1 still waits in it
    assert waiting["ranks"] == [0, 2] and at(waiting, s, m["RESTART"], "wait_for_restart"), txt
    inner = group(rep, 1)
    assert inner["ranks"] == [1] and at(inner, s, m["TRAIN"], "train") and inner["in_collective"], txt
    check_branch(dead, s, m["BRANCH"], "exit_site", txt)
    assert inner.get("branch") is None  # not a suspect: no branch to read


@pytest.mark.torch
@pytest.mark.timeout(200)
def test_uneven_inputs_under_ddp(spawn, tmp_path, port):
    s = "uneven_ddp.py"
    m = marks(s)
    rep, txt = hang(spawn, tmp_path, port, s)
    assert rep["verdict"] == "SPLIT" and rep["suspect_ranks"] == [3], txt
    waiting, short = group(rep, 0), group(rep, 3)
    # the reducer's all_reduce is issued from C++ inside backward: the user's line is backward()
    assert waiting["ranks"] == [0, 1, 2] and at(waiting, s, m["BACKWARD"], "train"), txt
    assert short["ranks"] == [3] and at(short, s, m["EVAL"], "evaluate"), txt
    # the loop's trip count is the branch: rank 3's shard was one batch shorter
    check_branch(short, s, m["BRANCH"], "loop_trip_count", txt)
    assert short["branch"]["kind"] == "loop"
    # while watching (Python stacks only: the reducer's all_reduce has no frame) the monitor
    # named rank 3 too, never the ranks waiting in backward
    lines = [ln for ln in (tmp_path / "run.stderr").read_text().splitlines() if "SUSPECTED stacks" in ln
             or "CONFIRMED stacks" in ln]
    assert lines and all("suspects [3]" in ln for ln in lines), lines


@pytest.mark.torch
@pytest.mark.timeout(200)
def test_collective_without_the_group_its_peers_pass(spawn, tmp_path, port):
    s = "wrong_group.py"
    m = marks(s)
    rep, txt = hang(spawn, tmp_path, port, s)
    assert rep["verdict"] == "SPLIT" and rep["suspect_ranks"] == [3], txt
    world, tp, wrong = group(rep, 0), group(rep, 2), group(rep, 3)
    assert world["ranks"] == [0, 1] and at(world, s, m["WORLD"], "main"), txt
    # ranks 2 and 3 stand at one line but wait on different process groups
    assert tp["ranks"] == [2] and at(tp, s, m["TP"], "tp_reduce"), txt
    assert wrong["ranks"] == [3] and at(wrong, s, m["TP"], "tp_reduce"), txt
    check_branch(wrong, s, m["BRANCH"], "group_argument", txt)
    assert "process group" in rep["summary"] and "rank 3" in rep["summary"], rep["summary"]


@pytest.mark.torch
@pytest.mark.timeout(200)
def test_rank_released_through_a_group_it_is_not_in(spawn, tmp_path, port):
    s = "comm_split.py"
    m = marks(s)
    rep, txt = hang(spawn, tmp_path, port, s)
    # the stacks alone name rank 0 (alone at the pipeline line); membership names rank 1
    assert rep["verdict"] == "SPLIT" and rep["suspect_ranks"] == [1], txt
    pp, world, left = group(rep, 0), group(rep, 2), group(rep, 1)
    assert pp["ranks"] == [0] and at(pp, s, m["PP"], "main"), txt
    assert world["ranks"] == [2, 3] and at(world, s, m["WORLD"], "main"), txt
    assert left["ranks"] == [1] and at(left, s, m["WORLD"], "main"), txt
    check_branch(left, s, m["BRANCH"], "group_argument", txt)
    assert "rank 1" in rep["summary"] and "process group" in rep["summary"], rep["summary"]
