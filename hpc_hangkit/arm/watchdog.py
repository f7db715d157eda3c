"""Per-rank watchdog: stack dumps written from C when a rank stops making progress.

Public API (see docs/watchdog.md)::

    watch(path_or_fd=None, period_s=None, signum=None)   arm (or re-arm)
    unwatch()                                            disarm
    watching(...)                                        context manager
    checkpoint(label="")                                 "I am making progress" (< 1 us)
    is_watching() -> bool
    request_dump(pid, signal_name="SIGURG")              on-demand dump of another process
    request_dumps({pid: [logs]}, ...)                    the same for many, confirmed, with fallback

A rank is normally armed from the job environment at interpreter start (the
boot ``sitecustomize``); calling :func:`watch` yourself is for programs run
outside hpc-hangkit.  Both share one state per process: this module re-uses
the core that boot loaded (``sys.modules['_hangkit_core']``).
"""
import contextlib
import os
import sys
import time

if "_hangkit_core" in sys.modules:
    _core = sys.modules["_hangkit_core"]
else:
    from hpc_hangkit.boot import _hangkit_core as _core

    sys.modules.setdefault("_hangkit_core", _core)  # one state, whoever imports it next

#: ``checkpoint(label="")``: record progress (see :func:`_hangkit_core.checkpoint`).
#: Bound directly to the core function: no wrapper on the hot path.
checkpoint = _core.checkpoint
#: ``tgkill(pid, tid, signum)``: send a signal to one thread (see :func:`_hangkit_core.tgkill`).
tgkill = _core.tgkill

__all__ = ["watch", "unwatch", "watching", "checkpoint", "is_watching", "request_dump", "request_dumps", "status",
           "tgkill"]


def _rank_from_env():
    try:
        rank, world, local, _ = _core.identify(os.environ, argv=[sys.executable])
        return rank, world, local
    except Exception:  # NotRank / Unwatched: a plain program is rank 0 of 1
        return 0, 1, None


def watch(path_or_fd=None, period_s=None, signum=None):
    """Arm the watchdog of this process (re-arming replaces the previous arming).

    path_or_fd: where dumps go.  None -> ``$HANGKIT_SCRATCH_DIR`` (default
    ``/tmp/hpc-hangkit``) ``/watchdog/rank_<r>.pid<pid>.log`` plus the heartbeat
    ``heartbeats/rank_<r>.pid<pid>.hb`` (rank from RANK/PMI_RANK/...; 0 for a
    plain program).  A path (str/PathLike) -> that file (opened O_APPEND,
    created 0600) and the heartbeat next to it (``<path minus .log>.hb``).  An
    int fd or a file object with a working ``fileno()`` -> that descriptor (no
    heartbeat file).  An in-memory buffer (StringIO, BytesIO, ...) raises
    TypeError: dumps are written from C while the rank may hold the GIL, so
    only a real file descriptor can receive them.
    period_s: seconds (> 0) without :func:`checkpoint` before a dump, and
    between repeated dumps while stalled (default $HANGKIT_WATCHDOG_PERIOD_S or 30).
    signum: signal name or number (default $HANGKIT_WATCHDOG_SIGNAL or SIGURG);
    one of SIGURG, SIGUSR1, SIGUSR2, SIGWINCH, SIGPWR, SIGVTALRM, SIGPROF,
    else ValueError.
    Returns a dict describing the arming (path, fd, period_s, signal, ...).
    Raises OSError if the kernel timer or the file cannot be created.
    """
    env = os.environ
    if period_s is None:
        raw = env.get(_core.ENV_WATCHDOG_PERIOD_S, "").strip()
        try:
            period_s = float(raw) if raw else _core.DEFAULT_PERIOD_S
        except ValueError:
            raise ValueError("%s=%r is not a number of seconds" % (_core.ENV_WATCHDOG_PERIOD_S, raw))
    if signum is None:
        signum = env.get(_core.ENV_WATCHDOG_SIGNAL, "").strip() or _core.DEFAULT_SIGNAL
    rank, world, local = _rank_from_env()
    hb = None
    dest = path_or_fd
    if path_or_fd is None:
        scratch = env.get(_core.ENV_SCRATCH_DIR, "").strip() or _core.DEFAULT_SCRATCH_DIR
        pid = os.getpid()
        dest = os.path.join(scratch, _core.WATCHDOG_DIR, _core.rank_file_name(rank, pid, _core.WATCHDOG_SUFFIX))
        hb = os.path.join(scratch, _core.HEARTBEAT_DIR, _core.rank_file_name(rank, pid, _core.HEARTBEAT_SUFFIX))
    elif isinstance(path_or_fd, (str, bytes)) or hasattr(path_or_fd, "__fspath__"):
        p = os.fsdecode(os.fspath(path_or_fd))
        base = p[: -len(_core.WATCHDOG_SUFFIX)] if p.endswith(_core.WATCHDOG_SUFFIX) else p
        hb = base + _core.HEARTBEAT_SUFFIX
    return _core.arm(dest, period_s, signum, rank=rank, world=world, local_rank=local, heartbeat_path=hb)


