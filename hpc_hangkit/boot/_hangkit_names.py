"""The rank-side names of hpc-hangkit, written once (stdlib-only, no imports, CPython >= 3.8).

Loaded as the top-level module ``_hangkit_names`` by the boot core (the boot
directory is first on a rank's PYTHONPATH, where hpc_hangkit itself may not be
importable) and as ``hpc_hangkit.boot._hangkit_names`` by
:mod:`hpc_hangkit.layout` and :mod:`hpc_hangkit.config`, which re-export these
names.  It imports nothing: it runs at every rank's interpreter start.
"""

# --- node scratch: directories and suffixes of the rank-side files --------------
#: default node-local scratch root (setting scratch_dir)
DEFAULT_SCRATCH_DIR = "/tmp/hpc-hangkit"
WATCHDOG_DIR = "watchdog"
HEARTBEAT_DIR = "heartbeats"
UNWATCHED_DIR = "unwatched"
#: how each armed rank process ended (``rank_<r>.pid<p>.txt``, written by the rank itself)
EXITS_DIR = "exits"
#: first characters of an exit record; then ``how=<normal|exit|exception> status=<n>``, and
#: for an exception the Python traceback, as the interpreter prints it
EXIT_PREFIX = "# hpc-hangkit exit "
WATCHDOG_SUFFIX = ".log"
HEARTBEAT_SUFFIX = ".hb"
UNWATCHED_SUFFIX = ".txt"
#: first characters of the header line of a watchdog log
HEADER_PREFIX = "# hpc-hangkit "
#: Flight Recorder dumps (``rank_<r>.pickle``/``.json``), also under hang_detector/
FLIGHT_RECORDER_DIR = "flight_recorder"
#: under FLIGHT_RECORDER_DIR: one registration file per rank whose trigger thread is armed
FR_TRIGGER_DIR = "trigger"

# --- job environment read by the rank ----------------------------------------------
ENV_MODE = "HANGKIT_MODE"
#: the job attempt's own node-scratch directory (where ranks write)
ENV_SCRATCH_DIR = "HANGKIT_SCRATCH_DIR"
ENV_WATCHDOG_PERIOD_S = "HANGKIT_WATCHDOG_PERIOD_S"
ENV_WATCHDOG_SIGNAL = "HANGKIT_WATCHDOG_SIGNAL"
ENV_AUTO_CHECKIN = "HANGKIT_AUTO_CHECKIN"
#: the Flight Recorder trigger's signal (not a setting; default SIGWINCH)
ENV_FR_SIGNAL = "HANGKIT_FR_SIGNAL"
#: PyTorch's Flight Recorder ring size (entries per rank; 0 = off), set from flight_recorder_buffer
TORCH_FR_BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
#: set by boot in the armed rank (inherited by its children, which then know
#: they are not the rank); never a setting
ENV_ARMED_PID = "HANGKIT_ARMED_PID"

# --- watchdog defaults (settings watchdog_period_s / watchdog_signal) -------------
DEFAULT_PERIOD_S = 30.0
DEFAULT_SIGNAL = "SIGURG"
#: signals the watchdog may use (their dumps are harmless to the process)
ALLOWED_SIGNALS = ("SIGURG", "SIGUSR1", "SIGUSR2", "SIGWINCH", "SIGPWR", "SIGVTALRM", "SIGPROF")

#: the spellings of "true" in a boolean environment value (case-insensitive, stripped)
TRUE_WORDS = ("1", "true", "yes", "on")


def nonneg(value, what):
    """``int(value)`` if it is a non-negative integer (an int, or a float or str with an
    integral value; bools refused); else ValueError naming ``what`` and the value."""
    if isinstance(value, bool):
        raise ValueError("invalid %s %r: expected a non-negative integer" % (what, value))
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise ValueError("invalid %s %r: expected a non-negative integer" % (what, value)) from None
    if v < 0 or (isinstance(value, float) and v != value):
        raise ValueError("invalid %s %r: expected a non-negative integer" % (what, value))
    return v


def rank_file_name(rank, pid, suffix):
    """``rank_<r>.pid<pid><suffix>``; rank None -> ``x``. Raises ValueError for a negative or
    non-integer rank or pid, or a suffix other than ``.log``/``.hb``/``.txt``."""
    if suffix not in (WATCHDOG_SUFFIX, HEARTBEAT_SUFFIX, UNWATCHED_SUFFIX):
        raise ValueError("invalid rank file suffix %r" % (suffix,))
    return "rank_%s.pid%d%s" % ("x" if rank is None else nonneg(rank, "rank"), nonneg(pid, "pid"), suffix)
