"""The watchdog in real processes (never in-process: pytest owns faulthandler here).

Each test writes a small program, runs it as its own process group (``spawn``),
and reads the dump log / heartbeat files it leaves.
"""
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from conftest import PYTHON, REPO
from testlib import blocked_in, wait_for
from hpc_hangkit.parse.heartbeat import HeartbeatWarning, read_heartbeat, read_heartbeats

DUMP_START = re.compile(r"^(Stack \(most recent call first\):|Current thread 0x[0-9a-f]+ \(most recent call first\):)$", re.M)
FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)$')


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_") and k not in (
        "RANK", "WORLD_SIZE", "LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK",
        "SLURM_PROCID", "SLURM_STEP_ID", "SLURM_NTASKS", "TORCHELASTIC_RUN_ID")}
    env["PYTHONPATH"] = REPO
    env.update(extra)
    return env


def write(tmp_path, name, src):
    p = tmp_path / name
    p.write_text(textwrap.dedent(src))
    return str(p)


def line_of(path, marker):
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if marker in line:
                return n
    raise AssertionError("marker %r not in %s" % (marker, path))


def dumps(log_text):
    """List of dumps; each a list of (file, line, func), innermost first."""
    out = []
    for block in DUMP_START.split(log_text)[1:]:
        frames = []
        for line in block.splitlines():
            m = FRAME.match(line)
            if m:
                frames.append((m.group("file"), int(m.group("line")), m.group("func")))
        if frames:
            out.append(frames)
    return out


