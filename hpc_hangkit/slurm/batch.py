"""The Slurm batch-step monitor (``hpc-hangkit slurm-monitor``), and its node-side helpers.

Started once per job by the SPANK plugin, in the batch step, as the job's user,
as a child of the batch script (it gets SIGTERM when the batch script ends, and
also stops when its parent is gone). It runs the same
:class:`hpc_hangkit.detect.monitor.Monitor` and :class:`hpc_hangkit.detect.detector.Detector`
as ``hpc-hangkit run``, with Slurm sources:

- **stacks** (:class:`SlurmStackSource`): the heartbeats and watchdog dumps of
  the ranks. Every poll reads this node's scratch (``$HANGKIT_SCRATCH_DIR``);
  when nothing progressed, it also probes the job's other nodes with one
  ``srun --overlap --jobid J`` step (``hpc-hangkit slurm-probe`` on each node,
  which prints the tails of that node's rank files and whether each heartbeat's process
  lives, for the vanished-pid check) - on suspicion, never on a
  poll where the ranks show progress. The probe runs in its own thread
  (:class:`BackgroundProbe`): its answer joins the next poll, so a slow ``srun``
  delays the local decision by at most one poll interval. Everything is mirrored into one
  private view directory, and :class:`hpc_hangkit.evidence.stacks.StackSource` decides
  (progress anywhere -> not stalled; ranks disagree -> stalled).
- **sstat** step counters (CPU seconds, disk bytes per step, via
  :func:`hpc_hangkit.slurmjob.step_stats`) ride along in the detail of every
  stalled poll as evidence, and tell whether any step is running at all. They
  never reset the detector on their own: a rank blocked in a busy-waiting
  collective burns CPU, and a rank's own stall dumps are disk writes.
- **RAS** (:class:`hpc_hangkit.evidence.ras.RasSource`) when ``ncclras`` is configured
  and present, queried only at this job's own ``NCCL_RAS_ADDR`` (the per-job
  address of :mod:`hpc_hangkit.slurm.rasport`, or the one the job set, which wins
  and is logged).

On a confirmed hang: capture on every node at once (in-process here,
``srun --overlap`` running ``hpc-hangkit slurm-capture`` on the other nodes,
which returns what it captured), the roll call over the combined tree
(``<scratch>/hang_detector/report.txt`` / ``report.json``), then by mode:

- ``observe``: log the report path; the job keeps running.
- ``fail``: requeue (``scontrol requeue``) if allowed: a batch job with
  Requeue=1, this hang is not a *repeat* (the same suspect ranks at the same
  place as the previous attempt), and fewer than ``max_hang_requeues`` hang
  requeues were made. hpc-hangkit's own count lives in
  ``<storage_url>/<job_id>/hangkit_requeue.json`` (or
  ``~/.hpc-hangkit/jobs/<job_id>/`` without storage), not in
  SLURM_RESTART_COUNT, which also counts preemption and node failure. When a
  requeue is not allowed, the job is ended (``scancel``) with the reason and the
  report path in its output, and
  ``hpc-hangkit: hang confirmed, not requeued: <reason>; report: <path>`` put
  before the job's own Comment (``<ours> | <the user's>``, within Slurm's 1024
  bytes; the user's text is kept): how a script tells this apart from any other
  cancel; a monitor failure never ends a job.

Every attempt's ``report.txt``/``report.json`` is also copied to
``<storage_url>/<job_id>/attempt_<n>/hang_detector/`` right after capture, so the
next attempt and the user see it before any epilog runs.

Log: ``<scratch>/hang_detector/monitor.log`` (INFO and up) and the job's stderr
(WARNING and up). The monitor writes with umask 077.

Interactive steps (``srun`` run directly or inside ``salloc``) get a :class:`StepMonitor`
(``slurm-monitor --step J.S``, started by the plugin in ``srun``): the same monitor over
the step's nodes, printing to the user's terminal, ending the step in ``fail`` mode.
"""
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional

from hpc_hangkit import fsio, layout, storage
from hpc_hangkit.capture.ranks import ALIVE, ENDED, GONE, UNKNOWN, Liveness, node_liveness
from hpc_hangkit.evidence.stacks import together_after_s
from hpc_hangkit.gather import read_tail
from hpc_hangkit import slurmjob as slurm
from hpc_hangkit.wire import decode_files, emit_doc, encode_files, parse_docs

log = logging.getLogger("hpc_hangkit.slurm.batch")

#: bytes of each watchdog log a probe returns (the newest dumps)
PROBE_TAIL_BYTES = 64 * 1024
PROBE_TIMEOUT_S = 60.0


# --------------------------------------------------------------------------- node side

