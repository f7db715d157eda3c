"""The job-wide sources of the Slurm monitor: :class:`SlurmStackSource` (the stack source
over the :class:`hpc_hangkit.slurm.probe.View` of every node, other nodes probed in the
background by :class:`BackgroundProbe` through :func:`srun_probe`) and
:class:`RasOnRankNode` (the RAS source run on a node that holds ranks).
"""
import logging
import os
import threading
import time
from typing import Dict, List, Optional

from hpc_hangkit import layout
from hpc_hangkit import slurmjob as slurm
from hpc_hangkit.capture.ranks import UNKNOWN, Liveness
from hpc_hangkit.slurm.probe import View, probe_files, rank_files
from hpc_hangkit.wire import parse_docs

log = logging.getLogger("hpc_hangkit.slurm.sources")

PROBE_TIMEOUT_S = 60.0



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
