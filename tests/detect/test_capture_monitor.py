"""capture (real processes, real py-spy), the stack source and the monitor loop (injected clock, scripted sources)."""
from testlib import REPO
import json
import os
import subprocess
import sys
import time

import pytest

from hpc_hangkit.capture import orchestrator as cap
from hpc_hangkit.capture.ranks import RankProc
from hpc_hangkit.detect.detector import Detector
from hpc_hangkit.detect.monitor import EventLog, Monitor
from hpc_hangkit.evidence.stacks import pyspy_all, pyspy_rank


class _Settings:
    watchdog_signal = "SIGURG"
    pyspy_path = "py-spy"


SLEEPER = """
import time
def parked_in_a_named_function():
    while True:
        time.sleep(0.2)
print("ready", flush=True)
parked_in_a_named_function()
"""


def _sleeper(spawn):
    p = spawn([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready"
    return p


@pytest.mark.timeout(60)
def test_pyspy_capture_of_a_live_process(spawn, tmp_path):
    p = _sleeper(spawn)
    ctx = cap.CaptureContext(_Settings, str(tmp_path / "scratch"), str(tmp_path / "hd"),
                             {0: RankProc(0, p.pid, "")})
    path = pyspy_rank(ctx, ctx.ranks[0])
    text = open(path).read()
    assert path.endswith(os.path.join("stack_traces", "rank_0.log"))
    assert "parked_in_a_named_function" in text and not text.startswith("hpc-hangkit:")
    assert ctx.problems == []


@pytest.mark.timeout(60)
def test_missing_pyspy_writes_one_line_why_file(spawn, tmp_path):
    p = _sleeper(spawn)

    class S(_Settings):
        pyspy_path = str(tmp_path / "nope" / "py-spy")
    ctx = cap.CaptureContext(S, str(tmp_path / "scratch"), str(tmp_path / "hd"),
                             {0: RankProc(0, p.pid, ""), 3: RankProc(3, p.pid, "")})
    paths = pyspy_all(ctx)
    assert len(paths) == 2
    for path in paths:
        text = open(path).read()
        assert text.startswith("hpc-hangkit: py-spy unavailable: executable ")
        assert S.pyspy_path in text and text.count("\n") == 1
    assert len(ctx.problems) == 2


@pytest.mark.timeout(60)
def test_refused_pyspy_and_dead_pid(tmp_path):
    """py-spy runs but cannot attach (the pid is gone): the why-file carries py-spy's own reason."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    ctx = cap.CaptureContext(_Settings, str(tmp_path), str(tmp_path / "hd"), {})
    path = pyspy_rank(ctx, RankProc(2, p.pid, ""))
    text = open(path).read()
    assert text.startswith("hpc-hangkit: py-spy unavailable: py-spy dump --native --pid %d failed: " % p.pid)
    assert text.count("\n") == 1


def test_copy_rank_files_skips_symlinks(tmp_path):
    scratch = tmp_path / "s"
    (scratch / "watchdog").mkdir(parents=True)
    (scratch / "watchdog" / "rank_0.pid1.log").write_text("x")
    secret = tmp_path / "secret"
    secret.write_text("do not copy")
    os.symlink(str(secret), str(scratch / "watchdog" / "rank_1.pid2.log"))
    out = cap.copy_rank_files(str(scratch), str(tmp_path / "hd"))
    assert [os.path.basename(p) for p in out] == ["rank_0.pid1.log"]
    assert not (tmp_path / "hd" / "watchdog" / "rank_1.pid2.log").exists()


class Scripted:
    """A source replaying a list of answers (the monitor's loop is what is under test)."""

    name = "scripted"

    def __init__(self, answers, key="k"):
        self.answers = list(answers)
        self.key = key

    def poll(self, now):
        a = self.answers.pop(0) if self.answers else None
        if a is None:
            return {}
        return {self.key: (a, "detail at %g" % now)}


class Broken:
    name = "broken"

    def poll(self, now):
        raise RuntimeError("boom")


def test_monitor_loop_events_and_confirm_once(tmp_path):
    t = [0.0]
    confirmed = []
    det = Detector(1, 3, 1, 100)
    src = Scripted([False, True, None, True, True, True, True, False])
    mon = Monitor(det, [Broken(), src], hd_dir=str(tmp_path), on_confirmed=confirmed.append,
                  clock=lambda: t[0])

    def wait(s):
        t[0] += s
    mon.run(lambda: bool(src.answers), wait)
    assert t[0] == 7.0  # one poll per interval
    kinds = [e.kind for e in mon.history]
    assert kinds == ["suspected", "confirmed", "recovered"]
    # the empty answer at t=2 neither advanced nor reset the streak: 3 s of wall-clock time confirm
    assert len(confirmed) == 1 and confirmed[0].stalled_for_s == 3.0
    lines = [json.loads(l) for l in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [l["kind"] for l in lines] == kinds
    assert lines[1]["detail"].startswith("detail at")


def test_event_log_survives_unwritable_path(tmp_path):
    (tmp_path / "f").write_text("")
    EventLog(str(tmp_path / "f" / "events.jsonl")).write("x", a=1)  # a file as parent dir: logged, no raise


def test_why_file_never_replaces_real_output(tmp_path):
    from hpc_hangkit.capture.whyfile import is_why_data, write_why_file

    real = tmp_path / "stack_traces" / "rank_0.log"
    real.parent.mkdir()
    real.write_bytes(b"Process 12: python train.py\nThread 12 (idle): \"MainThread\"\n    f (train.py:3)\n")
    write_why_file(str(real), "py-spy", "ptrace refused")
    assert not is_why_data(real.read_bytes())            # the earlier real dump is kept
    fresh = tmp_path / "stack_traces" / "rank_1.log"
    write_why_file(str(fresh), "py-spy", "ptrace\nrefused")
    assert fresh.read_bytes() == b"hpc-hangkit: py-spy unavailable: ptrace refused\n"
    write_why_file(str(fresh), "py-spy", "timed out")     # a why-file may replace a why-file
    assert fresh.read_bytes() == b"hpc-hangkit: py-spy unavailable: timed out\n"



@pytest.mark.timeout(60)
def test_rank_still_importing_with_cpu_counts_as_progress(tmp_path, spawn):
    """A rank whose newest dump is inside an import and that burns CPU is starting up, not
    hung; one inside an import that uses no CPU (a deadlocked import) is not progressing."""
    import os
    import subprocess
    import sys
    import textwrap
    import time

    from hpc_hangkit.detect.monitor import stack_judge
    from hpc_hangkit.evidence.stacks import StackSource

    scratch = tmp_path / "scratch"
    (scratch / "watchdog").mkdir(parents=True)
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "slowmod.py").write_text(textwrap.dedent("""
        import time
        t0 = time.time()
        while time.time() - t0 < 30:   # an import that computes (a slow extension)
            sum(range(1000))
        """))
    (mods / "stuckmod.py").write_text("import time\ntime.sleep(30)  # an import that waits\n")
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""
        import os, sys
        from hpc_hangkit.arm import watchdog
        watchdog.watch(os.path.join(sys.argv[1], "rank_%s.pid%d.log" % (sys.argv[2], os.getpid())),
                       period_s=0.3)
        print("armed", flush=True)
        sys.path.insert(0, sys.argv[3])
        __import__(sys.argv[4])
        """))
    env = dict(os.environ, PYTHONPATH=REPO)
    for rank, mod in ((0, "slowmod"), (1, "stuckmod")):
        p = spawn([sys.executable, str(prog), str(scratch / "watchdog"), str(rank), str(mods), mod],
                  stdout=subprocess.PIPE, env=env)
        assert p.stdout.readline() == b"armed\n"
    src = StackSource(str(scratch), stack_judge(), sample_signal=None)
    seen = {0: [], 1: []}
    time.sleep(1.0)
    for _ in range(5):
        out = src.poll(time.monotonic())
        for ans in out.values():
            for r, why in ans[1].progressed.items():
                seen[r].append(why)
        time.sleep(1.0)
    assert any("still starting up" in w for w in seen[0]), seen
    assert not any("still starting up" in w for w in seen[1]), seen


@pytest.mark.parametrize("window", [12.0, 60.0])
def test_monitor_confirms_on_time_when_every_poll_takes_4x_its_interval(tmp_path, caplog, window):
    """The loop the batch monitor runs: 1 s polls that each cost 4 s. The confirmation comes
    within one slow poll after the window (not after window/interval slow polls), and the
    slow poll is logged once with its duration."""
    t = [0.0]

    class Slow:
        name = "slow"
        polls = 0

        def poll(self, now):
            Slow.polls += 1
            t[0] += 4.0                      # the poll's own cost, on the injected clock
            return {"k": (Slow.polls > 1, "poll %d" % Slow.polls)}

    confirmed = []
    mon = Monitor(Detector(1.0, window, 5.0, 10.0), [Slow()], hd_dir=str(tmp_path),
                  on_confirmed=confirmed.append, clock=lambda: t[0])

    def wait(s):
        t[0] += s
    with caplog.at_level("WARNING", logger="hpc_hangkit.detect.monitor"):
        mon.run(lambda: not confirmed, wait)
    # the first poll (at t=0) saw progress; the stall is measured from there
    assert window <= confirmed[0].stalled_for_s < window + 4.0
    assert Slow.polls - 1 < window / 1.0               # far fewer polls than a poll count needs
    slow = [r.getMessage() for r in caplog.records if "a poll took" in r.getMessage()]
    assert len(slow) == 1 and slow[0].startswith("a poll took 4.0 s, more than the 1.0 s poll interval")
    lines = [json.loads(l) for l in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [l["seconds"] for l in lines if l["kind"] == "slow_poll"] == [4.0]


def test_the_capture_inside_a_poll_is_not_a_slow_poll(tmp_path, caplog):
    """A poll that confirms runs the capture (seconds of py-spy, Flight Recorder dumps):
    that time is the capture's, not the poll's, and logs no 'a poll took' warning."""
    t = [0.0]

    class Quick:
        name = "quick"
        polls = 0

        def poll(self, now):
            Quick.polls += 1
            t[0] += 0.1
            return {"k": (Quick.polls > 1, "poll %d" % Quick.polls)}

    confirmed = []

    def capture(ev):
        t[0] += 8.0                          # the capture's cost, on the injected clock
        confirmed.append(ev)
    mon = Monitor(Detector(1.0, 5.0, 5.0, 10.0), [Quick()], hd_dir=str(tmp_path),
                  on_confirmed=capture, clock=lambda: t[0])

    def wait(s):
        t[0] += s
    with caplog.at_level("WARNING", logger="hpc_hangkit.detect.monitor"):
        mon.run(lambda: not confirmed, wait)
    assert confirmed and mon.slow_poll_s is None
    assert not [r for r in caplog.records if "a poll took" in r.getMessage()]
