"""Every file and directory name hpc-hangkit uses in node scratch and in storage.

Stdlib-only constants and tiny name builders, so every stage (rank side, monitor,
capture, collector, roll call) agrees on one spelling.  The rank-side names (the
scratch directories and suffixes the ranks write, the header prefix, the variables
the ranks read, :func:`rank_file_name`) are defined in
``hpc_hangkit/boot/_hangkit_names.py``, which the boot core loads where hpc_hangkit
is not importable, and re-exported here.

Layouts (see docs/internals.md)::

    <scratch_dir>/job_<id>/attempt_<n>/        = $HANGKIT_SCRATCH_DIR (one per job attempt)
        hangkit.env                            job environment (prolog -> SPANK plugin)
        watchdog/rank_<r>.pid<pid>.log         faulthandler dumps (header line first)
        heartbeats/rank_<r>.pid<pid>.hb        fixed-size heartbeat record
        unwatched/rank_<r>.pid<pid>.txt        why arming failed (one line)
        vanished/rank_<r>.pid<pid>.txt         the monitor saw the process gone with no exit record
        hang_detector/                         capture output (same tree as storage)
        step_<s>/                              = $HANGKIT_SCRATCH_DIR of interactive step s
                                               (an srun outside a batch script, e.g. in salloc):
            watchdog/ heartbeats/ ... hang_detector/   the same tree, that step's ranks only

    <storage_url>/<job_id>/attempt_<n>/hang_detector/
        stack_traces/rank_<i>.log  watchdog/  heartbeats/  unwatched/
        nccl_ras/ncclras_report.txt  nccl_ras/ncclras_<timestamp>.json
        nvidia_smi/node_<host>.log  flight_recorder/rank_<i>.json
        events.jsonl  report.txt  report.json
    <storage_url>/<job_id>/attempt_<n>/step_<s>/hang_detector/   the same, of step s

Names built from ids (job id, rank, pid, host, timestamp) are validated here, before they
reach a path: a job id, host or timestamp holding ``/``, ``..``, NUL, whitespace or shell
syntax raises ValueError (:func:`validate_job_id`, :func:`validate_host`).
"""
import re
from typing import Iterable, List, NamedTuple, Optional

from hpc_hangkit.boot._hangkit_names import (  # noqa: F401 (re-exported)
    DEFAULT_SCRATCH_DIR, ENV_ARMED_PID, EXIT_PREFIX, EXITS_DIR, ENV_AUTO_CHECKIN, ENV_FR_SIGNAL, ENV_MODE, ENV_SCRATCH_DIR,
    ENV_WATCHDOG_PERIOD_S, ENV_WATCHDOG_SIGNAL, FLIGHT_RECORDER_DIR, FR_TRIGGER_DIR, HEADER_PREFIX,
    HEARTBEAT_DIR, HEARTBEAT_SUFFIX, TORCH_FR_BUFFER_ENV, UNWATCHED_DIR, UNWATCHED_SUFFIX, WATCHDOG_DIR,
    WATCHDOG_SUFFIX, nonneg as _nonneg, rank_file_name)

#: ``123`` or an array task ``123_4`` (Slurm job ids; the one definition)
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


def unique_job_id(job_id) -> str:
    """Return ``job_id`` as a string if it is the unique numeric id (``SLURM_JOB_ID``, as
    :func:`validate_job_id` checks it) that node scratch and storage are keyed by. Raises
    ValueError for anything else, the array form ``123_4`` included (resolve it first)."""
    s = validate_job_id(job_id)
    if not s.isdigit():
        raise ValueError("job id %r: scratch and storage use the unique numeric id"
                         " (SLURM_JOB_ID), not the array form" % (job_id,))
    return s


#: a user name fit for a path or URL component (``{user}`` in storage_url): letters, digits,
#: ``_``, ``.``, ``@``, ``-``, not starting with ``@``/``-``, never ``.`` or ``..``
USER_RE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.@-]*\Z")


def validate_user(user) -> str:
    """Return ``user`` if it is a plain user name (:data:`USER_RE`, not ``.``/``..``).
    Raises ValueError naming the value otherwise (None, ``''``, ``a/b``, ``..``, ``x$``, NUL)."""
    if not isinstance(user, str) or not USER_RE.match(user) or user in (".", ".."):
        raise ValueError("invalid user name %r: expected letters, digits, '_', '.', '@' or '-',"
                         " not '.' or '..'" % (user,))
    return user


