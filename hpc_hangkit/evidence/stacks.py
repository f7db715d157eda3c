"""The stack source: watchdog dumps and heartbeats while polling, py-spy at capture.

Where the data comes from: the ranks' own files in node scratch
(``watchdog/rank_<r>.pid<p>.log`` faulthandler dumps, ``heartbeats/rank_<r>.pid<p>.hb``),
``/proc/<pid>/io`` and ``/proc/<pid>/stat`` of the ranks on this host, and at
capture ``py-spy dump --pid <pid>`` of every live rank (``--native`` where
:mod:`hpc_hangkit.capture.native` says it is worth it).

- :class:`StackSource` is the monitor's source (key ``"stacks"``): progress
  since the previous poll, else the roll call over the scratch decides.
  The roll call's rules come in as a :class:`Judge` (the report stage sits
  downstream of the sources; :func:`hpc_hangkit.detect.monitor.stack_judge`
  builds the real one).
- :func:`pyspy_rank` / :func:`pyspy_all` write ``<hd_dir>/stack_traces/rank_<i>.log``
  (a missing or refused py-spy, e.g. no ptrace, writes a one-line why-file
  ``hpc-hangkit: py-spy unavailable: <why>`` instead; if only ``--native`` is
  refused, the Python-only dump is kept).

No report section of its own: the stacks are the roll call itself.
"""
import logging
import os
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from hpc_hangkit import fsio, layout
from hpc_hangkit.capture.ranks import ALIVE, ENDED, GONE, UNKNOWN, Liveness, node_liveness, write_vanished
from hpc_hangkit.capture.whyfile import unavailable_line, write_why_file
from hpc_hangkit.evidence.source import PollContext, Source

log = logging.getLogger("hpc_hangkit.evidence.stacks")

PYSPY_TIMEOUT_S = 30.0


class Judge(NamedTuple):
    """The roll call's rules the stack source consults.

    ``main_thread(sample) -> Thread or None``: a sample's main thread;
    ``is_startup(frames) -> bool``: the frames are inside an import in progress;
    ``roll_call(path, world_size=None, samples=5) -> (Report, text)``: the roll
    call over a directory and its rendered text.
    """

    main_thread: Callable[[Any], Any]
    is_startup: Callable[[Any], bool]
    roll_call: Callable[..., Tuple[Any, str]]


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


#: the stack source's key for "every rank in one distributed call, nothing moving" (TOGETHER)
TOGETHER_KEY = "stacks/together"


def all_ended_cleanly(report) -> bool:
    """True when every rank of ``report`` recorded a clean end (its program returned, or
    ``sys.exit(0)``): the job is finishing (processes still tearing down), not hung."""
    groups = list(getattr(report, "groups", None) or [])
    return bool(groups) and all(
        g.role == "exited" and g.exit is not None and g.exit["how"] in ("normal", "exit") and g.exit["status"] == 0
        for g in groups) and not getattr(report, "missing_ranks", None)


def in_one_call(report) -> bool:
    """True when the roll call ``report`` has every observed rank in one group, inside a
    distributed call (a collective or point-to-point frame: torch.distributed, gloo/NCCL,
    MPI), with no rank missing, unwatched or without a position."""
    if report is None:
        return False
    groups = list(getattr(report, "groups", None) or [])
    if len(groups) != 1 or groups[0].state != "stuck" or not groups[0].in_collective:
        return False
    return not (getattr(report, "missing_ranks", None) or getattr(report, "unwatched_ranks", None))


def _main_stack(judge: "Judge", sample) -> Tuple:
    """The main thread's Python frames of one sample (the roll call's main-thread rule)."""
    th = judge.main_thread(sample)
    if th is None:
        return ()
    return tuple((f.file, f.line, f.function) for f in th.frames if not f.native)


