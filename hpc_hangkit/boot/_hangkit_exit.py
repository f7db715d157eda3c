"""The rank records how it ended (stdlib only; an extension point of boot ``sitecustomize``).

Into ``<scratch>/exits/rank_<r>.pid<p>.txt`` (docs/internals.md "Exit record"), one
file per armed process, written by temp file + rename:

- an uncaught exception: written from ``sys.excepthook`` (chained: the previous hook,
  the user's or the site's, still prints its output), before the interpreter starts
  shutting down, so a rank that then blocks (``MPI_Finalize``, a non-daemon thread)
  has already said how it ended;
- ``sys.exit(code)``: ``how=exit status=<code>`` (a ``SystemExit`` raised some other
  way, or an exit status that is not an int, reads as status 1 unless it is None/0);
- the end of the program: ``how=normal status=0``, from an ``atexit`` handler
  registered at interpreter start, so it runs after the user's handlers and before
  C-level finalizers (mpi4py's ``MPI_Finalize``).

A fatal signal is not recorded here: faulthandler writes its fatal-error dump into
the rank's watchdog log (the boot core enables it). ``os._exit``, SIGKILL and the OOM
killer leave no record; the monitor sees those as a vanished process.
"""
import os
import sys

try:
    from . import _hangkit_names as _names
except ImportError:
    import _hangkit_names as _names

_state = {"path": None, "written": False, "exit_code": None}


def _write(text):
    """Write the record once (the first of excepthook / atexit wins); never raises."""
    path = _state["path"]
    if path is None or _state["written"]:
        return
    _state["written"] = True
    try:
        os.makedirs(os.path.dirname(path), 0o700, exist_ok=True)
        tmp = "%s.tmp" % path
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.write(fd, text.encode("utf-8", "replace"))
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except Exception:
        pass


def _status_of(code):
    if code is None:
        return 0
    if isinstance(code, bool) or not isinstance(code, int):
        return 1  # sys.exit("message") prints it and exits 1
    return code & 0xFF


def _excepthook(prev):
    def hook(etype, value, tb):
        try:
            if etype is not None and issubclass(etype, SystemExit):
                _write("%show=exit status=%d\n" % (_names.EXIT_PREFIX, _status_of(getattr(value, "code", None))))
            else:
                import traceback
                _write("%show=exception status=1\n%s" % (
                    _names.EXIT_PREFIX, "".join(traceback.format_exception(etype, value, tb))))
        except Exception:
            pass
        return prev(etype, value, tb)
    hook.__wrapped__ = prev
    return hook


def _exit_wrapper(orig):
    def exit(*args):
        code = args[0] if args else None
        try:  # where it was called, as a traceback (innermost last), for the report's file:line
            import traceback
            where = "Traceback (most recent call last):\n%sSystemExit: %s\n" % (
                "".join(traceback.format_stack(sys._getframe(1))), code)
        except Exception:
            where = ""
        _state["exit_code"] = (code, where)
        return orig(*args)
    exit.__wrapped__ = orig
    exit.__doc__ = orig.__doc__
    return exit


def _atexit():
    code = _state["exit_code"]
    last = getattr(sys, "last_value", None)
    if last is not None and not isinstance(last, SystemExit):
        # uncaught, but a later sys.excepthook replaced ours: the interpreter kept it here
        try:
            import traceback
            _write("%show=exception status=1\n%s" % (_names.EXIT_PREFIX, "".join(
                traceback.format_exception(type(last), last, getattr(sys, "last_traceback", None)))))
        except Exception:
            pass
    if code is None:
        _write("%show=normal status=0\n" % _names.EXIT_PREFIX)
    else:
        _write("%show=exit status=%d\n%s" % (_names.EXIT_PREFIX, _status_of(code[0]), code[1]))


def arm(env):
    """Start recording this rank's end (called by boot ``sitecustomize`` once the watchdog
    is armed; never raises). Does nothing when ``HANGKIT_SCRATCH_DIR`` is unset."""
    try:
        scratch = env.get(_names.ENV_SCRATCH_DIR, "").strip()
        if not scratch or _state["path"] is not None:
            return
        try:
            import _hangkit_core as core
        except ImportError:
            from . import _hangkit_core as core
        st = core.status() or {}
        rank = st.get("rank")
        pid = os.getpid()
        _state["path"] = os.path.join(scratch, _names.EXITS_DIR,
                                      _names.rank_file_name(rank, pid, _names.UNWATCHED_SUFFIX))
        _state["pid"] = pid
        import atexit
        atexit.register(_atexit)
        sys.excepthook = _excepthook(sys.excepthook)
        sys.exit = _exit_wrapper(sys.exit)
        os.register_at_fork(after_in_child=_after_fork_child)
    except Exception:
        pass


def _after_fork_child():
    """A fork child (a data-loader worker) is not the rank: it records nothing."""
    _state["path"] = None
