"""Scenarios 3, 4 and 7 of the hang catalogue as real 4-rank gloo jobs.

Each job is a plain user script (tests/scenarios/) armed the way a real job is:
the environment comes from ``Settings.to_env(scratch)`` (sitecustomize arms the
watchdog at interpreter start), the ranks really hang (or really exit), the
watchdog writes real dumps, and the test asks every live rank for one more
on-demand dump with ``watchdog.request_dump``. The roll call over the job's
directory must name the right verdict, ranks and lines. Line numbers come from
``# MARK:`` comments in the scripts, never from constants here.
"""
from testlib import TESTS, dump_samples, wait_for
import os
import sys

import pytest

pytest.importorskip("torch", reason="scenario jobs need torch (CPU) for gloo")

from hpc_hangkit.config import load_settings  # noqa: E402
from hpc_hangkit.report.render import render_text  # noqa: E402
from hpc_hangkit.rollcall import report_from_dir  # noqa: E402

SCEN = os.path.join(TESTS, "scenarios")
WORLD = 4
PERIOD_S = 1.0


def line_of(script, text):
    """1-based line of the first line of ``script`` that contains ``text``."""
    with open(os.path.join(SCEN, script)) as fh:
        return next(i for i, line in enumerate(fh, 1) if text in line)


def mark_line(script, mark):
    with open(os.path.join(SCEN, script)) as fh:
        for i, line in enumerate(fh, 1):
            if "# MARK: %s" % mark in line:
                return i
    raise AssertionError("no MARK %s in %s" % (mark, script))


