"""Shared test fixtures.

Rules for tests that start processes (see DEVELOPERS.md):
- every child runs in its own session/process group (``spawn`` below does it);
- the fixture kills the whole group in teardown, pass or fail;
- every test has a timeout (pytest-timeout, default in pyproject.toml).

Every roll call JSON a test leaves under its ``tmp_path`` is checked against
hpc_hangkit/report/schema.json after the test (``_reports_match_the_schema``).
"""
import os
import signal
import socket
import subprocess
import sys

import pytest

from testlib import FIXTURES, REPO, report_violations_under  # noqa: F401  (REPO, FIXTURES: re-exported to tests)


def pytest_report_header(config):
    """The s3fs the S3 tests run against (and the aiobotocore/botocore under it)."""
    from importlib import metadata

    def v(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"
    return "s3fs %s (aiobotocore %s, botocore %s)" % (v("s3fs"), v("aiobotocore"), v("botocore"))


_HANDED_OUT = set()


def free_port():
    """A free TCP port on 127.0.0.1 (for MASTER_PORT etc.), outside the kernel's ephemeral
    range (``net.ipv4.ip_local_port_range``) and never the same twice in a session. A port
    from that range (what ``bind(0)`` gives) can be taken by any outgoing connection (srun's,
    slurmd's, another rank's) before the rank that is to listen on it binds it: seen as
    EADDRINUSE in the rendezvous of a cluster test."""
    import random
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    pool = range(20000, lo) if lo > 21000 else range(hi + 1, 65536)
    for _ in range(500):
        port = random.choice(pool)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free TCP port outside the ephemeral range %d-%d" % (lo, hi))


def _kill_group(proc, grace=2.0):
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = proc.pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    # the group may outlive its leader (orphaned ranks): sweep it
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@pytest.fixture
def spawn():
    """Start processes in their own process group; all are killed at teardown.

    Usage: ``p = spawn([sys.executable, "x.py"], env=..., stdout=...)`` -> Popen.
    """
    procs = []

    def _spawn(argv, **kw):
        kw.setdefault("start_new_session", True)
        p = subprocess.Popen(argv, **kw)
        procs.append(p)
        return p

    yield _spawn
    for p in procs:
        _kill_group(p)


@pytest.fixture(autouse=True, scope="session")
def _lint_cache_home():
    """The lint's default facts cache in a directory of this session's own, never the user's
    ~/.cache: every lint test after the first that reads the same files reads their facts from
    it, so the suite also checks that a cached run finds what a fresh one does."""
    import shutil
    import tempfile
    old = os.environ.get("XDG_CACHE_HOME")
    home = tempfile.mkdtemp(prefix="hk-lint-cache-")
    os.environ["XDG_CACHE_HOME"] = home
    yield home
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(autouse=True)
def _reports_match_the_schema(request):
    """After the test (and after its processes are killed: this fixture is set up first,
    so it is torn down last), every report.json, and every other *.json holding a roll
    call (``--json-out``), under the test's ``tmp_path`` must match the schema; a
    violation is an error of this test naming the file and the fields."""
    yield
    tmp = request.node.funcargs.get("tmp_path") if hasattr(request.node, "funcargs") else None
    if tmp is None or not os.path.isdir(str(tmp)):
        return
    bad = report_violations_under(str(tmp))
    if bad:
        pytest.fail("report JSON written by this test does not match hpc_hangkit/report/schema.json:\n" + "\n".join(
            "%s:\n  %s" % (os.path.relpath(p, str(tmp)), "\n  ".join(errs)) for p, errs in sorted(bad.items())),
            pytrace=False)


@pytest.fixture
def port():
    return free_port()


def have_module(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


PYTHON = sys.executable
