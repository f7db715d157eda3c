"""Real hung jobs for the live benches (figures 5-7). Not a benchmark itself.

:func:`start_hung_job` starts ``examples/gloo_divergent.py`` under
``torch.distributed.run`` (or ``examples/mpi_divergent.py`` under ``mpiexec``)
armed by the job environment of :meth:`hpc_hangkit.config.Settings.to_env`,
in its own session (process group); :func:`wait_hung` waits until every rank
has a watchdog log and the job's main threads stopped moving; :func:`kill_job`
kills the whole group (SIGTERM, then SIGKILL). Every bench that starts a job
kills it in a ``finally``.
"""
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def free_port():
    """A free TCP port on 127.0.0.1 (MASTER_PORT; the default 29500 collides with other jobs)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settings(**overrides):
    """Settings from the defaults plus ``overrides`` only (no site file, no HANGKIT_* environment)."""
    from hpc_hangkit.config import load_settings
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_")}
    env["HPC_HANGKIT_CONFIG"] = ""
    ov = {"mode": "observe"}
    ov.update(overrides)
    return load_settings(env=env, path=None, overrides=ov)


def job_argv(ranks, kind="gloo"):
    """The launcher command of a hung ``ranks``-rank job (rank 1 skips a collective)."""
    if kind == "mpi":
        return ["mpiexec", "-n", str(ranks), sys.executable, os.path.join(ROOT, "examples", "mpi_divergent.py")]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
            "--master-port", str(free_port()), os.path.join(ROOT, "examples", "gloo_divergent.py")]


def start_hung_job(scratch, ranks=4, kind="gloo", s=None, log_path=None):
    """Start the job armed (scratch = its ``HANGKIT_SCRATCH_DIR``); returns the Popen (own session)."""
    s = s or settings()
    base = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_")}
    env = s.to_env(os.path.abspath(scratch), base_env=base)
    out = open(log_path or os.devnull, "ab")
    try:
        return subprocess.Popen(job_argv(ranks, kind), env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=ROOT)
    finally:
        out.close()


def wait_hung(scratch, ranks, proc, timeout_s=120.0, settle_s=3.0, until_split=False):
    """Wait until ``ranks`` live rank processes are known in ``scratch`` and ``settle_s`` more seconds
    passed (the example hangs at step 3, well under a second after start-up). ``until_split``: then
    also wait (on-demand dumps every second) until the roll call of the watchdog dumps says the
    ranks disagree (on a loaded machine the ranks may still be importing torch after the settle
    time). Raises RuntimeError if the job exits or the ranks do not show up within ``timeout_s``."""
    from hpc_hangkit.capture.ranks import discover_ranks
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the job exited (status %s) before it hung" % proc.returncode)
        found = discover_ranks(scratch)
        if len(found) >= ranks:
            time.sleep(settle_s)
            if until_split:
                _wait_split(scratch, proc, deadline)
            return discover_ranks(scratch)
        time.sleep(0.25)
    raise RuntimeError("only %d of %d ranks showed up in %.0f s" % (len(discover_ranks(scratch)), ranks, timeout_s))


def _wait_split(scratch, proc, deadline):
    from hpc_hangkit import layout
    from hpc_hangkit.arm.watchdog import request_dumps
    from hpc_hangkit.capture.ranks import discover_ranks
    from hpc_hangkit.evidence.stacks import DISAGREE_VERDICTS
    from hpc_hangkit.rollcall import report_from_dir
    verdict = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the job exited (status %s) before it hung" % proc.returncode)
        request_dumps({rp.pid: [] for rp in discover_ranks(scratch).values()}, "SIGURG", timeout_s=1.0)
        rep = report_from_dir(os.path.join(scratch, layout.WATCHDOG_DIR))
        now = (rep.verdict, tuple(rep.suspect_ranks))
        if rep.verdict in DISAGREE_VERDICTS and now == verdict:
            return              # the same split twice, a second apart: the ranks stopped moving
        verdict = now
        time.sleep(1.0)
    raise RuntimeError("the ranks never split (last roll call: %s)" % verdict)


def exit_on_sigterm():
    """SIGTERM/SIGHUP raise SystemExit, so the bench's ``finally`` kills the jobs it started."""
    def _exit(signum, frame):
        sys.exit(128 + signum)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit)


def kill_job(proc, grace_s=2.0):
    """SIGTERM then SIGKILL to the job's whole process group (ranks orphaned by the launcher too)."""
    from hpc_hangkit.run import signal_group, terminate_group
    if proc is None:
        return
    terminate_group(proc, proc.pid, grace_s)
    signal_group(proc.pid, signal.SIGKILL)