def rank_files(scratch: str, since: Optional[Mapping[str, int]] = None,
               tail: int = PROBE_TAIL_BYTES) -> Dict[str, dict]:
    """The rank files of one node scratch: ``{"watchdog/<name>": {"size", "offset", "data"}}``
    and the same for ``heartbeats/``. ``data`` (bytes) is the file from ``offset``:
    new bytes since ``since[rel]`` (at most ``tail``); heartbeats whole. Files
    that vanish or are not regular files are skipped."""
    since = since or {}
    out = {}
    for sub in (layout.WATCHDOG_DIR, layout.HEARTBEAT_DIR):
        try:
            dfd = os.open(os.path.join(scratch, sub), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            for name in (rf.name for rf in layout.list_rank_files(dfd)):
                rel = sub + "/" + name
                try:
                    if sub == layout.HEARTBEAT_DIR:
                        size, data, off = read_tail(dfd, name, 0, 1 << 16)
                    else:
                        old = since.get(rel, 0)
                        try:
                            if os.stat(name, dir_fd=dfd, follow_symlinks=False).st_size == old:
                                continue
                        except OSError:
                            continue
                        size, data, off = read_tail(dfd, name, old, tail)
                except OSError:
                    continue
                out[rel] = {"size": size, "offset": off, "data": data}
        finally:
            os.close(dfd)
    return out


def heartbeat_liveness(scratch: str, host: Optional[str] = None) -> Dict[str, List[str]]:
    """``{"heartbeats/<name>": [state, seen]}``: :func:`hpc_hangkit.capture.ranks.node_liveness`
    of the process of every heartbeat record of this node (``host``, default this host's
    name) in ``scratch``, for the batch monitor, which cannot read this node's ``/proc``."""
    from hpc_hangkit.parse.heartbeat import read_heartbeats

    short = (host or socket.gethostname()).split(".")[0]
    out = {}
    for hb in read_heartbeats(os.path.join(scratch, layout.HEARTBEAT_DIR)):
        if (hb.host or "").split(".")[0] != short:
            continue
        lv = node_liveness(scratch, int(hb.pid), float(hb.armed_mono_s))
        out[layout.HEARTBEAT_DIR + "/" + os.path.basename(hb.path)] = [lv.state, lv.seen]
    return out


def sample_quiet_ranks(scratch: str, sample_signal: str, quiet_s: float, wait_s: float = 1.0,
                       host: Optional[str] = None) -> Dict[int, str]:
    """Ask this node's armed ranks that have not checked in for ``quiet_s`` seconds for an
    on-demand watchdog dump (``sample_signal``, :func:`hpc_hangkit.arm.watchdog.request_dumps`),
    waiting up to ``wait_s`` s for them: what the batch monitor's own node does at every poll, so
    a remote node's ranks are sampled at the poll rate, not only every watchdog period (the
    roll call's modal position needs several samples at the new place). Returns
    ``{pid: outcome}``; ``{}`` when no rank is quiet. Raises ValueError for a signal name the
    watchdog does not accept."""
    from hpc_hangkit.arm.watchdog import request_dumps
    from hpc_hangkit.parse.heartbeat import read_heartbeats

    short = (host or socket.gethostname()).split(".")[0]
    wd = os.path.join(scratch, layout.WATCHDOG_DIR)
    logs: Dict[int, List[str]] = {}
    for rf in layout.list_rank_files(wd, ext="log"):
        logs.setdefault(rf.pid, []).append(os.path.join(wd, rf.name))
    now = time.time()
    targets = {int(hb.pid): logs.get(int(hb.pid), [])
               for hb in read_heartbeats(os.path.join(scratch, layout.HEARTBEAT_DIR))
               if (hb.host or "").split(".")[0] == short and hb.age_s(now) >= quiet_s}
    return request_dumps(targets, sample_signal, timeout_s=wait_s) if targets else {}


def probe_main(scratch: str, out=None, sample_signal: Optional[str] = None, quiet_s: float = 1.0) -> int:
    """``hpc-hangkit slurm-probe``: print (framed, :func:`hpc_hangkit.wire.emit_doc`) this node's rank files
    (tails) and the liveness of its ranks' processes (:func:`heartbeat_liveness`), for the
    batch-step monitor. With ``sample_signal``, first a fresh dump of every rank quiet for
    ``quiet_s`` seconds (:func:`sample_quiet_ranks`), so the answer holds it. Runs inside the
    job as its user."""
    out = out or sys.stdout
    if sample_signal:
        try:
            sample_quiet_ranks(scratch, sample_signal, quiet_s)
        except (ValueError, OSError) as e:  # the files are still worth sending
            sys.stderr.write("hpc-hangkit slurm-probe: no on-demand sample (%s)\n" % e)
    emit_doc({"host": socket.gethostname(), "files": encode_files(rank_files(scratch)),
              "liveness": heartbeat_liveness(scratch)}, out)
    return 0


def probe_files(text: str) -> Dict[str, dict]:
    """The rank files of the framed ``slurm-probe`` answers in ``text`` (srun output), merged:
    ``{rel: {"size", "offset", "data"}}``; a heartbeat's entry also holds ``liveness``
    (``[state, seen]``) when its node said it."""
    files: Dict[str, dict] = {}
    for d in parse_docs(text):
        got = decode_files(d.get("files", {}))
        lv = d.get("liveness")
        for rel, pair in (lv.items() if isinstance(lv, dict) else ()):
            if rel in got and isinstance(pair, list) and len(pair) == 2:
                got[rel]["liveness"] = pair
        files.update(got)
    return files


# --------------------------------------------------------------------------- the view

class View:
    """A private directory mirroring every node's rank files (``watchdog/``,
    ``heartbeats/``), so that one StackSource and one roll call see all ranks.

    Watchdog logs are mirrored by appending the new bytes, so a mirrored log
    grows exactly as its original (a gap, when more than the probe tail was
    written between two probes, shows as one torn dump that the parser skips
    with a warning)."""

    def __init__(self, path: str):
        self.path = path
        self.sizes: Dict[str, int] = {}      # rel -> original size mirrored so far
        #: heartbeat file name -> the liveness of its process, as its node's probe said
        self.liveness: Dict[str, Liveness] = {}
        for sub in (layout.WATCHDOG_DIR, layout.HEARTBEAT_DIR):
            os.makedirs(os.path.join(path, sub), exist_ok=True)

    def apply(self, files: Mapping[str, dict]) -> int:
        """Mirror ``files`` (from :func:`rank_files`); returns how many changed."""
        n = 0
        for rel, f in files.items():
            sub, _, name = rel.partition("/")
            if sub not in (layout.WATCHDOG_DIR, layout.HEARTBEAT_DIR) or "/" in name \
                    or not layout.parse_rank_file_name(name):
                continue
            dst = os.path.join(self.path, sub, name)
            size, off, data = f["size"], f["offset"], f["data"]
            if sub == layout.HEARTBEAT_DIR:
                lv = f.get("liveness")
                if isinstance(lv, list) and len(lv) == 2 and lv[0] in (ALIVE, GONE, ENDED, UNKNOWN):
                    self.liveness[name] = Liveness(lv[0], str(lv[1]))
                fsio.write_atomic(dst, data)
                n += 1
                continue
            have = self.sizes.get(rel, 0)
            if size == have:
                continue
            if size < have or off > have:
                # rewritten, or a gap: keep what we have, append the newest bytes
                pass
            new = data[max(0, have - off):] if off <= have else data
            with open(dst, "ab") as fh:
                fh.write(new)
            self.sizes[rel] = size
            n += 1
        return n


# --------------------------------------------------------------------------- sources

class BackgroundProbe:
    """Runs ``probe(nodes) -> {rel: file}`` in a thread of its own, one probe at a time,
    so that a slow ``srun`` never holds up a poll: :meth:`start` returns at once,
    :meth:`take` hands over the answer of the finished probe (once), or None.

    ``clock``: seconds, monotonic. :attr:`last_seconds` is how long the latest
    finished probe took, :attr:`last_started` when it started; a probe that raises counts as an empty answer (logged once
    per message).
    """

    def __init__(self, probe, clock=time.monotonic):
        self.probe = probe
        self.clock = clock
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._answer: Optional[Dict[str, dict]] = None
        self._errors = set()
        self.last_seconds: Optional[float] = None
        #: when (``clock``) the latest finished probe started
        self.last_started: Optional[float] = None

    def busy(self) -> bool:
        """True while a probe runs."""
        t = self._thread
        return t is not None and t.is_alive()

    def start(self, nodes: List[str]) -> bool:
        """Start a probe of ``nodes`` unless one runs already; True when one was started."""
        if self.busy():
            return False
        self._thread = threading.Thread(target=self._run, args=(list(nodes),), daemon=True,
                                        name="hpc-hangkit-probe")
        self._thread.start()
        return True

    def _run(self, nodes: List[str]) -> None:
        t0 = self.clock()
        try:
            files = self.probe(nodes) or {}
        except Exception as e:  # a probe problem is evidence lost, not a monitor failure
            msg = "%s: %s" % (type(e).__name__, e)
            if msg not in self._errors:
                self._errors.add(msg)
                log.warning("probe of %s failed: %s", ",".join(nodes), msg)
            files = {}
        with self._lock:
            self.last_seconds = self.clock() - t0
            self.last_started = t0
            prev = self._answer or {}
            prev.update(files)
            self._answer = prev

    def take(self) -> Optional[Dict[str, dict]]:
        """The finished probe's rank files (``{rel: file}``, possibly empty), or None
        when no probe finished since the last call."""
        with self._lock:
            got, self._answer = self._answer, None
        return got

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait for the running probe (if any) to finish; True when none runs any more."""
        t = self._thread
        if t is not None:
            t.join(timeout)
        return not self.busy()


class SlurmStackSource:
    """Key ``"stacks"``: StackSource over the :class:`View` of every node's rank files.

    ``probe(nodes) -> {rel: file}`` fetches the other nodes' rank files (default:
    one ``srun --overlap`` step); it runs in the background (:class:`BackgroundProbe`)
    and its answer enters the view at the first poll after it finished, so a probe
    slower than the poll interval delays the remote evidence, never the local poll.
    ``stats() -> [StepStat]`` gives sstat counters. ``poll_interval_s``: the
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
        # this node's ranks are checked against this node's /proc and exit records, the
        # others' by their node's probe; every vanished record also goes to this node's
        # scratch, so the capture copies it
        self.inner = StackSource(view.path, stack_judge(), samples=samples, world_size=world_size,
                                 together_after_s=together_after_s, node_scratch=scratch,
                                 remote_liveness=self._remote_liveness, host=host)
        self.probes = 0
        #: seconds between probes; the monitor raises it after a confirmation
        self.min_probe_interval_s = 0.0
        #: seconds between probes while this node has no rank data at all
        self.idle_probe_interval_s = idle_probe_s
        self.poll_interval_s = poll_interval_s
        self._slow_probe_logged = False
        self._last_probe = None
        self._last_answer = None  # when the probe of the latest answer started (monotonic s)
        self._local_seen = False
        self._last_stats: Dict[str, object] = {}

    def rollcall(self, det=None):
        return self.inner.rollcall(det)

    def _remote_liveness(self, hb) -> Liveness:
        """The liveness of another node's rank process, as that node's latest probe said."""
        return self.view.liveness.get(os.path.basename(hb.path), Liveness(UNKNOWN))

    def _step_evidence(self) -> Optional[dict]:
        if self.stats is None:
            return None
        try:
            cur = {s.step: s for s in self.stats()}
        except Exception as e:  # sstat trouble is evidence lost, not a monitor failure
            return {"error": str(e)}
        ev = {}
        for step, s in sorted(cur.items()):
            p = self._last_stats.get(step)
            ev[step] = {"ntasks": s.ntasks, "cpu_s": round(s.cpu_s, 2),
                        "cpu_delta_s": round(s.cpu_s - p.cpu_s, 2) if p else None,
                        "read_delta_bytes": (s.read_bytes - p.read_bytes) if p else None,
                        "write_delta_bytes": (s.write_bytes - p.write_bytes) if p else None}
        self._last_stats = cur
        return ev

    def _take_probe(self) -> None:
        files = self.background.take() if self.background is not None else None
        if files is None:
            return
        took = self.background.last_seconds
        if (not self._slow_probe_logged and took is not None and self.poll_interval_s
                and took > self.poll_interval_s):
            self._slow_probe_logged = True
            log.warning("probing the other node(s) took %.1f s (poll interval %.1f s); it runs "
                        "beside the polls, so their news arrives that much later, and the "
                        "confirm window stays wall-clock time", took, self.poll_interval_s)
        if files:
            self.view.apply(files)
            # an answer after a long gap (no probe while this node moved): what changed on the
            # other nodes since the previous answer happened at some time in that gap
            started = self.background.last_started
            if self._last_answer is None or started is None or started - self._last_answer > self._fresh_s(took):
                age = self.background.clock() - started if started is not None else 0.0
                self.inner.absorb_remote(age_s=age)
            self._last_answer = started

    def _fresh_s(self, took: Optional[float]) -> float:
        """Seconds between two probe answers within which the second one's changes count as
        progress: two polls or two probes, whichever is longer."""
        return 2.0 * max(self.poll_interval_s or 1.0, took or 0.0)

    def poll(self, now: float):
        local = rank_files(self.scratch, since=self.view.sizes)
        self._local_seen = self._local_seen or bool(local)
        self.view.apply(local)
        self._take_probe()
        ans = self.inner.poll(now)
        got = ans.get(self.key)
        # probe on suspicion: nothing moved in the view; with no rank data on this node
        # at all (no armed rank here), only every idle_probe_interval_s
        interval = self.min_probe_interval_s if self._local_seen else max(
            self.min_probe_interval_s, self.idle_probe_interval_s)
        quiet = got is None or got[0] or not got[1].progressed
        due = self._last_probe is None or now - self._last_probe >= interval
        if self.other_nodes and self.background is not None and quiet and due:
            if self.background.start(self.other_nodes):
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
               quiet_s: float = 1.0):
    """A probe function for :class:`SlurmStackSource`: one ``srun --overlap`` step running
    ``hpc-hangkit slurm-probe`` on the given nodes (with ``sample_signal``: each node first
    samples its ranks quiet for ``quiet_s`` s); returns the merged rank files."""
    argv = bin_argv + ["slurm-probe", "--scratch", scratch]
    if sample_signal:
        argv += ["--sample-signal", sample_signal, "--quiet-s", "%g" % quiet_s]

    def _probe(nodes: List[str]) -> Dict[str, dict]:
        try:
            p = slurm.srun_overlap(job_id, nodes, argv, timeout=PROBE_TIMEOUT_S)
        except slurm.SlurmError as e:
            log.info("probe of %s failed: %s", ",".join(nodes), e)
            return {}
        text = p.stdout.decode("utf-8", "replace")
        files = probe_files(text)
        answered = len(parse_docs(text))
        if answered < len(nodes):
            log.info("probe: %d of %d node(s) answered (%s)", answered, len(nodes),
                        p.stderr.decode("utf-8", "replace").strip()[-300:])
        return files
    return _probe


