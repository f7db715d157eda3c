"""Every file and directory name hpc-hangkit uses in node scratch and in storage.

Stdlib-only constants and tiny name builders, so every stage (rank side, monitor,
capture, collector, roll call) agrees on one spelling.  The boot core
(``hpc_hangkit/boot/_hangkit_core.py``) cannot import this module (it must run
where hpc_hangkit is not installed), so it keeps its own copy of the rank-side
names; ``tests/test_boot.py`` asserts that the two copies agree.

Layouts (see docs/internals.md)::

    <scratch_dir>/job_<id>/attempt_<n>/        = $HANGKIT_SCRATCH_DIR (one per job attempt)
        hangkit.env                            job environment (prolog -> SPANK plugin)
        watchdog/rank_<r>.pid<pid>.log         faulthandler dumps (header line first)
        heartbeats/rank_<r>.pid<pid>.hb        fixed-size heartbeat record
        unwatched/rank_<r>.pid<pid>.txt        why arming failed (one line)
        hang_detector/                         capture output (same tree as storage)

    <storage_url>/<job_id>/attempt_<n>/hang_detector/
        stack_traces/rank_<i>.log  watchdog/  heartbeats/  unwatched/
        nccl_ras/ncclras_report.txt  nccl_ras/ncclras_<timestamp>.json
        nvidia_smi/node_<host>.log  flight_recorder/rank_<i>.json
        events.jsonl  report.txt  report.json
"""
import re

# --- configuration file ------------------------------------------------------
SITE_CONFIG_PATH = "/etc/hpc-hangkit/config.toml"
CONFIG_PATH_ENV = "HPC_HANGKIT_CONFIG"

# --- job environment ---------------------------------------------------------
ENV_PREFIX = "HANGKIT_"
ENV_MODE = "HANGKIT_MODE"
#: the job attempt's own node-scratch directory (where ranks write)
ENV_SCRATCH_DIR = "HANGKIT_SCRATCH_DIR"
#: the node-wide scratch root (setting scratch_dir); the job's directory is below it
ENV_SCRATCH_ROOT = "HANGKIT_SCRATCH_ROOT"
ENV_WATCHDOG_PERIOD_S = "HANGKIT_WATCHDOG_PERIOD_S"
ENV_WATCHDOG_SIGNAL = "HANGKIT_WATCHDOG_SIGNAL"
ENV_AUTO_CHECKIN = "HANGKIT_AUTO_CHECKIN"
#: set by boot in the armed rank (inherited by its children, which then know
#: they are not the rank); never a setting
ENV_ARMED_PID = "HANGKIT_ARMED_PID"
#: HANGKIT_* variables that are not settings (config ignores them)
INTERNAL_ENV = (ENV_ARMED_PID,)
TORCH_FR_BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
BOOT_DIR_NAME = "boot"

# --- node scratch --------------------------------------------------------------
DEFAULT_SCRATCH_DIR = "/tmp/hpc-hangkit"
WATCHDOG_DIR = "watchdog"
HEARTBEAT_DIR = "heartbeats"
UNWATCHED_DIR = "unwatched"
HANG_DETECTOR_DIR = "hang_detector"
#: KEY=VALUE job environment written by the prolog, read by the SPANK plugin
JOB_ENV_FILE = "hangkit.env"

WATCHDOG_SUFFIX = ".log"
HEARTBEAT_SUFFIX = ".hb"
UNWATCHED_SUFFIX = ".txt"

#: first characters of the header line of a watchdog log
HEADER_PREFIX = "# hpc-hangkit "

#: rank-side file names: rank_<r>.pid<pid>.<ext>; <r> is "x" when unknown
RANK_FILE_RE = re.compile(r"^rank_(?P<rank>\d+|x)\.pid(?P<pid>\d+)\.(?P<ext>log|hb|txt)\Z")


def job_scratch_dir(scratch_dir, job_id, attempt):
    """Node scratch of one job attempt: ``<scratch_dir>/job_<id>/attempt_<n>`` (= HANGKIT_SCRATCH_DIR)."""
    import os

    return os.path.join(scratch_dir, "job_%s" % job_id, "attempt_%d" % int(attempt))


def rank_file_name(rank, pid, suffix):
    """``rank_<r>.pid<pid><suffix>``; rank None -> ``x``."""
    return "rank_%s.pid%d%s" % ("x" if rank is None else int(rank), int(pid), suffix)


def watchdog_log_name(rank, pid):
    """File name of one process's faulthandler dump log (under ``watchdog/``)."""
    return rank_file_name(rank, pid, WATCHDOG_SUFFIX)


def heartbeat_name(rank, pid):
    """File name of one process's heartbeat record (under ``heartbeats/``)."""
    return rank_file_name(rank, pid, HEARTBEAT_SUFFIX)


def unwatched_name(rank, pid):
    """File name of the marker saying why a rank was not armed (under ``unwatched/``)."""
    return rank_file_name(rank, pid, UNWATCHED_SUFFIX)


def parse_rank_file_name(name):
    """``(rank|None, pid, ext)`` for a rank-side file name, or None if it is not one."""
    m = RANK_FILE_RE.match(name)
    if not m:
        return None
    r = m.group("rank")
    return (None if r == "x" else int(r)), int(m.group("pid")), m.group("ext")


# --- capture output / storage (under hang_detector/) ----------------------------
STACK_TRACES_DIR = "stack_traces"
NCCL_RAS_DIR = "nccl_ras"
NVIDIA_SMI_DIR = "nvidia_smi"
FLIGHT_RECORDER_DIR = "flight_recorder"
EVENTS_FILE = "events.jsonl"
REPORT_TXT = "report.txt"
REPORT_JSON = "report.json"
NCCLRAS_REPORT_TXT = "ncclras_report.txt"


def stack_trace_name(rank):
    """``rank_<i>.log`` under ``stack_traces/``."""
    return "rank_%d.log" % int(rank)


def flight_recorder_name(rank):
    """``rank_<i>.json`` under ``flight_recorder/``."""
    return "rank_%d.json" % int(rank)


def nvidia_smi_name(host):
    """``node_<host>.log`` under ``nvidia_smi/``."""
    return "node_%s.log" % host


def ncclras_json_name(timestamp):
    """``ncclras_<timestamp>.json`` under ``nccl_ras/`` (timestamp: a string, e.g. ``20260101T120000Z``)."""
    return "ncclras_%s.json" % timestamp


# --- Slurm (batch-step monitor) -------------------------------------------------
#: the batch-step monitor's log, under hang_detector/
MONITOR_LOG = "monitor.log"
#: hpc-hangkit's own count of hang requeues, under <storage_url>/<job_id>/
REQUEUE_STATE_FILE = "hangkit_requeue.json"


def storage_attempt_prefix(job_id, attempt):
    """``<job_id>/attempt_<n>`` relative to the storage URL."""
    return "%s/attempt_%d" % (job_id, int(attempt))
