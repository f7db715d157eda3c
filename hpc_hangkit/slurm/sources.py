"""The job-wide sources of the Slurm monitor: :class:`SlurmStackSource` (the stack source
over the :class:`hpc_hangkit.slurm.probe.View` of every node, other nodes probed in the
background by :class:`BackgroundProbe` through :func:`srun_probe`) and
:class:`RasOnRankNode` (the RAS source run on a node that holds ranks).

A probe is one ``srun --overlap`` step over all the other nodes (Slurm's own fan-out). Its
output is read as it comes (:func:`hpc_hangkit.slurmjob.srun_overlap_stream`): each node's
answer is decoded when its last line arrives and folded into the view at the next poll,
whoever else is still to answer. At the probe's deadline (:func:`probe_deadline_s`) the
step is stopped and the nodes that did not answer are named: each gets an unreachable
record (:mod:`hpc_hangkit.rollcall.unreachable`: the node, since when, its ranks as last
known) that the roll call reports, and is dropped again when the node answers. Nothing
waits for them: the polls, the detector and its confirmation go on with what the view holds.
"""
import logging
import os
import threading
import time
from typing import Dict, List, Mapping, Optional

from hpc_hangkit import layout
from hpc_hangkit import slurmjob as slurm
from hpc_hangkit.capture.ranks import UNKNOWN, Liveness
from hpc_hangkit.slurm.probe import ANSWERS, View, doc_files, rank_files
from hpc_hangkit.wire import DocReader

log = logging.getLogger("hpc_hangkit.slurm.sources")

#: a probe's deadline is twice the poll interval, within these bounds (seconds): long enough
#: for ``srun`` to launch on a loaded node, short enough that a node that never answers is
#: named within a fraction of the confirm window
PROBE_DEADLINE_MIN_S = 10.0
PROBE_DEADLINE_MAX_S = 60.0
#: the environment variable (the batch step's, so a site sets it in the job environment
#: or the prolog's) that forces the answer shape: ``raw``, ``summary`` or ``auto``
PROBE_ANSWER_ENV = "HANGKIT_PROBE_ANSWER"
#: with ``auto``, the other nodes answer with node summaries once they are this many or
#: more; fewer answer with their raw rank-file tails (cheap for a few nodes, and what the
#: capture falls back on when a node does not answer it)
SUMMARY_MIN_NODES = 4
#: seconds between probes that ask the nodes already named unreachable again (the probes in
#: between leave them out, so that they end when every node that answers has answered instead
#: of at the deadline)
UNREACHABLE_RETRY_S = 30.0


def probe_deadline_s(poll_interval_s: Optional[float]) -> float:
    """Seconds a probe waits for the other nodes' answers: 2 x ``poll_interval_s``, at least
    :data:`PROBE_DEADLINE_MIN_S` and at most :data:`PROBE_DEADLINE_MAX_S`."""
    return min(PROBE_DEADLINE_MAX_S, max(PROBE_DEADLINE_MIN_S, 2.0 * float(poll_interval_s or 0.0)))


def probe_answer(n_nodes: int, env: Optional[Mapping[str, str]] = None) -> str:
    """The answer shape (``"raw"`` or ``"summary"``) for a probe of ``n_nodes`` other nodes:
    what :data:`PROBE_ANSWER_ENV` in ``env`` forces, else (``auto``, unset) ``"summary"``
    from :data:`SUMMARY_MIN_NODES` nodes on. Raises ValueError for another value of it."""
    want = ((env or {}).get(PROBE_ANSWER_ENV) or "auto").strip().lower()
    if want == "auto":
        return "summary" if n_nodes >= SUMMARY_MIN_NODES else "raw"
    if want not in ANSWERS:
        raise ValueError("%s=%r: expected raw, summary or auto" % (PROBE_ANSWER_ENV, want))
    return want