def unwatch():
    """Disarm: kernel timer first, then the signal handler; close the files.

    Returns True if the watchdog was armed.  A watchdog signal arriving later
    is ignored (never kills the process).
    """
    return _core.disarm()


def is_watching():
    """True while this process's watchdog is armed."""
    return _core.is_armed()


def status():
    """The current arming (dict: path, fd, period_s, signal, signal_name, rank,
    world, pid, main_tid, heartbeat_path) or None."""
    return _core.status()


@contextlib.contextmanager
def watching(path_or_fd=None, period_s=None, signum=None):
    """``with watching(...):`` arm for the block; on exit restore the previous
    arming (e.g. the one boot made) or disarm.  Yields the arming dict."""
    prev = _core._state
    st = watch(path_or_fd, period_s, signum)
    try:
        yield st
    finally:
        if prev is not None:
            dest = prev["path"] if prev["path"] is not None else prev["_dest"]
            try:
                _core.arm(dest, prev["period_s"], prev["signal"], rank=prev["rank"], world=prev["world"],
                          local_rank=prev["local_rank"], heartbeat_path=prev["heartbeat_path"])
            except (OSError, TypeError, ValueError):
                _core.disarm()
        else:
            _core.disarm()


def request_dump(pid, signal_name="SIGURG", direct=False):
    """Ask process ``pid`` (a watched rank) for one stack dump now, without waiting.

    The request goes to the rank's ``hk-watchdog`` thread, which dumps the
    main thread from Python under the GIL (crash-free); ``direct=True`` (or a
    rank without that thread) signals the main thread and faulthandler dumps
    from C.  The dump lands in that rank's watchdog log.  Returns
    ``"thread"`` or ``"signal"``.  Raises ProcessLookupError (no such
    process), PermissionError (not ours), ValueError (not a watchdog signal).
    Use :func:`request_dumps` to also make sure the dump arrived.
    """
    return _core.request_dump(pid, signal_name, direct=direct)


def _sizes(paths):
    out = {}
    for p in paths:
        try:
            out[p] = os.lstat(p).st_size
        except OSError:
            out[p] = -1
    return out


def request_dumps(targets, signal_name="SIGURG", timeout_s=1.0, settle_s=0.1):
    """On-demand dumps of several ranks, each confirmed by its log growing.

    targets: ``{pid: [watchdog log paths of that pid]}``.  Every rank is asked
    through its ``hk-watchdog`` thread first (all at once); a rank whose log
    has not grown after ``timeout_s`` seconds has a main thread that holds
    the GIL while blocked in C, so its watchdog thread cannot run: it is then
    signalled directly and faulthandler dumps from C (safe in that state).
    Waits at most about ``2 * timeout_s + settle_s`` seconds in all.

    Returns ``{pid: outcome}`` with outcome ``"thread"``, ``"signal"``
    (direct, or no watchdog thread), ``"escalated"`` (thread path timed out,
    direct signal delivered the dump), ``"no dump"`` (asked both ways, log
    never grew: signals masked, or the process is stopped) or ``"failed:
    <error>"`` (not ours) or ``"gone"`` (no such process).  Never raises for a single rank's failure;
    ValueError for a signal the watchdog does not use.
    """
    _core.signal_number(signal_name)
    before = {}
    out = {}
    for pid, logs in targets.items():
        before[pid] = _sizes(logs)
        try:
            out[pid] = request_dump(pid, signal_name)
        except ProcessLookupError:
            out[pid] = "gone"
        except OSError as e:
            out[pid] = "failed: %s" % (e.strerror or e)

    def grown(pid):
        return any(n > before[pid].get(p, -1) for p, n in _sizes(before[pid]).items())

    def wait(pids):
        deadline = time.monotonic() + timeout_s
        pending = set(pids)
        while pending and time.monotonic() < deadline:
            pending = {p for p in pending if not grown(p)}
            if pending:
                time.sleep(0.01)
        return pending

    waiting = [p for p, o in out.items() if o in ("thread", "signal") and before[p]]
    slow = wait(waiting)
    for pid in sorted(slow):
        if out[pid] == "thread":
            try:
                request_dump(pid, signal_name, direct=True)
                out[pid] = "escalated"
            except ProcessLookupError:
                out[pid] = "gone"
            except OSError as e:
                out[pid] = "failed: %s" % (e.strerror or e)
    still = wait([p for p in slow if out[p] == "escalated"]) if slow else set()
    for pid in slow:
        if pid in still or out[pid] == "signal":
            out[pid] = "no dump"
    if len(waiting) > len(still):
        time.sleep(settle_s)  # a dump that started growing finishes writing
    return out
