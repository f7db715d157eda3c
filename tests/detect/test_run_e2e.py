"""`hpc-hangkit run` end to end on real jobs that really hang (gloo on CPU, mpi4py + mpich).

Each test runs `python -m hpc_hangkit run ... -- LAUNCHER` in its own session
(``spawn`` fixture: the whole group is killed in teardown) with short windows:
poll 1 s, confirm 6 s, watchdog period 1 s. The examples are the plain user
scripts in examples/; nothing in them knows about hpc-hangkit.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

from testlib import wait_for

import pytest

from conftest import REPO, have_module

EXAMPLES = os.path.join(REPO, "examples")
EXIT_HANG = 3

needs_mpi = pytest.mark.skipif(
    not have_module("mpi4py") or subprocess.call(["sh", "-c", "command -v mpiexec"],
                                                  stdout=subprocess.DEVNULL) != 0,
    reason="needs mpi4py and an mpiexec on PATH (pip install mpi4py mpich: the test extra)")
needs_torch = pytest.mark.skipif(not have_module("torch"),
                                 reason="needs torch (CPU) for the gloo job: pip install torch==2.13.0")

FAST = ["--poll-interval", "1", "--confirm-duration", "6", "--suspect-after", "2",
        "--report-every", "3", "--watchdog-period", "1", "--grace", "5"]


def line_of(path, needle):
    """1-based line number of the first line of ``path`` containing ``needle``."""
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if needle in line:
                return i
    raise AssertionError("%r not in %s" % (needle, path))


def clean_env(tmp_path):
    """The test's environment: no inherited HANGKIT_* settings, an empty site config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_")}
    cfg = tmp_path / "config.toml"
    cfg.write_text("# empty site config for the test\n")
    env["HPC_HANGKIT_CONFIG"] = str(cfg)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class HangkitRun:
    """One `hpc-hangkit run` subprocess with its stdout/stderr in files."""

    def __init__(self, spawn, tmp_path, opts, launcher, env=None):
        self.out = tmp_path / "out"
        self.stdout_path = tmp_path / "run.stdout"
        self.stderr_path = tmp_path / "run.stderr"
        argv = [sys.executable, "-m", "hpc_hangkit", "run"] + FAST + list(opts) + [
            "--out", str(self.out), "--"] + list(launcher)
        self.proc = spawn(argv, env=env or clean_env(tmp_path), cwd=str(tmp_path),
                          stdout=open(self.stdout_path, "wb"), stderr=open(self.stderr_path, "wb"))
        self.hd = self.out / "hang_detector"

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("hpc-hangkit run did not finish in %d s; stderr:\n%s"
                                 % (timeout, self.stderr()[-4000:]))

    def stderr(self):
        return self.stderr_path.read_text(errors="replace")

    def stdout(self):
        return self.stdout_path.read_text(errors="replace")

    def events(self):
        p = self.hd / "events.jsonl"
        if not p.exists():
            return []
        return [json.loads(l) for l in p.read_text().splitlines() if l.strip()]

    def kinds(self):
        return [e["kind"] for e in self.events()]

    def report(self):
        return json.loads((self.hd / "report.json").read_text())

    def rank_pids(self):
        """{rank: pid} from the watchdog log names of the scratch."""
        out = {}
        for d in self.out.glob("scratch-*/watchdog"):
            for p in d.iterdir():
                m = re.match(r"rank_(\d+)\.pid(\d+)\.log$", p.name)
                if m:
                    out[int(m.group(1))] = int(m.group(2))
        return out


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def torchrun(port, script, *args):
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
            "--master-addr", "127.0.0.1", "--master-port", str(port),
            os.path.join(EXAMPLES, script)] + list(args)


def mpiexec(script, *args):
    return ["mpiexec", "-n", "4", sys.executable, os.path.join(EXAMPLES, script)] + list(args)


def waiting_group(report):
    """The group of ranks that are not suspects (the waiters), as the report gives it."""
    groups = report["groups"]
    sus = set(report["suspect_ranks"])
    waiters = [g for g in groups if not (set(g["ranks"]) & sus)]
    assert len(waiters) == 1, groups
    return waiters[0]


