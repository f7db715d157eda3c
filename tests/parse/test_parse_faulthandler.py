"""faulthandler dump parser: the three shapes CPython writes (from real files), our header,
fatal-error dumps, and damaged input (truncated, garbage, interleaved) that must never raise."""
from testlib import TESTS
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hpc_hangkit.parse.faulthandler import looks_like_faulthandler, parse_faulthandler, parse_header
from hpc_hangkit.rollcall import main_thread

FIX = os.path.join(TESTS, "fixtures", "torch_samples")


def fixture(*parts):
    with open(os.path.join(FIX, *parts), "rb") as fh:
        return fh.read()


#: a program whose ``inner()`` has faulthandler dump its own stack (``Stack`` shape) into
#: dump.log; append the calls
SIGNAL_DUMPS = textwrap.dedent("""
    import faulthandler, os, signal
    f = open("dump.log", "a")
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=False)
    def inner():
        os.kill(os.getpid(), signal.SIGUSR1)
    def outer():
        inner()
    """)


def run_py(tmp_path, code, timeout=30):
    """Run ``code`` in a fresh interpreter (real faulthandler output lands in tmp_path)."""
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=str(tmp_path),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p


# --- shape 1: dump_traceback_later (Timeout + Thread blocks, main thread last) ------------

def test_timeout_shape_real_gloo_log():
    log = parse_faulthandler(fixture("gloo_divergent_barrier", "faulthandler", "rank_1.log"), "rank_1.log")
    assert log.warnings == []
    assert (log.rank, log.pid, log.host) == (1, 7699, "vm")
    assert log.header["format"] == "hangkit-probe"
    assert log.header["argv"] == ["/home/user/hangdemo/jobs/hang_gloo.py"]
    assert log.period_s == 3.0
    assert len(log.samples) == 35
    assert all(s.source == "timeout" for s in log.samples)
    first = log.samples[0]
    assert len(first.threads) == 1 and first.threads[0].frames[0].function == "get_data"
    last = log.samples[-1]
    assert [t.frames[-1].function for t in last.threads] == ["_bootstrap", "<module>"]
    # innermost first
    assert last.threads[-1].frames[0].function == "barrier"
    assert last.threads[-1].frames[2].function == "checkpoint_barrier"
    assert last.threads[-1].frames[2].line == 69


# --- shape 2: register(all_threads=True): Current thread, no separator between dumps -------

def test_signal_shape_no_separator_and_no_python_frame():
    data = fixture("gloo_sigusr1_register_running", "rank_3_head520.log")
    log = parse_faulthandler(data, "rank_3_head520.log")
    assert len(log.samples) == 87
    assert all(s.source == "signal" for s in log.samples)
    two = [s for s in log.samples if len(s.threads) == 2]
    assert len(two) == 1, "the <no Python frame> block and the Current thread block are ONE dump"
    helper, cur = two[0].threads
    assert helper.no_python and not helper.current and helper.frames == ()
    assert cur.current and cur.frames[0].function == "train"
    assert main_thread(two[0]) is cur


def test_signal_shape_all_threads_real(tmp_path):
    code = """
    import faulthandler, os, signal, threading, time
    f = open("dump.log", "w")
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)
    ev, started = threading.Event(), threading.Event()
    def helper_loop():
        started.set()
        ev.wait(30)
    t = threading.Thread(target=helper_loop, daemon=True); t.start()
    started.wait(30)  # the helper is in its own function before the dumps
    def first():
        os.kill(os.getpid(), signal.SIGUSR1)
    def second():
        os.kill(os.getpid(), signal.SIGUSR1)
    first(); second()
    ev.set(); t.join()
    """
    assert run_py(tmp_path, code).returncode == 0
    log = parse_faulthandler((tmp_path / "dump.log").read_bytes(), "dump.log")
    assert log.warnings == []
    assert len(log.samples) == 2, "two consecutive dumps without a separator"
    for s, fn in zip(log.samples, ("first", "second")):
        assert len(s.threads) == 2
        m = main_thread(s)
        assert m.current and m.frames[-1].function == "<module>"
        assert [f.function for f in m.frames][:2] == [fn, "<module>"]
        other = [t for t in s.threads if t is not m][0]
        assert other.frames[-1].function == "_bootstrap"