# --------------------------------------------------------------------------- requeue policy

def signature(report) -> dict:
    """Where a hang is: ``{"verdict", "suspect_ranks", "where"}`` from a roll-call Report.

    ``where``: sorted ``file:line function (in collective)`` of the user frame
    (roll-call group ``frame``) of every group that holds a suspect rank: the
    place the suspects stand. File names are base names, so a job that moved
    its checkout still repeats.
    """
    d = report.to_dict() if hasattr(report, "to_dict") else dict(report or {})
    sus = sorted(int(r) for r in (d.get("suspect_ranks") or []))
    where = []
    for g in d.get("groups") or []:
        ranks = g.get("ranks") or []
        if isinstance(ranks, str):
            from hpc_hangkit.ranges import parse_ranks
            ranks = parse_ranks(ranks)
        if not set(int(r) for r in ranks) & set(sus):
            continue
        fr = g.get("frame") or g.get("position") or {}
        if isinstance(fr, dict):
            pos = "%s:%s %s" % (os.path.basename(str(fr.get("file", "?"))), fr.get("line", "?"),
                                fr.get("function", ""))
        else:
            pos = str(fr)
        if g.get("collective"):
            pos += " (in %s)" % g["collective"]
        where.append(str(pos))
    return {"verdict": d.get("verdict"), "suspect_ranks": sus, "where": sorted(where)}


