"""The lint's process pool (hpc_hangkit.lint._map): this process works too, results come back in
the order of the items, a worker's exception or death reaches the caller, nothing is left
running."""
import multiprocessing
import os
import time

import pytest

from hpc_hangkit.lint import _map


def _slow_square(x):
    # the early items slowest, so that later ones finish first somewhere
    time.sleep(0.002 * (20 - x) if x < 20 else 0)
    return x * x, os.getpid()


@pytest.mark.timeout(120)
def test_results_in_order_from_this_process_and_the_workers():
    items = list(range(60))
    got = list(_map(_slow_square, items, 3))
    assert [v for v, _ in got] == [x * x for x in items]
    pids = {pid for _, pid in got}
    # this process takes items too (its own are not pickled); every process is one of the jobs
    assert os.getpid() in pids and len(pids) <= 3
    assert multiprocessing.active_children() == []


def test_one_job_runs_here_alone():
    assert {pid for _, pid in _map(_slow_square, list(range(5)), 1)} == {os.getpid()}


def _fails_on_7(x):
    if x == 7:
        raise KeyError("item %d" % x)
    return x


@pytest.mark.timeout(120)
@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_an_exception_in_any_process_reaches_the_caller(jobs):
    with pytest.raises(KeyError, match="item 7"):
        list(_map(_fails_on_7, list(range(30)), jobs))
    assert multiprocessing.active_children() == []


class _Unpicklable(Exception):
    def __init__(self, msg):
        super().__init__(msg)
        self.lock = __import__("threading").Lock()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how, raised, says", [
    ("exit", RuntimeError, "a lint worker process died \\(exit code 3\\)"),
    ("raise", KeyError, "in a worker"),
    ("unpicklable", RuntimeError, "_Unpicklable: in a worker"),
])
def test_what_happens_in_a_worker_reaches_the_caller(tmp_path, how, raised, says):
    parent = os.getpid()
    marker = tmp_path / "done"

    def fail_in_a_worker(x):
        if os.getpid() != parent:
            marker.write_text("x")
            if how == "exit":
                os._exit(3)
            raise KeyError("in a worker") if how == "raise" else _Unpicklable("in a worker")
        # this process keeps its item until the worker has taken one and failed
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return x

    with pytest.raises(raised, match=says):
        list(_map(fail_in_a_worker, list(range(4)), 2))
    assert marker.exists()
    assert multiprocessing.active_children() == []


@pytest.mark.timeout(120)
def test_closing_early_stops_the_workers():
    it = _map(_slow_square, list(range(200)), 2)
    assert next(it)[0] == 0
    it.close()
    assert multiprocessing.active_children() == []