def _in_startup(judge: "Judge", sample) -> bool:
    """True if the sample's main thread is inside an import in progress (the roll call's rule)."""
    th = judge.main_thread(sample)
    return th is not None and judge.is_startup(th.frames)


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

    Any progress: ``stalled=False``. A stalled answer carries ``since``: the last poll that
    saw anything change (progress, another node's answer taken as a baseline, a rank's end
    recorded), the first observation of the state that stayed frozen; when every change of
    that poll came from other nodes' answers, the latest time those nodes took them (their
    facts' ``seen_at``), not when the answers arrived; the roll call's
    position is a mode of several samples, so its verdict can catch up polls later, and
    the window is counted from that poll, not from the verdict. Otherwise the roll call over the
    scratch decides: ranks disagree (verdict in :data:`DISAGREE_VERDICTS`) ->
    ``stalled=True``, except GONE when every rank ended cleanly (the job is finishing);
    TOGETHER, SLOW, NO_HANG, INCONCLUSIVE -> ``stalled=False`` (a SLOW rank is never
    confirmed). No dumps yet -> ``{}`` (no answer). A rank that recorded its own end
    (``exits/``) never counts as progress (what it does then is its shutdown).

    Each poll also checks the process of every heartbeat (``liveness``, default: ``/proc`` of
    this host's ranks): an armed process seen alive before and gone now (no process, a
    zombie, its pid reused) that left no exit record gets a vanished record
    (``vanished/rank_<r>.pid<p>.txt`` in ``scratch`` and in ``node_scratch``, the scratch
    this host's ranks write, when the source reads a copy: the batch monitor's view), which
    the roll call reads as that rank's end (SIGKILL, the OOM killer, ``os._exit``), so
    GONE is confirmed within the confirm window; it counts as ended like an exit record.

    With ``together_after_s`` (seconds; from settings: together_confirm_s minus
    confirm_duration_s) a second key, :data:`TOGETHER_KEY`, is stalled once every rank
    has sat in one distributed call (:func:`in_one_call`) with nothing moving for that
    long, so the detector confirms a TOGETHER hang after together_confirm_s in all.

    ``node_scratch``: the scratch this host's ranks write, when ``scratch`` is a copy (the
    batch monitor's view); ``remote_liveness(heartbeat) -> Liveness``: the processes of other
    hosts' ranks (the batch monitor's probes); ``host``: this host's name (default
    ``socket.gethostname()``). ``remote_facts() -> [rank process]``: other hosts' rank
    processes known by their node's summary answer, not by files in ``scratch``
    (:class:`hpc_hangkit.slurm.sources.RemoteRank`: ``rank``, ``pid``, ``host``, ``counter``,
    ``busy``, ``label``, ``armed_mono_s``, ``path``, ``stack`` (a signature of its newest
    main-thread stack), ``ended``, ``seen_at``: when its node took them, this monitor's clock,
    or None); the same rules apply to them: a counter or busy change,
    a changed stack signature, a new process are progress, an ended one is ended, a
    vanished one gets its record (their roll call facts are in the summaries in ``scratch``).
    ``samples``: K for the roll call's modal position (settings.stack_samples);
    ``io_bytes``: I/O threshold per poll (bytes; 0 disables the I/O signal);
    ``sample_signal``: the ranks' watchdog signal name (settings.watchdog_signal);
    ``judge``: the roll call's rules (:class:`Judge`).
    """

    name = "stacks"
    key = "stacks"

    def __init__(self, scratch: str, judge: "Judge", samples: int = 5, world_size: Optional[int] = None,
                 io_bytes: int = IO_PROGRESS_BYTES, sample_signal: Optional[str] = "SIGURG",
                 together_after_s: Optional[float] = None, node_scratch: Optional[str] = None,
                 remote_liveness: Optional[Callable[[Any], Liveness]] = None, host: Optional[str] = None,
                 remote_facts: Optional[Callable[[], List[Any]]] = None):
        self.scratch = scratch
        #: ``remote_facts() -> [rank process]``: other hosts' ranks known by facts, not files
        self.remote_facts = remote_facts
        self._remote_stacks: Dict[Tuple, Optional[str]] = {}  # (rank, pid) -> stack signature
        #: the scratch this host's ranks write (their exit records; vanished records go there too)
        self.node_scratch = node_scratch or scratch
        #: ``remote_liveness(heartbeat) -> Liveness`` for ranks of other hosts (their node's word)
        self.remote_liveness = remote_liveness
        self._seen_alive = set()  # (rank, pid) seen alive at some poll
        self._vanished = set()    # (rank, pid) judged already (recorded, or ended with a record)
        self.together_after_s = together_after_s
        self._together_since: Optional[float] = None
        self.judge = judge
        self.sample_signal = sample_signal
        self.samples = samples
        self.world_size = world_size
        self.io_bytes = io_bytes
        self._procs: Dict[str, _ProcState] = {}   # watchdog log path -> state
        self._hb: Dict[Tuple, Tuple[int, int]] = {}  # (rank, pid) -> (counter, busy)
        self._first = True
        self._host = host or socket.gethostname()
        #: ``{pid: outcome}`` of the latest on-demand sampling (``request_dumps``'s outcomes)
        self.sample_outcomes: Dict[int, str] = {}
        self._last_change: Optional[float] = None  # the last poll that saw anything change
        self._absorbed_change = False  # absorb_remote took changed files since the last poll
        self._absorbed_age: Optional[float] = None  # how old they were (s), the youngest
        self._ended: set = set()        # ranks with an exit or vanished record, as last seen
        #: ``{rank: seen_at}``: the ranks whose change at the latest poll only another node's
        #: answer showed, with when that node took it (this monitor's clock)
        self.dated: Dict[int, float] = {}

    def _is_local(self, path: str) -> bool:
        from hpc_hangkit.parse.faulthandler import parse_header
        try:
            with open(path, "rb") as f:
                hdr = parse_header(f.readline(4096).decode("utf-8", "replace"))
        except OSError:
            return False
        host = (hdr or {}).get("host") or ""
        return bool(host) and host.split(".")[0] == self._host.split(".")[0]

    def absorb_remote(self, age_s: float = 0.0) -> None:
        """Take the other nodes' heartbeats and dumps in the scratch as they are now, without
        counting what changed in them as progress: for a view whose other nodes' files were
        last refreshed long ago (a probe runs only on suspicion), a change since that old
        answer says the ranks moved at some time since then, not since the previous poll.
        Their next changes count again. This node's files are left for :meth:`poll`.
        ``age_s``: how long ago (seconds) the answer's files were taken (when its probe
        started): a changed picture was first observed then, which is where the next
        stalled answer's ``since`` can start."""
        changed = False
        d = os.path.join(self.scratch, layout.HEARTBEAT_DIR)
        if os.path.isdir(d):
            from hpc_hangkit.parse.heartbeat import read_heartbeats
            for hb in read_heartbeats(d):
                if (hb.host or "").split(".")[0] != self._host.split(".")[0]:
                    k, cur = (hb.rank, hb.pid), (hb.counter, getattr(hb, "busy", 0))
                    changed = changed or self._hb.get(k) != cur
                    self._hb[k] = cur
        moved: Dict[int, str] = {}
        self._scan_logs(moved, remote_only=True)
        for rr in self._remote():
            k, cur = (rr.rank, rr.pid), (rr.counter, rr.busy)
            changed = changed or self._hb.get(k) != cur or self._remote_stacks.get(k) != rr.stack
            self._hb[k] = cur
            self._remote_stacks[k] = rr.stack
        # what changed there is not progress, but it is a new picture: a stall starts no
        # earlier than when it was taken
        if changed or moved:
            self._absorbed_change = True
            age = max(0.0, float(age_s))
            self._absorbed_age = age if self._absorbed_age is None else min(age, self._absorbed_age)

    def _scan_logs(self, progressed: Dict[int, str], remote_only: bool = False) -> List[int]:
        from hpc_hangkit.parse.faulthandler import parse_faulthandler
        d = os.path.join(self.scratch, layout.WATCHDOG_DIR)
        ranks = []
        for rf in layout.list_rank_files(d, ext="log", known_rank=True):
            name, rank, pid = rf.name, rf.rank, rf.pid
            ranks.append(rank)
            path = os.path.join(d, name)
            try:
                size = os.lstat(path).st_size
            except OSError:
                continue
            st = self._procs.get(path)
            new_proc = st is None
            if remote_only and (st.local if st is not None else self._is_local(path)):
                continue
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
                stack = _main_stack(self.judge, smp)
                if not stack:
                    continue  # a dump without a main thread (torn, or a helper-only dump)
                if st.stack and stack != st.stack and moved is None:
                    moved = stack
                st.stack = stack
                st.startup = _in_startup(self.judge, smp)
            if moved is not None and not new_proc and rank not in progressed:
                progressed[rank] = "stack moved (now at %s:%d)" % (os.path.basename(moved[0][0]), moved[0][1])
        return sorted(set(ranks))

    def _remote(self) -> list:
        """The other hosts' rank processes known by facts (``remote_facts``), or []."""
        return list(self.remote_facts()) if self.remote_facts is not None else []

    def _scan_remote_stacks(self, progressed: Dict[int, str]) -> set:
        """The stack-signature and new-process rules for the rank processes of ``remote_facts``
        (progress into ``progressed``); returns their ranks."""
        ranks = set()
        for rr in self._remote():
            k = (rr.rank, rr.pid)
            ranks.add(rr.rank)
            new_proc = k not in self._remote_stacks
            prev = self._remote_stacks.get(k)
            self._remote_stacks[k] = rr.stack
            if rr.rank in progressed:
                continue
            if new_proc:
                if not self._first:
                    progressed[rr.rank] = "new process rank_%d.pid%d on %s" % (rr.rank, rr.pid, rr.host or "?")
                    self._date(rr, "moved_at")  # (its watchdog's first look, after it started, is a move)
            elif prev is not None and rr.stack is not None and rr.stack != prev:
                progressed[rr.rank] = "stack moved (on %s)" % (rr.host or "?")
                self._date(rr, "moved_at")
        return ranks

    def _request_samples(self, skip_ranks) -> None:
        """On-demand dump of every live local rank process not in ``skip_ranks`` (for the next poll)."""
        if not self.sample_signal:
            return
        from hpc_hangkit.arm.watchdog import request_dumps
        targets: Dict[int, List[str]] = {}
        states: Dict[int, list] = {}
        for path, st in self._procs.items():
            if not st.local or st.gone:
                continue
            name = os.path.basename(path)
            parsed = layout.parse_rank_file_name(name)
            if parsed and parsed[0] in skip_ranks:
                continue
            # the log the rank writes: in a copy (the batch monitor's view) the answer would
            # never show, and request_dumps would escalate to a C-level dump every poll
            targets.setdefault(st.pid, []).append(
                path if self.node_scratch == self.scratch else
                os.path.join(self.node_scratch, layout.WATCHDOG_DIR, name))
            states.setdefault(st.pid, []).append(st)
        if not targets:
            return
        try:
            outcome = request_dumps(targets, self.sample_signal, timeout_s=1.0)
            self.sample_outcomes = dict(outcome)
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

    def _scan_heartbeats(self, progressed: Dict[int, str]) -> list:
        """Note heartbeat progress into ``progressed``; returns the heartbeat records read."""
        d = os.path.join(self.scratch, layout.HEARTBEAT_DIR)
        hbs = list(self._remote())
        if os.path.isdir(d):
            from hpc_hangkit.parse.heartbeat import read_heartbeats
            hbs = read_heartbeats(d) + hbs
        for hb in hbs:
            k = (hb.rank, hb.pid)
            prev = self._hb.get(k)
            busy = getattr(hb, "busy", 0)
            self._hb[k] = (hb.counter, busy)
            if prev is None:
                continue
            if prev[0] != hb.counter:
                label = (" (%s)" % hb.label) if getattr(hb, "label", "") else ""
                progressed[hb.rank] = "heartbeat %d->%d%s" % (prev[0], hb.counter, label)
                self._date(hb, "checkpoint_at")
            elif prev[1] != busy:
                # its watchdog thread found the main thread running Python: computing
                # (a tight loop's samples all show one line), not waiting in a collective
                progressed[hb.rank] = "main thread running Python (busy %d->%d)" % (prev[1], busy)
                self._date(hb, "busy_at")
        return hbs

    def _date(self, fact, by: Optional[str] = None) -> None:
        """Remember when another node saw the change of a rank process it reports (its
        ``seen_at``, this monitor's clock; or its attribute ``by``, when that node knows the
        change happened earlier: ``moved_at`` for a stack, ``checkpoint_at`` for a
        heartbeat, ``busy_at`` for busy), for :meth:`_change_at`; a file of the scratch has
        none."""
        seen = getattr(fact, "seen_at", None)
        if seen is None:
            return
        early = getattr(fact, by, None) if by else None
        if early is not None:
            seen = min(seen, early)
        self.dated[fact.rank] = max(seen, self.dated.get(fact.rank, seen))

    def _change_at(self, now: float, progressed: Dict[int, str]) -> float:
        """When the changes of this poll were seen: ``now``, or, when every rank that moved
        is known only by its node's answer, the latest time those nodes took them (a change
        they report happened by then; the answer may arrive seconds later)."""
        if progressed and all(r in self.dated for r in progressed):
            return min(now, max(self.dated[r] for r in progressed))
        return now

    def liveness(self, hb) -> Liveness:
        """:func:`hpc_hangkit.capture.ranks.node_liveness` of a heartbeat's process (exit records
        in ``node_scratch``) when it is on this host, else what ``remote_liveness`` says (its
        node's probe), else UNKNOWN (another node's ``/proc`` is not ours to read)."""
        host = (getattr(hb, "host", "") or "").split(".")[0]
        if not host or host != self._host.split(".")[0]:
            return self.remote_liveness(hb) if self.remote_liveness is not None else Liveness(UNKNOWN)
        return node_liveness(self.node_scratch, int(hb.pid), float(hb.armed_mono_s))

    def _scan_vanished(self, hbs) -> None:
        """Write a vanished record (:func:`hpc_hangkit.capture.ranks.write_vanished`) for every
        armed rank process seen alive at an earlier poll that is now gone and left no exit
        record (:meth:`liveness`), unless another process of that rank lives (a restart). A pid
        never seen alive is never called vanished: a rank in another pid namespace (a
        container) has no ``/proc`` entry here at all."""
        states = {}
        for hb in hbs:
            if hb.rank is None or hb.rank < 0 or not isinstance(hb.pid, int) or hb.pid < 2:
                continue
            states[(hb.rank, hb.pid)] = (hb, self.liveness(hb))
        alive_ranks = {k[0] for k, (_, lv) in states.items() if lv.state == ALIVE}
        for key, (hb, lv) in sorted(states.items()):
            if lv.state == ALIVE:
                self._seen_alive.add(key)
                continue
            if lv.state == ENDED:
                self._vanished.add(key)  # it recorded its own end: judged for good
            if lv.state != GONE or key not in self._seen_alive or key in self._vanished:
                continue
            rank, pid = key
            self._vanished.add(key)
            if rank in alive_ranks:
                continue
            t = time.time()  # one moment for both copies of the record
            for d in sorted({self.scratch, self.node_scratch}):
                try:
                    write_vanished(d, rank, pid, hb.host or self._host, lv.seen, t=t)
                except (OSError, ValueError) as e:
                    log.warning("cannot record that rank %d (pid %d) vanished in %s: %s", rank, pid, d, e)
            for st in self._procs.values():
                if st.pid == pid:
                    st.gone = True  # never signal a pid that may be someone else's now
            log.warning("rank %d (pid %d) vanished: %s, no exit record", rank, pid, lv.seen)

    def _ended_ranks(self) -> set:
        """Ranks with an exit record (``exits/``) or a vanished record (``vanished/``) in the scratch."""
        out = set()
        for sub in (layout.EXITS_DIR, layout.VANISHED_DIR):
            d = os.path.join(self.scratch, sub)
            out |= {rf.rank for rf in layout.list_rank_files(d, ext="txt", known_rank=True)}
        return out | {rr.rank for rr in self._remote() if rr.ended}

    def rebaseline(self) -> None:
        """Forget the I/O the ranks did since the last poll (call after a capture: a rank
        writing its Flight Recorder dump on our request is not progress)."""
        for st in self._procs.values():
            if st.local and not st.gone:
                st.io = proc_io_bytes(st.pid)

    def poll(self, now: float) -> Dict[str, Tuple[bool, StackDetail, Optional[float]]]:
        """One look at the scratch: ``{"stacks": (stalled, StackDetail, since)}`` (``since``: the
        last poll that saw a change, on a stalled answer; else None), with :data:`TOGETHER_KEY`
        beside it when ``together_after_s`` is set, or ``{}`` before any dump."""
        progressed: Dict[int, str] = {}
        self.dated = {}
        hbs = self._scan_heartbeats(progressed)
        by_heartbeat = set(progressed)
        ranks = sorted(set(self._scan_logs(progressed)) | self._scan_remote_stacks(progressed))
        self._scan_vanished(hbs)
        self._request_samples(by_heartbeat)
        ended = self._ended_ranks()
        for rank in ended & set(progressed):
            # it recorded its own end: what it does now is its shutdown (atexit, MPI_Finalize)
            del progressed[rank]
        first, self._first = self._first, False
        if first or ended - self._ended:
            self._last_change = now
        elif progressed:
            at = self._change_at(now, progressed)
            self._last_change = at if self._last_change is None else max(self._last_change, at)
        elif self._absorbed_change:
            self._last_change = max(self._last_change or 0.0, now - (self._absorbed_age or 0.0))
        self._absorbed_change, self._absorbed_age = False, None
        self._ended = ended
        if not self._procs and not self._remote_stacks:
            return {}
        det = StackDetail(progressed=progressed, ranks=ranks)
        if progressed:
            return self._answer(now, False, det)
        if first:
            return self._answer(now, False, det)  # nothing to compare with yet
        self.rollcall(det)
        return self._answer(now, det.verdict in DISAGREE_VERDICTS and not all_ended_cleanly(det.report), det)

    def _answer(self, now: float, stalled: bool, det: StackDetail) -> Dict[str, Tuple[bool, StackDetail, Optional[float]]]:
        """The poll's answers: key ``"stacks"`` (the ranks disagree and nothing moved) and, when
        ``together_after_s`` is set, key :data:`TOGETHER_KEY`: stalled once every rank has sat in
        the same distributed call with nothing moving for ``together_after_s`` seconds (the
        detector's confirm window then runs on top: together_confirm_s in all)."""
        out = {self.key: (stalled, det, self._last_change if stalled else None)}
        if self.together_after_s is None:
            return out
        together = not det.progressed and det.verdict == "TOGETHER" and in_one_call(det.report)
        if not together:
            self._together_since = None
        elif self._together_since is None:
            self._together_since = now
        # (no since: this key's stall starts after together_after_s of its own)
        out[TOGETHER_KEY] = (together and now - self._together_since >= self.together_after_s, det, None)
        return out

    def rollcall(self, det: Optional[StackDetail] = None) -> StackDetail:
        """Compute the roll call over the scratch into ``det`` (verdict, suspects, report, text)."""
        det = det or StackDetail()
        rep, text = self.judge.roll_call(self.scratch, world_size=self.world_size, samples=self.samples)
        det.report = rep
        det.verdict = rep.verdict
        det.suspect_ranks = list(rep.suspect_ranks or [])
        det.text = text
        return det


