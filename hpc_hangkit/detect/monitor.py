"""The monitor: poll sources, feed the detector, log, capture and act.

Used by ``hpc-hangkit run`` (:mod:`hpc_hangkit.run`) and by the Slurm
batch-step monitor. Pieces:

- a *source* is any object with ``name`` (str) and
  ``poll(now: float) -> {key: (stalled: bool, detail)}`` (or ``(stalled, detail,
  since)``: when the source last saw a change, see ``Detector.update``); an empty
  dict means "no answer this poll" (the detector neither advances nor resets). The
  sources come from :data:`hpc_hangkit.evidence.registry.SOURCES` through
  :func:`poll_sources`: :class:`hpc_hangkit.evidence.stacks.StackSource`
  (watchdog dumps + heartbeats of the ranks of one node, judged by the roll
  call: :func:`stack_judge`) and :class:`hpc_hangkit.evidence.ras.RasSource`
  (per NCCL communicator).
- :class:`Monitor` runs the loop: every ``poll_interval_s`` seconds it polls
  each source, feeds :class:`hpc_hangkit.detect.detector.Detector`, logs every event
  with a timestamp (logger ``hpc_hangkit.detect.monitor``), appends it to
  ``<hd_dir>/events.jsonl``, and on *confirmed* calls its ``on_confirmed``
  callback once per streak (the caller's action: capture, then fail/requeue).
- :func:`capture_and_report` is the standard response to a confirmation:
  :func:`hpc_hangkit.capture.orchestrator.capture` while the ranks live, then the roll call
  over the captured tree, written as ``report.txt`` / ``report.json``.
"""
import json
import logging
import os
import time
from typing import Callable, List, Optional, Sequence

from hpc_hangkit import layout
from hpc_hangkit.detect.detector import CONFIRMED, STILL_SUSPECTED, Detector, Event
from hpc_hangkit.evidence.registry import poll_sources as _registry_poll_sources
from hpc_hangkit.evidence.source import PollContext
from hpc_hangkit.evidence.stacks import Judge

log = logging.getLogger("hpc_hangkit.detect.monitor")

def _jsonable(x):
    if hasattr(x, "to_json"):
        return x.to_json()
    if hasattr(x, "_asdict"):
        return x._asdict()
    if hasattr(x, "__dict__"):
        return {k: v for k, v in vars(x).items() if not k.startswith("_")}
    return str(x)


class EventLog:
    """Append-only ``events.jsonl``: one JSON object per line (``t`` epoch seconds, ``kind``, ...)."""

    def __init__(self, path: Optional[str]):
        self.path = path

    def write(self, kind: str, **fields) -> None:
        if not self.path:
            return
        rec = {"t": round(time.time(), 3), "kind": kind}
        rec.update(fields)
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(self.path, "a") as f:
                f.write(json.dumps(rec, default=_jsonable, sort_keys=True) + "\n")
        except OSError as e:  # the log is evidence, not control: keep monitoring
            log.warning("cannot append to %s: %s", self.path, e)

    def event(self, ev: Event, **extra) -> None:
        self.write(ev.kind, key=ev.key, stalled_for_s=round(ev.stalled_for_s, 3), detail=ev.detail, **extra)


