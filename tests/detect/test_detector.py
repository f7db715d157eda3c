"""Detector rules, one test per rule, with an injected clock (no sleeping)."""
import pytest

from hpc_hangkit.detect.detector import (CONFIRMED, RECOVERED, STILL_SUSPECTED, SUSPECTED,
                                  Detector, Event)


def kinds(evs):
    return [e.kind for e in evs]


def run(det, answers, key="stacks", t0=100.0, dt=None):
    """Feed ``answers`` (list of bool) at t0, t0+dt, ...; return [(t, [kinds])] of non-empty polls."""
    dt = det.poll_interval_s if dt is None else dt
    out = []
    for i, stalled in enumerate(answers):
        t = t0 + i * dt
        evs = det.update(t, key, stalled, detail=i)
        if evs:
            out.append((t, kinds(evs)))
    return out


def test_confirm_polls_round_up():
    assert Detector(1, 6, 0, 100).confirm_polls == 6
    assert Detector(1, 5.5, 0, 100).confirm_polls == 6
    assert Detector(1.5, 6, 0, 100).confirm_polls == 4  # exact: no float round-up to 5
    assert Detector(15, 600, 60, 120).confirm_polls == 40  # the Ray defaults
    d = Detector(4, 10, 0, 100)
    assert d.confirm_polls == 3 and d.effective_confirm_s == 12


@pytest.mark.parametrize("kw", [dict(poll_interval_s=0), dict(confirm_duration_s=-1),
                                dict(report_every_s=0), dict(suspect_after_s=-0.5),
                                dict(poll_interval_s="1")])
def test_bad_arguments_raise(kw):
    args = dict(poll_interval_s=1, confirm_duration_s=5, suspect_after_s=1, report_every_s=2)
    args.update(kw)
    with pytest.raises(ValueError, match=list(kw)[0]):
        Detector(**args)


def test_never_stalled_never_emits():
    d = Detector(1, 3, 0, 1)
    assert run(d, [False] * 50) == []
    assert d.stalled_keys(200) == {} and d.confirmed_keys() == []


def test_confirmed_after_whole_polls_not_before():
    d = Detector(1, 5, 100, 100)  # suspect_after beyond the window: suspected comes with confirm
    # first poll is progress (False), then stalled polls
    out = run(d, [False] + [True] * 10)
    assert out == [(105.0, [SUSPECTED, CONFIRMED])]
    # the 5th stalled poll confirms; stalled_for is measured from the last progress poll
    d2 = Detector(1, 5, 100, 100)
    d2.update(0, "k", False)
    for t in range(1, 5):
        assert d2.update(t, "k", True) == []
    evs = d2.update(5, "k", True, detail="R")
    assert kinds(evs) == [SUSPECTED, CONFIRMED]
    assert evs[-1] == Event(CONFIRMED, "k", 5.0, "R")


def test_suspected_after_suspect_after_s():
    d = Detector(1, 10, 3, 100)
    out = run(d, [False] + [True] * 6)
    assert out[0] == (103.0, [SUSPECTED])
    assert all(SUSPECTED not in k for _, k in out[1:])


def test_still_suspected_every_report_every_s_then_confirmed_once():
    d = Detector(1, 12, 2, 3)
    out = run(d, [False] + [True] * 20)
    assert out == [
        (102.0, [SUSPECTED]),
        (105.0, [STILL_SUSPECTED]),
        (108.0, [STILL_SUSPECTED]),
        (111.0, [STILL_SUSPECTED]),
        (112.0, [CONFIRMED]),
    ]  # nothing after confirmation until recovery


def test_any_progress_resets_the_streak():
    d = Detector(1, 4, 100, 100)
    # 3 stalled, one progress, 3 stalled: never 4 in a row -> never confirmed
    pattern = [False, True, True, True, False, True, True, True, False, True, True, True]
    assert run(d, pattern) == []
    assert d.state("stacks").stalled_polls == 3


def test_recovered_after_suspected_and_after_confirmed():
    d = Detector(1, 4, 1, 100)
    out = run(d, [False, True, True, False])
    assert out == [(101.0, [SUSPECTED]), (103.0, [RECOVERED])]
    d = Detector(1, 2, 1, 100)
    d.update(0, "k", False)
    assert kinds(d.update(1, "k", True)) == [SUSPECTED]
    assert kinds(d.update(2, "k", True)) == [CONFIRMED]
    assert d.confirmed_keys() == ["k"]
    ev = d.update(3, "k", False, detail="back")
    assert ev == [Event(RECOVERED, "k", 3.0, "back")]
    assert d.confirmed_keys() == []
    # after recovery a fresh streak starts from scratch
    assert d.update(4, "k", True) == [Event(SUSPECTED, "k", 1.0, None)]
    assert kinds(d.update(5, "k", True)) == [CONFIRMED]


def test_no_recovered_for_a_streak_that_was_never_suspected():
    d = Detector(1, 10, 5, 100)
    assert run(d, [False, True, True, False, False]) == []


def test_keys_are_independent():
    """A stuck sub-communicator confirms while the world one keeps progressing."""
    d = Detector(1, 3, 0, 100)
    got = {}
    for t in range(10):
        for key, stalled in (("world", t % 2 == 0), ("tp0", t >= 1)):
            for e in d.update(float(t), key, stalled):
                got.setdefault(key, []).append((t, e.kind))
    assert "world" not in got or CONFIRMED not in [k for _, k in got["world"]]
    assert got["tp0"] == [(1, SUSPECTED), (3, CONFIRMED)]