def split_rel(rel) -> List[str]:
    """The components of a relative ``/``-separated path that came from untrusted input (a
    node's answer, a storage listing), before it is joined to a local directory. Raises
    ValueError for an empty, absolute or ``.``/``..``-holding path, or one with NUL."""
    parts = rel.split("/") if isinstance(rel, str) else []
    if not parts or any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise ValueError("unsafe relative path %r" % (rel,))
    return parts


def validate_host(host) -> str:
    """Return ``host`` if it is a node name fit for a file name (:data:`HOST_RE`, no ``..``).
    Raises ValueError naming the value otherwise (``''``, ``a/b``, ``../x``, ``a b``, NUL, ``-x``)."""
    if not isinstance(host, str) or not HOST_RE.match(host) or ".." in host:
        raise ValueError("invalid host name %r: expected 1-128 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit, without '..'" % (host,))
    return host


# --- configuration file ------------------------------------------------------
SITE_CONFIG_PATH = "/etc/hpc-hangkit/config.toml"
CONFIG_PATH_ENV = "HPC_HANGKIT_CONFIG"

# --- job environment ---------------------------------------------------------
ENV_PREFIX = "HANGKIT_"
#: the node-wide scratch root (setting scratch_dir); the job's directory is below it
ENV_SCRATCH_ROOT = "HANGKIT_SCRATCH_ROOT"
#: HANGKIT_* variables that are not settings (config ignores them)
INTERNAL_ENV = (ENV_ARMED_PID,)
BOOT_DIR_NAME = "boot"

# --- node scratch --------------------------------------------------------------
HANG_DETECTOR_DIR = "hang_detector"
#: KEY=VALUE job environment written by the prolog, read by the SPANK plugin
JOB_ENV_FILE = "hangkit.env"
#: ``<scratch_dir>/nccl_ras_ports/<port>`` (root's, content: the job id): the node's
#: per-job NCCL RAS ports, taken by the prolog, given back by the epilog
RAS_PORTS_DIR = "nccl_ras_ports"
#: the variable NCCL reads its RAS listen address from (NCCL's default: localhost:28028)
NCCL_RAS_ADDR_ENV = "NCCL_RAS_ADDR"

#: ``vanished/rank_<r>.pid<pid>.txt``: written by the monitor (not the rank) when it saw an armed
#: rank's process gone (no process, a zombie, or its pid reused) and no exit record of it
VANISHED_DIR = "vanished"
#: first characters of a vanished record; then ``pid=<p> host=<h> t=<epoch s> seen=<how>``
VANISHED_PREFIX = "# hpc-hangkit vanished "


def vanished_name(rank, pid):
    """File name of the monitor's record that a rank process vanished (under ``vanished/``)."""
    return rank_file_name(rank, pid, UNWATCHED_SUFFIX)


#: rank-side file names: rank_<r>.pid<pid>.<ext>; <r> is "x" when unknown
RANK_FILE_RE = re.compile(r"^rank_(?P<rank>\d+|x)\.pid(?P<pid>\d+)\.(?P<ext>log|hb|txt)\Z")


def job_scratch_dir(scratch_dir, job_id, attempt):
    """Node scratch of one job attempt: ``<scratch_dir>/job_<id>/attempt_<n>`` (= HANGKIT_SCRATCH_DIR).
    Raises ValueError for a job id that is not :func:`validate_job_id`'s or a negative attempt."""
    import os

    return os.path.join(scratch_dir, "job_%s" % validate_job_id(job_id),
                        "attempt_%d" % _nonneg(attempt, "attempt"))


#: an interactive step's own directory under the attempt, in node scratch and in storage:
#: ``step_<n>`` (``<n>``: Slurm's step id). The SPANK plugin (spank/hangkit_spank.c,
#: STEP_DIR_PREFIX) points such a step's ranks there; the ranks of a batch script's sruns
#: write to the attempt directory itself.
STEP_DIR_PREFIX = "step_"
STEP_DIR_RE = re.compile(r"^step_([0-9]{1,10})\Z")


def step_dir_name(step_id) -> str:
    """``step_<n>`` for a Slurm step id (int or digit string, at most 10 digits). Raises
    ValueError for anything else (negative, ``1/2``, ``..``, the batch/extern names)."""
    s = str(step_id)
    if not (s.isdigit() and s.isascii()) or len(s) > 10:
        raise ValueError("invalid step id %r: expected a number" % (step_id,))
    return STEP_DIR_PREFIX + str(int(s))


