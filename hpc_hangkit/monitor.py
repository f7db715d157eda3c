"""The monitor: poll sources, feed the detector, log, capture and act.

Used by ``hpc-hangkit run`` (:mod:`hpc_hangkit.run`) and by the Slurm
batch-step monitor. Pieces:

- a *source* is any object with ``name`` (str) and
  ``poll(now: float) -> {key: (stalled: bool, detail)}``; an empty dict means
  "no answer this poll" (the detector neither advances nor resets). Sources
  here: :class:`StackSource` (watchdog dumps + heartbeats of the ranks of one
  node); :class:`hpc_hangkit.ras.RasSource` (per NCCL communicator) plugs in
  the same way.
- :class:`Monitor` runs the loop: every ``poll_interval_s`` seconds it polls
  each source, feeds :class:`hpc_hangkit.detector.Detector`, logs every event
  with a timestamp (logger ``hpc_hangkit.monitor``), appends it to
  ``<hd_dir>/events.jsonl``, and on *confirmed* calls its ``on_confirmed``
  callback once per streak (the caller's action: capture, then fail/requeue).
- :func:`capture_and_report` is the standard response to a confirmation:
  :func:`hpc_hangkit.capture.capture` while the ranks live, then the roll call
  over the captured tree, written as ``report.txt`` / ``report.json``.
"""
import json
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from hpc_hangkit import layout
from hpc_hangkit.detector import CONFIRMED, STILL_SUSPECTED, Detector, Event

log = logging.getLogger("hpc_hangkit.monitor")

#: verdicts under which the ranks disagree about where they are (a hang candidate)
DISAGREE_VERDICTS = ("MISSED", "SPLIT", "GONE", "SAME_LINE_DIFFERENT_ARGS")
#: above this size only the tail of a watchdog log is parsed each poll (bytes)
TAIL_BYTES = 1 << 20
#: bytes of read/write syscalls per poll above which a rank counts as moving
IO_PROGRESS_BYTES = 64 * 1024


@dataclass
class StackDetail:
    """What :class:`StackSource` says about one poll.

    ``verdict``/``suspect_ranks``: the roll call's (None when it was not
    computed because something progressed); ``progressed``: ranks seen
    moving since the previous poll, with why (``{rank: "heartbeat 12->13"}``);
    ``ranks``: ranks with a watchdog log; ``report``: the
    :class:`hpc_hangkit.rollcall.Report` (or None); ``text``: its rendered roll call;
    ``steps``: evidence a wrapping source adds (Slurm: sstat counters).
    """

    verdict: Optional[str] = None
    suspect_ranks: List[int] = field(default_factory=list)
    progressed: Dict[int, str] = field(default_factory=dict)
    ranks: List[int] = field(default_factory=list)
    report: Any = None
    text: str = ""
    #: extra evidence a wrapping source attaches (e.g. sstat step counters on Slurm)
    steps: Optional[dict] = None

    def to_json(self) -> dict:
        d = {"verdict": self.verdict, "suspect_ranks": list(self.suspect_ranks),
             "progressed": {str(k): v for k, v in sorted(self.progressed.items())},
             "ranks": list(self.ranks)}
        if self.steps is not None:
            d["steps"] = self.steps
        return d

    def __str__(self):
        if self.progressed:
            return "progress on rank(s) %s" % ",".join(str(r) for r in sorted(self.progressed))
        return "verdict %s, suspects %s" % (self.verdict, self.suspect_ranks)


def _main_stack(sample) -> Tuple:
    """The main thread's Python frames of one sample (the roll call's main-thread rule)."""
    from hpc_hangkit.rollcall import main_thread
    th = main_thread(sample)
    if th is None:
        return ()
    return tuple((f.file, f.line, f.function) for f in th.frames if not f.native)


def _in_startup(sample) -> bool:
    """True if the sample's main thread is inside an import in progress (the roll call's rule)."""
    from hpc_hangkit.rollcall import is_startup, main_thread
    th = main_thread(sample)
    return th is not None and is_startup(th.frames)


