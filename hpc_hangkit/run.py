"""``hpc-hangkit run``: start a launcher armed, watch its ranks, confirm and report a hang.

Stages (each logged to stderr with a UTC timestamp):

1. **arm**: the job environment comes only from
   :meth:`hpc_hangkit.config.Settings.to_env` with a fresh scratch directory
   ``<out>/scratch-XXXX`` (the ranks' ``watchdog/`` and ``heartbeats/``).
2. **launch**: the launcher (``mpiexec ...``, ``python -m torch.distributed.run ...``)
   starts in its own process group (session). SIGINT/SIGTERM/SIGHUP sent to
   ``hpc-hangkit run`` are forwarded to that whole group; a second one after
   the grace period escalates to SIGKILL.
3. **monitor**: :class:`hpc_hangkit.detect.monitor.Monitor` over the sources of
   the evidence registry (:func:`hpc_hangkit.detect.monitor.poll_sources`: the
   stacks, NCCL RAS where it works) every ``poll_interval_s`` seconds.
4. **capture + report** on confirmation, while the ranks live, into
   ``<out>/hang_detector/`` (see :func:`hpc_hangkit.detect.monitor.capture_and_report`);
   the roll call is printed to stdout and written as ``report.txt``/``report.json``
   (and ``--json-out``).
5. **act**: ``observe`` keeps waiting for the launcher; ``fail`` terminates the
   launcher's process group (SIGTERM, then SIGKILL after ``grace_s``).

Exit statuses (:data:`EXIT_HANG`, :data:`EXIT_TOOL`; see docs/run.md):
the launcher's own status when it ends by itself (128+N if killed by signal N;
in observe mode also after a confirmed hang), **3** when a hang was confirmed
and fail mode ended the job, **4** when hpc-hangkit itself failed (bad
settings, unusable output directory, monitor crash: the job, if started, was
left to finish unmonitored), **127** when the launcher executable was not found
and **126** when it could not be executed.
"""
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import List, Optional

from hpc_hangkit import layout

log = logging.getLogger("hpc_hangkit.run")

EXIT_HANG = 3
EXIT_TOOL = 4
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126
DEFAULT_GRACE_S = 10.0


class RunError(Exception):
    """hpc-hangkit could not start the run (maps to exit status 4)."""


class _UTCFormatter(logging.Formatter):
    converter = time.gmtime

    def formatTime(self, record, datefmt=None):
        return time.strftime("%Y-%m-%dT%H:%M:%S", self.converter(record.created)) + (
            ".%03dZ" % record.msecs)


def setup_logging(stream=None, level=logging.INFO) -> logging.Handler:
    """Stage logs of the ``hpc_hangkit`` loggers to ``stream`` (stderr): ``<UTC time> hpc-hangkit <LEVEL>: msg``."""
    h = logging.StreamHandler(stream or sys.stderr)
    h.setFormatter(_UTCFormatter("%(asctime)s hpc-hangkit %(levelname)s: %(message)s"))
    root = logging.getLogger("hpc_hangkit")
    root.addHandler(h)
    root.setLevel(level)
    root.propagate = False
    return h


def exit_status(returncode: int) -> int:
    """Shell-style status of a Popen returncode: negative (killed by signal N) -> 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to process group ``pgid``; False if the group is gone."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError as e:
        log.warning("cannot signal process group %d: %s", pgid, e)
        return False


def group_alive(pgid: int) -> bool:
    """True while any process of group ``pgid`` exists (signal 0)."""
    return signal_group(pgid, 0)


def terminate_group(proc: subprocess.Popen, pgid: int, grace_s: float) -> None:
    """SIGTERM the launcher's group, SIGKILL what is left after ``grace_s`` seconds, reap the leader."""
    log.info("terminating the job: SIGTERM to process group %d", pgid)
    signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not group_alive(pgid):
            break
        time.sleep(0.1)
    if group_alive(pgid):
        log.warning("job still alive %.0f s after SIGTERM: SIGKILL to process group %d", grace_s, pgid)
        signal_group(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout=max(grace_s, 5.0))
    except subprocess.TimeoutExpired:  # pragma: no cover - only if SIGKILL is refused
        log.error("launcher pid %d did not exit after SIGKILL", proc.pid)