@dataclass(frozen=True)
class Decision:
    """``action``: ``keep`` (observe: the job runs on), ``requeue`` or ``end``; ``reason``: one sentence."""
    action: str
    reason: str


def decide(mode: str, requeue_flag: bool, batch: bool, state: dict, sig: dict, attempt: int,
           max_hang_requeues: int) -> Decision:
    """The requeue rule, pure. ``state``: the requeue state (``hang_requeues`` int,
    ``hangs`` list of ``{"attempt", "signature"}``) before this hang."""
    if mode != "fail":
        return Decision("keep", "observe mode: hang reported, the job keeps running")
    if not batch:
        return Decision("end", "not requeued: only batch jobs are requeued")
    if not requeue_flag:
        return Decision("end", "not requeued: the job does not allow requeue "
                               "(submitted with --no-requeue, or JobRequeue=0 on this cluster)")
    prev = [h for h in state.get("hangs", []) if int(h.get("attempt", -1)) < attempt]
    if prev:
        p = prev[-1]
        ps = p.get("signature") or {}
        if ps.get("suspect_ranks") == sig.get("suspect_ranks") and ps.get("where") == sig.get("where"):
            return Decision("end", "not requeued: repeat - rank(s) %s hang at the same place as in "
                                   "attempt %s (%s)" % (_ranks(sig), p.get("attempt"),
                                                        "; ".join(sig.get("where") or []) or "?"))
    used = int(state.get("hang_requeues", 0))
    if used >= max_hang_requeues:
        return Decision("end", "not requeued: the hang-requeue budget is spent (%d of %d used)"
                        % (used, max_hang_requeues))
    return Decision("requeue", "requeueing: hang requeue %d of %d" % (used + 1, max_hang_requeues))


def _ranks(sig: dict) -> str:
    from hpc_hangkit.ranges import format_ranks
    return format_ranks(sig.get("suspect_ranks") or []) or "?"


# --------------------------------------------------------------------------- the monitor