def assert_hang_report(run, script, waiting_line):
    rep = run.report()
    assert rep["verdict"] in ("MISSED", "SPLIT"), rep
    assert rep["suspect_ranks"] == [1], rep
    w = waiting_group(rep)
    assert sorted(w["ranks"]) == [0, 2, 3], w
    # the waiters' own line (the user frame) is the all_reduce call in the example
    assert w["frame"]["file"].endswith(script) and w["frame"]["line"] == waiting_line, w
    # the printed roll call is the same report
    assert (run.hd / "report.txt").read_text().strip() in run.stdout()
    # one stack trace per rank, from py-spy --native (Python + native frames)
    for r in range(4):
        p = run.hd / "stack_traces" / ("rank_%d.log" % r)
        assert p.exists(), p
    # the copied evidence
    assert len(list((run.hd / "watchdog").glob("rank_*.log"))) == 4
    assert len(list((run.hd / "heartbeats").glob("rank_*.hb"))) == 4
    kinds = run.kinds()
    for k in ("launch", "suspected", "confirmed", "captured", "report"):
        assert k in kinds, kinds
    assert kinds.index("suspected") < kinds.index("confirmed") < kinds.index("captured")
    return rep


@needs_torch
@pytest.mark.timeout(150)
def test_gloo_divergent_confirmed_and_failed(spawn, tmp_path, port):
    run = HangkitRun(spawn, tmp_path, ["--mode", "fail", "--json-out", str(tmp_path / "r.json")],
                     torchrun(port, "gloo_divergent.py"))
    rc = run.wait(120)
    assert rc == EXIT_HANG, run.stderr()[-4000:]
    script = os.path.join(EXAMPLES, "gloo_divergent.py")
    rep = assert_hang_report(run, "gloo_divergent.py", line_of(script, "dist.all_reduce(grads)"))
    assert json.loads((tmp_path / "r.json").read_text()) == rep
    for r in range(4):  # py-spy --native really ran: native frames under the all_reduce
        text = (run.hd / "stack_traces" / ("rank_%d.log" % r)).read_text()
        assert "unavailable" not in text and "Thread" in text, text[:500]
    assert "c10d" in (run.hd / "stack_traces" / "rank_0.log").read_text()
    # fail mode ended the job: no rank survives
    pids = run.rank_pids()
    assert sorted(pids) == [0, 1, 2, 3]
    wait_for(lambda: not any(alive(p) for p in pids.values()), 5, what="every rank of the failed job to exit")
    err = run.stderr()
    assert re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z hpc-hangkit ", err, re.M), err[:500]
    assert "SUSPECTED" in err and "CONFIRMED" in err and "SIGTERM" in err


@needs_mpi
@pytest.mark.timeout(120)
def test_mpi_divergent_observe_leaves_job_running_then_ctrl_c(spawn, tmp_path):
    run = HangkitRun(spawn, tmp_path, ["--mode", "observe"], mpiexec("mpi_divergent.py"))
    def acted():  # the action event follows the report files
        assert run.proc.poll() is None, run.stderr()[-4000:]
        return "action" in run.kinds()
    wait_for(acted, 80, interval_s=0.5, what="the run's action after the report")
    script = os.path.join(EXAMPLES, "mpi_divergent.py")
    assert_hang_report(run, "mpi_divergent.py", line_of(script, "comm.allreduce(local"))
    # observe: the job and the run are still there, after the capture
    time.sleep(2)  # the thing under test: nothing ends the job for a while after the capture
    assert run.proc.poll() is None
    pids = run.rank_pids()
    assert sorted(pids) == [0, 1, 2, 3] and all(alive(p) for p in pids.values())
    assert "action" in run.kinds() and run.events()[run.kinds().index("action")]["action"] == "observe"
    # Ctrl-C to hpc-hangkit run is forwarded to the job's process group
    os.kill(run.proc.pid, signal.SIGINT)
    rc = run.wait(30)
    assert rc not in (0, EXIT_HANG), rc  # the job's own status after SIGINT
    wait_for(lambda: not any(alive(p) for p in pids.values()), 5, what="every rank to exit after Ctrl-C")
    assert "forwarding it to the job" in run.stderr()
    assert run.events()[-1]["kind"] == "end" and run.events()[-1]["exit_status"] == rc


@needs_mpi
@pytest.mark.timeout(120)
def test_pyspy_unavailable_why_files_and_same_verdict(spawn, tmp_path):
    """Scenario 9: no py-spy -> a one-line why-file per rank; the watchdog dumps still name rank 1."""
    missing = str(tmp_path / "no-such-dir" / "py-spy")
    run = HangkitRun(spawn, tmp_path, ["--mode", "fail", "--pyspy-path", missing],
                     mpiexec("mpi_divergent.py"))
    rc = run.wait(100)
    assert rc == EXIT_HANG, run.stderr()[-4000:]
    script = os.path.join(EXAMPLES, "mpi_divergent.py")
    assert_hang_report(run, "mpi_divergent.py", line_of(script, "comm.allreduce(local"))
    for r in range(4):
        text = (run.hd / "stack_traces" / ("rank_%d.log" % r)).read_text()
        assert text.startswith("hpc-hangkit: py-spy unavailable: ") and missing in text, text
        assert text.count("\n") == 1
    assert "py-spy unavailable" in run.stderr()