class Run:
    """One ``hpc-hangkit run`` (see the module docstring).

    ``argv``: the launcher command line (non-empty list of str); ``settings``:
    :class:`hpc_hangkit.config.Settings` (mode observe|fail; off runs the job
    unarmed and unwatched); ``out_dir``: where ``hang_detector/`` and the
    scratch go (created); ``json_out``: extra path for the report JSON;
    ``grace_s``: seconds between SIGTERM and SIGKILL.
    """

    def __init__(self, argv: List[str], settings, out_dir: str, json_out: Optional[str] = None,
                 grace_s: float = DEFAULT_GRACE_S, stdout=None, base_env=None):
        if not argv:
            raise RunError("no launcher command given (usage: hpc-hangkit run [OPTIONS] -- LAUNCHER ARGS...)")
        self.argv = list(argv)
        self.settings = settings
        self.out_dir = os.path.abspath(out_dir)
        self.hd_dir = os.path.join(self.out_dir, layout.HANG_DETECTOR_DIR)
        self.json_out = json_out
        self.grace_s = grace_s
        self.stdout = stdout or sys.stdout
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.proc: Optional[subprocess.Popen] = None
        self.pgid: Optional[int] = None
        self.scratch: Optional[str] = None
        self.monitor = None
        self.hang_confirmed = False
        self.killed_for_hang = False
        self.report = None
        self._signals = []
        self._lock = threading.Lock()

    # -- setup ------------------------------------------------------------
    def prepare(self) -> dict:
        """Create the output tree and scratch; return the job environment."""
        try:
            os.makedirs(self.out_dir, exist_ok=True)
            if os.path.isdir(self.hd_dir) and os.listdir(self.hd_dir):
                raise RunError("%s already holds a previous run's diagnostics; choose another --out"
                               % self.hd_dir)
            os.makedirs(self.hd_dir, exist_ok=True)
            self.scratch = tempfile.mkdtemp(prefix="scratch-", dir=self.out_dir)
        except OSError as e:
            raise RunError("cannot create the output directory %s: %s" % (self.out_dir, e))
        return self.settings.to_env(self.scratch, base_env=self.base_env)

    # -- signals ----------------------------------------------------------
    def _on_signal(self, signum, frame):
        self._signals.append((signum, time.monotonic()))
        if self.pgid is None:
            return
        if len(self._signals) > 1 and time.monotonic() - self._signals[0][1] >= min(self.grace_s, 2.0):
            log.warning("second %s: SIGKILL to the job's process group %d",
                        signal.Signals(signum).name, self.pgid)
            signal_group(self.pgid, signal.SIGKILL)
        else:
            log.info("%s received: forwarding it to the job's process group %d",
                     signal.Signals(signum).name, self.pgid)
            signal_group(self.pgid, signum)
        if self.monitor is not None:
            self.monitor.stop_requested = True

    def _install_signals(self):
        old = {}
        if threading.current_thread() is not threading.main_thread():
            return old
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.signal(sig, self._on_signal)
        return old

    # -- confirmation ---------------------------------------------------------
    def _on_confirmed(self, ev):
        from hpc_hangkit.detect.monitor import capture_and_report, suspects_of
        if self.hang_confirmed:
            log.info("%s confirmed again; diagnostics were already captured", ev.key)
            return
        self.hang_confirmed = True
        rep, text, res = capture_and_report(self.settings, self.scratch, self.hd_dir,
                                            events=self.monitor.events, suspects=suspects_of(ev))
        self.report = rep  # res.problems were logged once each as they happened (CaptureContext.problem)
        self.stdout.write(text if text.endswith("\n") else text + "\n")
        self.stdout.flush()
        log.info("report written: %s", ", ".join(os.path.join(self.hd_dir, n) for n in (
            layout.REPORT_TXT, layout.REPORT_JSON, layout.REPORT_HTML)
            if os.path.exists(os.path.join(self.hd_dir, n))))
        if self.json_out:
            try:
                d = os.path.dirname(os.path.abspath(self.json_out))
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(self.hd_dir, layout.REPORT_JSON)) as src, \
                        open(self.json_out, "w") as dst:
                    dst.write(src.read())
            except OSError as e:
                log.warning("cannot write --json-out %s: %s (the report is in %s)",
                            self.json_out, e, self.hd_dir)
        if self.settings.mode == "fail":
            self.monitor.events.write("action", action="terminate", grace_s=self.grace_s)
            self.killed_for_hang = True
            self.monitor.stop_requested = True
            terminate_group(self.proc, self.pgid, self.grace_s)
        else:
            self.monitor.events.write("action", action="observe")
            log.warning("observe mode: the job is left running; stop it yourself (Ctrl-C) "
                        "or use --mode fail next time")

    # -- main -------------------------------------------------------------------
    def execute(self) -> int:
        """Run the job to its end; return the exit status (see the module docstring)."""
        from hpc_hangkit.detect.detector import Detector
        from hpc_hangkit.detect.monitor import EventLog, Monitor, poll_sources

        env = self.prepare()
        mode = self.settings.mode
        events = EventLog(os.path.join(self.hd_dir, layout.EVENTS_FILE))
        log.info("mode %s; poll every %g s, suspect after %g s, confirm after %g s; watchdog period %g s",
                 mode, self.settings.poll_interval_s, self.settings.suspect_after_s,
                 self.settings.effective_confirm_s, self.settings.watchdog_period_s)
        log.info("scratch %s; diagnostics go to %s", self.scratch, self.hd_dir)
        old = self._install_signals()
        try:
            try:
                self.proc = subprocess.Popen(self.argv, env=env, start_new_session=True)
            except FileNotFoundError:
                log.error("launcher not found: %r", self.argv[0])
                return EXIT_NOT_FOUND
            except PermissionError as e:
                log.error("cannot execute launcher %r: %s", self.argv[0], e)
                return EXIT_NOT_EXECUTABLE
            self.pgid = self.proc.pid
            events.write("launch", argv=self.argv, pid=self.proc.pid, mode=mode,
                         scratch=self.scratch, confirm_s=self.settings.effective_confirm_s,
                         poll_interval_s=self.settings.poll_interval_s)
            log.info("launched %s (pid %d, process group %d)", " ".join(self.argv), self.proc.pid, self.pgid)
            if self._signals:  # a signal arrived before the group existed
                signal_group(self.pgid, self._signals[-1][0])
            tool_failed = False
            if mode != "off":
                det = Detector.from_settings(self.settings)
                # stacks (one key), NCCL RAS where ncclras works (one key per communicator)
                sources = poll_sources(self.settings, self.scratch, self.hd_dir)
                self.monitor = Monitor(det, sources, hd_dir=self.hd_dir, on_confirmed=self._on_confirmed)
                self.monitor.events = events
                log.info("monitoring (confirm window %g s of wall-clock time)", det.confirm_duration_s)
                try:
                    self.monitor.run(alive=lambda: self.proc.poll() is None, wait=self._wait)
                except Exception as e:
                    tool_failed = True
                    log.exception("monitor failed (%s); the job keeps running unmonitored", e)
                    events.write("tool_failure", error="%s: %s" % (type(e).__name__, e))
            rc = exit_status(self._wait_job())
            # ranks orphaned by a launcher that exited: never leave them behind
            if group_alive(self.pgid) and (self.killed_for_hang or self._signals):
                signal_group(self.pgid, signal.SIGKILL)
            if self.killed_for_hang:
                status = EXIT_HANG
                log.error("hang confirmed: job terminated (launcher status %d); exit status %d",
                          rc, EXIT_HANG)
            elif tool_failed:
                status = EXIT_TOOL
                log.error("hpc-hangkit failed during the run; the job ended with status %d; exit %d",
                          rc, EXIT_TOOL)
            else:
                status = rc
                log.info("job ended with status %d%s", rc,
                         " (a hang had been confirmed in observe mode)" if self.hang_confirmed else "")
            events.write("end", launcher_status=rc, exit_status=status,
                         hang_confirmed=self.hang_confirmed)
            return status
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)

    def _wait_job(self) -> int:
        """Wait for the launcher; after a forwarded signal, terminate the group once ``grace_s`` has passed."""
        escalated = False
        while True:
            try:
                return self.proc.wait(timeout=0.25)
            except subprocess.TimeoutExpired:
                pass
            if self._signals and not escalated and time.monotonic() - self._signals[0][1] >= self.grace_s:
                escalated = True
                log.warning("job still running %.0f s after %s: terminating it", self.grace_s,
                            signal.Signals(self._signals[0][0]).name)
                terminate_group(self.proc, self.pgid, self.grace_s)

    def _wait(self, seconds: float) -> None:
        try:
            self.proc.wait(timeout=max(0.0, seconds))
        except subprocess.TimeoutExpired:
            pass