def proc_cpu_s(pid: int) -> Optional[float]:
    """User + system CPU seconds of a local process (``/proc/<pid>/stat``), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


#: CPU seconds per poll that count as progress for a rank still inside an import
STARTUP_CPU_S = 0.05


def proc_io_bytes(pid: int) -> Optional[int]:
    """``rchar + wchar`` of a local process (bytes it read/wrote through syscalls, files and sockets), or None."""
    try:
        with open("/proc/%d/io" % pid) as f:
            total = 0
            for line in f:
                k, _, v = line.partition(":")
                if k in ("rchar", "wchar"):
                    total += int(v)
            return total
    except (OSError, ValueError):
        return None


class _ProcState:
    """What :class:`StackSource` remembers about one rank process (one watchdog log)."""

    __slots__ = ("size", "last_off", "stack", "pid", "local", "io", "gone", "startup", "cpu")

    def __init__(self, pid: int, local: bool):
        self.size = -1
        self.last_off = -1
        self.stack: Tuple = ()
        self.pid = pid
        self.local = local
        self.io: Optional[int] = None
        self.gone = False
        self.startup = False  # its newest dump is inside an import
        self.cpu: Optional[float] = None


class StackSource:
    """Stack/heartbeat source over one node scratch directory. Key: ``"stacks"``.

    Each poll, for every rank process (``watchdog/rank_<r>.pid<p>.log``,
    ``heartbeats/rank_<r>.pid<p>.hb``) it looks for progress since the
    previous poll:

    - its heartbeat counter moved (``checkpoint()``);
    - a new watchdog dump shows a main-thread stack different from the one
      before (so a job that never calls ``checkpoint()`` counts as moving
      while its stacks change);
    - it read or wrote more than ``io_bytes`` bytes through syscalls (files,
      sockets; from ``/proc/<pid>/io`` of ranks on this host, minus its own
      watchdog dumps): a rank saving a checkpoint sits at one ``fsync`` line
      for seconds but is moving (a rank blocked in a collective does no I/O);
    - its watchdog thread found its main thread running Python (heartbeat
      ``busy``): a rank computing in a tight loop is sampled at one line;
    - its newest dump is inside an import and it used >= :data:`STARTUP_CPU_S`
      of CPU since the previous poll (a slow start on a busy node, on this host);
    - a new rank process appeared.

    So that every poll has a fresh sample whatever the watchdog period, each
    poll ends by asking every live local rank whose heartbeat did not move for
    an on-demand watchdog dump (``sample_signal``; None disables it): the
    next poll compares it with the previous one.

    Any progress: ``stalled=False``. Otherwise the roll call over the
    scratch decides: ranks disagree (verdict in :data:`DISAGREE_VERDICTS`) ->
    ``stalled=True``; TOGETHER, SLOW, NO_HANG, INCONCLUSIVE -> ``stalled=False``
    (a SLOW rank is never confirmed). No dumps yet -> ``{}`` (no answer).

    ``samples``: K for the roll call's modal position (settings.stack_samples);
    ``io_bytes``: I/O threshold per poll (bytes; 0 disables the I/O signal);
    ``sample_signal``: the ranks' watchdog signal name (settings.watchdog_signal).
    """

    name = "stacks"
    key = "stacks"

    def __init__(self, scratch: str, samples: int = 5, world_size: Optional[int] = None,
                 io_bytes: int = IO_PROGRESS_BYTES, sample_signal: Optional[str] = "SIGURG"):
        self.scratch = scratch
        self.sample_signal = sample_signal
        self.samples = samples
        self.world_size = world_size
        self.io_bytes = io_bytes
        self._procs: Dict[str, _ProcState] = {}   # watchdog log path -> state
        self._hb: Dict[Tuple, Tuple[int, int]] = {}  # (rank, pid) -> (counter, busy)
        self._first = True
        self._host = socket.gethostname()

    def _is_local(self, path: str) -> bool:
        from hpc_hangkit.parse.faulthandler import parse_header
        try:
            with open(path, "rb") as f:
                hdr = parse_header(f.readline(4096).decode("utf-8", "replace"))
        except OSError:
            return False
        host = (hdr or {}).get("host") or ""
        return bool(host) and host.split(".")[0] == self._host.split(".")[0]

    def _scan_logs(self, progressed: Dict[int, str]) -> List[int]:
        from hpc_hangkit.parse.faulthandler import parse_faulthandler
        d = os.path.join(self.scratch, layout.WATCHDOG_DIR)
        try:
            names = sorted(os.listdir(d))
        except OSError:
            return []
        ranks = []
        for name in names:
            parsed = layout.parse_rank_file_name(name)
            if not parsed or parsed[2] != "log" or parsed[0] is None:
                continue
            rank, pid = parsed[0], parsed[1]
            ranks.append(rank)
            path = os.path.join(d, name)
            try:
                size = os.lstat(path).st_size
            except OSError:
                continue
            st = self._procs.get(path)
            new_proc = st is None
            if new_proc:
                st = self._procs[path] = _ProcState(pid, self._is_local(path))
                if not self._first:
                    progressed[rank] = "new process %s" % name
            grew = size - st.size if st.size >= 0 else 0
            if st.local and self.io_bytes > 0:
                io = proc_io_bytes(pid)
                if io is not None and st.io is not None and not new_proc:
                    own = io - st.io - max(0, grew)  # minus its own watchdog dumps
                    if own >= self.io_bytes and rank not in progressed:
                        progressed[rank] = "I/O %d bytes since the previous poll" % own
                st.io = io
            if st.local and st.startup:
                # still importing (its newest dump is inside an import): a slow start, e.g. a
                # big extension loading on a busy node, burns CPU; a deadlocked import does not
                cpu = proc_cpu_s(pid)
                if cpu is not None and st.cpu is not None and cpu - st.cpu >= STARTUP_CPU_S \
                        and rank not in progressed:
                    progressed[rank] = "still starting up (import in progress, %.2f s CPU since the previous poll)" % (
                        cpu - st.cpu)
                st.cpu = cpu
            if size == st.size:
                continue  # no new dump from this process
            try:
                with open(path, "rb") as f:
                    start = max(0, size - TAIL_BYTES)
                    if st.last_off > start:
                        start = st.last_off  # re-read from the last dump seen: a dump boundary
                    f.seek(start)
                    data = f.read(size - start)
            except OSError:
                continue
            st.size = size
            moved = None
            for smp in parse_faulthandler(data, name).samples:
                off = start + smp.offset
                if off <= st.last_off:
                    continue  # seen at an earlier poll
                st.last_off = off
                stack = _main_stack(smp)
                if not stack:
                    continue  # a dump without a main thread (torn, or a helper-only dump)
                if st.stack and stack != st.stack and moved is None:
                    moved = stack
                st.stack = stack
                st.startup = _in_startup(smp)
            if moved is not None and not new_proc and rank not in progressed:
                progressed[rank] = "stack moved (now at %s:%d)" % (os.path.basename(moved[0][0]), moved[0][1])
        return sorted(set(ranks))

    def _request_samples(self, skip_ranks) -> None:
        """On-demand dump of every live local rank process not in ``skip_ranks`` (for the next poll)."""
        if not self.sample_signal:
            return
        from hpc_hangkit.watchdog import request_dumps
        targets: Dict[int, List[str]] = {}
        states: Dict[int, list] = {}
        for path, st in self._procs.items():
            if not st.local or st.gone:
                continue
            parsed = layout.parse_rank_file_name(os.path.basename(path))
            if parsed and parsed[0] in skip_ranks:
                continue
            targets.setdefault(st.pid, []).append(path)
            states.setdefault(st.pid, []).append(st)
        if not targets:
            return
        try:
            outcome = request_dumps(targets, self.sample_signal, timeout_s=1.0)
        except ValueError as e:
            log.warning("cannot sample ranks (%s): stack progress relies on the watchdog period", e)
            self.sample_signal = None
            return
        for pid, how in outcome.items():
            if how == "gone":
                for st in states[pid]:
                    st.gone = True
            elif how.startswith("failed"):
                log.warning("cannot sample pid %d (%s): stack progress relies on the watchdog period", pid, how)
                self.sample_signal = None
                return

    def _scan_heartbeats(self, progressed: Dict[int, str]) -> None:
        d = os.path.join(self.scratch, layout.HEARTBEAT_DIR)
        if not os.path.isdir(d):
            return
        from hpc_hangkit.parse.heartbeat import read_heartbeats
        for hb in read_heartbeats(d):
            k = (hb.rank, hb.pid)
            prev = self._hb.get(k)
            busy = getattr(hb, "busy", 0)
            self._hb[k] = (hb.counter, busy)
            if prev is None:
                continue
            if prev[0] != hb.counter:
                label = (" (%s)" % hb.label) if getattr(hb, "label", "") else ""
                progressed[hb.rank] = "heartbeat %d->%d%s" % (prev[0], hb.counter, label)
            elif prev[1] != busy:
                # its watchdog thread found the main thread running Python: computing
                # (a tight loop's samples all show one line), not waiting in a collective
                progressed[hb.rank] = "main thread running Python (busy %d->%d)" % (prev[1], busy)

    def rebaseline(self) -> None:
        """Forget the I/O the ranks did since the last poll (call after a capture: a rank
        writing its Flight Recorder dump on our request is not progress)."""
        for st in self._procs.values():
            if st.local and not st.gone:
                st.io = proc_io_bytes(st.pid)

    def poll(self, now: float) -> Dict[str, Tuple[bool, StackDetail]]:
        """One look at the scratch; ``{"stacks": (stalled, StackDetail)}`` or ``{}`` before any dump."""
        progressed: Dict[int, str] = {}
        self._scan_heartbeats(progressed)
        by_heartbeat = set(progressed)
        ranks = self._scan_logs(progressed)
        self._request_samples(by_heartbeat)
        first, self._first = self._first, False
        if not self._procs:
            return {}
        det = StackDetail(progressed=progressed, ranks=ranks)
        if progressed:
            return {self.key: (False, det)}
        if first:
            return {self.key: (False, det)}  # nothing to compare with yet
        self.rollcall(det)
        return {self.key: (det.verdict in DISAGREE_VERDICTS, det)}

    def rollcall(self, det: Optional[StackDetail] = None) -> StackDetail:
        """Compute the roll call over the scratch into ``det`` (verdict, suspects, report, text)."""
        from hpc_hangkit.render import render_text
        from hpc_hangkit.rollcall import report_from_dir
        det = det or StackDetail()
        rep = report_from_dir(self.scratch, world_size=self.world_size, samples=self.samples)
        det.report = rep
        det.verdict = rep.verdict
        det.suspect_ranks = list(rep.suspect_ranks or [])
        det.text = render_text(rep)
        return det


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

    def event(self, ev: Event) -> None:
        self.write(ev.kind, key=ev.key, stalled_for_s=round(ev.stalled_for_s, 3), detail=ev.detail)


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
            for key, (stalled, detail) in answers.items():
                events += self.detector.update(now, key, bool(stalled), detail)
        for ev in events:
            self._handle(ev, now)
        return events

    def _handle(self, ev: Event, now: float) -> None:
        self.history.append(ev)
        self.events.event(ev)
        msg = "%s %s: ranks stalled for %.0f s (%s)" % (ev.kind.replace("_", " ").upper(), ev.key,
                                                        ev.stalled_for_s, ev.detail)
        if ev.kind in (CONFIRMED,):
            log.error("hang %s", msg)
        elif ev.kind == "recovered":
            log.info("%s", msg)
        else:
            left = max(0.0, self.detector.effective_confirm_s - ev.stalled_for_s)
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
                self.on_confirmed(ev)
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
        when the job exits).
        """
        interval = self.detector.poll_interval_s
        nxt = self.clock()
        while not self.stop_requested and alive():
            self.poll_once()
            nxt += interval
            delay = nxt - self.clock()
            if delay < 0:  # polling is slower than the interval: don't try to catch up
                nxt = self.clock()
                delay = 0.0
            if self.stop_requested or not alive():
                break
            wait(delay)


