"""GONE on real 4-rank jobs: ranks that leave (raise, return, sys.exit, segfault, SIGKILL)
while others wait. Each rank records its own end (boot ``_hangkit_exit``); the monitor of
`hpc-hangkit run` confirms GONE within the confirm window, and the roll call says who
left and how, with the file:line of every group.

mpi4py jobs run under ``mpiexec -disable-auto-cleanup`` (a launcher that does not abort
the job when a rank fails), so the waiting ranks really hang; gloo ranks are separate
processes (their peers fail with "connection closed", the victims).
"""
import json
import os
import sys

import pytest

from conftest import REPO, free_port
from test_run_e2e import EXIT_HANG, HangkitRun, clean_env, line_of, needs_mpi, needs_torch

JOBS = os.path.join(REPO, "tests", "gone_jobs")
MPI_JOB = os.path.join(JOBS, "mpi_gone.py")
GLOO_JOB = os.path.join(JOBS, "gloo_gone.py")
CONFIRM_S, POLL_S = 6, 1  # test_run_e2e.FAST


def mpi_run(spawn, tmp_path, scenario):
    run = HangkitRun(spawn, tmp_path, ["--mode", "fail"],
                     ["mpiexec", "-disable-auto-cleanup", "-n", "4", sys.executable, MPI_JOB, scenario])
    assert run.wait(100) == EXIT_HANG, run.stderr()[-4000:]
    return run


def exit_times(run):
    """{rank: mtime} of the ranks' exit records in the run's scratch."""
    out = {}
    for d in run.out.glob("scratch-*/exits"):
        for p in d.iterdir():
            out[int(p.name.split("_")[1].split(".")[0])] = p.stat().st_mtime
    return out


def confirmed_within_window(run, ranks):
    """The confirmation came at most the confirm window plus two polls after the last of
    ``ranks`` recorded its end (a poll: the interval, or the slowest poll before the
    confirmation where polls took longer)."""
    ends = exit_times(run)
    assert set(ranks) <= set(ends), ends
    events = run.events()
    conf = next(e for e in events if e["kind"] == "confirmed")
    late = conf["t"] - max(ends[r] for r in ranks)
    # a poll is the monitor's resolution: on a loaded node one takes longer than its interval
    poll_s = max(POLL_S, conf["slowest_poll_s"])
    print("confirmed %.1f s after the exit (window %d s, poll %d s, slowest poll %.1f s)"
          % (late, CONFIRM_S, POLL_S, conf["slowest_poll_s"]))
    assert late <= CONFIRM_S + 2 * poll_s, ("confirmed %.1f s after the exit" % late, events)


def by_ranks(rep):
    return {tuple(g["ranks"]): g for g in rep["groups"]}


def gone(run, suspects):
    """The run's report.json, checked to be GONE naming ``suspects``; its groups by ranks."""
    rep = run.report()
    assert rep["verdict"] == "GONE" and rep["suspect_ranks"] == suspects, rep
    return by_ranks(rep)


def at(g, marker, job=MPI_JOB):
    assert g["frame"] is not None, g
    assert g["frame"]["file"] == job and g["frame"]["line"] == line_of(job, marker), g["frame"]


@needs_mpi
@pytest.mark.timeout(150)
def test_mpi_root_raises_before_barrier(spawn, tmp_path):
    run = mpi_run(spawn, tmp_path, "raise")
    g = gone(run, [0])
    assert g[(0,)]["role"] == "exited"
    assert g[(0,)]["exit"] == {"how": "exception", "status": 1, "signal": None, "type": "RuntimeError",
                               "message": "initial state: shard file missing"}
    at(g[(0,)], "GONE raise: here")  # where it raised, the traceback as its call chain
    assert [f["function"] for f in g[(0,)]["call_chain"]] == ["build_state", "main", "<module>"]
    assert g[(1, 2, 3)]["role"] == "waiting" and g[(1, 2, 3)]["collective"] == "Barrier"
    at(g[(1, 2, 3)], "GONE wait: the others wait here")
    text = (run.hd / "report.txt").read_text()
    assert "rank 0 exited on its own (RuntimeError: initial state: shard file missing)" in text, text
    confirmed_within_window(run, [0])


@needs_mpi
@pytest.mark.timeout(150)
def test_mpi_only_root_broadcasts_others_exit_normally(spawn, tmp_path):
    run = mpi_run(spawn, tmp_path, "bcast")
    g = gone(run, [1, 2, 3])
    assert g[(1, 2, 3)]["role"] == "exited" and g[(1, 2, 3)]["frame"] is None  # they left the program
    assert g[(1, 2, 3)]["exit"]["how"] == "normal" and g[(1, 2, 3)]["exit"]["status"] == 0
    assert g[(0,)]["role"] == "waiting" and g[(0,)]["collective"] == "bcast"
    at(g[(0,)], "GONE bcast: rank 0 waits here")
    text = (run.hd / "report.txt").read_text()
    assert "ranks 1-3 exited normally (status 0); while rank 0 waits at mpi_gone.py:%d" % line_of(
        MPI_JOB, "GONE bcast: rank 0 waits here") in text.replace("\n   ", " "), text
    confirmed_within_window(run, [1, 2, 3])