class Answer:
    """What a probe brought since the last :meth:`BackgroundProbe.take`: ``files`` (raw answers'
    rank files, merged), ``nodes`` (``{host: summary answer doc}``), ``answered`` (short host
    names), ``missing`` (``{node: why}``, set once the probe finished: the nodes that did not
    answer), ``started`` (``clock``), ``arrived`` (``{host: clock}``: when each summary answer
    was folded) and ``finished``."""

    def __init__(self, started: float):
        self.files: Dict[str, dict] = {}
        self.nodes: Dict[str, dict] = {}
        self.arrived: Dict[str, float] = {}
        self.answered: set = set()
        self.missing: Optional[Dict[str, str]] = None
        self.started = started
        self.finished = False

    def fold(self, doc: dict, at: Optional[float] = None) -> None:
        """Fold one node's answer (a ``slurm-probe`` document) in; ``at``: when it arrived."""
        host = str(doc.get("host") or "").split(".")[0]
        if doc.get("answer") == "summary":
            if host and layout.HOST_RE.match(host) and isinstance(doc.get("summary"), dict):
                self.nodes[host] = doc
                if at is not None:
                    self.arrived[host] = at
        else:
            self.files.update(doc_files(doc))
        if host:
            self.answered.add(host)

    def empty(self) -> bool:
        return not (self.files or self.nodes or self.answered or self.finished)


