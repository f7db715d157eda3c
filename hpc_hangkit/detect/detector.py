"""The hang detector: a pure state machine with an injected clock.

This is the rule of the Ray Train NCCL hang detector, generalised to any source
of "is this thing stalled?" answers, one answer per *key* per poll:

- a key is a communicator hash for the NCCL RAS source, ``"stacks"`` for the
  stack/heartbeat source, or anything else a source chooses;
- ``stalled=True`` means "the ranks disagree AND nothing progressed since the
  previous poll" for that key; the source decides what that means;
- any ``stalled=False`` resets the key (a *recovered* event if it had been
  suspected or confirmed);
- a streak of stalled polls escalates: **suspected** once it has lasted
  ``suspect_after_s`` seconds, **still_suspected** every ``report_every_s``
  seconds after that, **confirmed** once it has lasted ``confirm_duration_s``
  seconds. A confirmed key emits nothing more until it recovers.

Every window is wall-clock time, never a count of polls: a poll that costs
four times its interval (an ``srun`` probe of a slow controller) makes the
confirmation come at the first poll after the window has elapsed, not after
``confirm_duration_s / poll_interval_s`` slow polls. With polls on time the
window is in effect rounded up to whole polls (:attr:`Detector.confirm_polls`).
A new window is one more duration compared with :meth:`KeyState.stalled_for`.

The streak starts at the first observation of the state that then stayed
frozen: the previous poll of that key (a stalled answer says "nothing changed
since then"), or the first stalled poll if the key is new, or an earlier time
the source names (``since``: the stack source's last poll that saw anything
change, when its verdict, a mode of several samples, caught up later). So
``stalled_for_s`` is "seconds since progress was last seen".

No I/O, no clock reads: every time comes in as ``now`` (seconds, any monotonic
origin), so every rule is unit-testable. Used by :mod:`hpc_hangkit.detect.monitor`
(``hpc-hangkit run`` and the Slurm batch-step monitor) and the RAS source.
"""
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

SUSPECTED = "suspected"
STILL_SUSPECTED = "still_suspected"
CONFIRMED = "confirmed"
RECOVERED = "recovered"
KINDS = (SUSPECTED, STILL_SUSPECTED, CONFIRMED, RECOVERED)


@dataclass(frozen=True)
class Event:
    """One escalation step of one key.

    ``kind``: one of :data:`KINDS`. ``key``: the source's key (str).
    ``stalled_for_s``: seconds since progress was last seen for the key (for
    *recovered*: how long the streak lasted). ``detail``: whatever the source
    passed with the update that produced the event (e.g. a roll-call report).
    """

    kind: str
    key: str
    stalled_for_s: float
    detail: Any = None

    def to_dict(self) -> dict:
        """JSON-able form (``detail`` as ``str`` unless it is already plain data)."""
        d = self.detail
        if d is not None and not isinstance(d, (str, int, float, bool, list, dict)):
            d = str(d)
        return {"kind": self.kind, "key": self.key,
                "stalled_for_s": round(self.stalled_for_s, 3), "detail": d}


@dataclass
class KeyState:
    """Per-key streak state (read-only for callers; see :meth:`Detector.state`)."""

    last_poll: Optional[float] = None     # time of the latest update for the key
    streak_start: Optional[float] = None  # last time progress was seen (None: not stalled)
    stalled_polls: int = 0                # consecutive stalled polls
    suspected: bool = False
    confirmed: bool = False
    next_report: Optional[float] = None   # when the next still_suspected is due
    detail: Any = field(default=None, repr=False)

    def stalled_for(self, now: float) -> float:
        if self.streak_start is None:
            return 0.0
        return max(0.0, now - self.streak_start)


def _elapsed(stalled_for: float, window_s: float) -> bool:
    """True once a streak of ``stalled_for`` seconds has lasted ``window_s`` seconds;
    sums of float poll times (6 x 0.1 s) must reach 0.6 s, hence the tolerance."""
    return stalled_for >= window_s - 1e-6


