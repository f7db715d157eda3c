"""Shared test fixtures.

Rules for tests that start processes (see DEVELOPERS.md):
- every child runs in its own session/process group (``spawn`` below does it);
- the fixture kills the whole group in teardown, pass or fail;
- every test has a timeout (pytest-timeout, default in pyproject.toml).
"""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures")


def free_port():
    """A free TCP port on 127.0.0.1 (for MASTER_PORT etc.)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@pytest.fixture
def port():
    return free_port()


def have_module(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


PYTHON = sys.executable