def step_of(name) -> Optional[int]:
    """``n`` of a step directory name ``step_<n>`` (:data:`STEP_DIR_RE`), or None if
    ``name`` is not one."""
    m = STEP_DIR_RE.match(name) if isinstance(name, str) else None
    return int(m.group(1)) if m else None


def step_scratch_dir(attempt_scratch, step_id):
    """Node scratch of one interactive step: ``<attempt scratch>/step_<n>`` (its
    HANGKIT_SCRATCH_DIR). Raises ValueError like :func:`step_dir_name`."""
    import os

    return os.path.join(attempt_scratch, step_dir_name(step_id))


#: an attempt directory (scratch or storage): ``attempt_<n>``
ATTEMPT_DIR_RE = re.compile(r"^attempt_([0-9]{1,6})\Z")


def attempt_of(name) -> Optional[int]:
    """``n`` of an attempt directory name ``attempt_<n>`` (:data:`ATTEMPT_DIR_RE`), or None
    if ``name`` is not one."""
    m = ATTEMPT_DIR_RE.match(name) if isinstance(name, str) else None
    return int(m.group(1)) if m else None


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


class RankFile(NamedTuple):
    """One rank-side file name, parsed: ``rank`` is None for ``rank_x``; ``ext`` is
    ``log``, ``hb`` or ``txt``."""
    name: str
    rank: Optional[int]
    pid: int
    ext: str


def rank_files(names: Iterable[str], ext: Optional[str] = None,
               known_rank: bool = False) -> List[RankFile]:
    """The rank-side file names among ``names`` (e.g. an ``os.listdir`` result), parsed and
    sorted by name: only those with extension ``ext`` (``"log"``, ``"hb"``, ``"txt"``) when
    given, only those with a known rank when ``known_rank``. Other names are ignored."""
    out = []
    for name in sorted(names):
        p = parse_rank_file_name(name)
        if p is None or (ext is not None and p[2] != ext) or (known_rank and p[0] is None):
            continue
        out.append(RankFile(name, p[0], p[1], p[2]))
    return out


def list_rank_files(directory, ext: Optional[str] = None, known_rank: bool = False) -> List[RankFile]:
    """:func:`rank_files` of a directory (a path or an open directory fd); a missing or
    unreadable directory gives ``[]`` (a rank that never wrote is not an error here)."""
    import os

    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return rank_files(names, ext, known_rank)


# --- capture output / storage (under hang_detector/) ----------------------------
STACK_TRACES_DIR = "stack_traces"
NCCL_RAS_DIR = "nccl_ras"
NVIDIA_SMI_DIR = "nvidia_smi"
EVENTS_FILE = "events.jsonl"
REPORT_TXT = "report.txt"
REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
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
#: name prefix of the batch-step monitor's private view directory in the attempt scratch
#: (copies of other nodes' rank files; the collector does not store it)
MONITOR_VIEW_PREFIX = ".monitor_view."
#: hpc-hangkit's own count of hang requeues, under <storage_url>/<job_id>/
REQUEUE_STATE_FILE = "hangkit_requeue.json"
#: the user's own per-job directory, under $HOME (requeue state without storage, the
#: interactive step monitor's work directory)
USER_JOBS_DIR = ".hpc-hangkit/jobs"


def user_job_dir(home, job_id):
    """``<home>/.hpc-hangkit/jobs/<job_id>``. Raises ValueError for a bad job id."""
    import os
    return os.path.join(home, USER_JOBS_DIR, validate_job_id(job_id))


def step_monitor_dir(home, job_id, step_id):
    """The interactive step monitor's work directory (its log, view and the roll call):
    ``<home>/.hpc-hangkit/jobs/<job_id>/step_<step_id>``. Raises ValueError for a bad job
    id or a step id that is not a non-negative number."""
    import os
    s = str(step_id)
    if not s.isdigit() or len(s) > 10:
        raise ValueError("invalid step id %r: expected a number" % (step_id,))
    return os.path.join(user_job_dir(home, job_id), "step_" + s)


def storage_attempt_prefix(job_id, attempt):
    """``<job_id>/attempt_<n>`` relative to the storage URL. Raises ValueError like
    :func:`job_scratch_dir`."""
    return "%s/attempt_%d" % (validate_job_id(job_id), _nonneg(attempt, "attempt"))