class Detector:
    """Escalates per-key stall answers into suspected/still_suspected/confirmed/recovered.

    Arguments (seconds, all > 0 except ``suspect_after_s`` >= 0):
    ``poll_interval_s`` the caller's nominal poll period (only for
    :attr:`confirm_polls` / :attr:`effective_confirm_s` and the caller's
    loop: no rule counts polls); ``confirm_duration_s`` how long a key must
    stay stalled (wall-clock seconds); ``suspect_after_s`` when to raise the
    first warning; ``report_every_s`` period of the *still suspected* reminders.

    Raises ``ValueError`` for a non-positive period/duration.
    """

    def __init__(self, poll_interval_s: float, confirm_duration_s: float,
                 suspect_after_s: float, report_every_s: float):
        for name, v in (("poll_interval_s", poll_interval_s),
                        ("confirm_duration_s", confirm_duration_s),
                        ("report_every_s", report_every_s)):
            if not (isinstance(v, (int, float)) and v > 0):
                raise ValueError("Detector: %s must be a number > 0, got %r" % (name, v))
        if not (isinstance(suspect_after_s, (int, float)) and suspect_after_s >= 0):
            raise ValueError("Detector: suspect_after_s must be a number >= 0, got %r"
                             % (suspect_after_s,))
        self.poll_interval_s = float(poll_interval_s)
        self.confirm_duration_s = float(confirm_duration_s)
        self.suspect_after_s = float(suspect_after_s)
        self.report_every_s = float(report_every_s)
        # informational (log lines, RAS history length); tolerate float noise: 6.0/1.5 is 4 polls
        self.confirm_polls = max(1, int(math.ceil(self.confirm_duration_s / self.poll_interval_s - 1e-9)))
        self._keys: Dict[str, KeyState] = {}

    @classmethod
    def from_settings(cls, settings) -> "Detector":
        """Build from a :class:`hpc_hangkit.config.Settings` (its poll/confirm/suspect/report fields)."""
        return cls(settings.poll_interval_s, settings.confirm_duration_s,
                   settings.suspect_after_s, settings.report_every_s)

    @property
    def effective_confirm_s(self) -> float:
        """Seconds from the stall to the confirmation when polls run on time:
        ``confirm_polls * poll_interval_s`` (the first on-time poll at or after
        ``confirm_duration_s``). Slow polls confirm at the first poll after
        ``confirm_duration_s``, whatever they cost."""
        return self.confirm_polls * self.poll_interval_s

    def update(self, now: float, key: str, stalled: bool, detail: Any = None,
               since: Optional[float] = None) -> List[Event]:
        """Feed one poll's answer for ``key`` at time ``now`` (seconds); return the events it causes.

        ``since`` (seconds, same clock): when the source last saw anything change, for a
        stalled answer that starts a streak; used when it is earlier than the previous poll
        (a later one, or one after ``now``, is ignored). Events come in escalation order;
        one update can return e.g. ``[suspected, confirmed]`` when ``suspect_after_s``
        exceeds the confirm window. A time earlier than the key's previous update is
        treated as equal to it (the caller's clock is assumed monotonic).
        """
        st = self._keys.get(key)
        if st is None:
            st = self._keys[key] = KeyState()
        prev = st.last_poll
        if prev is not None and now < prev:
            now = prev
        st.last_poll = now
        st.detail = detail
        events: List[Event] = []
        if not stalled:
            if st.suspected or st.confirmed:
                events.append(Event(RECOVERED, key, st.stalled_for(now), detail))
            st.streak_start = None
            st.stalled_polls = 0
            st.suspected = st.confirmed = False
            st.next_report = None
            return events
        if st.streak_start is None:
            # nothing progressed since the previous poll: the stall began then, or at the
            # source's own earlier word for when it last saw a change
            st.streak_start = prev if prev is not None else now
            if since is not None and since < st.streak_start:
                st.streak_start = since
        st.stalled_polls += 1
        if st.confirmed:
            return events
        stalled_for = st.stalled_for(now)
        confirm_now = _elapsed(stalled_for, self.confirm_duration_s)
        if not st.suspected:
            if _elapsed(stalled_for, self.suspect_after_s) or confirm_now:
                st.suspected = True
                st.next_report = now + self.report_every_s
                events.append(Event(SUSPECTED, key, stalled_for, detail))
        elif not confirm_now and st.next_report is not None and now >= st.next_report:
            events.append(Event(STILL_SUSPECTED, key, stalled_for, detail))
            # keep the cadence; after a long gap restart it from now (no burst)
            nxt = st.next_report + self.report_every_s
            st.next_report = nxt if nxt > now else now + self.report_every_s
        if confirm_now:
            st.confirmed = True
            events.append(Event(CONFIRMED, key, stalled_for, detail))
        return events

    def forget(self, key: str) -> None:
        """Drop a key that no longer exists (e.g. a destroyed communicator). No event."""
        self._keys.pop(key, None)

    def state(self, key: str) -> Optional[KeyState]:
        """The key's current :class:`KeyState`, or None if never seen."""
        return self._keys.get(key)

    def stalled_keys(self, now: float) -> Dict[str, float]:
        """``{key: stalled_for_s}`` of every key currently in a stalled streak (for still-suspected listings)."""
        return {k: st.stalled_for(now) for k, st in self._keys.items()
                if st.streak_start is not None}

    def confirmed_keys(self) -> List[str]:
        """Keys currently confirmed (until they recover), sorted."""
        return sorted(k for k, st in self._keys.items() if st.confirmed)
