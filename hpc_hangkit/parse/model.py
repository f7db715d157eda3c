"""Data model shared by the stack-dump parsers and the roll call.

Everything here is plain data, cheap to build in bulk (the roll call must hold
100k ranks x 5 samples): frames are interned tuples, threads and samples use
``__slots__``.

- :class:`Frame` ``(file, line, function, native)``: one frame. ``line`` is an
  int (0 when unknown, e.g. native frames or faulthandler's ``???``);
  ``native`` is True for C/C++ frames from ``py-spy --native`` (no ``.py`` file).
- :class:`Thread`: ``tid`` (str, as printed: ``0x7f..`` for faulthandler, the
  OS thread id for py-spy), ``frames`` (tuple, innermost first), ``name``,
  ``current`` (faulthandler's ``Current thread`` marker), ``no_python``
  (faulthandler's ``<no Python frame>``).
- :class:`Sample`: one dump of one process: ``threads`` in the order printed,
  ``t`` (epoch seconds when known, else None), ``source`` (which shape it came
  from), ``index`` (0-based position in its file), ``offset`` (byte offset of
  the dump in its file), ``fatal`` (e.g. ``"Segmentation fault"`` when the
  dump is a fatal-error dump: the process died).
- :class:`ParsedLog`: the result of parsing one file: ``header`` (dict of the
  ``# hpc-hangkit``/``# hangkit-probe`` header line, or None), ``rank``,
  ``pid``, ``host``, ``world``, ``samples``, ``warnings`` (strings naming the
  file and byte offset of everything skipped).
"""
import enum
import re
import sys
from typing import Dict, List, NamedTuple, Optional, Tuple

__all__ = ["Frame", "Thread", "Sample", "ParsedLog", "frame", "clear_intern", "is_library_path", "basename"]


def basename(path: str) -> str:
    """The last component of a path written with ``/`` or ``\\`` (dumps may come from either)."""
    i = max(path.rfind("/"), path.rfind("\\"))
    return path[i + 1:] if i >= 0 else path


def is_own_frame(path: str) -> bool:
    """True when a frame's file is hpc-hangkit's own code: the package, or a boot module
    (``_hangkit_*.py``, loaded from the boot directory wherever a site put it) such as the
    auto check-in's wrapper that sits between the user's call and torch's collective."""
    return "/hpc_hangkit/" in path or basename(path).startswith("_hangkit_")


#: top-level packages of library code, for py-spy's relative paths
_LIB_TOPS = frozenset(("torch", "mpi4py", "numpy", "scipy", "hpc_hangkit", "gloo", "nccl",
                       "requests", "urllib3", "concurrent", "importlib", "multiprocessing",
                       "asyncio", "site-packages", "dist-packages", "deepspeed", "accelerate",
                       "transformers", "lightning", "pytorch_lightning", "jax", "tensorflow"))
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()) or (
    "threading", "signal", "socket", "selectors", "subprocess", "queue", "time", "runpy", "ssl",
    "http", "json", "os", "io", "logging", "abc", "typing", "functools", "contextlib", "weakref",
    "pickle", "copy", "collections", "enum", "inspect", "traceback", "linecache", "tempfile"))


def is_library_path(p: str) -> bool:
    """True when the Python source ``p`` (a frame's file: an absolute path from faulthandler,
    a traceback or Flight Recorder; often relative from py-spy) is not the user's code:
    ``<frozen ...>``/``<built-in>``, site-/dist-packages, the standard library, hpc_hangkit
    itself (its boot wrappers sit between the user's call and torch), and relative paths under
    a well-known library package. ``<string>``/``<stdin>`` are the user's."""
    if p.startswith("<"):
        return p.startswith("<frozen") or p.startswith("<built-in")
    if "site-packages" in p or "dist-packages" in p or is_own_frame(p):
        return True
    if re.search(r"/lib/python\d", p) or re.search(r"/lib/pypy", p):
        return True
    if not p.startswith("/"):
        q = p.replace("\\", "/")
        top = q.split("/", 1)[0]
        if "/" in q:
            return top in _LIB_TOPS or top in _STDLIB
        mod = p[:-3] if p.endswith(".py") else p
        return mod in _STDLIB
    return False


class Frame(NamedTuple):
    """One stack frame. ``line`` is 0 when unknown; ``native`` for C/C++ frames."""

    file: str
    line: int
    function: str
    native: bool = False

    def where(self) -> str:
        """``"file:line in function"`` (``"function (file)"`` for a native frame)."""
        if self.native:
            return "%s (%s)" % (self.function, self.file)
        return "%s:%d in %s" % (self.file, self.line, self.function)


_FRAMES: Dict[tuple, Frame] = {}


