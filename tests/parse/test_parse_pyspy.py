"""py-spy dump parser: text and --json, with and without --native (real outputs), a live
py-spy run, capture's why-file, and damaged input."""
from testlib import TESTS, blocked_in, wait_for
import os
import shutil
import subprocess
import sys

import pytest

from hpc_hangkit.parse.pyspy import looks_like_pyspy, parse_pyspy
from hpc_hangkit.parse.model import LogKind, no_dump_text
from hpc_hangkit.rollcall import main_thread
from hpc_hangkit.rollcall.frames import key_of

FIX = os.path.join(TESTS, "fixtures", "torch_samples")


def fixture(*parts):
    with open(os.path.join(FIX, *parts), "rb") as fh:
        return fh.read()


def main_py_key(data, name="x"):
    log = parse_pyspy(data, name)
    assert log.warnings == [], log.warnings
    assert len(log.samples) == 1
    m = main_thread(log.samples[0])
    return log, m, key_of(m.frames)


@pytest.mark.parametrize("sample", ["gloo_divergent_barrier", "mpi_mpich_allreduce_obj",
                                    "mpi_openmpi_Allreduce_buf"])
@pytest.mark.parametrize("rank", [0, 1])
def test_text_json_native_agree_on_the_python_position(sample, rank):
    """Four py-spy outputs of the same hung process: same main thread, same Python position."""
    d = os.path.join(sample, "pyspy")
    keys = set()
    for name in ("dump_rank%d.txt", "dump_rank%d.json", "dump_native_rank%d.txt", "dump_native_rank%d.json"):
        path = os.path.join(FIX, d, name % rank)
        if not os.path.exists(path):
            continue
        log, m, key = main_py_key(fixture(d, name % rank), name)
        assert m.name == "MainThread" and m.current
        assert log.pid is not None
        if "native" in name:
            assert any(f.native for f in m.frames), "native frames are kept"
            assert all(f.line == 0 for f in m.frames if f.native)
        keys.add(key)
    assert len(keys) == 1, keys


def test_native_mpi_frames_and_helper_threads():
    log, m, _ = main_py_key(fixture("mpi_mpich_allreduce_obj", "pyspy", "dump_native_rank0.txt"))
    names = [f.function for f in m.frames]
    assert "allreduce" in names and "PMPI_Recv_c" in names and "sched_yield" in names
    py = [f for f in m.frames if not f.native]
    assert [(f.function, f.line) for f in py] == [("sync_grads", 34), ("train", 47), ("<module>", 56)]
    log, m, _ = main_py_key(fixture("gloo_divergent_barrier", "pyspy", "dump_rank1.json"))
    assert len(log.samples[0].threads) == 2
    helper = [t for t in log.samples[0].threads if t is not m][0]
    assert helper.name == "fr-sigwait" and helper.owns_gil is False
    assert m.frames[0].function == "barrier" and m.frames[0].file.endswith("distributed_c10d.py")


def test_live_pyspy_dump(tmp_path):
    pyspy = shutil.which("py-spy")
    assert pyspy, "py-spy is a test dependency (pyproject [test])"
    prog = tmp_path / "sleeper.py"
    prog.write_text("import time\n\ndef waiting_here():\n    time.sleep(60)\n\nprint('ready', flush=True)\n"
                    "waiting_here()\n")
    p = subprocess.Popen([sys.executable, str(prog)], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert p.stdout.readline().strip() == b"ready"
        # after 'ready' the program only calls waiting_here(): blocked in a sleep, it is in that one
        wait_for(lambda: blocked_in(p.pid) in ("nanosleep", "clock_nanosleep"), 30, 0.02,
                 what="pid %d blocked in its sleep" % p.pid, detail=lambda: "blocked in: %s" % blocked_in(p.pid))
        for extra in ([], ["--json"]):
            r = subprocess.run([pyspy, "dump", "--pid", str(p.pid)] + extra, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=30)
            if r.returncode != 0 and b"ermission" in r.stderr + r.stdout:
                pytest.skip("py-spy cannot attach here (no ptrace permission): %s" % r.stderr[:200])
            assert r.returncode == 0, r.stderr
            assert looks_like_pyspy(r.stdout)
            log = parse_pyspy(r.stdout, "live")
            m = main_thread(log.samples[0])
            assert log.pid == p.pid
            py = [f for f in m.frames if not f.native]
            assert [f.function for f in py] == ["waiting_here", "<module>"]
            assert py[0].line == 4
    finally:
        p.kill()
        p.wait()


def test_why_file_and_error_text_give_no_samples():
    log = parse_pyspy(b"hpc-hangkit: py-spy unavailable: executable 'py-spy' not found\n", "stack_traces/rank_2.log")
    assert log.samples == [] and log.kind is LogKind.UNAVAILABLE
    assert log.no_dump == "hpc-hangkit: py-spy unavailable: executable 'py-spy' not found"
    assert "py-spy unavailable" in log.warnings[0] and log.warnings[0].startswith("stack_traces/rank_2.log")
    log = parse_pyspy(b"Error: Permission Denied (os error 13)\n", "x")
    assert log.samples == [] and "Permission" in log.warnings[0] and log.kind is LogKind.UNAVAILABLE
    # a file without a dump whose parser warned first: the why is the file's own line, not the
    # first warning
    log = parse_pyspy(b"Process 12 (python)\nsome line py-spy never prints\n", "y")
    assert log.samples == [] and log.kind is LogKind.UNAVAILABLE
    assert log.no_dump == "Process 12 (python)" and no_dump_text(log.no_dump) in log.warnings[-1]
    log = parse_pyspy(b"", "z")
    assert log.no_dump == "" and no_dump_text("") == "empty py-spy output"
    assert parse_pyspy(b"hpc-hangkit: py-spy unavailable: x\n", "w").kind is not LogKind.PYSPY


def test_damaged_pyspy_input_never_raises():
    text = fixture("gloo_divergent_barrier", "pyspy", "dump_native_rank0.txt")
    for cut in range(0, len(text), 97):
        parse_pyspy(text[:cut], "cut")
    log = parse_pyspy(text[: len(text) - 5], "cut.txt")
    assert any("truncated" in w for w in log.warnings)
    js = fixture("gloo_divergent_barrier", "pyspy", "dump_rank0.json")
    log = parse_pyspy(js[: len(js) // 2], "half.json")
    assert log.samples == [] and "does not parse" in log.warnings[0]
    assert parse_pyspy(b'[{"frames": 3}, 7]', "odd.json").samples == []
    assert parse_pyspy(b"\x00\xff" * 50, "bin").samples == []