# --- shape 3: register(all_threads=False): "Stack (most recent call first):", our watchdog ---

def test_stack_shape_real_and_our_header(tmp_path):
    from hpc_hangkit.boot import _hangkit_core as core

    hdr = core.header_line(3, None, 1, 4242, "node7", 1796000000.5, "SIGURG", 2.5, ["python", "train.py", "--x"])
    (tmp_path / "dump.log").write_text(hdr)
    assert run_py(tmp_path, SIGNAL_DUMPS + "outer(); inner(); outer()\n").returncode == 0
    log = parse_faulthandler((tmp_path / "dump.log").read_bytes(), "dump.log")
    assert log.warnings == []
    assert log.header["format"] == "hpc-hangkit"
    assert (log.rank, log.world, log.pid, log.host, log.period_s) == (3, None, 4242, "node7", 2.5)
    assert log.header["local_rank"] == 1 and log.header["signal"] == "SIGURG"
    assert log.header["argv"] == ["python", "train.py", "--x"]
    assert [s.source for s in log.samples] == ["stack"] * 3
    chains = [[f.function for f in s.threads[0].frames] for s in log.samples]
    assert chains == [["inner", "outer", "<module>"], ["inner", "<module>"], ["inner", "outer", "<module>"]]


def test_fatal_error_dump_real(tmp_path):
    code = """
    import ctypes, faulthandler
    f = open("dump.log", "w")
    faulthandler.enable(file=f, all_threads=True)
    def crash_here():
        ctypes.string_at(0)
    crash_here()
    """
    p = run_py(tmp_path, code)
    assert p.returncode == -signal.SIGSEGV
    log = parse_faulthandler((tmp_path / "dump.log").read_bytes(), "dump.log")
    assert len(log.samples) == 1
    s = log.samples[0]
    assert s.fatal == "Segmentation fault"
    assert main_thread(s).frames[-2].function == "crash_here" or any(
        f.function == "crash_here" for f in main_thread(s).frames)
    assert log.exit_note == "Fatal Python error: Segmentation fault"


def test_header_parsing_variants():
    h = parse_header("# hpc-hangkit rank=0 world=- local_rank=- pid=12 host=h t=1.5 signal=SIGURG "
                     "period_s=30 argv=[\"a b\", \"c\"]")
    assert h["rank"] == 0 and h["world"] is None and h["local_rank"] is None
    assert h["argv"] == ["a b", "c"] and h["t"] == 1.5 and h["period_s"] == 30.0
    assert parse_header("# something else") is None
    assert parse_header("# hpc-hangkit rank=x pid=?? argv=not json")["argv"] == "not json"


# --- damaged input -------------------------------------------------------------------

def test_truncated_real_log_is_skipped_with_offset():
    name = "faulthandler_crash_stress/gloo_rank2_truncated_dump_before_segv.log"
    data = fixture("faulthandler_crash_stress", "gloo_rank2_truncated_dump_before_segv.log")
    log = parse_faulthandler(data, name)
    assert log.samples == []
    assert log.rank == 2
    assert len(log.warnings) == 1
    assert name in log.warnings[0] and "byte %d" % (data.rfind(b"\n") + 1) in log.warnings[0]
    assert "truncated" in log.warnings[0]
    assert "died" in log.exit_note


def test_binary_garbage_inside_one_dump_drops_only_that_dump():
    data = fixture("gloo_divergent_barrier", "faulthandler", "rank_0.log")
    clean = parse_faulthandler(data, "r0")
    tenth = clean.samples[10].offset
    cut = data.index(b"\n", tenth + 40) + 1
    garbage = b"\x00\x00\xff\xfe\x13garbage\x00\n"
    bad = data[:cut] + garbage + data[cut:]
    log = parse_faulthandler(bad, "r0.log")
    assert len(log.samples) == len(clean.samples) - 1
    joined = " | ".join(log.warnings)
    assert "r0.log: byte %d" % cut in joined and "garbage" in joined
    assert "byte %d" % tenth in joined  # the damaged dump is named by where it starts