class BatchMonitor:
    """One job's monitor: sources, detector, capture fan-out, report, requeue.

    ``env``: the batch step's environment (SLURM_JOB_ID, HANGKIT_SCRATCH_DIR, ...);
    ``bin_argv``: how to run ``hpc-hangkit`` on the other nodes.
    """

    def __init__(self, settings, env: Mapping[str, str], bin_argv: List[str]):
        self.settings = settings
        self.env = env
        self.bin_argv = bin_argv
        self.job_id = layout.validate_job_id(env["SLURM_JOB_ID"])
        self.attempt = slurm.attempt_from_env(env)
        self.scratch = env.get(layout.ENV_SCRATCH_DIR) or layout.job_scratch_dir(
            settings.scratch_dir, self.job_id, self.attempt)
        if not self.scratch.rstrip("/").endswith("/attempt_%d" % self.attempt):
            log.warning("HANGKIT_SCRATCH_DIR=%s does not belong to attempt %d", self.scratch,
                        self.attempt)
        #: where the ranks write on every node (the probes and captures read it there)
        self.node_scratch = self.scratch
        self.hd_dir = os.path.join(self.scratch, layout.HANG_DETECTOR_DIR)
        self.host = socket.gethostname()
        nodes = env.get("SLURM_JOB_NODELIST", "")
        self.nodes = slurm.expand_hostlist(nodes) if nodes else [self.host]
        self.others = [n for n in self.nodes if n != self.host]
        ws = env.get("SLURM_NTASKS", "")
        self.world_size = int(ws) if ws.isdigit() else None
        self.done = threading.Event()
        self.view_dir = None
        self.srcs: List[object] = []
        #: what the log calls this monitor's work
        self.what = "job %s attempt %d" % (self.job_id, self.attempt)

    def capture_all(self, suspects=()):
        """Capture on every node at once (here in-process, on the others through
        :func:`hpc_hangkit.gather.capture_job`), every node starting its snapshot at the same
        moment (:meth:`snapshot_lead_s` from now), the ``suspects`` sampled ``--native``
        everywhere; the roll call over the combined tree. Returns what
        :func:`hpc_hangkit.detect.monitor.write_report` returns."""
        from hpc_hangkit.gather import capture_here, capture_job

        at = time.time() + self.snapshot_lead_s() if self.others else None

        def _local():
            res = capture_here(self.settings, self.scratch, self.hd_dir, suspects=suspects, at=at)
            log.info("captured on %s in %.1f s (%d file(s), %d problem(s))", self.host,
                     res.seconds, len(res.files), len(res.problems))

        # a node of the job whose ranks are in this node's scratch is captured in-process
        here = self.node_scratch == self.scratch
        got = capture_job(self.job_id, self.others, self.node_scratch, self.bin_argv, self.hd_dir,
                          local=_local if here else None, suspects=suspects, at=at)
        for note in got.notes:
            log.warning("capture: %s", note)
        if self.others and got.error is None:
            log.info("captured on %d of %d other node(s)", len(got.hosts), len(self.others))
        if got.missing or got.error is not None:
            kept = self.keep_view_copies()
            if kept:
                log.warning("kept the monitor's copies of %d rank file(s) of the node(s) that did not "
                            "answer", kept)
        from hpc_hangkit.detect.monitor import write_report
        return write_report(self.hd_dir, self.settings, self.world_size)

    def keep_view_copies(self) -> int:
        """Copy into the captured tree every rank file of another node that the capture did not
        bring (a node that did not answer: the job ended or srun failed under the capture), from
        the monitor's :class:`View`, so the final roll call sees every rank the monitor saw. A
        file the capture brought is never replaced. Returns the number of files copied."""
        from hpc_hangkit.capture.whyfile import merge_file

        n = 0
        for sub in (layout.WATCHDOG_DIR, layout.HEARTBEAT_DIR):
            src_dir = os.path.join(self.view_dir or "", sub)
            for rf in layout.list_rank_files(src_dir):
                dst = os.path.join(self.hd_dir, sub, rf.name)
                if os.path.lexists(dst):
                    continue
                try:
                    with open(os.path.join(src_dir, rf.name), "rb") as f:
                        data = f.read()
                    if merge_file(dst, data, self.host):
                        n += 1
                except OSError as e:
                    log.warning("cannot keep the monitor's copy of %s/%s: %s", sub, rf.name, e)
        return n

    def snapshot_lead_s(self) -> float:
        """Seconds from now to the moment every node takes its snapshot: what an ``srun
        --overlap`` step took to answer last time (the stack source's probe) x 1.5, at least
        1 s and at most 20 s, so the remote ranks are sampled with the local ones."""
        took = None
        for src in self.srcs:
            bg = getattr(src, "background", None)
            if bg is not None and bg.last_seconds is not None:
                took = bg.last_seconds
        return min(20.0, max(1.0, 1.5 * (took if took is not None else 2.0)))

    def on_confirmed(self, ev, monitor=None):
        for src in self.srcs:
            if isinstance(src, SlurmStackSource):   # watch for recovery, but probe less often
                src.min_probe_interval_s = float(self.settings.report_every_s)
        from hpc_hangkit.detect.monitor import suspects_of
        rep, text = self.capture_all(suspects_of(ev))
        local = os.path.join(self.hd_dir, layout.REPORT_TXT)
        where = "%s on node %s" % (local, self.host)
        sp = self.publish_report()
        if sp:
            where += " and %s (or run: hpc-hangkit collect %s)" % (sp, self.job_id)
        log.error("HANG CONFIRMED in %s: %s\n%s\nreport: %s", self.what,
                  getattr(rep, "verdict", "?"), text.rstrip(), where)
        self.act(rep, where)

    def publish_report(self) -> Optional[str]:
        """Copy report.txt/report.json to ``<storage_url>/<job_id>/attempt_<n>/hang_detector/``
        right away (:func:`hpc_hangkit.storage.publish_report`, as the job's user), so the
        next attempt and the user see this attempt's report even before the epilog runs.
        Returns the URL of the stored report.txt, or None (no storage, or storage refused:
        logged)."""
        base = getattr(self.settings, "storage_url", None)
        if not base:
            return None
        try:
            return storage.publish_report(base, self.job_id, self.attempt, self.hd_dir,
                                          self.env.get("SLURM_JOB_USER") or self.env.get("USER"))
        except Exception as e:  # the epilog copies it later anyway
            log.warning("could not copy the report to storage now (%s); the epilog will", e)
            return None

    def act(self, rep, where: str):
        mode = self.settings.mode
        sig = signature(rep)
        info = None
        if mode == "fail":
            try:
                info = slurm.job_info(self.job_id)
            except (slurm.SlurmError, ValueError) as e:
                log.error("cannot look the job up (%s): not requeued", e)
        url = storage.state_url(self.settings, self.job_id, self.env)
        state = storage.load_state(url) if mode == "fail" else {}
        d = decide(mode, bool(info and info.requeue), bool(info and info.batch) if info else False,
                   state, sig, self.attempt, int(self.settings.max_hang_requeues))
        if d.action == "keep":
            log.warning("hpc-hangkit: %s; report: %s", d.reason, where)
            return
        state.setdefault("hangs", []).append({"attempt": self.attempt, "signature": sig,
                                              "t": round(time.time(), 3), "action": d.action,
                                              "reason": d.reason})
        if d.action == "requeue":
            state["hang_requeues"] = int(state.get("hang_requeues", 0)) + 1
        try:
            storage.save_state(url, state)
        except Exception as e:
            # a requeue that cannot be counted could repeat without end: end the job instead
            log.warning("could not record the hang in the requeue state %s: %s: %s", url,
                        type(e).__name__, e)
            if d.action == "requeue":
                d = Decision("end", "not requeued: cannot record the hang-requeue count at %s (%s)"
                             % (url, e))
        if d.action == "requeue":
            log.error("hpc-hangkit: %s; report of this attempt: %s", d.reason, where)
            self._flush()
            try:
                slurm.requeue(self.job_id)
                return
            except slurm.SlurmError as e:
                # The requeue kills this attempt's processes, scontrol (our child,
                # in the batch step) included, sometimes before its answer
                # arrives: "failed (exit -15)" while the job WAS requeued. Ask
                # Slurm what happened before treating it as refused.
                moved = self._moved_on()
                if moved:
                    log.warning("hpc-hangkit: scontrol requeue ended abnormally (%s) but the job "
                                "was requeued (%s)", e, moved)
                    self._flush()
                    return
                d = Decision("end", "not requeued: scontrol requeue refused: %s" % e)
        moved = self._moved_on()
        if moved:
            # never end a later attempt: this one is already over
            log.error("hpc-hangkit: hang confirmed, %s; not ending the job: %s. Report: %s",
                      d.reason, moved, where)
            self._flush()
            return
        log.error("hpc-hangkit: hang confirmed, %s. Ending the job. Report: %s", d.reason, where)
        self._flush()
        try:
            # the mark that tells "hang confirmed, not requeued" apart from any
            # other cancel (a monitor failure never ends a job)
            slurm.prepend_comment(self.job_id, "%s, %s; report: %s"
                                  % (slurm.COMMENT_MARK, d.reason, where))
        except slurm.SlurmError as e:
            log.warning("could not set the job comment: %s", e)
        try:
            slurm.cancel(self.job_id)
        except slurm.SlurmError as e:
            log.error("hpc-hangkit: could not end the job: %s", e)

    def _moved_on(self, tries: int = 5, pause_s: float = 1.0) -> Optional[str]:
        """Why this attempt is over already (the job was requeued, or it is ending),
        or None when it still runs as attempt ``self.attempt``.

        Asks ``scontrol show job`` (up to ``tries`` times, ``pause_s`` apart, while
        the answer is missing or the job is still RUNNING as this attempt: a
        requeue that just happened is visible at once as a higher restart count
        or a PENDING/REQUEUE state). Without an answer, the monitor's own SIGTERM
        (the batch step is being ended by Slurm) counts as "over".
        """
        for i in range(max(1, tries)):
            try:
                info = slurm.job_info(self.job_id)
            except (slurm.SlurmError, ValueError) as e:
                info, err = None, e
            if info is not None:
                state = (info.state or "").split()[0].upper() if info.state else ""
                if info.restarts > self.attempt:
                    return "Slurm restart count is %d, this is attempt %d" % (info.restarts,
                                                                               self.attempt)
                if state.startswith("REQUEUE") or state in ("PENDING", "COMPLETED", "CANCELLED",
                                                            "FAILED", "TIMEOUT", "NODE_FAIL",
                                                            "PREEMPTED", "BOOT_FAIL", "DEADLINE",
                                                            "OUT_OF_MEMORY"):
                    return "job state %s" % state
                if state not in ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING"):
                    return None         # unknown state: act as if it still ran
                if state == "RUNNING" and not self.done.is_set():
                    return None
            if i + 1 < tries:
                time.sleep(pause_s)
        if self.done.is_set():
            return "Slurm is ending this attempt (the monitor got SIGTERM)"
        if info is None:
            log.warning("cannot look the job up (%s)", err)
        return None

    @staticmethod
    def _flush():
        for h in logging.getLogger("hpc_hangkit").handlers:
            try:
                h.flush()
            except Exception:
                pass

    def record_array_alias(self) -> Optional[str]:
        """For an array task, store ``<storage_url>/<A>_<T>.jobid`` (naming SLURM_JOB_ID) so
        ``hpc-hangkit collect A_T`` finds the task in storage after Slurm forgot it:
        only the job environment has SLURM_ARRAY_JOB_ID/TASK_ID (slurmd's epilog
        environment does not). Returns the alias, or None (not an array task, no
        storage, or storage refused: logged, the monitor goes on)."""
        url = getattr(self.settings, "storage_url", None)
        if not url or not self.env.get("SLURM_ARRAY_TASK_ID"):
            return None
        try:
            alias = storage.record_array_alias(url, slurm.JobEnv.from_env(self.env))
            if alias:
                log.info("array task %s is job %s (alias stored)", alias, self.job_id)
            return alias
        except Exception as e:  # the alias is a convenience; the data is keyed by the job id
            log.warning("could not store the array-task alias: %s", e)
            return None

    def step_stats(self):
        """The sstat counters this monitor weighs (:func:`hpc_hangkit.slurmjob.step_stats`):
        every step of the job."""
        return slurm.step_stats(self.job_id)

    def idle_probe_s(self) -> float:
        """Seconds between probes of the other nodes while this node holds no rank data: a
        batch node without ranks of its own probes rarely (one job step per probe)."""
        return max(30.0, float(self.settings.report_every_s))

    def sources(self):
        self.view_dir = tempfile.mkdtemp(prefix=layout.MONITOR_VIEW_PREFIX, dir=self.scratch)
        src = [SlurmStackSource(self.scratch, View(self.view_dir), self.others,
                                probe=srun_probe(self.job_id, self.node_scratch, self.bin_argv,
                                                 sample_signal=self.settings.watchdog_signal,
                                                 quiet_s=float(self.settings.poll_interval_s)),
                                stats=self.step_stats,
                                idle_probe_s=self.idle_probe_s(),
                                poll_interval_s=float(self.settings.poll_interval_s),
                                samples=getattr(self.settings, "stack_samples", 5),
                                world_size=self.world_size, together_after_s=together_after_s(self.settings))]
        try:
            from hpc_hangkit.evidence.ras import maybe_source
            ras = maybe_source(self.settings, out_dir=self.hd_dir, env=self.env)
            if ras is not None:
                from hpc_hangkit.slurm import rasport
                addr, origin = rasport.address_in_use(
                    self.env, rasport.read_job_env(os.path.join(self.scratch, layout.JOB_ENV_FILE)))
                (log.warning if "set by the job is used" in origin else log.info)(
                    "hpc-hangkit: NCCL RAS queries go to %s:%d: %s", ras.client.host, ras.client.port,
                    "the site's ncclras_address" if self.settings.ncclras_address else origin)
                prefix = slurm.overlap_prefix(self.job_id, self.others[:1]) if self.others else []
                src.append(RasOnRankNode(ras, self.scratch, prefix))
        except Exception as e:  # RAS is optional evidence
            log.info("NCCL RAS source not used: %s", e)
        return src

    def run(self) -> int:
        from hpc_hangkit.detect.detector import Detector
        from hpc_hangkit.detect.monitor import Monitor
        s = self.settings
        det = Detector(s.poll_interval_s, s.confirm_duration_s, s.suspect_after_s, s.report_every_s)
        parent = os.getppid()
        self.record_array_alias()
        try:
            self.srcs = self.sources()
            mon = Monitor(det, self.srcs, hd_dir=self.hd_dir,
                          on_confirmed=lambda ev: self.on_confirmed(ev))
            log.info("hpc-hangkit monitor for %s on %s (nodes %s), mode %s, poll "
                     "%.0f s, confirm after %.0f s", self.what, self.host,
                     ",".join(self.nodes), s.mode, s.poll_interval_s, det.confirm_duration_s)
            mon.run(alive=lambda: not self.done.is_set() and os.getppid() == parent,
                    wait=lambda t: self.done.wait(t))
        finally:
            if self.view_dir:
                shutil.rmtree(self.view_dir, ignore_errors=True)
        return 0