def launch(spawn, tmp_path, port, script, *args):
    """Start WORLD ranks of ``script`` armed from the job environment; returns (procs, job_dir)."""
    job = tmp_path / "job"
    scratch = job / "scratch"
    outdir = job / "stdout"
    scratch.mkdir(parents=True)
    outdir.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_")}
    st = load_settings(env={}, overrides={"mode": "observe", "watchdog_period_s": PERIOD_S})
    procs = []
    for r in range(WORLD):
        env = st.to_env(str(scratch), base_env=base)
        env.update(RANK=str(r), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
        out = open(str(outdir / ("rank_%d.txt" % r)), "wb")
        procs.append(spawn([sys.executable, os.path.join(SCEN, script)] + list(args), env=env,
                           stdout=out, stderr=out, cwd=str(tmp_path)))
    return procs, str(job)


def wait_verdict(job, want, deadline_s=240.0, min_samples=3):
    """Poll the roll call until its verdict is ``want``, every rank is in it and every rank is
    stuck with ``min_samples`` samples at its position (these jobs hang on every rank: a rank
    not stuck yet, e.g. one with only start-up dumps under load, is "unknown" and grouped
    apart, and the verdict can already be ``want``); returns that report."""
    last = []

    def ready():
        rep = report_from_dir(job)
        last[:] = [rep]
        all_stuck = all(f.state == "stuck" and f.mode >= min_samples for f in rep.ranks.values())
        return rep if rep.verdict == want and all_stuck and len(rep.ranks) == WORLD else None

    return wait_for(ready, deadline_s, 1.0, what="verdict %s with every rank stuck at %d samples" % (want, min_samples),
                    detail=lambda: "last report:\n%s\nstates: %s" % (
                        last and render_text(last[0]),
                        last and {r: (f.state, f.mode, f.n) for r, f in last[0].ranks.items()}))


def dump_all(procs, job):
    """One on-demand dump from every live rank through the real path (request_dump)."""
    from hpc_hangkit.arm.watchdog import request_dump

    wd = os.path.join(job, "scratch", "watchdog")

    def per_pid():
        n = {}
        for name, k in dump_samples(wd).items():
            pid = name.rsplit(".pid", 1)[-1].split(".", 1)[0]
            n[pid] = n.get(pid, 0) + k
        return n

    live = [p for p in procs if p.poll() is None]
    before = per_pid()
    for p in live:
        request_dump(p.pid, "SIGURG")
    wait_for(lambda: all(per_pid().get(str(p.pid), 0) > before.get(str(p.pid), 0) for p in live), 30,
             what="one more dump in the log of each live rank %s" % [p.pid for p in live],
             detail=lambda: "samples per pid before %s, now %s" % (before, per_pid()))


def hang(spawn, tmp_path, port, script, verdict, *args):
    """Launch, wait until the roll call says ``verdict``, take one on-demand dump of every
    rank, and return (procs, the final report)."""
    procs, job = launch(spawn, tmp_path, port, script, *args)
    wait_verdict(job, verdict)
    dump_all(procs, job)
    rep = report_from_dir(job)
    assert rep.verdict == verdict, render_text(rep)
    return procs, rep


def group_of(rep, rank):
    return next(g for g in rep.groups if rank in g.ranks)


@pytest.mark.torch
@pytest.mark.timeout(360)
def test_scenario3_inner_barrier_on_rank0_is_split(spawn, tmp_path, port):
    script = "scenario3_inner_barrier.py"
    procs, rep = hang(spawn, tmp_path, port, script, "SPLIT")
    assert rep.suspect_ranks == [0]
    waiting, inner = group_of(rep, 1), group_of(rep, 0)
    assert waiting.ranks == [1, 2, 3] and waiting.role == "waiting"
    assert (waiting.frame.function, waiting.frame.line) == ("train_epoch", mark_line(script, "train-allreduce"))
    assert waiting.collective == "all_reduce"
    assert inner.ranks == [0] and inner.role == "divergent"
    assert (inner.frame.function, inner.frame.line) == ("main", mark_line(script, "inner-barrier"))
    assert inner.collective == "barrier"
    # where the paths split: the rank-0-only block, read from the script's source
    assert inner.branch == {"file": os.path.join(SCEN, script), "line": line_of(script, "if rank == 0 and epoch == 1:"),
                            "text": "if rank == 0 and epoch == 1:", "kind": "if", "rank_dependent": True,
                            "rule": "own_frames"}
    assert waiting.branch is None
    text = render_text(rep)
    assert "split at  %s:%d `if rank == 0 and epoch == 1:` (rank-dependent if)" % (
        script, line_of(script, "if rank == 0 and epoch == 1:")) in text
    assert "%s:%d" % (script, mark_line(script, "inner-barrier")) in text
    assert "%s:%d" % (script, mark_line(script, "train-allreduce")) in text
    # the start-up dumps (import torch, rendezvous) were there and decided nothing
    assert any(f.startup > 0 for f in rep.ranks.values())
    assert all(p.poll() is None for p in procs), "the job must really hang, not exit"


@pytest.mark.torch
@pytest.mark.timeout(360)
def test_scenario4_uneven_data_final_barrier_is_split(spawn, tmp_path, port):
    script = "scenario4_uneven_data.py"
    procs, rep = hang(spawn, tmp_path, port, script, "SPLIT", "barrier")
    assert rep.suspect_ranks == [0], render_text(rep)
    six = group_of(rep, 1)
    assert six.ranks == [1, 2, 3]
    assert (six.frame.function, six.frame.line) == ("step", mark_line(script, "step-allreduce"))
    final = group_of(rep, 0)
    assert (final.frame.function, final.frame.line) == ("main", mark_line(script, "final-barrier"))
    assert final.collective == "barrier"
    # the batch loop whose trip count comes from the rank (through batches_for's return)
    assert final.branch == {"file": os.path.join(SCEN, script), "line": line_of(script, "for batch in range("),
                            "text": "for batch in range(batches_for(rank)):", "kind": "loop",
                            "rank_dependent": True, "rule": "loop_trip_count"}, render_text(rep)


@pytest.mark.torch
@pytest.mark.timeout(360)
def test_scenario4_uneven_data_rank0_exits_is_gone(spawn, tmp_path, port):
    script = "scenario4_uneven_data.py"
    procs, job = launch(spawn, tmp_path, port, script, "exit")
    wait_for(lambda: all(p.poll() is not None for p in procs), 240, 0.5, what="every rank to exit",
             detail=lambda: [p.poll() for p in procs])
    codes = [p.poll() for p in procs]
    assert codes[0] == 0 and all(c not in (None, 0) for c in codes[1:]), codes
    rep = report_from_dir(job)
    text = render_text(rep)
    assert rep.verdict == "GONE", text
    assert rep.suspect_ranks == [0], text
    victims = group_of(rep, 1)
    assert victims.ranks == [1, 2, 3] and victims.role == "exited"
    assert (victims.frame.function, victims.frame.line) == ("step", mark_line(script, "step-allreduce"))
    for r in (1, 2, 3):
        assert rep.ranks[r].state == "exited" and rep.ranks[r].traceback
    # rank 0 recorded its own end (main returned 0 through sys.exit): it left, the others wait
    g0 = group_of(rep, 0)
    assert g0.role == "exited" and g0.exit["how"] == "exit" and g0.exit["status"] == 0, text
    assert "rank 0 called sys.exit(0): exit status 0" in text
    # it left the loop the others are still in: the loop whose trip count comes from the rank
    assert g0.branch == {"file": os.path.join(SCEN, script), "line": line_of(script, "for batch in range("),
                         "text": "for batch in range(batches_for(rank)):", "kind": "loop",
                         "rank_dependent": True, "rule": "enclosing"}, text
    assert "rank 1 last traceback" in text


@pytest.mark.torch
@pytest.mark.timeout(360)
def test_scenario7_alive_but_stuck_is_missed(spawn, tmp_path, port):
    script = "scenario7_alive_but_stuck.py"
    procs, rep = hang(spawn, tmp_path, port, script, "MISSED")
    assert rep.suspect_ranks == [1], render_text(rep)
    waiting = group_of(rep, 0)
    assert waiting.ranks == [0, 2, 3] and waiting.role == "waiting"
    assert (waiting.frame.function, waiting.frame.line) == ("train", mark_line(script, "train-allreduce"))
    assert waiting.collective == "all_reduce"
    odd = group_of(rep, 1)
    assert odd.frame.function == "wait_for_a_condition_that_never_comes"
    assert odd.frame.line == mark_line(script, "stuck-sleep")
    assert odd.collective is None
    assert odd.branch == {"file": os.path.join(SCEN, script), "line": line_of(script, "if rank == 1 and step == 5:"),
                          "text": "if rank == 1 and step == 5:", "kind": "if", "rank_dependent": True,
                          "rule": "own_frames"}
    assert rep.to_dict()["groups"][1]["branch"]["line"] == line_of(script, "if rank == 1 and step == 5:")
    assert procs[1].poll() is None, "rank 1 must stay alive (alive but stuck)"
    assert rep.to_dict()["groups"][0]["frame"]["line"] == mark_line(script, "train-allreduce")