@needs_mpi
@pytest.mark.timeout(150)
def test_mpi_rank_calls_sys_exit_early(spawn, tmp_path):
    run = mpi_run(spawn, tmp_path, "exit3")
    g = gone(run, [2])
    assert g[(2,)]["exit"]["how"] == "exit" and g[(2,)]["exit"]["status"] == 3
    at(g[(2,)], "GONE exit3: here")
    at(g[(0, 1, 3)], "GONE wait: the others wait here")
    assert "rank 2 called sys.exit(3): exit status 3" in (run.hd / "report.txt").read_text()
    confirmed_within_window(run, [2])


@needs_mpi
@pytest.mark.timeout(150)
def test_mpi_rank_os_exit_before_barrier(spawn, tmp_path):
    """``os._exit`` leaves no exit record: the monitor sees rank 3's pid gone (a vanished
    record) and confirms GONE within the window after it left. Rank 3 computes until it
    leaves, so the stall starts then: without the pid check the roll call would keep it at
    its last position (MISSED) until it went silent."""
    run = mpi_run(spawn, tmp_path, "osexit")
    pid = run.rank_pids()[3]
    g = gone(run, [3])
    assert g[(3,)]["role"] == "exited", g
    assert g[(3,)]["exit"] == {"how": "vanished", "status": None, "signal": None, "type": None,
                               "message": "vanished (pid %d gone with no exit record: SIGKILL, the OOM "
                                          "killer or os._exit)" % pid}, g[(3,)]
    assert g[(0, 1, 2)]["role"] == "waiting" and g[(0, 1, 2)]["collective"] == "Barrier"
    at(g[(0, 1, 2)], "GONE wait: the others wait here")
    rec = run.hd / "vanished" / ("rank_3.pid%d.txt" % pid)
    assert rec.read_text().startswith("# hpc-hangkit vanished pid=%d " % pid), rec.read_text()
    assert not list(run.out.glob("scratch-*/exits/rank_3.*"))  # it left no record of its own
    text = (run.hd / "report.txt").read_text().replace("\n   ", " ")
    assert ("rank 3 vanished (pid %d gone with no exit record: SIGKILL, the OOM killer or os._exit); "
            "while ranks 0-2 wait at mpi_gone.py:%d" % (pid, line_of(MPI_JOB, "GONE wait: the others wait here"))
            ) in text, text
    left = float((tmp_path / "left_at").read_text())
    t_conf = next(e["t"] for e in run.events() if e["kind"] == "confirmed")
    print("confirmed %.1f s after os._exit (window %d s, poll %d s)" % (t_conf - left, CONFIRM_S, POLL_S))
    assert t_conf - left <= CONFIRM_S + 2 * POLL_S, "confirmed %.1f s after os._exit" % (t_conf - left)


def gloo_job(spawn, tmp_path, scenario):
    """Run the 4 gloo ranks to their end (the victims fail within the 20 s gloo timeout);
    returns the roll call over their scratch as JSON."""
    from hpc_hangkit.config import load_settings
    from hpc_hangkit.report.render import render_json
    from hpc_hangkit.rollcall import report_from_dir

    cfg = tmp_path / "config.toml"
    cfg.write_text("")
    scratch = str(tmp_path / "scratch")
    base = {k: v for k, v in clean_env(tmp_path).items()}
    env = load_settings(env={}, path=str(cfg), overrides={"mode": "observe", "watchdog_period_s": 1.0}).to_env(
        scratch, base_env=base)
    port = free_port()
    procs = [spawn([sys.executable, GLOO_JOB, scenario], stdout=open(os.devnull, "wb"), stderr=open(os.devnull, "wb"),
                   env=dict(env, RANK=str(r), WORLD_SIZE="4", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
             for r in range(4)]
    rcs = [p.wait(timeout=90) for p in procs]
    rep = json.loads(render_json(report_from_dir(scratch, world_size=4)))
    with open(str(tmp_path / "report.json"), "w") as f:
        json.dump(rep, f)  # the schema check of conftest reads it
    return rcs, rep


@needs_torch
@pytest.mark.timeout(150)
def test_gloo_root_raises_before_barrier(spawn, tmp_path):
    rcs, rep = gloo_job(spawn, tmp_path, "raise")
    assert rcs[0] == 1
    assert rep["verdict"] == "GONE" and rep["suspect_ranks"] == [0], rep
    g = by_ranks(rep)
    assert g[(0,)]["exit"]["type"] == "RuntimeError"
    at(g[(0,)], "GONE raise: here", GLOO_JOB)
    for gr in rep["groups"]:  # the others are victims of rank 0's exit
        assert gr["ranks"] == [0] or gr["role"] == "exited", gr


@needs_torch
@pytest.mark.timeout(150)
def test_gloo_rank_segfaults(spawn, tmp_path):
    rcs, rep = gloo_job(spawn, tmp_path, "segv")
    assert rcs[1] < 0  # killed by the signal
    assert rep["verdict"] == "GONE" and rep["suspect_ranks"] == [1], rep
    g = by_ranks(rep)
    assert g[(1,)]["exit"]["how"] == "signal" and g[(1,)]["exit"]["signal"] == "SIGSEGV"
    at(g[(1,)], "GONE segv: here", GLOO_JOB)


@needs_torch
@pytest.mark.timeout(150)
def test_gloo_rank_killed(spawn, tmp_path):
    rcs, rep = gloo_job(spawn, tmp_path, "kill")
    assert rcs[3] == -9
    assert rep["verdict"] == "GONE" and rep["suspect_ranks"] == [3], rep