class StepMonitor(BatchMonitor):
    """The monitor of one interactive step: ``srun`` run directly, or an ``srun`` inside
    ``salloc`` (``hpc-hangkit slurm-monitor --step J.S``, started by the SPANK plugin in
    the ``srun`` process, as the user; its stderr is srun's, the user's terminal).

    The :class:`BatchMonitor` with these differences: every node of the step
    (``scontrol show step``, :func:`hpc_hangkit.slurmjob.step_info`) is remote, probed
    and captured with ``srun --overlap`` (the srun host is usually a login node, not a node
    of the job), every poll when nothing progressed; the work directory (log, view, the
    captured tree and roll call) is :func:`hpc_hangkit.layout.step_monitor_dir` under the
    user's HOME, else a private temporary directory; sstat evidence is this step's alone;
    and in ``fail`` mode the step is ended (``scancel J.S``), never requeued.

    The step's ranks are found in the job's node scratch, which every step of the job
    shares: steps that run at the same time in one allocation are watched together
    (each step's monitor sees the other's ranks too), as the batch monitor watches
    every step of a batch job.

    ``step``: ``"<job>.<step>"``; ``info``: the step as Slurm lists it. Raises ValueError
    for a bad step id.
    """

    def __init__(self, settings, env: Mapping[str, str], bin_argv: List[str], step: str,
                 info: "slurm.StepInfo"):
        job, sid = slurm.validate_step_id(step)
        # the srun's environment describes the allocation, not this step
        env = {k: v for k, v in env.items() if k not in (layout.ENV_SCRATCH_DIR, "SLURM_NTASKS")}
        env["SLURM_JOB_ID"] = job
        super().__init__(settings, env, bin_argv)
        self.step = "%s.%s" % (job, sid)
        self.node_scratch = layout.job_scratch_dir(settings.scratch_dir, job, self.attempt)
        self.scratch = _private_dir(env, job, sid)
        self.hd_dir = os.path.join(self.scratch, layout.HANG_DETECTOR_DIR)
        self.nodes = list(info.nodes)
        self.others = list(info.nodes)
        self.world_size = info.ntasks
        self.what = "step %s" % self.step

    def step_stats(self):
        """sstat counters of this step only: another step of the allocation running says
        nothing about this one."""
        return [st for st in slurm.step_stats(self.job_id) if st.step == self.step]

    def idle_probe_s(self) -> float:
        """Every node is remote: a probe is the only way to see the ranks, so the probe
        interval is the poll interval."""
        return float(self.settings.poll_interval_s)

    def act(self, rep, where: str):
        d = decide(self.settings.mode, False, False, {}, signature(rep), self.attempt,
                   int(self.settings.max_hang_requeues))
        if d.action == "keep":
            log.warning("hpc-hangkit: observe mode: hang reported, step %s keeps running; "
                        "report: %s", self.step, where)
            return
        log.error("hpc-hangkit: hang confirmed: ending step %s (interactive work is not "
                  "requeued); report: %s", self.step, where)
        self._flush()
        try:
            slurm.cancel_step(self.step)
        except slurm.SlurmError as e:
            log.error("hpc-hangkit: could not end step %s: %s", self.step, e)


