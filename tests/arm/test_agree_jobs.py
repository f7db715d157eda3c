"""ranks_agree, @collective and auto check-in on real 4-rank gloo and mpi4py jobs.

Every rank is armed from the job environment (``load_settings(...).to_env``:
boot sitecustomize -> watchdog + heartbeat), the jobs really diverge or really
hang, and the roll call reads what the ranks left in scratch.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, free_port, have_module
from testlib import wait_for

JOBS = os.path.join(REPO, "tests", "agree_jobs")
PERIOD_S = 1.0  # watchdog period in these jobs
SAMPLES = 3  # K for the modal position


def job_env(tmp_path, auto_checkin=False):
    """The job environment for one test job, from the real config path."""
    from hpc_hangkit.config import load_settings

    cfg = tmp_path / "config.toml"
    cfg.write_text("")  # isolate from any site config on this machine
    scratch = str(tmp_path / "scratch")
    base = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_")}
    settings = load_settings(
        env={},
        path=str(cfg),
        overrides={"mode": "observe", "watchdog_period_s": PERIOD_S, "auto_checkin": auto_checkin},
    )
    return settings.to_env(scratch, base_env=base), scratch


def _out(capture):
    where = subprocess.PIPE if capture else subprocess.DEVNULL
    return {"stdout": where, "stderr": where}


def start_torch(spawn, env, scenario, capture=False, python=sys.executable):
    """4 gloo ranks (env:// rendezvous on 127.0.0.1), each its own process."""
    port = free_port()
    procs = []
    for rank in range(4):
        e = dict(env, RANK=str(rank), WORLD_SIZE="4", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(spawn([python, os.path.join(JOBS, "torch_job.py"), scenario], env=e, **_out(capture)))
    return procs


def start_mpi(spawn, env, scenario, capture=False):
    """``mpiexec -n 4`` (MPICH hydra passes the environment through)."""
    argv = [shutil.which("mpiexec"), "-n", "4", sys.executable, os.path.join(JOBS, "mpi_job.py"), scenario]
    return [spawn(argv, env=env, **_out(capture))]


def results_of(procs, timeout=150):
    results = {}
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err.decode()[-3000:]
        # mpiexec merges the ranks' stdout and two lines can land on one line:
        # decode each RESULT object where it starts, whatever precedes or follows it
        for chunk in out.decode().split("RESULT ")[1:]:
            r, _ = json.JSONDecoder().raw_decode(chunk)
            results[r["rank"]] = r
    return results


def wait_for_labels(scratch, expected, deadline_s=120):
    """Poll the heartbeats until every rank in ``expected`` shows its label.

    Returns {rank: Heartbeat}. Fails with what was seen if the deadline passes.
    """
    from hpc_hangkit.parse.heartbeat import read_heartbeats

    hbdir = os.path.join(scratch, "heartbeats")
    seen = {}

    def reached():
        seen.clear()
        if os.path.isdir(hbdir):
            seen.update({hb.rank: hb for hb in read_heartbeats(hbdir)})
        return dict(seen) if all(r in seen and seen[r].label == lab for r, lab in expected.items()) else None
    return wait_for(reached, deadline_s, interval_s=0.3, what="heartbeat labels %r" % (expected,),
                    detail=lambda: "last seen %r" % {r: hb.label for r, hb in seen.items()})


def settle(scratch):
    """Wait until every rank's newest SAMPLES watchdog dumps are at one position (it is
    blocked there); returns the roll call ``(report, text)`` at that moment."""
    def settled():
        got = report(scratch)
        return got if all((got[0].ranks[r].mode if r in got[0].ranks else 0) >= SAMPLES for r in range(4)) else None
    return wait_for(settled, 60, interval_s=PERIOD_S / 2,
                    what="every rank to write %d dumps at one position" % SAMPLES)


def report(scratch):
    from hpc_hangkit.report.render import render_text
    from hpc_hangkit.rollcall import report_from_dir

    rep = report_from_dir(scratch, world_size=4, samples=SAMPLES)
    return rep, render_text(rep)


def groups_by_ranks(rep):
    return {tuple(g.ranks): g for g in rep.groups}


needs_torch = pytest.mark.skipif(not have_module("torch"), reason="torch (CPU) is not installed")
needs_mpi = pytest.mark.skipif(
    not (have_module("mpi4py") and shutil.which("mpiexec")),
    reason="mpi4py and mpiexec (pip mpi4py mpich) are not installed",
)

# ------------------------------------------------------------- different routes


def _check_disagree(results, backend):
    assert sorted(results) == [0, 1, 2, 3]
    for rank, r in results.items():
        world = r["world"]
        assert world["groups"] == [["cached batch", [0, 1]], ["recomputed batch", [2, 3]]]
        assert "ranks 0-1: 'cached batch'" in world["message"]
        assert "ranks 2-3: 'recomputed batch'" in world["message"]
        assert backend in world["message"]
        if rank == 0:  # not in the sub-group [1, 2, 3]: returns at once
            assert r["sub"] == "returned"
        else:
            assert r["sub"]["groups"] == [["cached batch", [1]], ["recomputed batch", [2, 3]]]
            assert "rank 1: 'cached batch'" in r["sub"]["message"]
            assert "ranks 2-3: 'recomputed batch'" in r["sub"]["message"]
            assert "ranks 1-3" in r["sub"]["message"]  # global ranks of the sub-group


@needs_torch
@pytest.mark.torch
@pytest.mark.timeout(200)
def test_gloo_same_line_different_branches_raises_naming_both_groups(spawn, tmp_path):
    env, scratch = job_env(tmp_path)
    results = results_of(start_torch(spawn, env, "disagree", capture=True))
    _check_disagree(results, "torch.distributed")
    # the failure is also the last check-in of every rank
    from hpc_hangkit.parse.heartbeat import read_heartbeats

    labels = {hb.rank: hb.label for hb in read_heartbeats(os.path.join(scratch, "heartbeats"))}
    assert labels[0] == "failed ranks_agree(cached batch)"
    assert labels[3] == "failed ranks_agree(recomputed batch)"


def venv_without_numpy(tmp_path):
    """A venv that sees this interpreter's torch but cannot import numpy (a .pth in its
    site-packages marks numpy absent, as on a torch install without it); its python."""
    import sysconfig

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True, timeout=120)
    python = str(venv / "bin" / "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    # this interpreter's own packages: `--system-site-packages` gives the base interpreter's,
    # which lack torch when this interpreter is itself a venv (the test venv of run_all.sh)
    # (as site directories: their own .pth files, an editable install's among them, apply)
    own = sysconfig.get_paths()
    with open(os.path.join(purelib, "hk_this_site.pth"), "w") as f:
        f.write("import site; %s\n" % "; ".join("site.addsitedir(%r)" % p
                                                for p in dict.fromkeys((own["purelib"], own["platlib"]))))
    with open(os.path.join(purelib, "zz_no_numpy.pth"), "w") as f:
        f.write('import sys; sys.modules["numpy"] = None\n')
    probe = subprocess.run([python, "-c", "import torch; torch.tensor([1]).numpy()"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    assert probe.returncode != 0 and "Numpy is not available" in probe.stderr, probe.stderr[-2000:]
    return python


@needs_torch
@pytest.mark.torch
@pytest.mark.timeout(300)
def test_gloo_ranks_agree_without_numpy(spawn, tmp_path):
    python = venv_without_numpy(tmp_path)
    env, scratch = job_env(tmp_path)
    results = results_of(start_torch(spawn, env, "disagree", capture=True, python=python))
    _check_disagree(results, "torch.distributed")


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_mpi_same_line_different_branches_raises_naming_both_groups(spawn, tmp_path):
    env, scratch = job_env(tmp_path)
    results = results_of(start_mpi(spawn, env, "disagree", capture=True))
    _check_disagree(results, "mpi4py")


# ------------------------------------------------------------- a rank that never arrives


def _check_never_arrives(scratch):
    waiting = {r: "in ranks_agree(after load)" for r in (0, 1, 3)}
    expected = dict(waiting)
    expected[2] = "passed ranks_agree(start)"
    hbs = wait_for_labels(scratch, expected)
    settle(scratch)
    rep, text = report(scratch)
    assert rep.suspect_ranks == [2], text
    assert rep.verdict == "MISSED", text
    groups = groups_by_ranks(rep)
    assert (0, 1, 3) in groups and groups[(0, 1, 3)].role == "waiting", text
    assert (2,) in groups and groups[(2,)].frame.function == "wait_for_data", text
    # the waiting ranks' heartbeats carry the label and have not moved (blocked)
    from hpc_hangkit.parse.heartbeat import read_heartbeats

    later = {hb.rank: hb for hb in read_heartbeats(os.path.join(scratch, "heartbeats"))}
    for r in waiting:
        assert later[r].label == "in ranks_agree(after load)"
        assert later[r].counter == hbs[r].counter
    # and the report prints them
    for r in (0, 1, 3):
        assert 'rank %d last checked in: "in ranks_agree(after load)"' % r in text, text
    assert 'rank 2 last checked in: "passed ranks_agree(start)"' in text, text


@needs_torch
@pytest.mark.torch
@pytest.mark.timeout(200)
def test_gloo_rank_that_never_arrives_is_named(spawn, tmp_path):
    env, scratch = job_env(tmp_path)
    start_torch(spawn, env, "hang")
    _check_never_arrives(scratch)


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_mpi_rank_that_never_arrives_is_named(spawn, tmp_path):
    env, scratch = job_env(tmp_path)
    start_mpi(spawn, env, "hang")
    _check_never_arrives(scratch)


# ------------------------------------------------------------- labels of ranks blocked in C


def _check_blocked(scratch, labels):
    wait_for_labels(scratch, labels)
    settle(scratch)
    rep, text = report(scratch)
    groups = groups_by_ranks(rep)
    # where the stacks put them: 0,2,3 blocked in sync_grads' collective, 1 in log_metrics
    assert (0, 2, 3) in groups and groups[(0, 2, 3)].frame.function == "sync_grads", text
    assert (1,) in groups and groups[(1,)].frame.function == "log_metrics", text
    checkins = rep.checkins()
    for r, lab in labels.items():
        assert checkins[r]["label"] == lab
        assert 'rank %d last checked in: "%s"' % (r, lab) in text, text


@needs_torch
@pytest.mark.torch
@pytest.mark.timeout(200)
def test_gloo_decorated_collectives_label_ranks_blocked_in_c(spawn, tmp_path):
    env, scratch = job_env(tmp_path, auto_checkin=False)
    start_torch(spawn, env, "blocked")
    _check_blocked(scratch, {0: "entering sync_grads() [collective]", 1: "entering log_metrics() [collective]",
                             2: "entering sync_grads() [collective]", 3: "entering sync_grads() [collective]"})


@needs_torch
@pytest.mark.torch
@pytest.mark.timeout(200)
def test_gloo_auto_checkin_labels_ranks_blocked_in_c(spawn, tmp_path):
    env, scratch = job_env(tmp_path, auto_checkin=True)
    assert env["HANGKIT_AUTO_CHECKIN"] == "1"
    start_torch(spawn, env, "blocked")
    # three sync_grads on every rank, then the fourth collective differs:
    # same sequence number, different op
    ar = "torch.distributed.all_reduce seq=4 group=world"
    _check_blocked(scratch, {0: ar, 1: "torch.distributed.barrier seq=4 group=world", 2: ar, 3: ar})


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_mpi_decorated_collectives_label_ranks_blocked_in_c(spawn, tmp_path):
    env, scratch = job_env(tmp_path)
    start_mpi(spawn, env, "blocked")
    _check_blocked(scratch, {0: "entering sync_grads() [collective]", 1: "entering log_metrics() [collective]",
                             2: "entering sync_grads() [collective]", 3: "entering sync_grads() [collective]"})
