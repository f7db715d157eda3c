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

Names built from ids (job id, rank, pid, host, timestamp) are validated here, before they
reach a path: a job id, host or timestamp holding ``/``, ``..``, NUL, whitespace or shell
syntax raises ValueError (:func:`validate_job_id`, :func:`validate_host`).
"""
import re

#: ``123`` or an array task ``123_4`` (Slurm job ids; the one definition, slurm.py uses it)
JOB_ID_RE = re.compile(r"^[0-9]{1,10}(_[0-9]{1,10})?\Z")
#: a node / host name as Slurm prints it: letters, digits, ``.``, ``_``, ``-``; 1-128 characters,
#: starting with a letter or digit (so never ``-option``, ``.`` or ``..``)
HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
#: a timestamp in a file name (``20260101T120000Z``, ``2026-01-01T12:00:00.5``)
TIMESTAMP_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_.:+-]{0,63}\Z")


def validate_job_id(job_id) -> str:
    """Return ``job_id`` (str or int; surrounding whitespace stripped) as a string if it is
    ``<digits>`` or ``<digits>_<digits>`` (at most 10 digits each). Raises ValueError naming the
    value and the accepted forms for anything else (``..``, ``1/2``, ``123_[1-3]``, ``''``, ``-1``...)."""
    s = str(job_id).strip()
    if not JOB_ID_RE.match(s):
        raise ValueError("invalid Slurm job id %r: expected a number such as 1234, "
                         "or an array task such as 1234_5" % (job_id,))
    return s


def validate_host(host) -> str:
    """Return ``host`` if it is a node name fit for a file name (:data:`HOST_RE`, no ``..``).
    Raises ValueError naming the value otherwise (``''``, ``a/b``, ``../x``, ``a b``, NUL, ``-x``)."""
    if not isinstance(host, str) or not HOST_RE.match(host) or ".." in host:
        raise ValueError("invalid host name %r: expected 1-128 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit, without '..'" % (host,))
    return host


def _nonneg(value, what):
    """``int(value)`` if it is a non-negative integer (bools refused); else ValueError."""
    if isinstance(value, bool):
        raise ValueError("invalid %s %r: expected a non-negative integer" % (what, value))
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise ValueError("invalid %s %r: expected a non-negative integer" % (what, value)) from None
    if v < 0 or (isinstance(value, float) and v != value):
        raise ValueError("invalid %s %r: expected a non-negative integer" % (what, value))
    return v

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
    """Node scratch of one job attempt: ``<scratch_dir>/job_<id>/attempt_<n>`` (= HANGKIT_SCRATCH_DIR).
    Raises ValueError for a job id that is not :func:`validate_job_id`'s or a negative attempt."""
    import os

    return os.path.join(scratch_dir, "job_%s" % validate_job_id(job_id),
                        "attempt_%d" % _nonneg(attempt, "attempt"))


def rank_file_name(rank, pid, suffix):
    """``rank_<r>.pid<pid><suffix>``; rank None -> ``x``. Raises ValueError for a negative or
    non-integer rank or pid, or a suffix other than ``.log``/``.hb``/``.txt``."""
    if suffix not in (WATCHDOG_SUFFIX, HEARTBEAT_SUFFIX, UNWATCHED_SUFFIX):
        raise ValueError("invalid rank file suffix %r" % (suffix,))
    return "rank_%s.pid%d%s" % ("x" if rank is None else _nonneg(rank, "rank"), _nonneg(pid, "pid"), suffix)


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
    """``rank_<i>.log`` under ``stack_traces/``. Raises ValueError for a negative or non-integer rank."""
    return "rank_%d.log" % _nonneg(rank, "rank")


def flight_recorder_name(rank):
    """``rank_<i>.json`` under ``flight_recorder/``. Raises ValueError for a negative or non-integer rank."""
    return "rank_%d.json" % _nonneg(rank, "rank")


def nvidia_smi_name(host):
    """``node_<host>.log`` under ``nvidia_smi/``. Raises ValueError for a host name that is not
    :func:`validate_host`'s (``/``, ``..``, NUL, whitespace, over 128 characters...)."""
    return "node_%s.log" % validate_host(host)


def ncclras_json_name(timestamp):
    """``ncclras_<timestamp>.json`` under ``nccl_ras/`` (timestamp: a string, e.g. ``20260101T120000Z``).
    Raises ValueError for a timestamp outside :data:`TIMESTAMP_RE` (``/``, ``..``, spaces...)."""
    if not isinstance(timestamp, str) or not TIMESTAMP_RE.match(timestamp) or ".." in timestamp:
        raise ValueError("invalid timestamp for a file name %r" % (timestamp,))
    return "ncclras_%s.json" % timestamp


# --- Slurm (batch-step monitor) -------------------------------------------------
#: the batch-step monitor's log, under hang_detector/
MONITOR_LOG = "monitor.log"
#: hpc-hangkit's own count of hang requeues, under <storage_url>/<job_id>/
REQUEUE_STATE_FILE = "hangkit_requeue.json"


def storage_attempt_prefix(job_id, attempt):
    """``<job_id>/attempt_<n>`` relative to the storage URL. Raises ValueError like
    :func:`job_scratch_dir`."""
    return "%s/attempt_%d" % (validate_job_id(job_id), _nonneg(attempt, "attempt"))