def _run_pyspy(pyspy: str, pid: int, native: bool, timeout_s: float, nonblocking: bool = False):
    argv = [pyspy, "dump", "--pid", str(pid)] + (["--native"] if native else []) + (
        ["--nonblocking"] if nonblocking and not native else [])
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=max(0.1, timeout_s))
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace").strip()


def capture_header(rank: int, pid: int, host: str, t: float, took_s: float, native: bool,
                   nonblocking: bool, why: Optional[str] = None) -> bytes:
    """The lines a capture puts before a py-spy dump in ``stack_traces/rank_<i>.log``
    (docs/internals.md): ``# hpc-hangkit-capture tool=py-spy rank= pid= host= t=<epoch s>
    took_s= native=yes|no nonblocking=yes|no``, then, for a dump without ``--native``, the
    why-line ``# hpc-hangkit: <why>``. ``t``: when the py-spy run that produced the dump started."""
    host = "".join(c if c.isalnum() or c in "_.-" else "_" for c in host) or "unknown"
    line = ("%s tool=py-spy rank=%d pid=%d host=%s t=%.3f took_s=%.3f native=%s nonblocking=%s\n"
            % (CAPTURE_TAG, rank, pid, host, t, took_s, "yes" if native else "no",
               "yes" if nonblocking else "no"))
    if not native and why:
        line += "# hpc-hangkit: %s\n" % " ".join(why.split())
    return line.encode("utf-8", "replace")