def _private_dir(env: Mapping[str, str], job: str, step: str) -> str:
    """The step monitor's work directory (0700): :func:`hpc_hangkit.layout.step_monitor_dir`
    under ``env["HOME"]``, else (no HOME, or not writable) a new temporary directory."""
    home = env.get("HOME")
    if home:
        path = layout.step_monitor_dir(home, job, step)
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            if os.access(path, os.W_OK):
                return path
        except OSError:
            pass
    return tempfile.mkdtemp(prefix="hpc-hangkit-step-%s.%s-" % (job, step))


def _setup_logging(hd_dir: str, name: str = "monitor") -> None:
    lg = logging.getLogger("hpc_hangkit")
    lg.setLevel(logging.INFO)
    fmt = logging.Formatter("%(asctime)s hpc-hangkit[" + name.replace("%", "%%")
                            + "] %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S")
    try:
        os.makedirs(hd_dir, exist_ok=True)
        fh = logging.FileHandler(os.path.join(hd_dir, layout.MONITOR_LOG))
        fh.setFormatter(fmt)
        lg.addHandler(fh)
    except OSError as e:
        sys.stderr.write("hpc-hangkit: cannot write the monitor log in %s: %s\n" % (hd_dir, e))
    sh = logging.StreamHandler(sys.stderr)
    sh.setFormatter(fmt)
    sh.setLevel(logging.WARNING)
    lg.addHandler(sh)