def frame(file: str, line: int, function: str, native: bool = False) -> Frame:
    """Interned :class:`Frame`: equal frames are the same object (saves memory at scale)."""
    key = (file, line, function, native)
    f = _FRAMES.get(key)
    if f is None:
        if len(_FRAMES) > 2_000_000:  # bound the cache on hostile input
            _FRAMES.clear()
        f = _FRAMES[key] = Frame(file, line, function, native)
    return f


def clear_intern() -> None:
    """Drop the frame intern table (tests, long-running monitors)."""
    _FRAMES.clear()


class Thread:
    """One thread of one dump. ``frames`` is a tuple, innermost first."""

    __slots__ = ("tid", "frames", "name", "current", "no_python", "owns_gil", "active")

    def __init__(self, tid: str, frames: Tuple[Frame, ...] = (), name: Optional[str] = None,
                 current: bool = False, no_python: bool = False,
                 owns_gil: Optional[bool] = None, active: Optional[bool] = None):
        self.tid = tid
        self.frames = tuple(frames)
        self.name = name
        self.current = current
        self.no_python = no_python
        self.owns_gil = owns_gil
        self.active = active

    @property
    def python_frames(self) -> Tuple[Frame, ...]:
        """The frames that are Python code (native frames dropped), innermost first."""
        return tuple(f for f in self.frames if not f.native)

    def __repr__(self):
        return "Thread(%s, %d frames%s)" % (self.tid, len(self.frames), ", current" if self.current else "")


class Sample:
    """One dump of one process (all threads it printed)."""

    __slots__ = ("threads", "t", "source", "index", "offset", "fatal")

    def __init__(self, threads, t: Optional[float] = None, source: str = "", index: int = 0,
                 offset: int = 0, fatal: Optional[str] = None):
        self.threads = list(threads)
        self.t = t
        self.source = source
        self.index = index
        self.offset = offset
        self.fatal = fatal

    def __repr__(self):
        return "Sample(#%d %s, %d threads%s)" % (
            self.index, self.source, len(self.threads), ", fatal=%s" % self.fatal if self.fatal else "")


class LogKind(enum.Enum):
    """What a parsed file is: how the roll call orders and weighs it (never printed)."""
    OTHER = ""
    #: a rank's faulthandler log (watchdog/)
    FAULTHANDLER = "faulthandler"
    #: a py-spy dump taken at capture (stack_traces/)
    PYSPY = "pyspy"
    #: a capture file that holds no dump: a why-file, py-spy's own error text, an empty file
    UNAVAILABLE = "unavailable"


def no_dump_text(first_line: str) -> str:
    """The words for a capture file without a dump whose first line is ``first_line``
    (:attr:`ParsedLog.no_dump`; ``''``: the file was empty)."""
    return "no stacks in this file: %s" % first_line if first_line else "empty py-spy output"


class ParsedLog:
    """What one file said: header, samples, and warnings for what was skipped. ``kind``: a
    :class:`LogKind` (its value, a string, is accepted too)."""

    __slots__ = ("name", "header", "rank", "pid", "host", "world", "samples", "warnings", "kind",
                 "traceback", "exit_note", "period_s", "mtime", "no_dump")

    def __init__(self, name: str, header: Optional[dict] = None, rank: Optional[int] = None,
                 pid: Optional[int] = None, host: Optional[str] = None, world: Optional[int] = None,
                 samples: Optional[List[Sample]] = None, warnings: Optional[List[str]] = None,
                 kind=LogKind.OTHER):
        self.name = name
        self.header = header
        self.rank = rank
        self.pid = pid
        self.host = host
        self.world = world
        self.samples = samples if samples is not None else []
        self.warnings = warnings if warnings is not None else []
        self.kind = LogKind(kind)
        #: a capture file without a dump (kind UNAVAILABLE): its first line, at most 200
        #: characters ('' when empty; the words: :func:`no_dump_text`); None otherwise
        self.no_dump: Optional[str] = None
        #: lines of a Python traceback the process printed before exiting (stdout/stderr files)
        self.traceback: Optional[List[str]] = None
        #: one line saying how the process ended, when the file shows it (fatal error, exception)
        self.exit_note: Optional[str] = None
        #: the watchdog period (header ``period_s`` or the ``Timeout (h:mm:ss)!`` lines), seconds
        self.period_s: Optional[float] = None
        #: when the file was last written (epoch seconds; set by the reader, not the parser)
        self.mtime: Optional[float] = None

    def __repr__(self):
        return "ParsedLog(%r, rank=%s, pid=%s, %d samples, %d warnings)" % (
            self.name, self.rank, self.pid, len(self.samples), len(self.warnings))