def test_interleaved_writers_never_raise():
    a = fixture("gloo_divergent_barrier", "faulthandler", "rank_0.log").split(b"\n")
    b = fixture("gloo_divergent_barrier", "faulthandler", "rank_1.log").split(b"\n")
    mixed = []
    for i in range(max(len(a), len(b))):
        if i < len(a):
            mixed.append(a[i])
        if i < len(b) and i % 3 == 0:
            mixed.append(b[i])
    log = parse_faulthandler(b"\n".join(mixed), "mixed.log")
    assert log.warnings, "interleaving must be reported"
    assert all(w.startswith("mixed.log: byte ") for w in log.warnings)


def test_a_dump_written_into_the_middle_of_another_is_skipped_not_read_as_two_positions(tmp_path):
    """A loaded node: the kernel timer's C dump (a line at a time) and the watchdog thread's
    on-demand dump (one write) of the same stack land together; the log holds the C dump's
    first frame, the whole second dump, then the C dump's outer frames. Read naively that is
    a cut stack and one repeating its outer frames (two positions: the rank looked "moving");
    both are skipped with a warning and the clean dumps around them are kept, on the fast
    path and the line parser alike."""
    assert run_py(tmp_path, SIGNAL_DUMPS + "outer()\n").returncode == 0
    one = (tmp_path / "dump.log").read_bytes()
    lines = one.split(b"\n")
    assert lines[0] == b"Stack (most recent call first):" and len(lines) == 5  # 3 frames, last ''
    head, tail = b"\n".join(lines[:2]) + b"\n", b"\n".join(lines[2:])
    for prefix in (b"", b"# not a header line a parser knows\n"):  # fast path, then the line parser
        data = prefix + one * 2 + head + one + tail + one
        log = parse_faulthandler(data, "w.log")
        chains = [[f.function for f in s.threads[0].frames] for s in log.samples]
        assert chains == [["inner", "outer", "<module>"]] * 3, chains
        assert [s.index for s in log.samples] == [0, 1, 2]
        assert any("one dump written into another" in w for w in log.warnings), log.warnings
    clean = parse_faulthandler(one * 4, "w.log")
    assert len(clean.samples) == 4 and clean.warnings == []


def test_not_a_dump_at_all():
    assert not looks_like_faulthandler(b"[rank 1] step 0 done\nhello\n")
    assert not looks_like_faulthandler(
        b"Exception raised from delay at x.cpp:1 (most recent call first):\nframe #0: c10::Error\n")
    log = parse_faulthandler(b"\x00\x01\x02\xff" * 100, "bin")
    assert log.samples == [] and any("garbage" in w for w in log.warnings)
    assert parse_faulthandler(b"", "empty").samples == []


REAL = fixture("hung_sigusr1_register", "gloo", "rank_0.log") + fixture(
    "gloo_divergent_sleep", "faulthandler", "rank_1.log")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(min_value=0, max_value=len(REAL)))
def test_truncation_anywhere_keeps_a_prefix(cut):
    full = parse_faulthandler(REAL, "real")
    part = parse_faulthandler(REAL[:cut], "real")
    # every complete dump before the cut is parsed exactly as in the full file
    n = len(part.samples)
    for s, f in zip(part.samples[:-1], full.samples[:max(0, n - 1)]):
        assert [t.frames for t in s.threads] == [t.frames for t in f.threads]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=600), pos=st.integers(min_value=0, max_value=len(REAL)))
def test_random_bytes_spliced_into_a_real_log_never_raise(data, pos):
    log = parse_faulthandler(REAL[:pos] + data + REAL[pos:], "fuzz")
    for w in log.warnings:
        assert w.startswith("fuzz: ")
    for s in log.samples:
        for t in s.threads:
            assert t.frames or t.no_python or s.fatal


def _shape(log):
    return (log.header, log.rank, log.pid, log.period_s, log.exit_note, log.warnings,
            [(s.source, s.offset, s.fatal, [(t.tid, t.frames, t.current, t.no_python) for t in s.threads])
             for s in log.samples])