class Monitor:
    """The polling loop over ``sources`` (see the module docstring).

    ``on_confirmed(event) -> None`` runs in the loop's thread when a key is
    confirmed (once per streak); ``on_event(event)`` for every event. The loop
    survives a source that raises (logged once per source and message).
    ``clock``: seconds, monotonic (injectable for tests).
    """

    def __init__(self, detector: Detector, sources: Sequence, hd_dir: Optional[str] = None,
                 on_confirmed: Optional[Callable[[Event], None]] = None,
                 on_event: Optional[Callable[[Event], None]] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.detector = detector
        self.sources = list(sources)
        self.hd_dir = hd_dir
        self.events = EventLog(os.path.join(hd_dir, layout.EVENTS_FILE) if hd_dir else None)
        self.on_confirmed = on_confirmed
        self.on_event = on_event
        self.clock = clock
        self.confirmed: List[Event] = []
        self.history: List[Event] = []
        self._source_errors = set()
        self.stop_requested = False
        #: duration (s) of the first poll slower than the interval, None while none was
        self.slow_poll_s: Optional[float] = None
        #: seconds the current poll spent in on_confirmed (the capture): not the poll's own cost
        self.capture_s_in_poll = 0.0
        #: duration (s) of the slowest poll so far (``confirmed`` events carry it: a poll is the
        #: detector's resolution, so "window + 2 polls" is in these units on a loaded node)
        self.slowest_poll_s = 0.0

    def poll_once(self, now: Optional[float] = None) -> List[Event]:
        """Poll every source once at ``now`` (default: the clock), feed the detector, act on events."""
        now = self.clock() if now is None else now
        events: List[Event] = []
        for src in self.sources:
            try:
                answers = src.poll(now) or {}
            except Exception as e:  # a broken source must not stop the others
                msg = "%s: %s" % (type(e).__name__, e)
                if (src, msg) not in self._source_errors:
                    self._source_errors.add((src, msg))
                    log.warning("source %s failed: %s (keeps polling)", getattr(src, "name", src), msg)
                continue
            for key, ans in answers.items():
                # (stalled, detail) or (stalled, detail, since): see Detector.update
                since = ans[2] if len(ans) > 2 else None
                events += self.detector.update(now, key, bool(ans[0]), ans[1], since=since)
        for ev in events:
            self._handle(ev, now)
        return events

    def _handle(self, ev: Event, now: float) -> None:
        self.history.append(ev)
        self.events.event(ev, **({"slowest_poll_s": round(self.slowest_poll_s, 3)} if ev.kind == CONFIRMED else {}))
        msg = "%s %s: ranks stalled for %.0f s (%s)" % (ev.kind.replace("_", " ").upper(), ev.key,
                                                        ev.stalled_for_s, ev.detail)
        if ev.kind in (CONFIRMED,):
            log.error("hang %s", msg)
        elif ev.kind == "recovered":
            log.info("%s", msg)
        else:
            left = max(0.0, self.detector.confirm_duration_s - ev.stalled_for_s)
            log.warning("%s; confirm in about %.0f s", msg, left)
        if ev.kind == STILL_SUSPECTED:
            stalled = self.detector.stalled_keys(now)
            log.warning("still frozen: %s", ", ".join("%s %.0f s" % kv for kv in sorted(stalled.items())))
            text = getattr(ev.detail, "text", "")
            if not text and hasattr(ev.detail, "verdict"):
                src = next((s for s in self.sources if getattr(s, "key", None) == ev.key), None)
                if src is not None and hasattr(src, "rollcall"):
                    try:
                        text = src.rollcall().text
                    except Exception as e:  # the roll call is a courtesy here
                        text = "(roll call failed: %s)" % e
            if text:
                log.info("current roll call:\n%s", text.rstrip())
        if self.on_event:
            self.on_event(ev)
        if ev.kind == CONFIRMED:
            self.confirmed.append(ev)
            if self.on_confirmed:
                t_cap = self.clock()
                self.on_confirmed(ev)
                self.capture_s_in_poll += self.clock() - t_cap
                # what the capture made the ranks do (Flight Recorder dumps: I/O) is ours
                for src in self.sources:
                    rebase = getattr(src, "rebaseline", None)
                    if rebase is not None:
                        try:
                            rebase()
                        except Exception as e:  # a courtesy: never stop the loop
                            log.debug("rebaseline of %s failed: %s", getattr(src, "name", src), e)

    def run(self, alive: Callable[[], bool], wait: Callable[[float], None]) -> None:
        """Poll every ``detector.poll_interval_s`` while ``alive()`` and no stop was requested.

        ``wait(seconds)`` sleeps until the next poll (it may return early, e.g.
        when the job exits). A poll slower than the interval is followed at once
        by the next one (no catching up) and logged once, with its duration: the
        detector's windows are wall-clock time, so a slow poll delays a
        confirmation by at most itself.
        """
        interval = self.detector.poll_interval_s
        nxt = self.clock()
        while not self.stop_requested and alive():
            t0 = self.clock()
            self.capture_s_in_poll = 0.0
            self.poll_once(t0)
            took = self.clock() - t0 - self.capture_s_in_poll  # a capture is not a slow poll
            self.slowest_poll_s = max(self.slowest_poll_s, took)
            if took > interval:
                self.note_slow_poll(took)
            nxt += interval
            delay = nxt - self.clock()
            if delay < 0:  # polling is slower than the interval: don't try to catch up
                nxt = self.clock()
                delay = 0.0
            if self.stop_requested or not alive():
                break
            wait(delay)

    def note_slow_poll(self, seconds: float) -> None:
        """Log (once per monitor) and record that a poll took ``seconds`` > the poll interval."""
        if self.slow_poll_s is not None:
            return
        self.slow_poll_s = seconds
        log.warning("a poll took %.1f s, more than the %.1f s poll interval; the windows are "
                    "wall-clock time (confirm after %.0f s stalled), so polls follow each other "
                    "without waiting", seconds, self.detector.poll_interval_s,
                    self.detector.confirm_duration_s)
        self.events.write("slow_poll", seconds=round(seconds, 3),
                          poll_interval_s=self.detector.poll_interval_s)


def suspects_of(ev: Event) -> List[int]:
    """The suspect ranks an event's detail names (a stack or RAS detail), or []."""
    got = getattr(ev.detail, "suspect_ranks", None) or []
    try:
        return sorted(int(r) for r in got)
    except (TypeError, ValueError):
        return []


def roll_call(path: str, world_size: Optional[int] = None, samples: int = 5):
    """The roll call over ``path`` (:func:`hpc_hangkit.rollcall.report_from_dir`, sections included)
    and its rendered text: ``(report, text)``. Raises FileNotFoundError when ``path`` does not exist."""
    from hpc_hangkit.report.render import render_text
    from hpc_hangkit.rollcall import report_from_dir
    rep = report_from_dir(path, world_size=world_size, samples=samples)
    return rep, render_text(rep)


def stack_judge() -> Judge:
    """The roll call's rules for :class:`hpc_hangkit.evidence.stacks.StackSource`: the main-thread
    and import-in-progress rules of :mod:`hpc_hangkit.rollcall`, and :func:`roll_call`."""
    from hpc_hangkit.rollcall import is_startup, main_thread
    return Judge(main_thread, is_startup, roll_call)


def poll_sources(settings, scratch: str, hd_dir: str) -> List[object]:
    """The detector sources for one node: every poll factory of the evidence registry
    (:func:`hpc_hangkit.evidence.registry.poll_sources`) over ``scratch`` (the ranks' files),
    with ``hd_dir`` for their output and the roll call as the stack source's judge."""
    return _registry_poll_sources(PollContext(settings, scratch, hd_dir, stack_judge()))


def write_report(hd_dir: str, settings=None, world_size: Optional[int] = None):
    """Roll call over ``hd_dir`` written as ``report.txt``, ``report.json`` and ``report.html``
    (the page of :mod:`hpc_hangkit.report.html`, its evidence links relative to ``hd_dir``;
    the collector stores all three side by side); returns ``(report, text)``.

    Reads only ``hd_dir`` (the captured tree). ``settings.stack_samples`` is K. A page that
    cannot be made or written is logged and left out: the text and JSON stay.
    """
    from hpc_hangkit.report.render import render_json
    rep, text = roll_call(hd_dir, world_size=world_size, samples=getattr(settings, "stack_samples", 5))
    with open(os.path.join(hd_dir, layout.REPORT_TXT), "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    with open(os.path.join(hd_dir, layout.REPORT_JSON), "w") as f:
        f.write(render_json(rep))
    html_path = os.path.join(hd_dir, layout.REPORT_HTML)
    try:
        from hpc_hangkit.report import html

        page = html.render_html(rep, html.gather_evidence(hd_dir, html_path, rep))
        with open(html_path, "w") as f:
            f.write(page)
    except Exception as e:  # noqa: BLE001 -- the page is an extra; report.txt must not depend on it
        log.warning("could not write %s: %s: %s", html_path, type(e).__name__, e)
    return rep, text


def capture_and_report(settings, scratch: str, hd_dir: str, world_size: Optional[int] = None,
                       events: Optional[EventLog] = None, suspects: Sequence[int] = ()):
    """Capture the live ranks of this node, then the roll call over ``hd_dir``.

    Writes ``<hd_dir>/report.txt`` and ``<hd_dir>/report.json`` and returns
    ``(report, text, capture_result)``. Where the data comes from:
    ``scratch`` (heartbeats/watchdog of the live ranks) for the capture, then
    only ``hd_dir`` (the captured tree) for the roll call. ``suspects``: the confirmed
    hang's suspect ranks (they get ``py-spy --native``, see
    :mod:`hpc_hangkit.capture.native`).
    """
    from hpc_hangkit.gather import capture_here

    log.info("capturing diagnostics of this node's ranks into %s", hd_dir)
    res = capture_here(settings, scratch, hd_dir, suspects=suspects)
    ranks = res.ranks
    log.info("capture done in %.1f s (%s)", res.seconds, res.tally())
    if events:
        events.write("captured", files=len(res.files), problems=res.problems,
                     seconds=round(res.seconds, 3), ranks=sorted(ranks))
    rep, text = write_report(hd_dir, settings, world_size)
    if events:
        events.write("report", verdict=rep.verdict, suspect_ranks=list(rep.suspect_ranks or []))
    return rep, text, res