#: the tag of the header line of a captured py-spy dump (:func:`capture_header`)
CAPTURE_TAG = "# hpc-hangkit-capture"
#: seconds a Python-only retry gets after ``--native`` timed out
PYTHON_RETRY_S = 5.0


def pyspy_rank(ctx, rp, timeout_s: float = PYSPY_TIMEOUT_S, sampling=None) -> str:
    """py-spy dump of one rank into ``<ctx.hd_dir>/stack_traces/rank_<i>.log``; a why-file on failure.

    ``ctx``: a :class:`hpc_hangkit.capture.orchestrator.CaptureContext` (``settings.pyspy_path``,
    ``hd_dir``, ``host``; problems go to ``ctx.problem``); ``rp``: a
    :class:`hpc_hangkit.capture.ranks.RankProc`; ``timeout_s``: seconds per py-spy run;
    ``sampling``: a :class:`hpc_hangkit.capture.native.Sampling` (default: ``--native``,
    blocking). A refused or timed-out ``--native`` falls back to the Python-only dump, a
    refused ``--nonblocking`` to a blocking one: the Python stack is always tried. The
    dump is written after :func:`capture_header` (when it was taken, how, and the why-line
    of a dump without ``--native``). Returns the path written. Raises OSError only if the
    output cannot be written."""
    out = os.path.join(ctx.hd_dir, layout.STACK_TRACES_DIR, layout.stack_trace_name(rp.rank))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    pyspy = getattr(ctx.settings, "pyspy_path", None) or "py-spy"
    native = True if sampling is None else sampling.native
    nonblocking = False if sampling is None else sampling.nonblocking
    note = None if sampling is None or native else sampling.why
    why = None
    data = b""
    t = time.time()
    m0 = time.monotonic()
    try:
        try:
            rc, data, err = _run_pyspy(pyspy, rp.pid, native, timeout_s, nonblocking)
            failed = "exit status %d" % rc if rc != 0 else None
            if rc != 0 and err:
                failed = err.splitlines()[-1]
        except subprocess.TimeoutExpired:
            if not native:
                raise
            rc, failed = 1, "timed out after %.0f s" % timeout_s
        if rc != 0 and (native or nonblocking):
            what = "--native" if native else "--nonblocking"
            t = time.time()
            m0 = time.monotonic()
            rc2, data2, err2 = _run_pyspy(pyspy, rp.pid, False, PYTHON_RETRY_S if native else timeout_s)
            if rc2 == 0 and data2.strip():
                log.warning("rank %d: py-spy %s failed (%s); kept the Python-only dump", rp.rank,
                            what, failed)
                if native:
                    note = "native stack not taken: py-spy --native failed: %s" % failed
                rc, data, native, nonblocking = 0, data2, False, False
            else:
                why = "%s dump %s--pid %d failed: %s" % (pyspy, what + " ", rp.pid, failed)
        elif rc != 0:
            why = "%s dump --pid %d failed: %s" % (pyspy, rp.pid, failed)
    except FileNotFoundError:
        why = "executable %r not found (setting pyspy_path / HANGKIT_PYSPY_PATH)" % pyspy
    except PermissionError as e:
        why = "cannot execute %r: %s" % (pyspy, e)
    except subprocess.TimeoutExpired:
        why = "%s dump --pid %d timed out after %.0f s" % (pyspy, rp.pid, timeout_s)
    except OSError as e:
        why = "cannot run %r: %s" % (pyspy, e)
    if why is not None:
        ctx.problem("rank %d: %s" % (rp.rank, unavailable_line("py-spy", why).strip()))
        return write_why_file(out, "py-spy", why)
    head = capture_header(rp.rank, rp.pid, getattr(ctx, "host", None) or rp.host or socket.gethostname(),
                          t, time.monotonic() - m0, native, nonblocking, note)
    fsio.write_atomic(out, head + data)
    return out