class BackgroundProbe:
    """Runs a probe in a thread of its own, one probe at a time, so that a slow ``srun``
    never holds up a poll: :meth:`start` returns at once, :meth:`take` hands over what
    arrived since the last call (an :class:`Answer`), or None.

    ``probe``: either a streaming probe (attribute ``streams`` true, :func:`srun_probe`):
    ``probe(nodes, fold) -> {node: why}``, calling ``fold(doc)`` with each node's answer as
    it arrives and returning the nodes that did not answer; or ``probe(nodes) -> {rel: file}``
    (raw rank files, all at once). ``clock``: seconds, monotonic. :attr:`last_seconds` is
    how long the latest finished probe took, :attr:`last_started` when the latest probe
    started; a probe that raises counts as an empty answer naming no node (logged once per
    message): a failed srun is not the nodes' fault.
    """

    def __init__(self, probe, clock=time.monotonic):
        self.probe = probe
        self.clock = clock
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._answer: Optional[Answer] = None
        self._errors = set()
        self.last_seconds: Optional[float] = None
        #: when (``clock``) the latest probe started
        self.last_started: Optional[float] = None

    def busy(self) -> bool:
        """True while a probe runs."""
        t = self._thread
        return t is not None and t.is_alive()

    def start(self, nodes: List[str]) -> bool:
        """Start a probe of ``nodes`` unless one runs already; True when one was started."""
        if self.busy():
            return False
        t0 = self.clock()
        with self._lock:
            self.last_started = t0
        self._thread = threading.Thread(target=self._run, args=(list(nodes), t0), daemon=True,
                                        name="hpc-hangkit-probe")
        self._thread.start()
        return True

    def _pending(self, t0: float) -> Answer:
        if self._answer is None:
            self._answer = Answer(t0)
        return self._answer

    def _fold(self, t0: float, doc: dict) -> None:
        at = self.clock()
        with self._lock:
            self._pending(t0).fold(doc, at)

    def _run(self, nodes: List[str], t0: float) -> None:
        missing: Dict[str, str] = {}
        try:
            if getattr(self.probe, "streams", False):
                missing = dict(self.probe(nodes, lambda doc: self._fold(t0, doc)) or {})
            else:
                files = self.probe(nodes) or {}
                with self._lock:
                    self._pending(t0).files.update(files)
        except Exception as e:  # a probe problem is evidence lost, not a monitor failure
            msg = "%s: %s" % (type(e).__name__, e)
            if msg not in self._errors:
                self._errors.add(msg)
                log.warning("probe of %s failed: %s", ",".join(nodes), msg)
        with self._lock:
            self.last_seconds = self.clock() - t0
            a = self._pending(t0)
            a.finished = True
            a.missing = missing

    def take(self) -> Optional[Answer]:
        """What arrived since the last call (an :class:`Answer`, ``finished`` once its probe
        ended), or None when nothing did."""
        with self._lock:
            got, self._answer = self._answer, None
        return None if got is None or got.empty() else got

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait for the running probe (if any) to finish; True when none runs any more."""
        t = self._thread
        if t is not None:
            t.join(timeout)
        return not self.busy()


class BackgroundStats:
    """Runs ``stats()`` (sstat over every node of the job: 0.5-2 s at 32 nodes on the test
    cluster) in a thread of its own, one call at a time, so that it never lengthens a poll:
    :meth:`latest` starts the next call when none runs and returns the newest finished one
    as ``(seq, result, error)`` (``seq`` counts finished calls; ``error`` the message of a
    call that raised, ``result`` None then), or None before the first one finished."""

    def __init__(self, stats):
        self.stats = stats
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._latest = None
        self._seq = 0

    def _run(self) -> None:
        try:
            got, err = list(self.stats()), None
        except Exception as e:  # sstat trouble is evidence lost, not a monitor failure
            got, err = None, str(e)
        with self._lock:
            self._seq += 1
            self._latest = (self._seq, got, err)

    def latest(self):
        t = self._thread
        if t is None or not t.is_alive():
            self._thread = threading.Thread(target=self._run, daemon=True, name="hpc-hangkit-sstat")
            self._thread.start()
        with self._lock:
            return self._latest

    def wait(self, timeout: Optional[float] = None) -> None:
        """Wait for the call in flight, if any (tests, shutdown)."""
        t = self._thread
        if t is not None:
            t.join(timeout)


class RemoteRank:
    """One rank process of another node as its summary answer says it
    (:func:`hpc_hangkit.slurm.probe.rank_facts_of_node`), shaped like a heartbeat record for
    :class:`hpc_hangkit.evidence.stacks.StackSource`'s remote-facts hook: ``rank``, ``pid``,
    ``host``, ``counter``, ``busy``, ``label``, ``armed_mono_s``, ``path`` (the heartbeat's
    name), ``stack`` (signature of its newest main-thread stack, or None), ``ended``;
    ``seen_at``: when (the monitor's monotonic clock, seconds) its node took these facts
    (:meth:`SlurmStackSource.taken_mono`), None when unknown: a change they show happened
    by then, not when the answer reached the monitor. ``moved_at`` / ``checkpoint_at`` /
    ``busy_at``: the node's times of those names on the same clock (no later than
    ``seen_at``; None when unknown): a change of ``stack`` / ``counter`` / ``busy`` happened
    by then."""

    __slots__ = ("rank", "pid", "host", "counter", "busy", "label", "armed_mono_s", "path", "stack", "ended",
                 "seen_at", "moved_at", "checkpoint_at", "busy_at", "_node_times")

    def __init__(self, name: str, f: dict):
        self.path = name
        self.rank = int(f["rank"])
        self.pid = int(f["pid"])
        self.host = str(f.get("host") or "")
        self.counter = int(f.get("counter") or 0)
        self.busy = int(f.get("busy") or 0)
        self.label = str(f.get("label") or "")
        self.armed_mono_s = float(f.get("armed_mono_s") or 0.0)
        st = f.get("stack")
        self.stack = str(st) if st else None
        self.ended = bool(f.get("ended"))
        self.seen_at: Optional[float] = None
        self.moved_at: Optional[float] = None
        self.checkpoint_at: Optional[float] = None
        self.busy_at: Optional[float] = None
        self._node_times = {k: _epoch(f.get(k)) for k in _NODE_TIMES}

    def date(self, seen_at: Optional[float], taken_at) -> None:
        """Set ``seen_at`` and, from the node's ``moved_at``/``checkpoint_at``/``busy_at`` and
        the ``taken_at`` of the same answer (one node's clock: its offset cancels), those
        times on ``seen_at``'s clock, never after it."""
        self.seen_at = seen_at
        taken = _epoch(taken_at)
        if seen_at is None or taken is None:
            return
        for k, t in self._node_times.items():
            if t is not None:
                setattr(self, k, seen_at - max(0.0, taken - t))


#: the times a node's rank facts may carry (epoch s, its clock): see RemoteRank
_NODE_TIMES = ("moved_at", "checkpoint_at", "busy_at")


def _epoch(v) -> Optional[float]:
    """``v`` as a finite float (epoch seconds), else None."""
    try:
        t = float(v)
    except (TypeError, ValueError):
        return None
    return t if t == t and t not in (float("inf"), float("-inf")) else None


class SlurmStackSource:
    """Key ``"stacks"``: StackSource over the :class:`View` of every node's rank files.

    ``probe``: fetches the other nodes' answers (default: one ``srun --overlap`` step,
    :func:`srun_probe`; see :class:`BackgroundProbe` for the two shapes); it runs in the
    background and what arrived enters the view at the next poll, so a probe slower than
    the poll interval delays the remote evidence, never the local poll. A node's summary
    answer goes into the view as its summary (the roll call merges it) and its per-rank
    facts feed the stack source's progress and liveness rules (``remote_facts``); a node
    the finished probe names as not answering gets an unreachable record in the view
    (:attr:`unreachable`), dropped when it answers again.
    ``stats() -> [StepStat]`` gives sstat counters, on stalled polls, from the newest call
    finished beside the polls (:class:`BackgroundStats`). ``poll_interval_s``: the
    monitor's nominal interval (a probe slower than it is logged once). ``host``: this
    node's name (default ``socket.gethostname()``). A rank process of this node that
    vanished is seen in this node's ``/proc``, one of another node by that node's probe
    (:func:`heartbeat_liveness`); either way the vanished record goes into the view and
    into ``scratch``, whose capture copies it.
    """

    name = "stacks"
    key = "stacks"

    def __init__(self, scratch: str, view: View, other_nodes: List[str], probe=None,
                 stats=None, samples: int = 5, world_size: Optional[int] = None,
                 idle_probe_s: float = 30.0, together_after_s: Optional[float] = None,
                 poll_interval_s: Optional[float] = None, host: Optional[str] = None):
        from hpc_hangkit.detect.monitor import stack_judge
        from hpc_hangkit.evidence.stacks import StackSource
        self.scratch = scratch
        self.view = view
        self.other_nodes = list(other_nodes)
        self.probe = probe
        self.background = BackgroundProbe(probe) if probe is not None else None
        self.stats = stats
        self._stats_bg = BackgroundStats(stats) if stats is not None else None
        self._stats_seen = 0       # seq of the newest sstat answer turned into evidence
        self._stats_ev: Optional[dict] = None
        #: ``{host: {heartbeat name: RemoteRank}}``: the latest summary answer of each node
        self.remote: Dict[str, Dict[str, RemoteRank]] = {}
        #: ``{node: {"since": epoch s, "ranks": [...], "why": str}}``: nodes that did not answer
        self.unreachable: Dict[str, dict] = {}
        # this node's ranks are checked against this node's /proc and exit records, the
        # others' by their node's probe; every vanished record also goes to this node's
        # scratch, so the capture copies it
        self.inner = StackSource(view.path, stack_judge(), samples=samples, world_size=world_size,
                                 together_after_s=together_after_s, node_scratch=scratch,
                                 remote_liveness=self._remote_liveness, host=host,
                                 remote_facts=self._remote_facts)
        self.probes = 0
        #: seconds between probes; the monitor raises it after a confirmation
        self.min_probe_interval_s = 0.0
        #: seconds between probes while this node has no rank data at all
        self.idle_probe_interval_s = idle_probe_s
        self.poll_interval_s = poll_interval_s
        self._slow_probe_logged = False
        self._last_probe = None
        self._last_answer = None  # when the probe of the latest answer ended (monotonic s)
        self._local_seen = False
        self._last_stats: Dict[str, object] = {}
        self._answered_once: set = set()  # short names of the nodes that answered at some probe
        self._last_retry: Optional[float] = None  # when a probe last asked the unreachable nodes too

    def rollcall(self, det=None):
        return self.inner.rollcall(det)

    def _remote_liveness(self, hb) -> Liveness:
        """The liveness of another node's rank process, as that node's latest probe said."""
        return self.view.liveness.get(os.path.basename(hb.path), Liveness(UNKNOWN))

    def _remote_facts(self) -> List[RemoteRank]:
        """Every other node's rank processes as their latest summary answers say them."""
        return [rr for host in sorted(self.remote) for _, rr in sorted(self.remote[host].items())]

    def _step_evidence(self) -> Optional[dict]:
        if self.stats is None:
            return None
        # sstat asks every node of a step: it would wait out a silent node at each poll
        if self.unreachable:
            return {"error": "sstat not asked: node(s) %s unreachable" % ",".join(sorted(self.unreachable))}
        bg = self.background
        started = bg.last_started if bg is not None else None
        if bg is not None and bg.busy() and started is not None and \
                bg.clock() - started > 2.0 * (self.poll_interval_s or 1.0):
            return {"error": "sstat not asked: the probe of the other nodes is late (a node not answering?)"}
        # the newest finished sstat (it runs beside the polls): its counters against the one before
        got = self._stats_bg.latest()
        if got is None:
            return None
        seq, stats, err = got
        if seq == self._stats_seen:
            return self._stats_ev
        self._stats_seen = seq
        if err is not None:
            self._stats_ev = {"error": err}
            return self._stats_ev
        cur = {s.step: s for s in stats}
        ev = {}
        for step, s in sorted(cur.items()):
            p = self._last_stats.get(step)
            ev[step] = {"ntasks": s.ntasks, "cpu_s": round(s.cpu_s, 2),
                        "cpu_delta_s": round(s.cpu_s - p.cpu_s, 2) if p else None,
                        "read_delta_bytes": (s.read_bytes - p.read_bytes) if p else None,
                        "write_delta_bytes": (s.write_bytes - p.write_bytes) if p else None}
        self._last_stats = cur
        self._stats_ev = ev
        return ev

    def taken_mono(self, taken_at, started: float, arrived: float) -> float:
        """When a node took its answer, on this monitor's monotonic clock (seconds): its
        ``taken_at`` (epoch seconds, that node's clock) moved by this node's clock's distance
        to the monotonic one, kept within the probe (``started``, when it started, to
        ``arrived``, when its answer was folded): a node's clock off by more than that costs
        at most the probe's length, never dates a change before the probe that saw it.
        ``arrived`` when ``taken_at`` is missing or not a number."""
        try:
            t = float(taken_at)
        except (TypeError, ValueError):
            return arrived
        if t != t:  # NaN
            return arrived
        clock = self.background.clock if self.background is not None else time.monotonic
        mono = clock() - (time.time() - t)
        return min(arrived, max(started, mono))

    def _fold_summary(self, host: str, doc: dict, seen_at: Optional[float] = None) -> None:
        """A node's summary answer: its summary into the view, its rank facts remembered
        (``seen_at``: :meth:`taken_mono` of the answer, on each of them)."""
        from hpc_hangkit.capture.ranks import ALIVE, ENDED, GONE
        self.view.apply_summary(host, doc["summary"])
        ranks: Dict[str, RemoteRank] = {}
        got = doc.get("ranks")
        for name, f in (got.items() if isinstance(got, dict) else ()):
            if not isinstance(f, dict) or not layout.parse_rank_file_name(str(name)):
                continue
            try:
                rr = RemoteRank(str(name), f)
            except (KeyError, TypeError, ValueError):
                continue
            rr.date(seen_at, doc["summary"].get("taken_at"))
            ranks[rr.path] = rr
            lv = f.get("liveness")
            if isinstance(lv, list) and len(lv) == 2 and lv[0] in (ALIVE, GONE, ENDED, UNKNOWN):
                self.view.liveness[rr.path] = Liveness(lv[0], str(lv[1]))
        self.remote[host] = ranks

    def node_ranks(self, node: str) -> List[int]:
        """The ranks of ``node`` as last known: its heartbeats in the view (raw answers) and
        the rank facts of its latest summary answer."""
        from hpc_hangkit.parse.heartbeat import read_heartbeats
        short = node.split(".")[0]
        out = {rr.rank for rr in self.remote.get(short, {}).values()}
        for hb in read_heartbeats(os.path.join(self.view.path, layout.HEARTBEAT_DIR)):
            if (hb.host or "").split(".")[0] == short and hb.rank is not None and hb.rank >= 0:
                out.add(int(hb.rank))
        return sorted(out)

    def _mark(self, answered: set, missing: Mapping[str, str]) -> None:
        """Unreachable records: set for the ``missing`` nodes (kept since their first miss),
        dropped for the ``answered`` ones."""
        from hpc_hangkit.rollcall.unreachable import clear_unreachable, write_unreachable
        for node in list(self.unreachable):
            if node.split(".")[0] in answered:
                log.warning("node %s answers the probe again", node)
                del self.unreachable[node]
                clear_unreachable(self.view.path, node)
        for node, why in sorted(missing.items()):
            rec = self.unreachable.get(node)
            if rec is None:
                rec = self.unreachable[node] = {"since": time.time()}
                log.warning("node %s did not answer the probe (%s): its ranks %s are unreachable; the "
                            "monitor goes on without it", node, why, self.node_ranks(node) or "(none known)")
            rec["ranks"], rec["why"] = self.node_ranks(node), why
            try:
                write_unreachable(self.view.path, node, rec["since"], rec["ranks"], why)
            except (OSError, ValueError) as e:
                log.warning("cannot record that node %s is unreachable: %s", node, e)

    def _probe_nodes(self, now: float) -> List[str]:
        """The nodes the next probe asks: every other node, except those named unreachable,
        which only every :data:`UNREACHABLE_RETRY_S` seconds are asked again (with the rest):
        a silent node holds a probe until its deadline, and the news of the others with it."""
        if not self.unreachable:
            self._last_retry = None
            return list(self.other_nodes)
        if self._last_retry is None:
            self._last_retry = now  # just named by the probe that ended: its wait was the first try
        elif now - self._last_retry >= UNREACHABLE_RETRY_S:
            self._last_retry = now
            return list(self.other_nodes)
        return [n for n in self.other_nodes if n not in self.unreachable]

    def settle(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` seconds for a probe in flight, then fold what it brought and
        name the nodes it found silent (:attr:`unreachable`): before a capture, so that a node
        that stopped answering is known as such and the capture does not wait for it. A
        probe is bounded by its deadline, so this waits at most that long (plus srun's stop)."""
        if self.background is not None:
            self.background.wait(timeout_s)
            self._take_probe()

    def _take_probe(self) -> None:
        got = self.background.take() if self.background is not None else None
        if got is None:
            return
        took = self.background.last_seconds
        if (got.finished and not self._slow_probe_logged and took is not None and self.poll_interval_s
                and took > self.poll_interval_s):
            self._slow_probe_logged = True
            log.warning("probing the other node(s) took %.1f s (poll interval %.1f s); it runs "
                        "beside the polls, so their news arrives that much later, and the "
                        "confirm window stays wall-clock time", took, self.poll_interval_s)
        if got.files:
            self.view.apply(got.files)
        now = self.background.clock()
        for host, doc in sorted(got.nodes.items()):
            arrived = min(now, got.arrived.get(host, now))
            self._fold_summary(host, doc, self.taken_mono(doc["summary"].get("taken_at"), got.started, arrived))
        self._mark(got.answered, got.missing or {})
        first = not got.answered <= self._answered_once
        self._answered_once |= got.answered
        if got.files or got.nodes:
            # an answer after a long gap (no probe while this node moved): what changed on the
            # other nodes since the previous answer happened at some time in that gap; a node's
            # first answer is a baseline too (its ranks are new to the view, not new processes).
            # The gap runs from the previous probe's end to this one's start: how long a probe
            # takes is time watched, so a slow one does not turn the next prompt answer into one
            started = got.started
            if first or self._last_answer is None or started - self._last_answer > self.fresh_gap_s():
                self.inner.absorb_remote(age_s=now - started)
            self._last_answer = started + took if got.finished and took is not None else now

    def fresh_gap_s(self) -> float:
        """Seconds from the end of one probe to the start of the next within which the next
        answer's changes count as progress: two poll intervals (a prompt monitor starts the next
        probe at most one poll after an answer arrives)."""
        return 2.0 * (self.poll_interval_s or 1.0)

    def poll(self, now: float):
        local = rank_files(self.scratch, since=self.view.sizes)
        self._local_seen = self._local_seen or bool(local)
        self.view.apply(local)
        self._take_probe()
        ans = self.inner.poll(now)
        got = ans.get(self.key)
        # probe on suspicion: nothing moved in the view, or only what the other nodes' answers
        # just showed (the next look must tell whether they stopped too); with no rank data on
        # this node at all (no armed rank here), only every idle_probe_interval_s
        interval = self.min_probe_interval_s if self._local_seen else max(
            self.min_probe_interval_s, self.idle_probe_interval_s)
        quiet = got is None or got[0] or not set(got[1].progressed) - set(self.inner.dated)
        due = self._last_probe is None or now - self._last_probe >= interval
        if self.other_nodes and self.background is not None and quiet and due:
            nodes = self._probe_nodes(now)
            if nodes and self.background.start(nodes):
                self.probes += 1
                self._last_probe = now
        stalled = [k for k, a in ans.items() if a[0]]
        if stalled:
            got = ans[stalled[0]]
            steps = self._step_evidence()
            if steps is not None:
                got[1].steps = steps
                if not any(k.split(".")[-1] not in ("batch", "extern") for k in steps
                           if k != "error") and "error" not in steps:
                    # no user step is running: nothing to be hung
                    log.info("no job step is running (sstat): not a hang")
                    return {k: (False, a[1]) for k, a in ans.items()}
        return ans


class RasOnRankNode:
    """The NCCL RAS source (:class:`hpc_hangkit.evidence.ras.RasSource`, writing its JSON history
    under the ``hang_detector`` directory) run where a rank is: ``ncclras`` talks to the
    RAS service of an NCCL process on its own node, so while this (batch) node holds
    no rank of the job (no heartbeat file in its scratch), each query goes through
    ``remote_prefix`` (``srun --overlap`` on another node of the job); as soon as a
    rank is here, it runs locally (no job step per poll). Everything else is the
    wrapped source's."""

    def __init__(self, inner, scratch: str, remote_prefix: List[str]):
        self.inner = inner
        self.scratch = scratch
        self.remote_prefix = list(remote_prefix)
        self.local_ranks = False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def poll(self, now: float):
        if not self.local_ranks:
            self.local_ranks = bool(layout.list_rank_files(
                os.path.join(self.scratch, layout.HEARTBEAT_DIR)))
            self.inner.client.prefix = [] if self.local_ranks else list(self.remote_prefix)
        return self.inner.poll(now)


def srun_probe(job_id: str, scratch: str, bin_argv: List[str], sample_signal: Optional[str] = None,
               quiet_s: float = 1.0, answer: str = "raw", samples: int = 5,
               deadline_s: float = PROBE_DEADLINE_MIN_S):
    """A streaming probe for :class:`SlurmStackSource` (:class:`BackgroundProbe`): one ``srun
    --overlap`` step running ``hpc-hangkit slurm-probe --answer <answer>`` on the given
    nodes (with ``sample_signal``: each node first samples its ranks quiet for ``quiet_s``
    s; ``samples``: K of their summaries). ``probe(nodes, fold)`` calls ``fold(doc)`` with
    each node's answer as soon as it is complete, stops the step at ``deadline_s`` seconds
    (or when every node answered) and returns ``{node: why}`` for the nodes that did not
    answer. A srun that cannot start is logged and names no node."""
    argv = bin_argv + ["slurm-probe", "--scratch", scratch, "--answer", answer, "--samples", str(int(samples))]
    if sample_signal:
        argv += ["--sample-signal", sample_signal, "--quiet-s", "%g" % quiet_s]

    def _probe(nodes: List[str], fold) -> Dict[str, str]:
        rd = DocReader()
        answered = set()
        want = {n.split(".")[0] for n in nodes}

        def on_line(line: str) -> None:
            doc = rd.feed(line)
            if doc is None:
                return
            host = str(doc.get("host") or "").split(".")[0]
            answered.add(host)
            fold(doc)

        try:
            res = slurm.srun_overlap_stream(job_id, nodes, argv, on_line, deadline_s,
                                            done=lambda: want <= answered)
        except slurm.SlurmError as e:
            log.info("probe of %s failed: %s", ",".join(nodes), e)
            return {}
        missing = [n for n in nodes if n.split(".")[0] not in answered]
        if not missing:
            return {}
        err = " | ".join(res.stderr.strip().splitlines()[-2:])
        why = ("no answer within the probe's %.0f s deadline" % deadline_s if res.timed_out else
               "the probe step ended without its answer (srun exit %s%s)" % (
                   res.returncode, ": " + err if err else ""))
        log.info("probe: %d of %d node(s) answered in %.1f s; not %s: %s", len(nodes) - len(missing),
                 len(nodes), res.seconds, ",".join(missing), why)
        return {n: why for n in missing}
    _probe.streams = True
    return _probe