def test_first_poll_stalled_counts_from_itself():
    d = Detector(1, 3, 0, 100)
    ev = d.update(50.0, "k", True)
    assert ev == [Event(SUSPECTED, "k", 0.0, None)]
    d.update(51.0, "k", True)
    assert d.update(52.0, "k", True) == []   # 2 s of the 3 s window: three polls are not enough
    ev = d.update(53.0, "k", True)
    assert ev == [Event(CONFIRMED, "k", 3.0, None)]


def test_slow_polls_confirm_on_time_not_after_a_poll_count():
    """A poll loop running late confirms at the first poll after the window; stalled_for is wall time."""
    d = Detector(1, 3, 0, 100)
    d.update(0, "k", False)
    assert kinds(d.update(2.5, "k", True)) == [SUSPECTED]
    ev = d.update(5.0, "k", True)
    assert kinds(ev) == [CONFIRMED] and ev[0].stalled_for_s == 5.0


@pytest.mark.parametrize("window", [12.0, 60.0])
def test_every_window_is_wall_clock_when_each_poll_takes_4x_its_interval(window):
    """The 2-node case: 1 s polls that each cost 4.2 s (the srun probe). Suspected,
    still-suspected and confirmed come when their time has passed, at most one
    (slow) poll late; counted in polls the 12 s window took 51 s."""
    interval, cost = 1.0, 4.2
    d = Detector(interval, window, suspect_after_s=5.0, report_every_s=10.0)
    clock, got = 0.0, []
    d.update(clock, "stacks", False)     # last progress seen at t=0: the stall starts here
    while not any(k == CONFIRMED for _, k in got) and clock < 10 * window:
        clock += cost                     # the loop never waits: every poll is late
        got += [(clock, e.kind) for e in d.update(clock, "stacks", True)]
    t_confirm = [t for t, k in got if k == CONFIRMED]
    assert t_confirm and window <= t_confirm[0] < window + cost
    t_susp = [t for t, k in got if k == SUSPECTED][0]
    assert 5.0 <= t_susp < 5.0 + cost
    reminders = [t for t, k in got if k == STILL_SUSPECTED]
    assert reminders or window < t_susp + 10.0 + cost
    for i, t in enumerate(reminders):    # each one due report_every_s after the previous one's due time
        due = t_susp + 10.0 * (i + 1)
        assert due <= t < due + cost
    # a poll count would have needed window/interval stalled polls
    assert d.state("stacks").stalled_polls < d.confirm_polls


def test_float_sums_of_poll_times_reach_the_window():
    d = Detector(0.1, 0.6, 0, 100)
    t = 0.0
    d.update(t, "k", False)
    for _ in range(5):
        t += 0.1
        assert CONFIRMED not in kinds(d.update(t, "k", True))
    t += 0.1                              # 0.1 * 6 == 0.6000000000000001 or 0.5999999999999999
    assert CONFIRMED in kinds(d.update(t, "k", True))


def test_clock_going_backwards_is_clamped():
    d = Detector(1, 10, 0, 100)
    d.update(10, "k", False)
    ev = d.update(9, "k", True)
    assert kinds(ev) == [SUSPECTED] and ev[0].stalled_for_s == 0.0


def test_still_suspected_after_a_long_gap_is_not_a_burst():
    d = Detector(1, 1000, 0, 2)
    d.update(0, "k", False)
    assert kinds(d.update(1, "k", True)) == [SUSPECTED]
    assert kinds(d.update(20, "k", True)) == [STILL_SUSPECTED]   # 17 s late: one reminder
    assert d.update(20.5, "k", True) == []
    assert d.update(21.9, "k", True) == []
    assert kinds(d.update(22.0, "k", True)) == [STILL_SUSPECTED]


def test_forget_and_stalled_keys_and_event_dict():
    d = Detector(1, 10, 0, 100)
    d.update(0, "a", False)
    d.update(1, "a", True)
    d.update(1, "b", False)
    assert d.stalled_keys(4) == {"a": 4.0}
    d.forget("a")
    assert d.state("a") is None and d.stalled_keys(4) == {}
    e = Event(CONFIRMED, "a", 1.23456, detail=object())
    dd = e.to_dict()
    assert dd["kind"] == CONFIRMED and dd["stalled_for_s"] == 1.235 and isinstance(dd["detail"], str)


def test_from_settings():
    class S:
        poll_interval_s, confirm_duration_s, suspect_after_s, report_every_s = 15, 600, 60, 120
    d = Detector.from_settings(S)
    assert d.confirm_polls == 40 and d.effective_confirm_s == 600


def test_since_starts_the_streak_earlier_never_later():
    """A source that saw its last change at t=103 (its verdict caught up at t=106) starts the
    streak there: confirmed at 108 with a 5 s window, not at 111. A ``since`` after the
    previous poll changes nothing."""
    det = Detector(1, 5, 0, 100)
    for t in (100, 101, 102, 103, 104, 105):
        assert det.update(t, "stacks", False) == []
    evs = det.update(106, "stacks", True, since=103.0)
    assert kinds(evs) == [SUSPECTED] and evs[0].stalled_for_s == 3.0
    assert kinds(det.update(107, "stacks", True, since=103.0)) == []
    evs = det.update(108, "stacks", True, since=103.0)
    assert kinds(evs) == [CONFIRMED] and evs[0].stalled_for_s == 5.0
    late = Detector(1, 5, 0, 100)
    late.update(100, "k", False)
    late.update(101, "k", True, since=101.5)
    assert late.state("k").streak_start == 100  # the previous poll: the usual rule