def pyspy_all(ctx, workers: int = 16, deadline_s: float = PYSPY_TIMEOUT_S) -> List[str]:
    """:func:`pyspy_rank` of every rank of ``ctx.ranks`` in parallel (threads; each py-spy is its own
    process), each sampled as ``ctx.sampling`` says (``{rank: Sampling}``; default ``--native``);
    every run ends by ``deadline_s`` seconds from the start. Returns the paths written, in
    ``ctx.ranks`` order."""
    if not ctx.ranks:
        return []
    plan = getattr(ctx, "sampling", None) or {}
    end = time.monotonic() + deadline_s

    def one(rp):
        left = end - time.monotonic()
        if left <= 0:
            why = "the capture's %.0f s deadline for py-spy passed before rank %d's turn" % (
                deadline_s, rp.rank)
            ctx.problem("rank %d: %s" % (rp.rank, unavailable_line("py-spy", why).strip()))
            return write_why_file(os.path.join(ctx.hd_dir, layout.STACK_TRACES_DIR,
                                               layout.stack_trace_name(rp.rank)), "py-spy", why)
        return pyspy_rank(ctx, rp, timeout_s=left, sampling=plan.get(rp.rank))

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(ctx.ranks)))) as ex:
        return list(ex.map(one, ctx.ranks.values()))


