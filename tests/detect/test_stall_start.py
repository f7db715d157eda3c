"""Where a stall starts when the roll call's verdict catches up late.

The roll call places a rank at the mode of its last 5 samples, so after a hang the
verdict turns to "disagree" only once 3 samples show the new place: 2-3 polls after the
poll that first saw the ranks there. Nothing moved since that poll, so the confirm
window is counted from it (its ``since``), not from the verdict. A rank's end recorded
later is a new picture: the window then starts no earlier than that poll.

Real-format watchdog dumps in a scratch directory, one per rank per poll, as the
on-demand samples give them; an injected clock; the monitor's Detector on top.
"""
import os

from hpc_hangkit import layout
from hpc_hangkit.detect.detector import CONFIRMED, Detector
from hpc_hangkit.detect.monitor import stack_judge
from hpc_hangkit.evidence.stacks import StackSource

WORLD = 4


def _append(scratch, rank, frames):
    """One faulthandler dump (innermost first) appended to rank's watchdog log; host n-remote
    (not this host: no /proc reads, no sampling)."""
    path = os.path.join(scratch, layout.WATCHDOG_DIR, "rank_%d.pid%d.log" % (rank, 100 + rank))
    new = not os.path.exists(path)
    with open(path, "a") as f:
        if new:
            f.write("# hpc-hangkit rank=%d world=%d local_rank=0 pid=%d host=n-remote t=1796095330.0"
                    " signal=SIGURG period_s=30 argv=[\"train.py\"]\n" % (rank, WORLD, 100 + rank))
        f.write("Stack (most recent call first):\n")
        for line, func in frames:
            f.write('  File "/x/train.py", line %d in %s\n' % (line, func))


def _training(scratch, poll):
    for r in range(WORLD):
        _append(scratch, r, [(10 + poll % 3, "step"), (50, "<module>")])


def _hung(scratch):
    for r in range(WORLD):
        _append(scratch, r, [(30 if r else 40, "step"), (50, "<module>")])


def _source(tmp_path):
    scratch = str(tmp_path / "scratch")
    os.makedirs(os.path.join(scratch, layout.WATCHDOG_DIR))
    return scratch, StackSource(scratch, stack_judge(), samples=5, world_size=WORLD,
                                sample_signal=None, host="n-monitor")


def test_window_counts_from_the_poll_that_saw_the_ranks_stop(tmp_path):
    scratch, src = _source(tmp_path)
    det = Detector(1.0, 5.0, 2.0, 100.0)
    answers, confirmed_at = [], None
    for t in range(0, 20):
        if t < 4:
            _training(scratch, t)
        else:
            _hung(scratch)  # the first dumps at the new place are read at t = 4
        ans = src.poll(float(t))["stacks"]
        answers.append((t, ans[0], ans[2], ans[1].verdict))
        evs = det.update(float(t), "stacks", ans[0], ans[1], since=ans[2])
        if any(e.kind == CONFIRMED for e in evs) and confirmed_at is None:
            confirmed_at = t
    first_stalled = next(a for a in answers if a[1])
    assert first_stalled[0] >= 6, answers          # the mode of 5 needs 3 samples there
    assert first_stalled[2] == 4.0, answers        # nothing moved since t = 4
    assert first_stalled[3] in ("SPLIT", "MISSED"), answers
    assert confirmed_at == 9, answers              # 4 + 5, not first_stalled - 1 + 5


def test_a_rank_end_recorded_later_restarts_the_picture(tmp_path):
    """Rank 0 sat at another place while 1-3 waited (stalled since t = 0); then it vanished,
    recorded at t = 12 as the monitor records it: the GONE stall starts at t = 12."""
    from hpc_hangkit.capture.ranks import write_vanished
    scratch, src = _source(tmp_path)
    for t in range(0, 12):
        _hung(scratch)
        ans = src.poll(float(t))["stacks"]
    assert ans[0] and ans[2] == 0.0 and ans[1].verdict == "MISSED", ans
    write_vanished(scratch, 0, 100, "n-remote", "no process")
    ans = src.poll(12.0)["stacks"]
    assert ans[0] and ans[2] == 12.0 and ans[1].verdict == "GONE", ans
    _hung(scratch)
    ans = src.poll(13.0)["stacks"]
    assert ans[0] and ans[2] == 12.0, ans


def test_another_nodes_late_answer_counts_from_when_it_was_taken(tmp_path):
    """The batch monitor's view of another node: an answer whose changes are taken as a
    baseline (absorb_remote, not progress) is a new picture, first seen when its probe
    started (1.5 s before the poll that reads it)."""
    scratch, src = _source(tmp_path)
    for t in range(0, 10):
        _hung(scratch)
        ans = src.poll(float(t))["stacks"]
    assert ans[0] and ans[2] == 0.0, ans
    _append(scratch, 0, [(41, "step"), (50, "<module>")])
    src.absorb_remote(age_s=1.5)
    ans = src.poll(10.0)["stacks"]
    assert ans[0] and not ans[1].progressed and ans[2] == 8.5, ans


def test_a_rank_vanished_after_the_confirmation_is_the_jobs_end_not_the_hang(tmp_path):
    """Observe mode: the hang is confirmed, the job runs on to its time limit, Slurm kills the
    ranks and the monitor sees rank 0 go first (Slurm 24.11 cluster run). The roll call of
    that tree is the hang's (rank 0 at its place, SPLIT/MISSED), with a warning for the late
    record; a vanish before the confirmation is still GONE."""
    import time as _time
    from hpc_hangkit.capture.ranks import write_vanished
    from hpc_hangkit.detect.monitor import EventLog
    from hpc_hangkit.rollcall import report_from_dir
    scratch, _ = _source(tmp_path)
    for _ in range(5):
        _hung(scratch)
    hd = os.path.join(scratch, layout.HANG_DETECTOR_DIR)
    os.makedirs(hd)
    now = _time.time()
    EventLog(os.path.join(hd, layout.EVENTS_FILE)).write("confirmed", key="stacks", stalled_for_s=12.0)
    write_vanished(scratch, 0, 100, "n-remote", "zombie", t=now + 100.0)
    rep = report_from_dir(scratch)
    assert rep.verdict in ("SPLIT", "MISSED") and rep.suspect_ranks == [0], rep.verdict
    assert any("rank 0 vanished" in w and "after the hang was confirmed" in w for w in rep.warnings)
    write_vanished(scratch, 0, 100, "n-remote", "zombie", t=now - 5.0)
    rep = report_from_dir(scratch)
    assert rep.verdict == "GONE" and rep.suspect_ranks == [0], rep.verdict