def write_report(hd_dir: str, settings=None, world_size: Optional[int] = None):
    """Roll call over ``hd_dir`` written as ``report.txt`` and ``report.json``; returns ``(report, text)``.

    Reads only ``hd_dir`` (the captured tree). ``settings.stack_samples`` is K.
    """
    from hpc_hangkit.render import render_json, render_text
    from hpc_hangkit.rollcall import report_from_dir
    rep = report_from_dir(hd_dir, world_size=world_size,
                          samples=getattr(settings, "stack_samples", 5))
    text = render_text(rep)
    with open(os.path.join(hd_dir, layout.REPORT_TXT), "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    with open(os.path.join(hd_dir, layout.REPORT_JSON), "w") as f:
        f.write(render_json(rep))
    return rep, text


def capture_and_report(settings, scratch: str, hd_dir: str, world_size: Optional[int] = None,
                       events: Optional[EventLog] = None):
    """Capture the live ranks of this node, then the roll call over ``hd_dir``.

    Writes ``<hd_dir>/report.txt`` and ``<hd_dir>/report.json`` and returns
    ``(report, text, capture_result)``. Where the data comes from:
    ``scratch`` (heartbeats/watchdog of the live ranks) for the capture, then
    only ``hd_dir`` (the captured tree) for the roll call.
    """
    from hpc_hangkit.capture import CaptureContext, capture, discover_ranks

    ranks = discover_ranks(scratch)
    log.info("capturing diagnostics of %d rank(s) into %s", len(ranks), hd_dir)
    ctx = CaptureContext(settings, scratch, hd_dir, ranks)
    res = capture(ctx)
    log.info("capture done in %.1f s (%d file(s), %d problem(s))", res.seconds, len(res.files),
             len(res.problems))
    if events:
        events.write("captured", files=len(res.files), problems=res.problems,
                     seconds=round(res.seconds, 3), ranks=sorted(ranks))
    rep, text = write_report(hd_dir, settings, world_size)
    if events:
        events.write("report", verdict=rep.verdict, suspect_ranks=list(rep.suspect_ranks or []))
    return rep, text, res