def capture_hook(ctx) -> List[str]:
    """Capture step: :func:`pyspy_all` of ``ctx.ranks`` (the on-demand watchdog dumps were
    requested just before, and ``ctx.sampling`` planned, by the orchestrator); returns the
    paths written."""
    if not ctx.ranks:
        return []
    t0 = time.monotonic()
    files = pyspy_all(ctx)
    plan = getattr(ctx, "sampling", None) or {}
    log.info("py-spy of %d rank(s) (%d with --native): %.1f s", len(ctx.ranks),
             sum(1 for r in ctx.ranks if r not in plan or plan[r].native), time.monotonic() - t0)
    return files


def poll_source(ctx: PollContext) -> StackSource:
    """The monitor's stack source over ``ctx.scratch`` (settings ``stack_samples``, ``watchdog_signal``)."""
    return StackSource(ctx.scratch, ctx.judge, samples=ctx.settings.stack_samples,
                       sample_signal=ctx.settings.watchdog_signal, together_after_s=together_after_s(ctx.settings))


def together_after_s(settings) -> Optional[float]:
    """Seconds of TOGETHER before the stack source answers stalled for :data:`TOGETHER_KEY`:
    ``effective_together_confirm_s - confirm_duration_s`` (the detector's confirm window
    follows), at least 0; None (no TOGETHER key) for settings without those fields."""
    total = getattr(settings, "effective_together_confirm_s", None)
    if total is None:
        return None
    return max(0.0, float(total) - float(settings.confirm_duration_s))


SOURCE = Source("stacks", section_dir=layout.STACK_TRACES_DIR, poll=poll_source, capture=capture_hook)