def run(spawn, argv, env, timeout=60, **kw):
    p = spawn(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out.decode(), err.decode()


@pytest.mark.timeout(60)
def test_stalled_rank_dumped_at_the_right_line_healthy_phase_never(spawn, tmp_path):
    log = str(tmp_path / "w" / "rank_0.log")
    script = write(tmp_path, "prog.py", """
        import ctypes, sys, time
        from hpc_hangkit.arm import watchdog
        watchdog.watch(sys.argv[1], period_s=0.3)

        def healthy_loop(seconds):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                watchdog.checkpoint("healthy")
                time.sleep(0.005)  # MARK-healthy

        def stalled_here():
            watchdog.checkpoint("about to stall")
            time.sleep(1.5)  # MARK-stall

        def held_gil():
            watchdog.checkpoint("entering C with the GIL")
            ctypes.PyDLL(None).sleep(2)  # MARK-gil

        healthy_loop(1.5)
        stalled_here()
        held_gil()
        print("done")
        """)
    rc, out, err = run(spawn, [PYTHON, script, log], clean_env())
    assert rc == 0, err
    assert out.strip() == "done"
    text = open(log).read()
    assert text.startswith("# hpc-hangkit rank=0 world=1 ")
    ds = dumps(text)
    funcs = [d[0][2] for d in ds]
    assert not [f for d in ds for f in d if f[2] == "healthy_loop"], text
    stall = [d for d in ds if d[0][2] == "stalled_here"]
    assert len(stall) >= 3, text  # 1.5 s stalled at a 0.3 s period: dumped repeatedly
    assert all(d[0] == (script, line_of(script, "MARK-stall"), "stalled_here") for d in stall)
    # every stall dump is the main thread (outermost <module>); a dump can also land
    # in interpreter shutdown (threading._shutdown, no <module>), which is fine
    assert all(d[-1][2] == "<module>" for d in stall)
    gil = [d for d in ds if d[0][2] == "held_gil"]
    assert gil, "no dump while blocked in C holding the GIL:\n" + text
    assert gil[0][0] == (script, line_of(script, "MARK-gil"), "held_gil")
    assert set(funcs) <= {"stalled_here", "held_gil", "<module>"}, text  # <module>: on the way out


@pytest.mark.timeout(60)
def test_checkpointing_rank_is_never_dumped(spawn, tmp_path):
    script = write(tmp_path, "prog.py", """
        import sys, time
        from hpc_hangkit.arm import watchdog
        watchdog.watch(sys.argv[1], period_s=1.0)
        end = time.monotonic() + 4
        n = 0
        while time.monotonic() < end:
            watchdog.checkpoint("step %d" % n)
            n += 1
            sum(i * i for i in range(2000))
        print(n)
        """)
    log = str(tmp_path / "rank_0.log")
    rc, out, err = run(spawn, [PYTHON, script, log], clean_env())
    assert rc == 0, err
    text = open(log).read()
    assert text.count("\n") == 1 and text.startswith("# hpc-hangkit "), text  # the header line only
    hb = read_heartbeat(str(tmp_path / "rank_0.hb"))
    assert hb.counter == int(out) and hb.label == "step %d" % (int(out) - 1)


@pytest.mark.timeout(60)
def test_heartbeat_readable_while_rank_blocked_in_c(spawn, tmp_path):
    script = write(tmp_path, "prog.py", """
        import ctypes, sys, time
        from hpc_hangkit.arm import watchdog
        st = watchdog.watch(sys.argv[1], period_s=5)
        for i in range(12):
            watchdog.checkpoint("step %d" % i)
        print(st["heartbeat_path"], flush=True)
        buf = ctypes.create_string_buffer(1)
        ctypes.PyDLL(None).read(0, buf, 1)  # GIL held: no Python thread can run (until the test writes)
        """)
    p = spawn([PYTHON, script, str(tmp_path / "rank_0.log")], env=clean_env(), stdout=subprocess.PIPE,
              stdin=subprocess.PIPE)
    hb_path = p.stdout.readline().decode().strip()
    wait_for(lambda: blocked_in(p.pid) == "read", 30, 0.02, what="the rank blocked in read(2), GIL held",
             detail=lambda: "blocked in: %s" % blocked_in(p.pid))
    hb = read_heartbeat(hb_path)
    assert blocked_in(p.pid) == "read"
    assert (hb.counter, hb.label, hb.pid, hb.rank, hb.world) == (12, "step 11", p.pid, 0, 1)
    assert hb.signal == "SIGURG" and hb.period_s == 5 and hb.main_tid == p.pid
    assert abs(hb.wall_s - time.time()) < 5
    p.stdin.write(b"x")
    p.stdin.flush()
    assert p.wait(timeout=20) == 0


BURNER = "while True: pass"


@pytest.mark.timeout(600)
def test_heartbeat_never_torn_across_processes(spawn, tmp_path):
    """A rank checkpointing in a tight loop (what the auto check-in does for a rank that
    runs thousands of small collectives a second) on a node whose cores are all busy:
    every read returns a whole record, 50 rounds in a row, each a fresh writer."""
    script = write(tmp_path, "prog.py", """
        import sys, time
        from hpc_hangkit.arm import watchdog
        st = watchdog.watch(sys.argv[1], period_s=30)
        watchdog.checkpoint("x 1")
        print(st["heartbeat_path"], flush=True)
        i = 1
        end = time.monotonic() + float(sys.argv[2])
        while time.monotonic() < end:
            i += 1
            # label length varies, so a torn record would mix two labels
            watchdog.checkpoint(("x" * (i % 150)) + " %d" % i)
        """)
    for _ in range(2):  # two CPU burners: the writer gets preempted, mid-write too
        spawn([PYTHON, "-c", BURNER], env=clean_env())
    for round_ in range(50):
        p = spawn([PYTHON, script, str(tmp_path / ("r%d.log" % round_)), "0.4"], env=clean_env(),
                  stdout=subprocess.PIPE)
        hb_path = p.stdout.readline().decode().strip()
        seen, reads = set(), 0
        with warnings.catch_warnings():
            warnings.simplefilter("error", HeartbeatWarning)  # a torn read is a failure, not a skip
            while p.poll() is None:
                hb = read_heartbeat(hb_path)
                reads += 1
                assert hb is not None, (round_, reads)
                c = hb.counter
                assert hb.label == ("x" * (c % 150)) + " %d" % c, (round_, hb.label, c)
                seen.add(c)
        assert p.wait(timeout=20) == 0
        assert reads > 0 and len(seen) > 1, (round_, reads, len(seen))


@pytest.mark.timeout(60)
def test_heartbeat_readable_while_the_rank_is_stopped_mid_write(spawn, tmp_path):
    """A rank preempted (here: stopped) inside checkpoint(), its slot's sequence odd:
    the reader returns the previous checkpoint from the other slot at once."""
    script = write(tmp_path, "prog.py", """
        import sys, time
        from hpc_hangkit.arm import watchdog
        from hpc_hangkit.boot import _hangkit_core as core
        st = watchdog.watch(sys.argv[1], period_s=30)
        for i in range(1, 6):
            watchdog.checkpoint("step %d" % i)
        # what checkpoint 6 does first: mark its slot odd (writing), then stop there
        s = core._seq + 1
        core._hb[core.HB_SLOT_INDEX[(s >> 1) & 1]] = s
        print(st["heartbeat_path"], flush=True)
        time.sleep(60)
        """)
    p = spawn([PYTHON, script, str(tmp_path / "r.log")], env=clean_env(), stdout=subprocess.PIPE)
    hb_path = p.stdout.readline().decode().strip()
    t0 = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("error", HeartbeatWarning)
        hb = read_heartbeat(hb_path)
    assert time.monotonic() - t0 < 0.5  # no retrying against the stopped writer
    assert (hb.counter, hb.label) == (5, "step 5")


def test_heartbeat_garbage_truncated_symlink_are_skipped_with_warning(tmp_path):
    d = tmp_path / "heartbeats"
    d.mkdir()
    (d / "rank_0.pid1.hb").write_bytes(b"HKHEARTB" + b"\0" * 20)  # truncated
    (d / "rank_1.pid2.hb").write_bytes(b"garbage!" * 64)  # not a record
    os.symlink("/etc/passwd", str(d / "rank_2.pid3.hb"))
    (d / "notes.txt").write_text("ignored")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert read_heartbeats(str(d)) == []
    msgs = sorted(str(x.message) for x in w if issubclass(x.category, HeartbeatWarning))
    assert len(msgs) == 3
    assert any("truncated at byte offset 28" in m for m in msgs)
    assert any("bad magic" in m for m in msgs)
    assert any("rank_2.pid3.hb: cannot open" in m for m in msgs)
    assert read_heartbeats(str(tmp_path / "missing")) == []


@pytest.mark.timeout(60)
def test_non_file_destination_refused(spawn, tmp_path):
    script = write(tmp_path, "prog.py", """
        import io, sys
        from hpc_hangkit.arm import watchdog
        for dest in (io.StringIO(), io.BytesIO(), object(), 3.5, True, 987):
            try:
                watchdog.watch(dest, period_s=1)
            except TypeError as e:
                print("refused", type(dest).__name__, "|", e)
            else:
                print("ACCEPTED", type(dest).__name__)
        print("watching", watchdog.is_watching())
        with open(sys.argv[1], "w") as f:  # a real file object is fine
            watchdog.watch(f, period_s=1)
            print("watching", watchdog.is_watching())
            watchdog.unwatch()
        """)
    rc, out, err = run(spawn, [PYTHON, script, str(tmp_path / "f.log")], clean_env())
    assert rc == 0, err
    lines = out.splitlines()
    assert [l.split("|")[0].strip() for l in lines] == [
        "refused StringIO", "refused BytesIO", "refused object", "refused float", "refused bool", "refused int",
        "watching False", "watching True"]
    assert "no real file descriptor" in lines[0] and "StringIO" in lines[0]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("sig", ["SIGURG", "SIGUSR1"])
def test_signal_during_and_after_shutdown_never_kills(spawn, tmp_path, sig):
    script = write(tmp_path, "prog.py", """
        import sys
        from hpc_hangkit.arm import watchdog
        watchdog.watch(sys.argv[1], period_s=0.05, signum=sys.argv[2])
        print("armed", flush=True)
        x = 0
        for i in range(int(sys.argv[3])):
            x += i
        if int(sys.argv[3]) % 2:
            watchdog.unwatch()
        """)
    signum = getattr(signal, sig)
    for it in range(30):
        p = spawn([PYTHON, script, str(tmp_path / ("l%d.log" % it)), sig, str(20000 + 997 * it)],
                  env=clean_env(), stdout=subprocess.PIPE)
        assert p.stdout.readline() == b"armed\n"
        sent = 0
        while p.poll() is None:
            try:
                os.kill(p.pid, signum)
                sent += 1
            except ProcessLookupError:
                break
            if sent % 20 == 0:
                # paced a little: an unpaced flood of process-directed signals (all handled
                # by the main thread, as the watchdog thread blocks its signal) can starve
                # the process on a loaded 2-core machine, and starvation is not the property
                time.sleep(0.001)
        assert p.wait(timeout=20) == 0, "iteration %d: killed by %d after %d signals" % (it, p.returncode, sent)


@pytest.mark.timeout(260)
def test_two_thousand_on_demand_dumps_of_a_call_heavy_loop(spawn, tmp_path):
    log = str(tmp_path / "busy.log")
    stop = str(tmp_path / "stop")
    script = write(tmp_path, "prog.py", """
        import os, sys
        from hpc_hangkit.arm import watchdog
        watchdog.watch(sys.argv[1], period_s=3600)
        print("armed", flush=True)

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        class Box:
            def __init__(self, v):
                self.v = v

            def get(self):
                return self.v

        total = 0
        while not os.path.exists(sys.argv[2]):
            total += fib(14) + sum(Box(i).get() for i in range(50))
        print("ok", total > 0, flush=True)
        sys.stdin.readline()  # stays at <module> until every request sent is answered
        """)
    # Through the watchdog thread (the default path) the dump is written under the
    # GIL, so the main thread is between bytecodes: no crash is acceptable.  (A
    # C-level signal dump landing mid frame-pop crashes CPython 3.11/3.12 about once
    # per 5,000 dumps of this loop: bench/bench_watchdog_robustness.py measures both.)
    rc, paths = _two_thousand_dumps(spawn, script, log, stop)
    assert rc == 0, "process died with %d" % rc
    assert paths == {"thread"}
    text = open(log).read()
    ds = dumps(text)
    assert len(DUMP_START.findall(text)) >= 2000
    assert len(ds) >= 2000 and all(d[-1][2] == "<module>" for d in ds)
    # a thread-path dump shows the main thread where it handed over the GIL: at a
    # bytecode boundary in the loop's code, or inside a call that releases the GIL
    # (here os.stat in os.path.exists, most of the time)
    assert {d[0][2] for d in ds} <= {"fib", "__init__", "get", "<genexpr>", "<module>", "exists"}, \
        {d[0][2] for d in ds}


def _two_thousand_dumps(spawn, script, log, stop):
    from hpc_hangkit.arm.watchdog import request_dump

    p = spawn([PYTHON, script, log, stop], env=clean_env(), stdin=subprocess.PIPE,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline() == b"armed\n"
    sent, n, paths = 0, 0, set()
    deadline = time.monotonic() + 190  # (requests that arrive while one is pending merge, as signals do)
    while n < 2000 and time.monotonic() < deadline and p.poll() is None:
        paths.add(request_dump(p.pid))
        sent += 1
        time.sleep(0.002)
        if sent % 200 == 0:
            n = len(DUMP_START.findall(open(log).read()))
    open(stop, "w").close()
    ok = p.stdout.readline()
    if ok == b"ok True\n":
        # past the loop, waiting on stdin: a request still pending would otherwise be
        # answered during interpreter shutdown (threading._shutdown, no <module> frame)
        wait_for(lambda: not _signals_pending(p.pid, "hk-watchdog"), 30, 0.01,
                 what="the watchdog thread to take its last request")
    p.communicate(timeout=30)  # (closes stdin: the program ends)
    if p.returncode == 0:
        assert ok == b"ok True\n", ok
    return p.returncode, paths


def _signals_pending(pid, thread_name):
    """True while thread ``thread_name`` of ``pid`` has a signal pending (/proc SigPnd)."""
    for tid in os.listdir("/proc/%d/task" % pid):
        base = "/proc/%d/task/%s/" % (pid, tid)
        with open(base + "comm") as f:
            if f.read().strip() != thread_name:
                continue
        with open(base + "status") as f:
            for line in f:
                if line.startswith("SigPnd:"):
                    return int(line.split()[1], 16) != 0
    return False


@pytest.mark.timeout(60)
def test_gil_held_stall_is_dumped_from_c_by_timer_and_by_escalation(spawn, tmp_path):
    """A main thread blocked in C *holding the GIL*: the watchdog thread cannot run,
    so the kernel timer's C dump and request_dumps' escalation must cover it."""
    log = str(tmp_path / "gil.log")
    script = write(tmp_path, "prog.py", """
        import ctypes, sys
        from hpc_hangkit.arm import watchdog
        watchdog.watch(sys.argv[1], period_s=2.0)
        print("armed", flush=True)
        buf = ctypes.create_string_buffer(1)
        ctypes.PyDLL(None).read(0, buf, 1)  # read(2) on stdin with the GIL held (restarted after signals)
        print("done", flush=True)
        """)
    p = spawn([PYTHON, script, log], env=clean_env(), stdout=subprocess.PIPE, stdin=subprocess.PIPE)
    assert p.stdout.readline() == b"armed\n"
    # GIL held: only the kernel timer can dump; wait for its first dump, written whole (the log
    # ends with a newline), so request_dumps below does not take that dump for its own answer
    # (nor the next one, a 2 s period away, well past request_dumps' 0.5 s wait)
    n_timer = len(wait_for(lambda: (lambda t: t.endswith("\n") and dumps(t))(open(log).read()), 30, 0.02,
                           what="the kernel timer's first dump in %s" % log,
                           detail=lambda: open(log).read()[-2000:]))
    from hpc_hangkit.arm.watchdog import request_dumps

    outcome = request_dumps({p.pid: [log]}, "SIGURG", timeout_s=0.5)
    assert outcome == {p.pid: "escalated"}, outcome
    ds = dumps(open(log).read())
    assert len(ds) > n_timer
    assert all(d[0][1] == 7 and d[0][2] == "<module>" for d in ds), ds
    p.stdin.write(b"x")
    p.stdin.flush()
    assert p.stdout.readline() == b"done\n"
    assert p.wait(timeout=20) == 0


@pytest.mark.timeout(60)
def test_busy_rank_without_checkpoints_is_dumped_by_the_watchdog_thread(spawn, tmp_path):
    """No checkpoint for a period while the main thread runs Python: the periodic
    dump is written by the watchdog thread (the kernel timer is pushed past it)."""
    log = str(tmp_path / "busy.log")
    script = write(tmp_path, "prog.py", """
        import sys, threading, time
        from hpc_hangkit.arm import watchdog
        watchdog.watch(sys.argv[1], period_s=0.5)
        print("armed", flush=True)

        def spin(n):
            return n if n < 2 else spin(n - 1) + spin(n - 2)

        end = time.monotonic() + 3.2
        while time.monotonic() < end:
            spin(10)
        """)
    p = spawn([PYTHON, script, log], env=clean_env(), stdout=subprocess.PIPE)
    assert p.stdout.readline() == b"armed\n"
    assert p.wait(timeout=30) == 0
    ds = dumps(open(log).read())
    assert 4 <= len(ds) <= 8, len(ds)  # every period (0.5 s) for ~3 s
    assert all(d[-1][2] == "<module>" for d in ds)


@pytest.mark.timeout(60)
def test_the_heartbeat_says_when_the_stack_last_moved_even_into_the_same_call_elsewhere(spawn, tmp_path):
    """The watchdog thread keeps in the heartbeat when it last found the main thread's stack
    moved (``moved_mono_s``) and when it last looked (``checked_mono_s``): a rank that leaves
    one blocking call and enters the same function from another line (a collective, then the
    same collective elsewhere: its frame can reuse the memory, instruction and argument values
    of the first) is seen to move then, never dated before it; while it waits, the look
    advances and the move stays put."""
    log = str(tmp_path / "w" / "rank_0.pid.log")
    script = write(tmp_path, "prog.py", """
        import os, sys, time
        from hpc_hangkit.arm import watchdog
        watchdog.watch(sys.argv[1], period_s=0.4)

        def collective(fd):
            return os.read(fd, 1)

        print("first %.6f" % time.monotonic(), flush=True)
        collective(0)   # released by the test
        print("second %.6f" % time.monotonic(), flush=True)
        collective(0)   # never released
        """)
    p = spawn([PYTHON, script, log], env=clean_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    hb_path = log[:-len(".log")] + ".hb"

    def hb():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", HeartbeatWarning)
            return read_heartbeat(hb_path)

    t1 = float(p.stdout.readline().split()[1])
    wait_for(lambda: blocked_in(p.pid) == "read", 30, what="the first call to block")
    first = wait_for(lambda: (lambda h: h if h and h.checked_mono_s > t1 + 0.3 else None)(hb()), 30,
                     what="a look well after the first call started")
    assert t1 <= first.moved_mono_s <= first.checked_mono_s
    p.stdin.write(b"x")
    p.stdin.flush()
    t2 = float(p.stdout.readline().split()[1])
    wait_for(lambda: blocked_in(p.pid) == "read", 30, what="the second call to block")
    second = wait_for(lambda: (lambda h: h if h and h.checked_mono_s > t2 + 0.3 else None)(hb()), 30,
                      what="a look well after the second call started")
    assert second.moved_mono_s >= t2, (second.moved_mono_s, t2)  # moved, and never dated early
    later = wait_for(lambda: (lambda h: h if h and h.checked_mono_s > second.checked_mono_s + 0.3 else None)(hb()),
                     30, what="more looks while it waits")
    assert later.moved_mono_s == second.moved_mono_s
    assert later.moved_since(later.checked_mono_s) == second.moved_mono_s
    assert later.moved_since(later.checked_mono_s + 1.0) is None  # not looked at since that time


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_scenario_10_arm_disarm_under_load_and_thread_churn(spawn, tmp_path):
    """HANG_SCENARIOS 10: arm/disarm every 0.2 s for 60 s under CPU burners and thread churn."""
    script = write(tmp_path, "prog.py", """
        import os, sys, threading, time
        from concurrent.futures import ThreadPoolExecutor
        from hpc_hangkit.arm import watchdog

        def burn(stop):
            x = 0
            while not stop.is_set():
                x += 1

        def churn(stop):
            while not stop.is_set():
                with ThreadPoolExecutor(max_workers=4) as ex:  # new threads every round
                    list(ex.map(lambda i: sum(range(i * 100)), range(16)))

        stop = threading.Event()
        helpers = [threading.Thread(target=burn, args=(stop,)), threading.Thread(target=churn, args=(stop,))]
        for t in helpers:
            t.start()
        log = sys.argv[1]
        end = time.monotonic() + float(sys.argv[2])
        cycles = 0
        while time.monotonic() < end:
            watchdog.watch(log, period_s=0.05)   # fires within the cycle: dumps race the disarm
            t1 = time.monotonic() + 0.2
            while time.monotonic() < t1:
                if cycles % 2:
                    watchdog.checkpoint("c%d" % cycles)
                time.sleep(0.001)
            watchdog.unwatch()
            cycles += 1
        stop.set()
        for t in helpers:
            t.join()
        print("cycles", cycles, "threads", threading.active_count())
        """)
    burner = spawn([PYTHON, "-c", "import time\nend=time.time()+75\nwhile time.time()<end: pass"])
    log = str(tmp_path / "s10.log")
    rc, out, err = run(spawn, [PYTHON, script, log, "60"], clean_env(), timeout=120)
    burner.kill()
    assert rc == 0, err[-3000:]
    cycles = int(out.split()[1])
    assert cycles >= 150, out  # not stuck: ~250 cycles of 0.2 s
    assert int(out.split()[3]) == 1
    assert len(DUMP_START.findall(open(log).read())) > 0


@pytest.mark.timeout(60)
def test_watching_restores_previous_arming_and_unwatch_is_clean(spawn, tmp_path):
    script = write(tmp_path, "prog.py", """
        import sys, time
        from hpc_hangkit.arm import watchdog
        a, b = sys.argv[1], sys.argv[2]
        watchdog.watch(a, period_s=0.2)
        with watchdog.watching(b, period_s=0.2) as st:
            assert st["path"] == b
            time.sleep(0.5)  # MARK-inner
        assert watchdog.status()["path"] == a
        time.sleep(0.5)  # MARK-outer
        assert watchdog.unwatch() is True and watchdog.unwatch() is False
        assert not watchdog.is_watching()
        time.sleep(0.5)  # MARK-unwatched: no dumps
        print("ok")
        """)
    a, b = str(tmp_path / "a.log"), str(tmp_path / "b.log")
    rc, out, err = run(spawn, [PYTHON, script, a, b], clean_env())
    assert rc == 0 and out.strip() == "ok", err
    da, db = dumps(open(a).read()), dumps(open(b).read())
    assert da and db
    assert {d[0][1] for d in db} == {line_of(script, "MARK-inner")}
    assert {d[0][1] for d in da} == {line_of(script, "MARK-outer")}


@pytest.mark.timeout(60)
def test_fork_and_spawn_children_do_not_write_as_the_rank(spawn, tmp_path):
    script = write(tmp_path, "prog.py", """
        import multiprocessing as mp, os, sys, time
        from hpc_hangkit.arm import watchdog

        def child(q):
            # a data-loader-like worker: stalls longer than the period, checkpoints
            from hpc_hangkit.arm import watchdog as w
            w.checkpoint("child")
            try:
                w.request_dump(os.getpid())  # a dump request sent to the child itself
            except Exception as e:
                q.put(repr(e))
            time.sleep(0.8)
            q.put((os.getpid(), w.is_watching()))

        if __name__ == "__main__":
            st = watchdog.watch(sys.argv[1], period_s=0.3)
            watchdog.checkpoint("parent step 7")
            res = []
            for method in ("fork", "spawn"):
                ctx = mp.get_context(method)
                q = ctx.Queue()
                ps = [ctx.Process(target=child, args=(q,)) for _ in range(2)]
                for p in ps:
                    p.start()
                for p in ps:
                    res.append(q.get(timeout=30))
                for p in ps:
                    p.join()
                    assert p.exitcode == 0, p.exitcode
            print(res)
            print(watchdog.is_watching())
        """)
    log = str(tmp_path / "rank_0.log")
    rc, out, err = run(spawn, [PYTHON, script, log], clean_env())
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[-1] == "True"
    res = eval(lines[0])
    assert len(res) == 4 and all(w is False for _, w in res)
    ds = dumps(open(log).read())
    assert ds and all(d[-1][2] == "<module>" for d in ds)
    assert not any(f[2] == "child" for d in ds for f in d), "a child dumped into the rank's log"
    hb = read_heartbeat(str(tmp_path / "rank_0.hb"))
    assert hb.label == "parent step 7" and hb.counter == 1  # children never wrote into it


def test_request_dump_errors():
    from hpc_hangkit.arm.watchdog import request_dump

    p = subprocess.Popen([PYTHON, "-c", "pass"])
    p.wait()
    with pytest.raises(ProcessLookupError):
        request_dump(p.pid)
    with pytest.raises(ValueError):
        request_dump(os.getpid(), "SIGKILL")
    with pytest.raises(ValueError):
        request_dump(0)


@pytest.mark.timeout(60)
def test_bad_arguments_raise_clearly(spawn, tmp_path):
    script = write(tmp_path, "prog.py", """
        import sys
        from hpc_hangkit.arm import watchdog
        for kw in ({"period_s": 0}, {"period_s": -1}, {"period_s": "1"}, {"signum": "SIGKILL"},
                   {"signum": "SIGSEGV"}, {"signum": "NOPE"}):
            try:
                watchdog.watch(sys.argv[1], **kw)
            except (TypeError, ValueError) as e:
                print(type(e).__name__, e)
        print(watchdog.is_watching())
        """)
    rc, out, err = run(spawn, [PYTHON, script, str(tmp_path / "x.log")], clean_env())
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 7 and lines[-1] == "False"
    assert lines[0].startswith("ValueError period_s must be > 0")
    assert lines[2].startswith("TypeError period_s must be a number")
    assert "SIGKILL" in lines[3] and "not allowed" in lines[3]