def stop_handler(done):
    """A SIGTERM/SIGINT handler that sets the ``threading.Event`` ``done`` once.

    ``Event.set`` takes a non-reentrant lock, and a Python signal handler runs in the
    main thread between any two bytecodes, even inside ``Event.set`` itself: Slurm's
    burst of SIGTERMs at the end of a job deadlocked a monitor that way (it outlived its
    job by an hour). So only the first signal sets the event; later ones return at once.
    """
    seen = []

    def _term(signum, frame):
        if seen:
            return
        seen.append(signum)
        done.set()
    return _term


#: seconds the step monitor waits for Slurm to list its step
STEP_LOOKUP_S = 30.0


def _wait_step(step: str, done: threading.Event, timeout_s: float = STEP_LOOKUP_S):
    """The step as Slurm lists it (:func:`hpc_hangkit.slurmjob.step_info`) once it has
    nodes, asked every second for up to ``timeout_s`` seconds (srun starts the monitor right
    after the step is created); None when it never shows or ``done`` is set."""
    end = time.monotonic() + timeout_s
    while not done.is_set():
        try:
            info = slurm.step_info(step)
        except slurm.SlurmError as e:
            log.info("scontrol show step %s: %s", step, e)
            info = None
        if info is not None and info.nodes:
            return info
        if time.monotonic() >= end:
            return None
        done.wait(1.0)
    return None


def monitor_main(env: Optional[Mapping[str, str]] = None, bin_argv: Optional[List[str]] = None,
                 step: Optional[str] = None) -> int:
    """``hpc-hangkit slurm-monitor``: the batch-step monitor (see the module docstring), or
    with ``step`` (``"<job>.<step>"``) the :class:`StepMonitor` of an interactive step.

    Reads settings from the job environment (site TOML < HANGKIT_*; for a step, the
    environment of its ``srun`` with the step's mode as HANGKIT_MODE). Returns 0;
    a monitor problem is logged and never fails the job. Raises ValueError for a
    malformed ``step``.
    """
    env = dict(os.environ if env is None else env)
    if env.get(layout.ENV_MODE, "off") == "off":
        return 0
    if step is not None:
        slurm.validate_step_id(step)
    os.umask(0o077)   # reports and state it writes (also to file:// storage) are the user's alone
    from hpc_hangkit.config import ConfigError, load_settings
    try:
        settings = load_settings(env=env)
    except ConfigError as e:
        sys.stderr.write("hpc-hangkit: hang monitor not started for this %s: %s\n"
                         % ("step" if step else "job", e))
        return 0
    bin_argv = bin_argv or [sys.executable, "-m", "hpc_hangkit"]
    done = threading.Event()
    _term = stop_handler(done)
    signal.signal(signal.SIGTERM, _term)
    if step is None:
        signal.signal(signal.SIGINT, _term)
        bm = BatchMonitor(settings, env, bin_argv)
        _setup_logging(bm.hd_dir)
    else:
        # Ctrl-C at the terminal is for srun (its first one prints the step's status);
        # the monitor ends with srun (PR_SET_PDEATHSIG, set by the plugin)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        info = _wait_step(step, done)
        if info is None:
            if not done.is_set():
                sys.stderr.write("hpc-hangkit: step %s is not watched: Slurm does not list it\n"
                                 % step)
            return 0
        bm = StepMonitor(settings, env, bin_argv, step, info)
        _setup_logging(bm.hd_dir, "step %s" % bm.step)
        sys.stderr.write("hpc-hangkit: watching step %s (%s task(s) on %s), mode %s; log: %s\n"
                         % (bm.step, info.ntasks if info.ntasks is not None else "?",
                            ",".join(info.nodes), settings.mode,
                            os.path.join(bm.hd_dir, layout.MONITOR_LOG)))
    bm.done = done
    try:
        return bm.run()
    except Exception as e:
        log.exception("monitor stopped by an error: %s (the job is not affected)", e)
        return 0