def run_command(argv: List[str], overrides: dict, out_dir: Optional[str], json_out: Optional[str],
                grace_s: float = DEFAULT_GRACE_S) -> int:
    """The ``hpc-hangkit run`` command body: settings, logging, :class:`Run`; returns the exit status.

    ``overrides``: CLI settings (``mode``, ``confirm_duration_s``,
    ``poll_interval_s``, ...; None values dropped). A bad setting
    (:class:`hpc_hangkit.config.ConfigError`) or an unusable ``out_dir`` is
    logged and returns 4 without starting anything.
    """
    from hpc_hangkit.config import ConfigError, load_settings

    handler = setup_logging()
    try:
        ov = {k: v for k, v in overrides.items() if v is not None}
        try:
            settings = load_settings(overrides=ov)
            if "mode" not in ov and settings.sources.get("mode", "default") == "default" \
                    and settings.mode == "off":
                # `run` exists to watch: the default for it is observe
                settings = load_settings(overrides=dict(ov, mode="observe"))
        except ConfigError as e:
            log.error("%s", e)
            return EXIT_TOOL
        if out_dir is None:
            out_dir = "hangkit-run-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        try:
            return Run(argv, settings, out_dir, json_out=json_out, grace_s=grace_s).execute()
        except RunError as e:
            log.error("%s", e)
            return EXIT_TOOL
    finally:
        logging.getLogger("hpc_hangkit").removeHandler(handler)
