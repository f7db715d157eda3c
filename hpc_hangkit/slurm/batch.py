"""The Slurm batch-step monitor process (``hpc-hangkit slurm-monitor``). Its parts: the node
side and the view (:mod:`hpc_hangkit.slurm.probe`), the job-wide sources
(:mod:`hpc_hangkit.slurm.sources`), the requeue policy (:mod:`hpc_hangkit.slurm.requeue`).

Started once per job by the SPANK plugin, in the batch step, as the job's user,
as a child of the batch script (it gets SIGTERM when the batch script ends, and
also stops when its parent is gone). It runs the same
:class:`hpc_hangkit.detect.monitor.Monitor` and :class:`hpc_hangkit.detect.detector.Detector`
as ``hpc-hangkit run``, with Slurm sources:

- **stacks** (:class:`hpc_hangkit.slurm.sources.SlurmStackSource`): the heartbeats and watchdog dumps of
  the ranks. Every poll reads this node's scratch (``$HANGKIT_SCRATCH_DIR``);
  when nothing progressed, it also probes the job's other nodes with one
  ``srun --overlap --jobid J`` step (``hpc-hangkit slurm-probe`` on each node,
  which prints the tails of that node's rank files, or from
  :data:`hpc_hangkit.slurm.sources.SUMMARY_MIN_NODES` other nodes on its node summary and
  per-rank facts (``HANGKIT_PROBE_ANSWER=raw|summary|auto`` in the job's environment forces
  either), and whether each heartbeat's process lives, for the vanished-pid check) - on
  suspicion, never on a poll where the ranks show progress. Answers are folded as they
  arrive; a node that has not answered by the probe's deadline
  (:func:`hpc_hangkit.slurm.sources.probe_deadline_s`) is named unreachable, with its ranks,
  in the report, and the capture does not wait for it. The probe runs in its own thread
  (:class:`hpc_hangkit.slurm.sources.BackgroundProbe`): its answer joins the next poll, so a slow ``srun``
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
from typing import List, Mapping, Optional

from hpc_hangkit import layout, storage
from hpc_hangkit import slurmjob as slurm
from hpc_hangkit.evidence.stacks import together_after_s
from hpc_hangkit.slurm.probe import View
from hpc_hangkit.slurm.requeue import Decision, Hang, RequeueState, decide, signature, state_url
from hpc_hangkit.slurm.sources import (RasOnRankNode, SlurmStackSource, probe_answer, probe_deadline_s,
                                       srun_probe)

log = logging.getLogger("hpc_hangkit.slurm.batch")



class BatchMonitor:
    """One job's monitor: sources, detector, capture fan-out, report, requeue.

    ``env``: the batch step's environment (SLURM_JOB_ID, HANGKIT_SCRATCH_DIR, ...);
    ``bin_argv``: how to run ``hpc-hangkit`` on the other nodes.
    """

    def __init__(self, settings, env: Mapping[str, str], bin_argv: List[str]):
        self.settings = settings
        self.env = env
        self.bin_argv = bin_argv
        #: the job as its environment names it, read once
        self.job = slurm.JobEnv.from_env(env)
        self.job_id = self.job.job_id
        self.attempt = self.job.attempt
        self.scratch = self.job.scratch or layout.job_scratch_dir(
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
            log.info("captured on %s in %.1f s (%s)", self.host, res.seconds, res.tally())

        # a node of the job whose ranks are in this node's scratch is captured in-process
        here = self.node_scratch == self.scratch
        # a node that did not answer the latest probe would hold the capture up to its
        # timeout: it is left out, and its record and last-known files go in from the view;
        # a probe in flight is let finish first (at most its deadline), so a node that has
        # just stopped answering is known
        self.settle_probes()
        gone = self.unreachable_nodes()
        if gone:
            log.warning("capture: node(s) %s unreachable (no answer to the probe), not waited for",
                        ",".join(sorted(gone)))
        others = [n for n in self.others if n not in gone]
        got = capture_job(self.job_id, others, self.node_scratch, self.bin_argv, self.hd_dir,
                          local=_local if here else None, suspects=suspects, at=at)
        for note in got.notes:
            log.warning("capture: %s", note)
        if self.others and got.error is None:
            log.info("captured on %d of %d other node(s)", len(got.hosts), len(self.others))
        if got.missing or got.error is not None or gone:
            kept = self.keep_view_copies(set(got.missing or ()) | gone if got.error is None else None)
            if kept:
                log.warning("kept the monitor's copies of %d rank file(s) of the node(s) that did not "
                            "answer", kept)
        from hpc_hangkit.detect.monitor import write_report
        return write_report(self.hd_dir, self.settings, self.world_size)

    def settle_probes(self) -> None:
        """:meth:`hpc_hangkit.slurm.sources.SlurmStackSource.settle` of the stack source: waits at
        most the probe deadline plus srun's stop for a probe in flight."""
        wait_s = probe_deadline_s(self.settings.poll_interval_s) + slurm.STREAM_STOP_GRACE_S + 1.0
        for src in self.srcs:
            if isinstance(src, SlurmStackSource):
                src.settle(wait_s)

    def unreachable_nodes(self) -> set:
        """The other nodes that did not answer the stack source's latest probe of them."""
        out = set()
        for src in self.srcs:
            out |= set(getattr(src, "unreachable", None) or ())
        return out

    def keep_view_copies(self, nodes=None) -> int:
        """Copy into the captured tree every rank file of another node that the capture did not
        bring (a node that did not answer: unreachable, the job ended or srun failed under the
        capture), from the monitor's :class:`View`, so the final roll call sees every rank the
        monitor saw: raw files, the node summaries (``nodes/``) of ``nodes`` (None: all; a node
        the capture reached has fresher files than its summary) and the unreachable-node
        records. A file the capture brought is never replaced. Returns the number of files
        copied."""
        from hpc_hangkit import fsio
        from hpc_hangkit.capture.whyfile import merge_file
        from hpc_hangkit.rollcall.facts import SUMMARY_SUFFIX
        from hpc_hangkit.rollcall.unreachable import UNREACHABLE_DIR
        from hpc_hangkit.slurm.probe import NODES_DIR

        n = 0
        for sub in (NODES_DIR, UNREACHABLE_DIR):
            src_dir = os.path.join(self.view_dir or "", sub)
            try:
                names = sorted(os.listdir(src_dir))
            except OSError:
                continue
            for name in names:
                if sub == NODES_DIR and nodes is not None and not any(
                        name == n.split(".")[0] + SUMMARY_SUFFIX for n in nodes):
                    continue
                dst = os.path.join(self.hd_dir, sub, name)
                src = os.path.join(src_dir, name)
                if os.path.lexists(dst) or os.path.islink(src):
                    continue
                try:
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    with open(src, "rb") as f:
                        data = f.read()
                    fsio.write_atomic(dst, data)
                    n += 1
                except OSError as e:
                    log.warning("cannot keep the monitor's copy of %s/%s: %s", sub, name, e)
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
            return storage.publish_report(base, self.job_id, self.attempt, self.hd_dir, self.job.user)
        except Exception as e:  # the epilog copies it later anyway
            log.warning("could not copy the report to storage now (%s); the epilog will", e)
            return None

    def act(self, rep, where: str):
        """What a confirmed hang does to the job (report ``rep``, its path ``where``): look the
        job up, decide (:func:`hpc_hangkit.slurm.requeue.decide`), record the hang, then
        requeue, or end the job unless the attempt is over already."""
        d, count = self._decide(rep)
        if d.action == "keep":
            log.warning("hpc-hangkit: %s; report: %s", d.reason, where)
            return
        d = count(d)
        if d.action == "requeue":
            d = self._requeue(d, where)
            if d is None:
                return
        self._end(d, where)

    def _decide(self, rep):
        """``(Decision, count)``: the rule applied to this hang, with ``count(decision) ->
        decision``, which records the hang in the requeue state (a requeue that cannot be
        counted becomes an end)."""
        mode = self.settings.mode
        sig = signature(rep)
        info = self._job_info() if mode == "fail" else None
        url = state_url(self.settings, self.job_id, self.env)
        state = RequeueState.load(url) if mode == "fail" else RequeueState()
        d = decide(mode, bool(info and info.requeue), bool(info and info.batch), state, sig, self.attempt,
                   int(self.settings.max_hang_requeues))
        return d, lambda d: self._record(url, state, sig, d)

    def _job_info(self):
        """The job as ``scontrol show job`` has it, or None (logged: then it is not requeued)."""
        try:
            return slurm.job_info(self.job_id)
        except (slurm.SlurmError, ValueError) as e:
            log.error("cannot look the job up (%s): not requeued", e)
            return None

    def _record(self, url: str, state: RequeueState, sig: dict, d: Decision) -> Decision:
        """Add this hang (and a requeue to the count) to ``state`` and save it at ``url``.
        Returns ``d``, or an end when a requeue could not be counted: it could repeat without
        end."""
        state.hangs.append(Hang(self.attempt, sig, round(time.time(), 3), d.action, d.reason))
        if d.action == "requeue":
            state.hang_requeues += 1
        try:
            state.save(url)
        except Exception as e:
            log.warning("could not record the hang in the requeue state %s: %s: %s", url,
                        type(e).__name__, e)
            if d.action == "requeue":
                return Decision("end", "not requeued: cannot record the hang-requeue count at %s (%s)"
                                % (url, e))
        return d

    def _requeue(self, d: Decision, where: str) -> Optional[Decision]:
        """``scontrol requeue`` the job: None when it was requeued, an end when Slurm refused."""
        log.error("hpc-hangkit: %s; report of this attempt: %s", d.reason, where)
        self._flush()
        try:
            slurm.requeue(self.job_id)
            return None
        except slurm.SlurmError as e:
            # The requeue kills this attempt's processes, scontrol (our child, in the batch
            # step) included, sometimes before its answer arrives: "failed (exit -15)" while
            # the job WAS requeued. Ask Slurm what happened before treating it as refused.
            moved = self._moved_on()
            if moved:
                log.warning("hpc-hangkit: scontrol requeue ended abnormally (%s) but the job "
                            "was requeued (%s)", e, moved)
                self._flush()
                return None
            return Decision("end", "not requeued: scontrol requeue refused: %s" % e)

    def _end(self, d: Decision, where: str) -> None:
        """End the job (the mark in its Comment, then ``scancel``), unless this attempt is
        already over: a later attempt is never ended."""
        moved = self._moved_on()
        if moved:
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
        if not url or not self.job.alias:
            return None
        try:
            alias = storage.record_array_alias(url, self.job)
            if alias:
                log.info("array task %s is job %s (alias stored)", alias, self.job_id)
            return alias
        except Exception as e:  # the alias is a convenience; the data is keyed by the job id
            log.warning("could not store the array-task alias: %s", e)
            return None

    def step_stats(self):
        """The sstat counters this monitor weighs (:func:`hpc_hangkit.slurmjob.step_stats`):
        every step of the job; a slurmd that does not answer costs at most the poll interval
        (3-10 s)."""
        return slurm.step_stats(self.job_id, timeout=max(3.0, min(10.0, float(self.settings.poll_interval_s))))

    def idle_probe_s(self) -> float:
        """Seconds between probes of the other nodes while this node holds no rank data: a
        batch node without ranks of its own probes rarely (one job step per probe)."""
        return max(30.0, float(self.settings.report_every_s))

    def sources(self):
        self.view_dir = tempfile.mkdtemp(prefix=layout.MONITOR_VIEW_PREFIX, dir=self.scratch)
        try:
            answer = probe_answer(len(self.others), self.env)
        except ValueError as e:
            answer = probe_answer(len(self.others))
            log.warning("%s; the probe answers %s", e, answer)
        samples = getattr(self.settings, "stack_samples", 5)
        src = [SlurmStackSource(self.scratch, View(self.view_dir), self.others,
                                probe=srun_probe(self.job_id, self.node_scratch, self.bin_argv,
                                                 sample_signal=self.settings.watchdog_signal,
                                                 quiet_s=float(self.settings.poll_interval_s),
                                                 answer=answer, samples=samples,
                                                 deadline_s=probe_deadline_s(self.settings.poll_interval_s)),
                                stats=self.step_stats,
                                idle_probe_s=self.idle_probe_s(),
                                poll_interval_s=float(self.settings.poll_interval_s),
                                samples=samples,
                                world_size=self.world_size, together_after_s=together_after_s(self.settings))]
        try:
            from hpc_hangkit.evidence.ras import maybe_source
            ras = maybe_source(self.settings, out_dir=self.hd_dir, env=self.env)
            if ras is not None:
                from hpc_hangkit.slurm import rasport
                use = rasport.address_in_use(
                    self.env, rasport.read_job_env(os.path.join(self.scratch, layout.JOB_ENV_FILE)))
                (log.warning if use.origin is rasport.RasOrigin.JOB_OVERRIDES else log.info)(
                    "hpc-hangkit: NCCL RAS queries go to %s:%d: %s", ras.client.host, ras.client.port,
                    "the site's ncclras_address" if self.settings.ncclras_address else use.sentence())
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

    The step's ranks are found in its own node scratch, ``step_<s>`` under the attempt's
    (:func:`hpc_hangkit.layout.step_scratch_dir`, where the SPANK plugin points an
    interactive step's ranks), so steps that run at the same time in one allocation are
    watched apart; its early report goes to ``.../attempt_<n>/step_<s>/hang_detector/``
    in storage, where the epilog stores the step's files.

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
        self.sid = sid
        self.node_scratch = layout.step_scratch_dir(
            layout.job_scratch_dir(settings.scratch_dir, job, self.attempt), sid)
        self.scratch = _private_dir(env, job, sid)
        self.hd_dir = os.path.join(self.scratch, layout.HANG_DETECTOR_DIR)
        self.nodes = list(info.nodes)
        self.others = list(info.nodes)
        self.world_size = info.ntasks
        self.what = "step %s" % self.step

    def publish_report(self) -> Optional[str]:
        """The report to ``<storage_url>/<job_id>/attempt_<n>/step_<s>/hang_detector/`` now
        (:meth:`BatchMonitor.publish_report`, this step's directory)."""
        base = getattr(self.settings, "storage_url", None)
        if not base:
            return None
        try:
            return storage.publish_report(base, self.job_id, self.attempt, self.hd_dir,
                                          self.job.user, step=self.sid)
        except Exception as e:  # the epilog copies it later anyway
            log.warning("could not copy the report to storage now (%s); the epilog will", e)
            return None

    def step_stats(self):
        """sstat counters of this step only: another step of the allocation running says
        nothing about this one."""
        return [st for st in slurm.step_stats(self.job_id) if st.step == self.step]

    def idle_probe_s(self) -> float:
        """Every node is remote: a probe is the only way to see the ranks, so the probe
        interval is the poll interval."""
        return float(self.settings.poll_interval_s)

    def act(self, rep, where: str):
        d = decide(self.settings.mode, False, False, RequeueState(), signature(rep), self.attempt,
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