@needs_mpi
@pytest.mark.timeout(90)
def test_healthy_job_never_confirmed(spawn, tmp_path):
    """A healthy job that never calls checkpoint(): dumps every period, stacks move, never confirmed."""
    run = HangkitRun(spawn, tmp_path, ["--mode", "fail"], mpiexec("healthy.py", "--mpi", "--seconds", "12"))
    rc = run.wait(70)
    assert rc == 0, run.stderr()[-4000:]
    kinds = run.kinds()
    assert "launch" in kinds and kinds[-1] == "end"
    assert "confirmed" not in kinds and not (run.hd / "report.json").exists()
    # the watchdog really dumped all along (the job never checkpointed)
    logs = list(run.out.glob("scratch-*/watchdog/rank_*.log"))
    assert len(logs) == 4 and all(p.read_text().count("most recent call first") >= 8 for p in logs)


@needs_mpi
@pytest.mark.timeout(90)
def test_slow_rank_never_confirmed(spawn, tmp_path):
    """Rank 0 writes files for 12 s (twice the confirm window) while 1-3 wait in a collective."""
    run = HangkitRun(spawn, tmp_path, ["--mode", "fail"],
                     mpiexec("slow.py", "--mpi", "--io-seconds", "12"))
    rc = run.wait(70)
    assert rc == 0, run.stderr()[-4000:]
    kinds = run.kinds()
    assert "confirmed" not in kinds, run.stderr()[-3000:]
    assert not (run.hd / "report.json").exists()


TIGHT_LOOP = '''
import sys, time
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()


def preprocess(seconds):
    t0 = time.time()
    acc = i = 0
    while time.time() - t0 < seconds:
        acc += (i * i) % 7
        i += 1
    return acc


if rank == 0:
    preprocess(float(sys.argv[1]))  # pure Python, no calls per iteration: every sample shows one line
total = comm.allreduce(1)
print("rank %d done %d" % (rank, total), flush=True)
'''


@needs_mpi
@pytest.mark.timeout(90)
def test_rank_computing_in_a_tight_python_loop_is_not_confirmed(spawn, tmp_path):
    """Rank 0 spins in pure Python for 14 s (over twice the confirm window) while 1-3 wait in
    MPI_Allreduce. Its dumps all show the loop line (a dump lands at the loop's back edge),
    so stack samples do not move; its watchdog thread finds the main thread running Python
    (GIL busy) and that is progress. The waiters (in C, GIL released) are not busy."""
    script = tmp_path / "tight.py"
    script.write_text(TIGHT_LOOP)
    run = HangkitRun(spawn, tmp_path, ["--mode", "fail"],
                     ["mpiexec", "-n", "4", sys.executable, str(script), "14"])
    rc = run.wait(75)
    assert rc == 0, run.stderr()[-4000:]
    assert "confirmed" not in run.kinds(), run.stderr()[-3000:]
    from hpc_hangkit.parse.heartbeat import read_heartbeats

    busy = {}
    for d in run.out.glob("scratch-*/heartbeats"):
        busy.update({hb.rank: hb.busy for hb in read_heartbeats(str(d))})
    # rank 0 was found running Python again and again (its watchdog thread wakes every
    # 0.25 s; on 2 cores shared by 4 spinning ranks many probes are inconclusive)
    assert busy[0] >= 3, busy
    # the waiters spin in MPI with the GIL released: a rare late wake-up may count once
    assert all(busy[r] <= 2 for r in (1, 2, 3)), busy


@needs_torch
@pytest.mark.timeout(150)
def test_gloo_observe_capture_is_not_taken_for_progress(spawn, tmp_path, port):
    """Observe mode on a gloo hang with Flight Recorder on: the capture makes every rank
    write its Flight Recorder dump (tens of MB of I/O); the next polls must not call that
    progress ("recovered"), the hang stays confirmed while the job lives."""
    run = HangkitRun(spawn, tmp_path, ["--mode", "observe"], torchrun(port, "gloo_divergent.py"))
    def reported():
        assert run.proc.poll() is None, run.stderr()[-4000:]
        return "action" in run.kinds()  # written after report.txt/report.json
    wait_for(reported, 100, interval_s=0.5, what="the report and the run's action")
    assert list((run.hd / "flight_recorder").glob("rank_*.json"))  # the ranks really dumped
    time.sleep(6)  # six more polls after the capture
    assert run.proc.poll() is None
    kinds = run.kinds()
    assert "confirmed" in kinds and "recovered" not in kinds, [
        (e["kind"], e.get("detail")) for e in run.events()][-8:]
    run.proc.send_signal(signal.SIGINT)
    run.wait(40)