@pytest.mark.parametrize("rel", [
    "gloo_divergent_barrier/faulthandler/rank_0.log", "gloo_divergent_sleep/faulthandler/rank_1.log",
    "mpi_openmpi_allreduce_obj/faulthandler/rank_2.log", "control_gil_held/gil_held_faulthandler.log",
    "gloo_pg_timeout_10s/faulthandler_rank_3.log"])
def test_block_fast_path_equals_the_line_parser(rel, tmp_path):
    from hpc_hangkit.parse import faulthandler as fh

    data = fixture(*rel.split("/"))
    fast = fh._parse_blocks(data, rel)
    assert fast is not None, "these clean logs take the fast path"
    assert _shape(fast) == _shape(fh._parse_lines(data, rel))


def test_body_cache_equals_the_line_parser_under_other_headers():
    """A body seen before is taken from the cache: same result as parsing it, whatever the
    header line (offsets follow its length), and without one."""
    from hpc_hangkit.parse import faulthandler as fh

    data = fixture("gloo_divergent_barrier", "faulthandler", "rank_0.log")
    body = data[data.index(b"\n") + 1:] if data.startswith(b"# ") else data
    heads = [b"", b"# hpc-hangkit rank=7 world=8 local_rank=7 pid=1234567 host=n1 t=1.5 signal=SIGURG "
             b"period_s=3.0 argv=[\"x\"]\n", b"# hpc-hangkit rank=3 pid=9 argv=[]\n", b"# a comment\n"]
    for _ in range(2):  # the first round fills the cache, the second reads it
        for h in heads:
            assert _shape(fh._parse_blocks(h + body, "n")) == _shape(fh._parse_lines(h + body, "n"))
    assert fh._parse_blocks(b"# no end", "n") is None


def test_block_fast_path_on_our_watchdog_stack_logs(tmp_path):
    from hpc_hangkit.boot import _hangkit_core as core
    from hpc_hangkit.parse import faulthandler as fh

    (tmp_path / "dump.log").write_text(core.header_line(0, 2, 0, 1, "h", 1.0, "SIGURG", 1.0, ["x"]))
    code = """
    import faulthandler, os, signal
    f = open("dump.log", "a")
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=False)
    def a():
        os.kill(os.getpid(), signal.SIGUSR1)
    for _ in range(4):
        a()
    os.kill(os.getpid(), signal.SIGUSR1)
    """
    assert run_py(tmp_path, code).returncode == 0
    data = (tmp_path / "dump.log").read_bytes()
    fast = fh._parse_blocks(data, "d")
    assert fast is not None and len(fast.samples) == 5
    assert _shape(fast) == _shape(fh._parse_lines(data, "d"))


def test_all_three_shapes_mixed_in_one_real_file(tmp_path):
    code = """
    import faulthandler, os, signal, threading, time
    f = open("dump.log", "w")
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=False)
    def a(): os.kill(os.getpid(), signal.SIGUSR1)
    a(); a()
    faulthandler.register(signal.SIGUSR2, file=f, all_threads=True)
    ev = threading.Event()
    t = threading.Thread(target=ev.wait, daemon=True); t.start()
    def b(): os.kill(os.getpid(), signal.SIGUSR2)
    b(); b()
    ev.set(); t.join()
    faulthandler.dump_traceback_later(0.1, file=f)
    n = os.fstat(f.fileno()).st_size
    while os.fstat(f.fileno()).st_size == n:  # stay (in <module>) until the timeout dump lands;
        time.sleep(0.02)                      # exiting then waits for it to be written whole
    """
    assert run_py(tmp_path, code).returncode == 0
    log = parse_faulthandler((tmp_path / "dump.log").read_bytes(), "dump.log")
    assert log.warnings == []
    assert [(s.source, len(s.threads)) for s in log.samples] == [
        ("stack", 1), ("stack", 1), ("signal", 2), ("signal", 2), ("timeout", 1)]
    assert [main_thread(s).frames[0].function for s in log.samples] == ["a", "a", "b", "b", "<module>"]
    assert log.period_s == pytest.approx(0.1)  # "Timeout (0:00:00.100000)!"
