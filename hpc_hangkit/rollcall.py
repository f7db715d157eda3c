"""The roll call: from what every rank left behind, say where the collective is,
which ranks wait there, and which rank(s) went the other way.

Pipeline (each step a public function, data flowing one way)::

    parsed logs (parse.faulthandler / parse.pyspy / parse.traceback)
        -> rank_facts()        per rank: main thread, modal position, state
        -> summarize_node()    compact JSON-able node summary (positions -> rank sets)
        -> merge()             associative + commutative merge of node summaries
        -> build_report()      groups, verdict, suspects -> :class:`Report`

:func:`report_from_dir` does all of it for a directory holding any mix of
watchdog logs, py-spy dumps, stdout/stderr tracebacks, heartbeats, unwatched
markers and ``*.summary.json`` node summaries. A report over node summaries is
the same as one over the raw dumps (tests/test_rollcall_merge.py).

Rules (each has a regression test):

- **Main thread by outermost frame**, not depth: the thread whose outermost
  Python frame is the script's ``<module>`` (or runpy's ``_run_module_as_main``)
  is the main thread; threads whose outermost frame is ``threading``'s
  ``_bootstrap`` are helpers. A telemetry thread deep in an HTTP client never
  wins over the main thread blocked two frames into ``all_reduce``.
- **Modal position over the last K samples**, ties to the newest: a stuck rank
  shows the same position every period; one sample caught mid-transition must
  not split a group. Start-up samples (an import in progress:
  ``importlib._bootstrap`` frames) never decide a position.
- **State per rank**: ``stuck`` (the mode holds a strict majority of the last K
  samples, or every sample is in one polling loop: same call path and function,
  only the line moves), ``progressing`` (three or more samples and no majority,
  or a check-in after its last dump), ``exited`` (a fatal-error dump, an exit
  traceback, or it went silent in node scratch while others kept writing),
  ``unknown`` (no usable sample: only start-up dumps, py-spy refused, ...).
- **Grouping** by the Python call chain of the main thread (file, line,
  function of every frame; ``depth`` limits it to the innermost N frames).
  Files compare by base name and functions by their last dotted part, so
  faulthandler (full paths, ``co_name``) and py-spy text (short paths,
  qualified names) of the same position group together.
- **Collective or elsewhere**: a chain with torch.distributed frames, c10d /
  MPI native frames or mpi4py frames is *in a collective*; mpi4py's Cython
  frames are invisible to faulthandler, so an MPI rank shows only the user's
  line calling ``comm.allreduce`` (*unknown*: the majority then decides).

Verdicts: MISSED, SPLIT, TOGETHER, GONE, SLOW, NO_HANG, INCONCLUSIVE (see
docs/report.md); a Flight Recorder or RAS section may turn TOGETHER or
INCONCLUSIVE into its own verdict (e.g. SAME_LINE_DIFFERENT_ARGS).
"""
import hashlib
import json
import os
import re
import sys
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from hpc_hangkit.parse.model import Frame, ParsedLog, Sample, Thread, frame
from hpc_hangkit.ranges import format_ranks, parse_ranks

__all__ = [
    "VERDICTS", "ROLES", "SUMMARY_VERSION", "Group", "Report", "main_thread", "is_startup",
    "is_library_frame", "user_frame", "collective_of", "rank_facts", "positions",
    "summarize_node", "summarize_dir", "merge", "build_report", "report_from_dir",
    "report_from_summary_and_dir", "add_sections", "read_dir", "rank_from_name", "short_where",
    "short_error", "adopt_sections",
]


VERDICTS = ("MISSED", "SPLIT", "TOGETHER", "GONE", "SLOW", "NO_HANG", "INCONCLUSIVE",
            "SAME_LINE_DIFFERENT_ARGS")
ROLES = ("waiting", "divergent", "exited", "progressing", "unknown")
SUMMARY_VERSION = 1
SUMMARY_SUFFIX = ".summary.json"
#: a rank that wrote nothing (no dump, no check-in) for max(3 periods, this) seconds while
#: others kept writing "went silent" (cross-node clock skew stays well below it)
SILENT_MIN_S = 5.0

# --- frame classification -------------------------------------------------------

_THREAD_BOOT_FUNCS = frozenset(("_bootstrap", "_bootstrap_inner", "Thread._bootstrap",
                                "Thread._bootstrap_inner"))
_MAIN_OUTER_FUNCS = frozenset(("_run_module_as_main", "_run_code", "<module>"))
_LIB_TOPS = frozenset(("torch", "mpi4py", "numpy", "scipy", "hpc_hangkit", "gloo", "nccl",
                       "requests", "urllib3", "concurrent", "importlib", "multiprocessing",
                       "asyncio", "site-packages", "dist-packages", "deepspeed", "accelerate",
                       "transformers", "lightning", "pytorch_lightning", "jax", "tensorflow"))
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()) or (
    "threading", "signal", "socket", "selectors", "subprocess", "queue", "time", "runpy", "ssl",
    "http", "json", "os", "io", "logging", "abc", "typing", "functools", "contextlib", "weakref",
    "pickle", "copy", "collections", "enum", "inspect", "traceback", "linecache", "tempfile"))
_COLLECTIVE_NATIVE = re.compile(r"(^c10d::|^gloo::|^PMPI_|^MPI_|^MPIR_|^ompi_|^ncclGroup|^nccl[A-Z]"
                                r"|^MPIDI_|^mca_coll)")
_TORCH_DIST = ("torch/distributed/", "torch\\distributed\\", "torch/nn/parallel/distributed.py",
               "deepspeed/comm/", "horovod/")
_TORCH_WRAPPERS = frozenset(("wrapper", "_exception_logger.<locals>.wrapper", "_time_logger.<locals>.wrapper"))


def _basename(path: str) -> str:
    i = max(path.rfind("/"), path.rfind("\\"))
    return path[i + 1:] if i >= 0 else path


def is_library_frame(f: Frame) -> bool:
    """True for frames that are not the user's code: native frames, ``<frozen ...>``,
    site-/dist-packages, the standard library, hpc_hangkit itself, and (for py-spy's
    relative paths) files under a well-known library package."""
    if f.native:
        return True
    p = f.file
    if p.startswith("<"):  # <frozen importlib._bootstrap> is library; <string>, <stdin> are the user's
        return p.startswith("<frozen") or p.startswith("<built-in")
    if "site-packages" in p or "dist-packages" in p or "/hpc_hangkit/" in p:
        return True
    if re.search(r"/lib/python\d", p) or re.search(r"/lib/pypy", p):
        return True
    if not p.startswith("/"):
        top = p.replace("\\", "/").split("/", 1)[0]
        if "/" in p.replace("\\", "/"):
            return top in _LIB_TOPS or top in _STDLIB
        mod = p[:-3] if p.endswith(".py") else p
        return mod in _STDLIB
    return False


def user_frame(chain: Sequence[Frame]) -> Optional[Frame]:
    """The innermost frame of the user's code (outside torch/mpi4py/stdlib/site-packages).

    ``chain`` is innermost first. Falls back to the innermost Python frame when
    every frame is library code, and to None for an empty chain.
    """
    first_py = None
    framework_free = None
    for f in chain:
        if f.native:
            continue
        if first_py is None:
            first_py = f
        if not is_library_frame(f):
            return f
        if framework_free is None and not _is_framework(f):
            framework_free = f
    # the user's own code may be installed in site-packages: then the innermost frame
    # outside the frameworks (torch, mpi4py, numpy, stdlib, hpc_hangkit) stands for it
    return framework_free or first_py


def _is_framework(f: Frame) -> bool:
    p = f.file.replace("\\", "/")
    if p.startswith("<") or re.search(r"/lib/python\d[^/]*/(?!site-packages|dist-packages)", p):
        return True
    for top in ("torch", "mpi4py", "numpy", "hpc_hangkit", "threading.py", "concurrent", "importlib"):
        if "/%s/" % top in p or p.startswith(top + "/") or p.endswith("/" + top):
            return True
    return False


def collective_of(chain: Sequence[Frame]) -> Optional[str]:
    """Name of the collective the chain is in, or None when no frame shows one.

    torch.distributed: the innermost ``torch/distributed`` function that is not a
    logging wrapper (``all_reduce``, ``barrier``, ...). MPI: the mpi4py frame
    (``allreduce``, ``Barrier``) or the innermost ``PMPI_*``/``MPI_*`` native
    frame. c10d/gloo/NCCL native frames: ``c10d`` etc.
    """
    native_hit = None
    for f in chain:
        if f.native:
            if "mpi4py" in f.file and not f.function.startswith("0x") and not f.function.startswith("MPI_PyMPI"):
                return f.function
            if native_hit is None and _COLLECTIVE_NATIVE.match(f.function):
                native_hit = f.function.split("(")[0]
            continue
        p = f.file
        if any(t in p for t in _TORCH_DIST) or p.startswith(("torch/distributed", "deepspeed/comm")):
            if f.function in _TORCH_WRAPPERS or f.function.endswith(".wrapper"):
                continue
            return f.function.rsplit(".", 1)[-1]
        if "mpi4py" in p:
            return f.function.rsplit(".", 1)[-1]
    return native_hit


def _is_thread_boot(f: Frame) -> bool:
    return f.function in _THREAD_BOOT_FUNCS and _basename(f.file) == "threading.py"


def _outermost_py(t: Thread) -> Optional[Frame]:
    for f in reversed(t.frames):
        if not f.native:
            return f
    return None


def main_thread(sample: Sample) -> Optional[Thread]:
    """The main thread of one dump, found by its OUTERMOST frame (not its depth).

    Score per thread: 3 if the outermost Python frame is a script's ``<module>``
    (not inside importlib) or runpy's ``_run_module_as_main``/``_run_code``; 0 if it
    is ``threading``'s ``_bootstrap`` (a helper thread); 1 otherwise. Ties go to
    the thread py-spy calls ``MainThread`` / faulthandler marks ``Current``
    (signals are sent to the main thread), then to the LAST block (CPython prints
    the main thread last). Threads with no Python frame never win. Returns None
    when no thread has a Python frame.
    """
    threads = sample.threads
    if len(threads) == 1:
        t = threads[0]
        return t if t.frames and not all(f.native for f in t.frames) else None
    best = None
    best_score = None
    n = len(threads)
    for i, t in enumerate(threads):
        outer = _outermost_py(t)
        if outer is None:
            continue
        if outer.function in _MAIN_OUTER_FUNCS and not outer.file.startswith("<frozen"):
            s = 3
        elif _is_thread_boot(outer):
            s = 0
        else:
            s = 1
        score = (s, 1 if t.name == "MainThread" else 0, 1 if t.current else 0, i if n > 1 else 0)
        if best_score is None or score > best_score:
            best, best_score = t, score
    return best


def is_startup(chain: Sequence[Frame]) -> bool:
    """True if the chain is inside an import in progress (``importlib._bootstrap``)."""
    for f in chain:
        if f.file.startswith("<frozen importlib") or (
                f.function in ("_find_and_load", "_call_with_frames_removed", "_load_unlocked")
                and "importlib" in f.file):
            return True
    return False


def short_where(f: Frame) -> str:
    """``"base.py:61 in sync_grads"``: a frame as people read it (full path in JSON).
    Line 0 (unknown, or a polling loop over several lines) prints as ``"base.py in f"``."""
    if f.native:
        return "%s (%s)" % (f.function, _basename(f.file))
    if not f.line:
        return "%s in %s" % (_basename(f.file), f.function)
    return "%s:%d in %s" % (_basename(f.file), f.line, f.function)


def _canon(f: Frame) -> tuple:
    return (_basename(f.file), f.line, f.function.rsplit(".", 1)[-1])


def _key_of(chain: Sequence[Frame]) -> tuple:
    """Grouping key: canonical Python frames, innermost first."""
    return tuple(_canon(f) for f in chain if not f.native)


def _cid(key: tuple) -> str:
    return hashlib.sha1(repr(key).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _frames_json(chain: Sequence[Frame]) -> list:
    return [[f.file, f.line, f.function, bool(f.native)] for f in chain]


def _frames_from_json(data) -> Tuple[Frame, ...]:
    out = []
    for item in data or ():
        try:
            out.append(frame(str(item[0]), int(item[1]), str(item[2]), bool(item[3]) if len(item) > 3 else False))
        except (TypeError, ValueError, IndexError):
            continue
    return tuple(out)


def _chain_rank(frames_json: list) -> tuple:
    """Total order used to pick one representative chain deterministically: full paths
    (faulthandler, py-spy JSON) over py-spy text's short ones, then more frames, then the JSON."""
    py = [f for f in frames_json if not (len(f) > 3 and f[3])]
    return (sum(1 for f in py if str(f[0]).startswith("/")), sum(len(str(f[0])) for f in py),
            len(frames_json), json.dumps(frames_json))


def _better_frames(a: list, b: list) -> bool:
    """True if frames ``a`` rank above ``b`` by :func:`_chain_rank` (equal lists: False, cheaply)."""
    return a != b and _chain_rank(a) > _chain_rank(b)


def _format_frames(chain: Sequence[Frame]) -> List[str]:
    return ['  File "%s", line %d in %s' % (f.file, f.line, f.function) if not f.native
            else "  %s (%s)" % (f.function, f.file) for f in chain]


# --- per-rank analysis ----------------------------------------------------------

def rank_facts(samples: Sequence[Sample], k: int = 5, chains: Optional[dict] = None,
               memo: Optional[dict] = None) -> dict:
    """Analyse one rank's samples (oldest first) into a small JSON-able dict.

    ``k``: how many of the newest usable samples decide the position (modal,
    ties to the newest). ``chains``: dict cid -> chain record, filled in with
    the chains this rank uses. Returns ``{"state", "key", "n", "mode",
    "startup", "detail", "exit", "traceback"}`` where ``key`` is a chain id
    (or None) and ``state`` one of stuck/progressing/exited/unknown.
    """
    if chains is None:
        chains = {}
    if memo is None:
        memo = {}
    usable: List[Tuple[str, tuple]] = []
    startup = 0
    last_startup = None
    fatal = None
    no_main = 0
    for s in samples:
        t = main_thread(s)
        if s.fatal:
            fatal = (s, t)
            continue
        if t is None:
            no_main += 1
            continue
        frames_t = t.frames
        cid = memo.get(frames_t)
        if cid is None:
            cid = memo[frames_t] = "" if is_startup(frames_t) else _cid(_key_of(frames_t))
        if not cid:
            startup += 1
            last_startup = frames_t
            continue
        usable.append((cid, frames_t))
    out = {"state": "unknown", "key": None, "n": 0, "mode": 0, "startup": startup}
    if fatal is not None:
        s, t = fatal
        fr = t.frames if t is not None else ()
        out["state"] = "exited"
        out["exit"] = "Fatal Python error: %s" % s.fatal
        if fr:
            out["key"] = _remember(chains, fr)
            out["traceback"] = ["Fatal Python error: %s" % s.fatal] + _format_frames(fr)
        return out
    if not usable:
        if startup:
            u = user_frame(last_startup) if last_startup else None
            out["detail"] = ("only start-up dumps (%d, import in progress%s): the rank never got past "
                             "start-up while watched" % (startup, ", last at %s" % u.where() if u else ""))
        elif no_main:
            out["detail"] = "no dump has a Python main thread"
        else:
            out["detail"] = "no stack samples"
        return out
    last = usable[-k:] if k and k > 0 else usable
    counts: Dict[str, int] = {}
    newest: Dict[str, int] = {}
    for i, (cid, _) in enumerate(last):
        counts[cid] = counts.get(cid, 0) + 1
        newest[cid] = i
    mode = max(counts, key=lambda c: (counts[c], newest[c]))
    n = len(last)
    out["n"] = n
    out["mode"] = counts[mode]
    out["key"] = mode
    # only the samples AT the rank's position shape the chains table (representative frames,
    # collective, native frames): what a node summary keeps is then exactly what shaped it
    def keep(cid):
        for c, fr in last:
            if c == cid:
                _remember(chains, fr)

    loop = _loop_position(last) if n >= 3 and n - counts[mode] >= 2 else None
    if loop is not None:
        # the same function on the same call path in every sample, only the line moves (and
        # not just once): a polling loop. Its position is the loop (line 0), not one line.
        func_frames, lines = loop
        out["state"] = "stuck"
        out["key"] = _remember(chains, func_frames)
        out["mode"] = n
        out["detail"] = "looping in %s (lines %s): the same call, only the line changes" % (
            func_frames[0].function, ", ".join(str(x) for x in lines))
        return out
    if n >= 3 and counts[mode] * 2 <= n:
        out["state"] = "progressing"
        out["key"] = last[-1][0]
        keep(out["key"])
        out["detail"] = "%d different positions in its last %d samples: still moving" % (len(counts), n)
    else:
        keep(mode)
        out["state"] = "stuck"
        if counts[mode] < n:
            out["detail"] = "%d of its last %d samples here (the others caught it mid-transition)" % (
                counts[mode], n)
    return out


def _loop_position(last: List[Tuple[str, tuple]]):
    """If all samples share the call path and the innermost function, differing only in the
    innermost line (a polling loop), return (chain with that line set to 0, sorted lines)."""
    shapes = set()
    lines = set()
    first = None
    for _cid, fr in last:
        py = tuple(f for f in fr if not f.native)
        if not py:
            return None
        shapes.add((_canon(py[0])[0], _canon(py[0])[2]) + _key_of(py[1:]))
        lines.add(py[0].line)
        if first is None:
            first = py
        if len(shapes) > 1:
            return None
    f0 = first[0]
    return (frame(f0.file, 0, f0.function),) + first[1:], sorted(lines)


_RECS: Dict[tuple, tuple] = {}


def _remember(chains: dict, frames_t: Sequence[Frame]) -> str:
    """Add one chain to the chains table (content-addressed by its grouping key); returns its id."""
    hit = _RECS.get(frames_t)
    if hit is None:
        fj = _frames_json(frames_t)
        nat = [f for f in fj if f[3]]
        hit = (_cid(_key_of(frames_t)), {"frames": fj, "collective": collective_of(frames_t),
                                         "native": nat or None})
        if len(_RECS) > 100_000:
            _RECS.clear()
        _RECS[tuple(frames_t)] = hit
    cid, rec = hit
    old = chains.get(cid)
    if old is None:
        chains[cid] = rec  # shared, never mutated: _merge_chain copies before changing
    elif old is not rec:
        _merge_chain(chains, cid, rec)
    return cid


def _merge_chain(chains: dict, cid: str, rec: dict) -> None:
    """Merge one chain record into the table by fixed orders (so any merge order gives the
    same table): representative frames by :func:`_chain_rank`, the smallest collective name,
    the longest native frame list (``py-spy --native``)."""
    old = chains.get(cid)
    if old is None:
        chains[cid] = {"frames": rec.get("frames") or [], "collective": rec.get("collective"),
                       "native": rec.get("native") or None}
        return
    if old is rec:
        return
    frames = old["frames"]
    rf = rec.get("frames") or []
    if _better_frames(rf, frames):
        frames = rf
    coll = old.get("collective")
    c = rec.get("collective")
    if c is not None and (coll is None or c < coll):
        coll = c
    native = old.get("native")
    n = rec.get("native")
    if n and n != native and (not native or (len(n), json.dumps(n)) > (len(native), json.dumps(native))):
        native = n
    if frames is not old["frames"] or coll != old.get("collective") or native is not old.get("native"):
        # records may be shared (memo): replace, never change in place
        chains[cid] = {"frames": frames, "collective": coll, "native": native}


# --- reading a directory ----------------------------------------------------------

_RANK_NAME_RE = re.compile(r"rank[_-]?(\d+)", re.I)
_SKIP_DIRS = frozenset(("flight_recorder", "nccl_ras", "nvidia_smi", "__pycache__"))
_SKIP_FILES = frozenset(("report.txt", "report.json", "events.jsonl", "monitor.log", "hangkit.env"))
_MAX_FILE = 256 * 1024 * 1024


def rank_from_name(name: str) -> Optional[int]:
    """Rank from a file name: ``rank_3.pid77.log``, ``dump_native_rank0.txt``, ``rank3.json`` -> int."""
    base = _basename(name)
    try:
        from hpc_hangkit import layout

        p = layout.parse_rank_file_name(base)
        if p is not None:
            return p[0]
    except ImportError:  # pragma: no cover
        pass
    m = _RANK_NAME_RE.search(base)
    return int(m.group(1)) if m else None


class DirContents:
    """Everything :func:`read_dir` found: parsed logs, tracebacks, heartbeats, markers, summaries."""

    def __init__(self):
        self.logs: List[ParsedLog] = []
        self.tracebacks: Dict[int, object] = {}
        self.heartbeats: list = []
        self.unwatched: Dict[int, str] = {}
        self.summaries: List[dict] = []
        self.warnings: List[str] = []
        self.files = 0


def _safe_read(path: str, warnings: List[str], stat_out: Optional[list] = None) -> Optional[bytes]:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        warnings.append("%s: cannot read (%s); skipped" % (path, e.strerror or e))
        return None
    try:
        import stat as _stat

        st = os.fstat(fd)
        if not _stat.S_ISREG(st.st_mode):
            os.close(fd)
            return None
        if stat_out is not None:
            stat_out.append(st.st_mtime)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(_MAX_FILE + 1)
    except OSError as e:
        warnings.append("%s: cannot read (%s); skipped" % (path, e.strerror or e))
        return None
    if len(data) > _MAX_FILE:
        warnings.append("%s: larger than %d bytes; only the first %d bytes are read" % (path, _MAX_FILE, _MAX_FILE))
        data = data[:_MAX_FILE]
    return data


def _list_files(path: str) -> List[str]:
    """Every file under ``path`` (or ``[path]`` for a file), sorted, skipping the
    extension subdirectories and never descending into symlinked directories."""
    if os.path.isfile(path):
        return [path]
    files: List[str] = []
    for root, dirs, names in os.walk(path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for n in sorted(names):
            files.append(os.path.join(root, n))
    return files


def read_dir(path: str, files: Optional[List[str]] = None) -> DirContents:
    """Read and parse every file under ``path`` (recursively, never following symlinks),
    or only ``files`` (paths under ``path``) when given.

    Sniffs each file: faulthandler logs (watchdog/, stack_traces/, any file with
    a dump marker), py-spy text/JSON dumps, ``*.summary.json`` node summaries,
    ``heartbeats/*.hb`` (via :mod:`hpc_hangkit.parse.heartbeat` when present),
    ``unwatched/*.txt`` markers, and text files holding Python tracebacks. Files
    that are none of these are ignored silently; unreadable or damaged ones give
    warnings. Raises ``FileNotFoundError`` if ``path`` does not exist.
    """
    from hpc_hangkit.parse.faulthandler import looks_like_faulthandler, parse_faulthandler
    from hpc_hangkit.parse.pyspy import looks_like_pyspy, parse_pyspy
    from hpc_hangkit.parse.traceback import parse_tracebacks

    if not os.path.exists(path):
        raise FileNotFoundError("no such file or directory: %s" % path)
    out = DirContents()
    if files is None:
        files = _list_files(path)
    hb_files: List[str] = []
    for fp in files:
        name = os.path.relpath(fp, path) if fp != path else os.path.basename(fp)
        base = os.path.basename(fp)
        if base in _SKIP_FILES or os.path.islink(fp):
            continue
        parent = os.path.basename(os.path.dirname(fp))
        if base.endswith(".hb"):
            hb_files.append(fp)
            continue
        mt: list = []
        data = _safe_read(fp, out.warnings, mt)
        if data is None:
            continue
        out.files += 1
        if base.endswith(SUMMARY_SUFFIX):
            try:
                doc = json.loads(data.decode("utf-8"))
                if not isinstance(doc, dict) or doc.get("hangkit_summary") != SUMMARY_VERSION:
                    raise ValueError("not a version-%d node summary" % SUMMARY_VERSION)
                out.summaries.append(doc)
            except (ValueError, UnicodeDecodeError, RecursionError) as e:
                out.warnings.append("%s: node summary unreadable (%s); skipped" % (name, e))
            continue
        if parent == "unwatched" and base.endswith(".txt"):
            r = rank_from_name(base)
            reason = data.decode("utf-8", "replace").strip().splitlines()
            if r is not None:
                out.unwatched[r] = reason[0] if reason else "not armed (no reason given)"
            continue
        if looks_like_pyspy(data):
            lg = parse_pyspy(data, name)
        elif looks_like_faulthandler(data):
            lg = parse_faulthandler(data, name)
        else:
            head = data[:200].lstrip()
            if head.startswith(b"hpc-hangkit: py-spy unavailable") or head.startswith(b"hpc-hangkit: ") and (
                    parent == "stack_traces"):
                lg = parse_pyspy(data, name)
            else:
                tbs = parse_tracebacks(data, name)
                for r, tb in tbs.items():
                    rr = r if r is not None else rank_from_name(base)
                    if rr is not None:
                        out.tracebacks[rr] = tb
                continue
        if lg.rank is None:
            lg.rank = rank_from_name(base)
        if mt and "hang_detector" not in os.path.abspath(fp).split(os.sep):
            # file times are trusted only where the ranks write (node scratch), never in
            # capture/storage copies, whose times say when they were copied
            lg.mtime = mt[0]
        out.warnings.extend(lg.warnings)
        out.logs.append(lg)
    out.heartbeats.extend(_read_heartbeats(hb_files, out.warnings))
    return out


def _read_heartbeats(paths: List[str], warnings: List[str]) -> list:
    """Heartbeat records of the ``rank_<r>.pid<pid>.hb`` files among ``paths``, sorted by
    (directory, rank, pid); problems become warnings, never exceptions."""
    from hpc_hangkit import layout

    paths = [p for p in paths if (layout.parse_rank_file_name(os.path.basename(p)) or (0, 0, ""))[2] == "hb"]
    if not paths:
        return []
    try:
        from hpc_hangkit.parse import heartbeat as hbmod
    except ImportError:
        warnings.append("%s: heartbeat records present but hpc_hangkit.parse.heartbeat is not "
                        "installed; check-in labels not shown" % os.path.dirname(paths[0]))
        return []
    import warnings as _warnings

    out = []
    for p in paths:
        try:
            with _warnings.catch_warnings(record=True) as caught:
                _warnings.simplefilter("always")
                hb = hbmod.read_heartbeat(p)
            for w in caught:
                warnings.append("%s: %s" % (os.path.dirname(p), w.message))
        except Exception as e:  # never let a heartbeat problem lose the roll call
            warnings.append("%s: heartbeat unreadable (%s: %s); check-in label not shown" % (
                p, e.__class__.__name__, e))
            continue
        if hb is not None:
            out.append((os.path.dirname(p), hb))
    out.sort(key=lambda dh: (dh[0], dh[1].rank, dh[1].pid))
    return [hb for _, hb in out]


# --- node summaries ---------------------------------------------------------------

def _hb_dict(hb) -> Optional[dict]:
    try:
        return {"label": getattr(hb, "label", "") or "", "wall_s": float(getattr(hb, "wall_s", 0.0) or 0.0),
                "counter": int(getattr(hb, "counter", 0) or 0),
                "period_s": float(getattr(hb, "period_s", 0.0) or 0.0)}
    except (TypeError, ValueError):
        return None


def summarize_node(logs: Iterable[ParsedLog] = (), *, tracebacks: Optional[dict] = None,
                   heartbeats: Iterable = (), unwatched: Optional[Dict[int, str]] = None,
                   warnings: Iterable[str] = (), world_size: Optional[int] = None,
                   samples: int = 5, host: Optional[str] = None) -> dict:
    """Summarise the dumps of one node (or any set of ranks) into a compact JSON-able dict.

    ``logs``: parsed logs (ranks taken from ``log.rank``; logs without a rank
    are reported in ``warnings``). ``tracebacks``: rank -> exit traceback (from
    stdout/stderr). ``heartbeats``: heartbeat records (attributes ``rank,
    label, wall_s, counter, period_s``). ``samples``: K for the modal position.

    Shape (version 1, see docs/report-schema.md)::

        {"hangkit_summary": 1, "k": 5, "world": 4|null,
         "chains": {cid: {"frames": [[file, line, function, native], ...], "collective": str|null}},
         "positions": [{"chain": cid|null, "state": "stuck", "ranks": "0,2-3"}, ...],
         "facts": {"<rank>": {...small per-rank facts...}},
         "unwatched": {"<rank>": reason}, "warnings": [...]}

    Summaries merge with :func:`merge` (associative, commutative).
    """
    per_rank: Dict[int, List[ParsedLog]] = {}
    warns = set(warnings)
    world = world_size
    for lg in logs:
        if lg.rank is None:
            if lg.samples:
                warns.add("%s: no rank in its header or name; its %d dump(s) are not in the roll call"
                          % (lg.name, len(lg.samples)))
            continue
        per_rank.setdefault(int(lg.rank), []).append(lg)
        if lg.world and world_size is None:
            world = max(world or 0, int(lg.world))
    chains: Dict[str, dict] = {}
    facts: Dict[int, dict] = {}
    memo: Dict[tuple, str] = {}
    tmps: Dict[int, dict] = {}  # per rank: the chain records its own evidence produced
    for r, lgs in per_rank.items():
        # oldest process first (header t), watchdog dumps before py-spy dumps (taken at capture)
        lgs.sort(key=lambda g: (0 if g.kind == "faulthandler" else 1,
                                (g.header or {}).get("t") or 0.0, g.name))
        samples_all: List[Sample] = []
        for g in lgs:
            samples_all.extend(g.samples)
        tmp = tmps[r] = {}
        f = rank_facts(samples_all, samples, tmp, memo)
        writes = [g.mtime for g in lgs if g.kind == "faulthandler" and g.mtime is not None and g.samples]
        if writes:
            f["last_write"] = round(max(writes), 3)
        periods = [g.period_s for g in lgs if g.period_s]
        if periods:
            f["period_s"] = max(periods)
        g0 = next((g for g in reversed(lgs) if g.kind == "faulthandler" and g.pid), None) or lgs[-1]
        if g0.pid is not None:
            f["pid"] = g0.pid
        if g0.host:
            f["host"] = g0.host
        notes = [g.warnings[0].split(": ", 1)[-1] for g in lgs if g.kind == "unavailable" and g.warnings]
        ex = [g.exit_note for g in lgs if g.exit_note]
        if ex and "exit" not in f:
            f["note"] = ex[-1]
            notes.append(ex[-1])
        if notes and f["state"] == "unknown":
            f["detail"] = "; ".join(sorted(set(notes)))
        facts[r] = f
    for r, tb in (tracebacks or {}).items():
        r = int(r)
        f = facts.get(r)
        if f is None:
            f = facts[r] = {"state": "unknown", "key": None, "n": 0, "mode": 0, "startup": 0}
        f["state"] = "exited"
        f["exit"] = tb.error or "exited with a Python traceback"
        f["traceback"] = list(tb.lines[-60:])
        if tb.frames:
            f["key"] = _remember(tmps.setdefault(r, {}), tb.frames)
        f.pop("detail", None)
    # only the record of each rank's FINAL position enters the table: a node summary keeps
    # exactly the chains its ranks sit at, so merging summaries rebuilds the same table
    seen: Dict[str, int] = {}
    for r, tmp in tmps.items():
        key = facts[r].get("key")
        rec = tmp.get(key) if key else None
        if rec is not None and seen.get(key) != id(rec):
            _merge_chain(chains, key, rec)
            seen[key] = id(rec)
    for hb in heartbeats or ():
        r = getattr(hb, "rank", None)
        if r is None or (isinstance(r, int) and r < 0):
            continue
        d = _hb_dict(hb)
        if d is None:
            continue
        f = facts.get(int(r))
        if f is None:
            f = facts[int(r)] = {"state": "unknown", "key": None, "n": 0, "mode": 0, "startup": 0,
                                 "detail": "a heartbeat but no stack dump"}
        old = f.get("hb")
        if old is None or (d["wall_s"], d["counter"]) > (old["wall_s"], old["counter"]):
            f["hb"] = d
        w = getattr(hb, "world", None)
        if world_size is None and isinstance(w, int) and w > 0:
            world = max(world or 0, w)
        if "host" not in f and getattr(hb, "host", None):
            f["host"] = hb.host
    return _pack(world, samples, chains, facts, dict(unwatched or {}), warns, host)


def _pack(world, k, chains, facts, unwatched, warns, host=None) -> dict:
    groups: Dict[tuple, List[int]] = {}
    slim: Dict[str, dict] = {}
    for r, f in facts.items():
        groups.setdefault((f.get("key"), f.get("state")), []).append(r)
        extra = {kk: v for kk, v in f.items() if kk not in ("key", "state") and v not in (None, 0, "", [])}
        if extra:
            slim[str(r)] = extra
    used = {key for key, _ in groups if key is not None}
    positions = [{"chain": key, "state": state, "ranks": format_ranks(rs)}
                 for (key, state), rs in sorted(groups.items(), key=lambda kv: (min(kv[1]), str(kv[0])))]
    out = {"hangkit_summary": SUMMARY_VERSION, "k": k, "world": world,
           "chains": {c: {kk: v for kk, v in chains[c].items() if v is not None or kk == "collective"}
                      for c in sorted(used) if c in chains},
           "positions": positions, "facts": slim,
           "unwatched": {str(r): unwatched[r] for r in sorted(unwatched)},
           "warnings": sorted(warns)}
    if host:
        out["hosts"] = [host]
    return out


def _unpack(summary: dict) -> Tuple[Optional[int], dict, Dict[int, dict], Dict[int, str], set]:
    chains = dict(summary.get("chains") or {})
    facts: Dict[int, dict] = {}
    for p in summary.get("positions") or ():
        try:
            ranks = parse_ranks(str(p.get("ranks", "")))
        except ValueError:
            continue
        for r in ranks:
            facts[r] = {"key": p.get("chain"), "state": p.get("state") or "unknown"}
    for rs, extra in (summary.get("facts") or {}).items():
        try:
            r = int(rs)
        except ValueError:
            continue
        f = facts.setdefault(r, {"key": None, "state": "unknown"})
        f.update(extra)
    for f in facts.values():
        for kk in ("n", "mode", "startup"):
            f.setdefault(kk, 0)
    unw = {}
    for rs, why in (summary.get("unwatched") or {}).items():
        try:
            unw[int(rs)] = str(why)
        except ValueError:
            continue
    world = summary.get("world")
    return (int(world) if isinstance(world, int) else None), chains, facts, unw, set(summary.get("warnings") or ())


_STATE_PRIO = {"exited": 4, "stuck": 3, "progressing": 2, "unknown": 1}


def _fact_order(f: dict) -> tuple:
    return (_STATE_PRIO.get(f.get("state"), 0), f.get("n", 0), json.dumps(f, sort_keys=True, default=str))


def merge(*summaries: dict) -> dict:
    """Merge node summaries into one (associative and commutative).

    Ranks are unions; a rank present in two summaries keeps the record that is
    greatest in a fixed total order (exited > stuck > progressing > unknown,
    then more samples, then the canonical JSON) so the result does not depend on
    the order of merging. Chains are content-addressed (same id = same
    position); warnings and unwatched markers are unions; world is the maximum.
    """
    world = None
    k = None
    chains: Dict[str, dict] = {}
    facts: Dict[int, dict] = {}
    unw: Dict[int, str] = {}
    warns: set = set()
    hosts: set = set()
    for s in summaries:
        w, ch, fa, un, wa = _unpack(s)
        if w is not None:
            world = w if world is None else max(world, w)
        if isinstance(s.get("k"), int):
            k = s["k"] if k is None else max(k, s["k"])
        for cid, rec in ch.items():
            _merge_chain(chains, cid, rec)
        for r, f in fa.items():
            old = facts.get(r)
            if old is None or _fact_order(f) > _fact_order(old):
                facts[r] = f
        for r, why in un.items():
            if r not in unw or why > unw[r]:
                unw[r] = why
        warns |= wa
        hosts |= set(s.get("hosts") or ())
    out = _pack(world, k if k is not None else 5, chains, facts, unw, warns)
    if hosts:
        out["hosts"] = sorted(hosts)
    return out


# --- the report -------------------------------------------------------------------

class Group:
    """Ranks at one position. ``chain`` is the Python call chain, innermost first;
    ``frame`` the user's frame shown as the group's line; ``top`` the innermost frame."""

    __slots__ = ("ranks", "role", "state", "chain", "native", "frame", "top", "collective", "detail", "key")

    def __init__(self, ranks, role, state, chain=(), native=(), collective=None, detail=None, key=None):
        self.ranks = sorted(ranks)
        self.role = role
        self.state = state
        self.chain = tuple(chain)
        self.native = tuple(native)
        self.frame = user_frame(self.chain)
        self.top = self.chain[0] if self.chain else None
        self.collective = collective
        self.detail = detail
        self.key = key

    @property
    def in_collective(self) -> bool:
        return self.collective is not None

    def via(self, n: Optional[int] = 3) -> List[Frame]:
        """Frames outward of the user frame (the call chain shown as ``via`` lines)."""
        if self.frame is None:
            return []
        i = self.chain.index(self.frame)
        rest = list(self.chain[i + 1:])
        return rest if n is None else rest[:n]

    def to_dict(self) -> dict:
        def fd(f):
            return None if f is None else {"file": f.file, "line": f.line, "function": f.function}

        return {"ranks": list(self.ranks), "role": self.role, "state": self.state,
                "frame": fd(self.frame), "top": fd(self.top), "collective": self.collective,
                "in_collective": self.in_collective,
                "call_chain": [fd(f) for f in self.chain],
                "native_frames": [f.function + " (" + f.file + ")" for f in self.native][:12],
                "detail": self.detail}

    def __repr__(self):
        return "Group(%s, %s, %s)" % (format_ranks(self.ranks), self.role, self.frame and self.frame.where())


class Report:
    """The roll call. See docs/report.md for how to read it and docs/report-schema.md for ``to_dict``."""

    def __init__(self):
        self.verdict = "INCONCLUSIVE"
        self.reason = ""
        self.why = None  # for INCONCLUSIVE / NO_HANG: why
        self.suspect_ranks: List[int] = []
        self.groups: List[Group] = []
        self.missing_ranks: List[int] = []
        self.unwatched_ranks: List[int] = []
        self.unwatched: Dict[int, str] = {}
        self.warnings: List[str] = []
        self.sections: Dict[str, dict] = {}
        self.world: Optional[int] = None
        self.ranks: Dict[int, dict] = {}
        self.samples = 5
        self.depth: Optional[int] = None
        self.now: Optional[float] = None
        self.rank_chains: Dict[int, Tuple[Frame, ...]] = {}
        #: the verdict of the stack analysis alone, before any section was adopted
        self.stack_verdict = "INCONCLUSIVE"
        #: the section whose verdict was adopted ("flight_recorder" / "nccl_ras") or None
        self.adopted_from: Optional[str] = None

    def checkins(self) -> Dict[int, dict]:
        """Per rank with a heartbeat: ``{"label", "wall_s", "age_s", "counter"}`` (age vs ``self.now``)."""
        out = {}
        for r, f in sorted(self.ranks.items()):
            hb = f.get("hb")
            if hb:
                age = None if self.now is None else max(0.0, self.now - hb["wall_s"])
                out[r] = {"label": hb.get("label", ""), "wall_s": hb["wall_s"], "counter": hb.get("counter", 0),
                          "age_s": None if age is None else round(age, 1)}
        return out

    def to_dict(self) -> dict:
        """JSON schema v1 (docs/report-schema.md)."""
        return {
            "schema_version": 1,
            "verdict": self.verdict,
            "stack_verdict": self.stack_verdict,
            "verdict_from": self.adopted_from or "stacks",
            "suspect_ranks": list(self.suspect_ranks),
            "summary": self.reason,
            "why": self.why,
            "world_size": self.world,
            "samples_per_rank": self.samples,
            "depth": self.depth,
            "groups": [g.to_dict() for g in self.groups],
            "missing_ranks": list(self.missing_ranks),
            "unwatched_ranks": list(self.unwatched_ranks),
            "unwatched": {str(r): why for r, why in sorted(self.unwatched.items())},
            "ranks": {str(r): _rank_public(f) for r, f in sorted(self.ranks.items())},
            "last_checkin": {str(r): c for r, c in self.checkins().items()},
            "warnings": list(self.warnings),
            "sections": dict(self.sections),
        }


def _rank_public(f: dict) -> dict:
    out = {"state": f.get("state"), "samples_used": f.get("n", 0), "samples_at_position": f.get("mode", 0),
           "startup_samples": f.get("startup", 0)}
    for k in ("pid", "host", "detail", "exit", "traceback", "note"):
        if f.get(k):
            out[k] = f[k]
    return out


def _world_and_missing(world, facts, unwatched):
    seen = set(facts) | set(unwatched)
    if world is None and seen:
        world = None
    missing = sorted(r for r in range(world) if r not in seen) if world else []
    return world, missing


def build_report(summary: dict, *, depth: Optional[int] = None, world_size: Optional[int] = None,
                 now: Optional[float] = None) -> Report:
    """Turn a (merged) node summary into a :class:`Report`: groups, verdict, suspects.

    ``depth``: group by the innermost ``depth`` frames of the call chain (None:
    the whole chain). ``world_size`` overrides the world size from the headers.
    ``now``: epoch seconds for check-in ages (default: the newest check-in).
    """
    world, chains, facts, unw, warns = _unpack(summary)
    if world_size is not None:
        world = world_size
    rep = Report()
    rep.samples = summary.get("k", 5)
    rep.depth = depth
    rep.world = world
    rep.ranks = facts
    rep.unwatched = unw
    rep.unwatched_ranks = sorted(unw)
    rep.warnings = sorted(warns)
    hb_walls = [f["hb"]["wall_s"] for f in facts.values() if f.get("hb")]
    rep.now = now if now is not None else (max(hb_walls) if hb_walls else None)
    _, rep.missing_ranks = _world_and_missing(world, facts, unw)
    if world is not None:
        extra = sorted(r for r in facts if r >= world)
        if extra:
            rep.warnings.append("ranks %s are beyond the world size %d" % (format_ranks(extra), world))

    cache: Dict[str, tuple] = {}

    def chain_of(cid):
        if cid is None:
            return None
        c = cache.get(cid)
        if c is None:
            rec = chains.get(cid) or {}
            frames = _frames_from_json(rec.get("frames"))
            py = tuple(f for f in frames if not f.native)
            nat = _frames_from_json(rec.get("native")) or tuple(f for f in frames if f.native)
            gk = _key_of(py[:depth] if depth else py)
            c = cache[cid] = (py, nat, gk, rec.get("collective"))
        return c

    _apply_timing(facts)
    buckets: Dict[tuple, List[int]] = {}
    for r, f in facts.items():
        st = f.get("state", "unknown")
        c = chain_of(f.get("key"))
        if c is not None:
            rep.rank_chains[r] = c[0]
        if st == "unknown" or c is None:
            buckets.setdefault(("unknown", None), []).append(r)
        else:
            buckets.setdefault((st, c[2]), []).append(r)
    rep_cid: Dict[tuple, str] = {}
    crank: Dict[str, tuple] = {}

    def rank_of(cid):
        v = crank.get(cid)
        if v is None:
            v = crank[cid] = _chain_rank((chains.get(cid) or {}).get("frames") or [])
        return v

    for r, f in facts.items():
        c = chain_of(f.get("key"))
        if c is None:
            continue
        bk = (f.get("state"), c[2])
        cur = rep_cid.get(bk)
        if cur is None or (cur != f["key"] and rank_of(f["key"]) > rank_of(cur)):
            rep_cid[bk] = f["key"]
    # ranks stuck at one line of a function in which other ranks are seen looping join the loop
    loops = {gk for (st, gk) in buckets if st == "stuck" and gk and gk[0][1] == 0}
    if loops:
        for (st, gk) in list(buckets):
            if st == "stuck" and gk and gk[0][1] != 0:
                shape = ((gk[0][0], 0, gk[0][2]),) + gk[1:]
                if shape in loops:
                    buckets[(st, shape)].extend(buckets.pop((st, gk)))
    groups: List[Group] = []
    for (st, gk), rs in buckets.items():
        if st == "unknown":
            details = sorted({facts[r].get("detail") or "no usable stack sample" for r in rs})
            groups.append(Group(rs, "unknown", "unknown", detail="; ".join(details[:4])))
            continue
        cid = rep_cid[(st, gk)]
        py, nat, _, coll = chain_of(cid)
        if depth:
            py = py[:depth] if len(py) > depth else py
        colls = sorted({chain_of(facts[r]["key"])[3] for r in rs if chain_of(facts[r]["key"])[3]})
        detail = None
        if st == "exited":
            exits = sorted({_norm_error(facts[r]["exit"]): short_error(facts[r]["exit"])
                            for r in rs if facts[r].get("exit")}.values())
            detail = "; ".join(exits[:3]) or None
        elif st == "progressing":
            detail = "samples still changing: this rank is moving"
        groups.append(Group(rs, st, st, py, nat, colls[0] if colls else coll, detail, key=cid))
    _verdict(rep, groups, facts)
    labels = {}
    for r in rep.suspect_ranks:
        hb = (facts.get(r) or {}).get("hb")
        if hb and hb.get("counter", 0) > 0:
            labels.setdefault(hb.get("label") or "(no label)", []).append(r)
    if labels and len(labels) <= 3 and rep.verdict != "TOGETHER":
        rep.reason += " " + " ".join(
            "%s last checked in at %s." % (("Rank %s" if len(rs_) == 1 else "Ranks %s") % format_ranks(rs_),
                                          json.dumps(lab)) for lab, rs_ in sorted(labels.items()))
    rep.stack_verdict = rep.verdict
    stuck_n = [f.get("n", 0) for f in facts.values() if f.get("state") == "stuck"]
    if stuck_n and max(stuck_n) == 1 and rep.verdict not in ("INCONCLUSIVE", "NO_HANG"):
        rep.warnings.append("each rank has only one usable stack sample: the report cannot tell a stuck "
                            "rank from a slow one; take more dumps (the watchdog repeats every period)")
    return rep


def _verdict(rep: Report, groups: List[Group], facts: Dict[int, dict]):
    stuck = [g for g in groups if g.state == "stuck"]
    prog = [g for g in groups if g.state == "progressing"]
    gone = [g for g in groups if g.state == "exited"]
    unknown = [g for g in groups if g.state == "unknown"]
    absent = sorted(set(rep.missing_ranks) | set(rep.unwatched_ranks)
                    | {r for g in unknown for r in g.ranks})
    n_stuck = sum(len(g.ranks) for g in stuck)
    stuck.sort(key=lambda g: (-len(g.ranks), g.ranks[0]))
    for g in prog:
        g.role = "progressing"
    for g in gone:
        g.role = "exited"
    for g in unknown:
        g.role = "unknown"

    def where(g):
        f = g.frame
        s = short_where(f) if f else "(no Python frame)"
        if g.collective:
            s += " (in %s)" % g.collective
        return s

    def rs(ranks):
        ranks = sorted(ranks)
        return ("rank %s" if len(ranks) == 1 else "ranks %s") % format_ranks(ranks)

    total_seen = sum(len(g.ranks) for g in groups if g.state != "unknown")
    if not stuck and not prog and not gone:
        hbs = [r for r, f in facts.items() if f.get("hb")]
        if hbs and not any(f.get("n") for f in facts.values()):
            rep.verdict = "NO_HANG"
            rep.why = "no rank wrote a stack dump; %s checked in (heartbeats)" % rs(hbs)
            rep.reason = ("no hang seen: no rank stopped long enough for its watchdog to dump, and %s "
                          "checked in." % rs(hbs))
        else:
            rep.verdict = "INCONCLUSIVE"
            if not facts and not rep.unwatched:
                rep.why = "no stack dumps found"
            elif not facts:
                rep.why = "no rank was watched (%s unwatched)" % rs(rep.unwatched_ranks)
            else:
                rep.why = "no rank has a usable stack sample (%s)" % "; ".join(
                    sorted({g.detail or "" for g in unknown})[:3])
            rep.reason = "cannot tell: %s." % rep.why
        rep.groups = sorted(groups, key=lambda g: g.ranks[0])
        return

    if gone:
        _gone(rep, stuck, prog, gone, unknown, facts, where, rs, total_seen)
        return

    if not stuck:
        rep.verdict = "SLOW"
        moving = sorted(r for g in prog for r in g.ranks)
        rep.reason = ("no hang: %s %s still moving (samples change between dumps). Slow, not stuck."
                      % (rs(moving), "is" if len(moving) == 1 else "are"))
        rep.groups = prog + unknown
        return

    if prog:
        rep.verdict = "SLOW"
        moving = sorted(r for g in prog for r in g.ranks)
        for g in stuck:
            g.role = "waiting"
        rep.reason = ("no confirmed hang: %s %s still moving while %s wait%s at %s. If %s never arrive%s "
                      "there, %s %s the one%s that went the other way." % (
                          rs(moving), "is" if len(moving) == 1 else "are",
                          rs([r for g in stuck for r in g.ranks]), "s" if n_stuck == 1 else "",
                          where(stuck[0]), rs(moving), "s" if len(moving) == 1 else "",
                          "it" if len(moving) == 1 else "they", "is" if len(moving) == 1 else "are",
                          "" if len(moving) == 1 else "s"))
        rep.groups = stuck + prog + unknown
        return

    if len(stuck) == 1:
        g = stuck[0]
        g.role = "waiting"
        if absent:
            rep.verdict = "MISSED"
            rep.suspect_ranks = absent
            why = []
            if rep.missing_ranks:
                why.append("%s left no dumps" % rs(rep.missing_ranks))
            if rep.unwatched_ranks:
                why.append("%s %s never armed" % (rs(rep.unwatched_ranks),
                                                  "was" if len(rep.unwatched_ranks) == 1 else "were"))
            unk = sorted(r for u in unknown for r in u.ranks)
            if unk:
                why.append("%s gave no usable stack" % rs(unk))
            rep.reason = ("%d of %s ranks are waiting together at %s; %s. The ranks that are not there are "
                          "where the bug is (or their dumps were lost): %s." % (
                              n_stuck, rep.world or n_stuck + len(absent), where(g), "; ".join(why), rs(absent)))
        elif n_stuck < 2:
            rep.verdict = "INCONCLUSIVE"
            rep.why = "only one rank: a single rank cannot disagree with itself"
            rep.reason = "cannot tell: %s (it is at %s)." % (rep.why, where(g))
        else:
            rep.verdict = "TOGETHER"
            rep.reason = ("all %d ranks are waiting together at %s: this is not a missed collective. Check "
                          "what the ranks passed there (shapes, dtypes, sequence numbers: Flight Recorder), "
                          "the network and NCCL (RAS, NCCL logs) and the GPUs (nvidia-smi)." % (n_stuck, where(g)))
            _together_labels(rep, g, facts, rs)
        rep.groups = stuck + unknown
        return

    # two or more stuck groups
    big = stuck[0]
    unique_big = len(big.ranks) > len(stuck[1].ranks)
    majority = unique_big and len(big.ranks) * 2 > n_stuck
    known = [g for g in stuck if g.in_collective]
    lines = _join(["%s at %s" % (rs(g.ranks), where(g)) for g in stuck])
    if len(known) >= 2:
        rep.verdict = "SPLIT"
        for g in stuck:
            g.role = "waiting"
        if majority:
            rep.suspect_ranks = sorted(r for g in stuck[1:] for r in g.ranks)
            for g in stuck[1:]:
                g.role = "divergent"
            rep.reason = ("the ranks wait in %d different collectives: %s. Each side waits for the other. "
                          "%d of %d ranks agree at %s, so the likely bug is the branch that sent %s to a "
                          "different collective; check both lines." % (
                              len(stuck), lines, len(big.ranks), n_stuck, where(big), rs(rep.suspect_ranks)))
        else:
            rep.reason = ("the ranks wait in %d different collectives: %s. No group holds a majority, so "
                          "the report names no culprit: find the branch that sends these ranks to different "
                          "collectives." % (len(stuck), lines))
    elif len(known) == 1:
        w = known[0]
        rep.verdict = "MISSED"
        w.role = "waiting"
        others = [g for g in stuck if g is not w]
        for g in others:
            g.role = "divergent"
        rep.suspect_ranks = sorted(r for g in others for r in g.ranks)
        rep.reason = ("%d of %d ranks are waiting together at %s, and %s %s somewhere else (%s). That line "
                      "is where the collective is; %s %s where the bug is." % (
                          len(w.ranks), n_stuck, where(w), rs(rep.suspect_ranks),
                          "is" if len(rep.suspect_ranks) == 1 else "are",
                          _join([where(g) for g in others]), rs(rep.suspect_ranks),
                          "is" if len(rep.suspect_ranks) == 1 else "are"))
    elif majority:
        rep.verdict = "MISSED"
        big.role = "waiting"
        for g in stuck[1:]:
            g.role = "divergent"
        rep.suspect_ranks = sorted(r for g in stuck[1:] for r in g.ranks)
        rep.reason = ("%d of %d ranks are waiting together at %s, and %s %s somewhere else (%s). That line "
                      "is where the collective is (its frames are not visible, e.g. mpi4py's Cython call); "
                      "%s %s where the bug is." % (
                          len(big.ranks), n_stuck, where(big), rs(rep.suspect_ranks),
                          "is" if len(rep.suspect_ranks) == 1 else "are",
                          _join([where(g) for g in stuck[1:]]), rs(rep.suspect_ranks),
                          "is" if len(rep.suspect_ranks) == 1 else "are"))
    else:
        rep.verdict = "SPLIT"
        for g in stuck:
            g.role = "waiting"
        rep.reason = ("the ranks are stopped at %d different places and no group holds a majority: %s. "
                      "The report names no culprit; compare the lines." % (len(stuck), lines))
    if absent:
        rep.reason += " Not seen: %s." % rs(absent)
    rep.groups = stuck + unknown


def _together_labels(rep, g, facts, rs):
    """TOGETHER at one line, but their last check-ins differ (e.g. one rank a step or a
    collective sequence number behind): name the minority label's ranks as suspects."""
    by: Dict[str, List[int]] = {}
    for r in g.ranks:
        hb = facts[r].get("hb")
        if not hb or not hb.get("counter"):
            return  # labels are only evidence when every rank checked in
        by.setdefault(hb.get("label") or "", []).append(r)
    if len(by) < 2:
        return
    top = sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    if len(top[0][1]) * 2 <= len(g.ranks):
        rep.reason += (" But their last check-ins differ (%s): they may be in different iterations of this "
                       "collective." % _join(["%s at %s" % (rs(v), json.dumps(k)) for k, v in top]))
        return
    odd = sorted(r for _, v in top[1:] for r in v)
    rep.suspect_ranks = odd
    rep.reason += (" But their last check-ins differ: %s checked in at %s, %s at %s. %s may be one step or "
                   "collective behind (compare Flight Recorder sequence ids): the likely suspect%s." % (
                       rs(top[0][1]), json.dumps(top[0][0]), rs(odd),
                       _join([json.dumps(k) for k, _ in top[1:]], 3), rs(odd).capitalize(),
                       "" if len(odd) == 1 else "s"))


def _join(items: List[str], n: int = 4) -> str:
    """``a; b; c`` with at most ``n`` items, then ``and K more``."""
    if len(items) <= n:
        return "; ".join(items)
    return "; ".join(items[:n]) + "; and %d more" % (len(items) - n)


_CONSEQUENCE_RE = re.compile(r"closed by peer|reset by peer|remote worker|remote process|[Tt]imed out|"
                             r"[Tt]imeout|Broken pipe|Connection refused|ECONNRESET|peer .*(exit|crash)|"
                             r"DistNetworkError|aborted by another rank", re.I)


def _is_consequence(err: Optional[str]) -> bool:
    """True for exit errors that say a PEER went away or never answered (timeouts,
    connection closed/reset by peer): such a rank is a victim, not the culprit."""
    return bool(err) and bool(_CONSEQUENCE_RE.search(err))


def short_error(err: Optional[str], limit: int = 110) -> str:
    """An exit error as one short line: gloo's ``[/path/file.cc:NN] `` prefix dropped, cut at ``limit``."""
    if not err:
        return "no traceback"
    e = re.sub(r"\[/[^\]]*\.(cc|cpp|h|hpp):\d+\] ", "", err)
    e = e.split(". This is typically", 1)[0]
    return e if len(e) <= limit else e[:limit - 3] + "..."


def _norm_error(err: str) -> str:
    return re.sub(r"\d+", "N", short_error(err))


def _gone(rep, stuck, prog, gone, unknown, facts, where, rs, total_seen):
    """GONE: some ranks exited. Exits whose error says a peer went away are victims;
    the suspects are the ranks that failed on their own, else the ranks that did not
    fail that way (the other side), else the minority of the last positions."""
    rep.verdict = "GONE"
    exited = sorted(r for g in gone for r in g.ranks)
    victims = [r for r in exited if _is_consequence(facts[r].get("exit"))]
    primary = [r for r in exited if r not in victims]
    alive = stuck + prog
    alive_ranks = sorted(r for g in alive for r in g.ranks)
    errs = sorted({_norm_error(facts[r].get("exit") or "") for r in victims})
    verr = "; ".join(short_error(facts[min(r for r in victims if _norm_error(facts[r].get("exit") or "") == e)]
                                 .get("exit")) for e in errs[:2])
    for g in stuck:
        g.role = "waiting"
    if primary:
        rep.suspect_ranks = primary
        perr = "; ".join(sorted({short_error(facts[r].get("exit")) for r in primary})[:3])
        parts = ["%s exited on %s own (%s)" % (rs(primary), "its" if len(primary) == 1 else "their", perr)]
        if stuck:
            parts.append("while %s wait%s at %s: they are waiting for a rank that is gone" % (
                rs(alive_ranks), "s" if len(alive_ranks) == 1 else "", where(stuck[0])))
        if victims:
            parts.append("%s then failed because a peer went away (%s)" % (rs(victims), verr))
        rep.reason = "%s. %s %s where the bug is: see the last traceback below." % (
            "; ".join(parts), rs(primary).capitalize(), "is" if len(primary) == 1 else "are")
        rep.groups = [g for g in gone if set(g.ranks) & set(primary)] + stuck + \
            [g for g in gone if not set(g.ranks) & set(primary)] + prog + unknown
        return
    if alive:
        rep.suspect_ranks = alive_ranks
        for g in alive:
            g.role = "divergent"
        rep.reason = ("%s exited with errors saying a peer went away or never answered (%s): %s victims. "
                      "%s did not fail that way; last seen at %s. %s went the other way (left without an "
                      "error, or is still elsewhere): %s %s where the bug is." % (
                          rs(victims), verr, "they are" if len(victims) > 1 else "it is a",
                          rs(alive_ranks).capitalize(), _join([where(g) for g in alive]),
                          "It" if len(alive_ranks) == 1 else "They", rs(alive_ranks),
                          "is" if len(alive_ranks) == 1 else "are"))
        rep.groups = alive + gone + unknown
        return
    # everyone is gone, all as victims: the last positions still show who went the other way
    gone.sort(key=lambda g: (-len(g.ranks), g.ranks[0]))
    big = gone[0]
    if len(gone) > 1 and len(big.ranks) > len(gone[1].ranks) and len(big.ranks) * 2 > total_seen:
        rep.suspect_ranks = sorted(r for g in gone[1:] for r in g.ranks)
        rep.reason = ("all observed ranks exited (%s). Before exiting, %s were at %s and %s elsewhere (%s): "
                      "%s %s where the bug is." % (
                          verr, rs(big.ranks), where(big), rs(rep.suspect_ranks),
                          _join([where(g) for g in gone[1:]]), rs(rep.suspect_ranks),
                          "is" if len(rep.suspect_ranks) == 1 else "are"))
    else:
        rep.suspect_ranks = []
        rep.reason = ("all observed ranks exited (%s); their last positions do not single out a rank."
                      % (verr or "no traceback"))
    rep.groups = gone + unknown


def _apply_timing(facts: Dict[int, dict]) -> None:
    """Wall-clock evidence (log mtimes, heartbeat times), applied before grouping:

    - a stuck rank that checked in (heartbeat counter > 0) after its last dump is
      *progressing*: its dumps are history;
    - a rank that wrote nothing (no dump, no check-in) for more than
      max(3 watchdog periods, SILENT_MIN_S = 5 s) while another rank kept writing *went silent*:
      a watched rank that is stuck keeps dumping every period, so it exited, was
      killed, or its node is gone (state *exited*).
    Copies whose mtimes were reset (a plain copy) look fresh and change nothing.
    """
    lasts: Dict[int, float] = {}
    for r, f in facts.items():
        ts = [t for t in (f.get("last_write"), (f.get("hb") or {}).get("wall_s")) if t is not None]
        if ts:
            lasts[r] = max(ts)
    if len(lasts) < 2:
        return
    ref = max(lasts.values())
    for r, f in facts.items():
        hb = f.get("hb")
        lw = f.get("last_write")
        if f.get("state") == "stuck" and hb and lw is not None and hb.get("counter", 0) > 0 \
                and hb["wall_s"] > lw + 0.01:
            f["state"] = "progressing"
            f["detail"] = "checked in (%s) %.0f s after its last dump: moving" % (
                json.dumps(hb.get("label") or ""), hb["wall_s"] - lw)
        period = f.get("period_s") or (hb or {}).get("period_s")
        if lw is not None and period and f.get("state") in ("stuck", "progressing", "unknown"):
            silent = ref - lasts[r]
            if silent > max(3 * period, SILENT_MIN_S):
                f["state"] = "exited"
                f["silent_s"] = round(silent, 1)
                f["exit"] = ("went silent: nothing written for %.0f s while other ranks kept writing "
                             "(exited, killed, or its node is gone)" % silent)


def adopt_sections(rep: Report):
    """The extension rule: when the stacks say TOGETHER or INCONCLUSIVE and a section
    (Flight Recorder first, then NCCL RAS) gives a verdict, adopt it and its suspects,
    with a warning naming the source; a RAS verdict of TOGETHER never adds suspects."""
    if rep.stack_verdict not in ("TOGETHER", "INCONCLUSIVE") or rep.adopted_from:
        return
    for name in ("flight_recorder", "nccl_ras"):
        sec = rep.sections.get(name)
        if not isinstance(sec, dict):
            continue
        v = sec.get("verdict")
        if not v or v not in VERDICTS or v == rep.verdict:
            continue
        sus = sec.get("suspect_ranks")
        if name == "nccl_ras" and v == "TOGETHER":
            sus = None
        label = name.replace("_", " ")
        rep.warnings.append("verdict %s taken from the %s section (the stacks said %s): %s" % (
            v, label, rep.stack_verdict, sec.get("summary") or ""))
        rep.verdict = v
        rep.adopted_from = name
        rep.suspect_ranks = sorted(int(x) for x in sus if isinstance(x, int)) if isinstance(sus, list) else []
        rep.reason = "%s (from the %s section; the stacks alone said %s: %s)" % (
            (sec.get("summary") or v).rstrip("."), label, rep.stack_verdict, rep.reason)
        return


# --- top level ----------------------------------------------------------------------

def positions(logs: Iterable[ParsedLog], samples: int = 5) -> Dict[int, dict]:
    """Per rank: its facts (state, modal position, samples used) from parsed logs.

    Returns ``{rank: {"state", "chain" (tuple of Frame, innermost first) or None,
    "n", "mode", ...}}``. Logs without a rank are ignored.
    """
    s = summarize_node(list(logs), samples=samples)
    _, chains, facts, _, _ = _unpack(s)
    out = {}
    for r, f in facts.items():
        g = dict(f)
        rec = chains.get(f.get("key")) if f.get("key") else None
        g["chain"] = _frames_from_json(rec["frames"]) if rec else None
        out[r] = g
    return out


def _hd_dir(path: str) -> str:
    hd = os.path.join(path, "hang_detector")
    return hd if os.path.isdir(hd) else path


def _dedupe(logs: List[ParsedLog]) -> List[ParsedLog]:
    """The same process's log copied twice (scratch + hang_detector/watchdog): keep the fuller copy."""
    best: Dict[tuple, ParsedLog] = {}
    rest = []
    for lg in logs:
        if lg.kind == "faulthandler" and lg.pid is not None and lg.rank is not None:
            k = (lg.rank, lg.pid)
            old = best.get(k)
            if old is None or (len(lg.samples), lg.mtime or 0.0, lg.name) > (
                    len(old.samples), old.mtime or 0.0, old.name):
                best[k] = lg
        else:
            rest.append(lg)
    return list(best.values()) + rest


#: raw-dump directories with at least this many files are parsed on several cores
PARALLEL_MIN_FILES = 4096


def _fix_ranks(logs: List[ParsedLog]) -> None:
    """A log without a rank takes the rank of the other logs of its pid, when that is unique."""
    pid_rank = {(lg.host, lg.pid): lg.rank for lg in logs if lg.rank is not None and lg.pid is not None}
    pid_only: Dict[int, set] = {}
    for (h, p), r in pid_rank.items():
        pid_only.setdefault(p, set()).add(r)
    for lg in logs:
        if lg.rank is None and lg.pid is not None and len(pid_only.get(lg.pid, ())) == 1:
            lg.rank = next(iter(pid_only[lg.pid]))


def _summarize_contents(c: DirContents, world_size: Optional[int], samples: int) -> dict:
    _fix_ranks(c.logs)
    return summarize_node(_dedupe(c.logs), tracebacks=c.tracebacks, heartbeats=c.heartbeats,
                          unwatched=c.unwatched, warnings=c.warnings, world_size=world_size, samples=samples)


def _summarize_files(args) -> dict:
    """Worker: the node summary of ``files`` under ``path`` (a disjoint set of whole ranks)."""
    path, files, world_size, samples = args
    return _summarize_contents(read_dir(path, files), world_size, samples)


def _workers(n_files: int, workers: Optional[int]) -> int:
    if workers is not None:
        return max(1, int(workers))
    if n_files < PARALLEL_MIN_FILES:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def _other_threads() -> bool:
    th = sys.modules.get("threading")
    return th is not None and th.active_count() > 1


def _split_by_rank(path: str, files: List[str], workers: int):
    """``(serial, buckets)``: files routed to worker buckets by rank, and the rest.

    Only rank-side files whose name carries the rank (``watchdog/rank_<r>.pid<p>.log``,
    ``heartbeats/rank_<r>.pid<p>.hb``) are routed.  Everything else (captures, py-spy
    dumps, tracebacks, markers, summaries, rank-less logs) is parsed here first, and a
    rank it mentions keeps all its files here too, so every rank's data is summarized
    in exactly one place and the merge equals the serial summary.
    """
    from hpc_hangkit import layout

    routed: Dict[int, List[str]] = {}
    pid_ranks: Dict[int, set] = {}
    serial: List[str] = []
    for fp in files:
        parent = os.path.basename(os.path.dirname(fp))
        parsed = layout.parse_rank_file_name(os.path.basename(fp))
        if (parsed and parsed[0] is not None and (parent, parsed[2]) in (
                (layout.WATCHDOG_DIR, "log"), (layout.HEARTBEAT_DIR, "hb"))
                and "hang_detector" not in fp[len(path):].split(os.sep)):
            routed.setdefault(parsed[0], []).append(fp)
            pid_ranks.setdefault(parsed[1], set()).add(parsed[0])
        else:
            serial.append(fp)
    c = read_dir(path, serial) if serial else DirContents()
    touched = set(c.tracebacks) | set(c.unwatched)
    for lg in c.logs:
        if lg.rank is not None:
            touched.add(lg.rank)
        elif lg.pid is not None:
            touched |= pid_ranks.get(lg.pid, set())
    buckets: List[List[str]] = [[] for _ in range(workers)]
    extra: List[str] = []
    for r, fs in routed.items():
        if r in touched:
            extra.extend(fs)
        else:
            buckets[r % workers].extend(fs)
    if extra:
        more = read_dir(path, sorted(extra))
        c.logs.extend(more.logs)
        c.heartbeats.extend(more.heartbeats)
        c.warnings.extend(more.warnings)
        c.files += more.files
    return c, [b for b in buckets if b]


def summarize_dir(path: str, *, world_size: Optional[int] = None, samples: int = 5,
                  workers: Optional[int] = None) -> dict:
    """Read ``path`` (see :func:`read_dir`) and return its node summary merged with any
    ``*.summary.json`` found there.

    ``workers``: processes that parse raw dumps (default: one per available core, up
    to 8, when the directory holds at least :data:`PARALLEL_MIN_FILES` files; 1 =
    serial).  They are forked, so only from a process with no other threads; with
    threads running the parse is serial.  The result does not depend on it: ranks are split whole between the
    processes and their summaries merged (:func:`merge`).  If the worker processes
    cannot be started the directory is parsed serially.
    """
    if not os.path.exists(path):
        raise FileNotFoundError("no such file or directory: %s" % path)
    files = _list_files(path)
    n = _workers(len(files), workers)
    if n > 1 and (not hasattr(os, "fork") or _other_threads()):
        n = 1  # workers are forked: never from a process with other threads (their locks)
    parts: List[dict] = []
    if n > 1:
        c, buckets = _split_by_rank(path, files, n)
        if len(buckets) > 1:
            try:
                import concurrent.futures
                import multiprocessing

                ctx = multiprocessing.get_context("fork")
                with concurrent.futures.ProcessPoolExecutor(len(buckets), mp_context=ctx) as ex:
                    parts = list(ex.map(_summarize_files, [(path, b, world_size, samples) for b in buckets]))
            except Exception as e:  # no processes here (limits, sandbox): do it in this one
                c.warnings.append("parallel parse unavailable (%s: %s); parsed serially" % (
                    e.__class__.__name__, e))
                parts = [_summarize_files((path, b, world_size, samples)) for b in buckets]
        elif buckets:
            parts = [_summarize_files((path, buckets[0], world_size, samples))]
    else:
        c = read_dir(path, files)
    own = _summarize_contents(c, world_size, samples)
    if parts:
        return merge(own, *parts, *c.summaries)
    if c.summaries:
        return merge(own, *c.summaries) if (c.logs or c.unwatched or c.tracebacks or c.heartbeats) else merge(
            *c.summaries)
    return own


def report_from_dir(path: str, *, world_size: Optional[int] = None, depth: Optional[int] = None,
                    samples: int = 5, now: Optional[float] = None) -> Report:
    """The roll call over everything under ``path`` (a directory or one file).

    ``world_size``: number of ranks (default: from the dump headers); ranks
    below it with no data are listed as missing. ``depth``: group by the
    innermost N frames (default: the whole chain). ``samples``: K, how many of
    each rank's newest samples decide its position. ``now``: epoch seconds for
    check-in ages (default: the report's own clock).

    After the stack analysis, the Flight Recorder and NCCL RAS sections
    (``hpc_hangkit.flightrec`` / ``hpc_hangkit.ras`` ``section_from_dir``) are
    added when those modules import and their subdirectories exist.
    Raises ``FileNotFoundError`` when ``path`` does not exist; everything else
    (bad files, missing modules) becomes a warning.
    """
    summary = summarize_dir(path, world_size=world_size, samples=samples)
    return report_from_summary_and_dir(summary, path, depth=depth, world_size=world_size, now=now)


def report_from_summary_and_dir(summary: dict, path: str, *, depth: Optional[int] = None,
                                world_size: Optional[int] = None, now: Optional[float] = None) -> Report:
    """:func:`build_report` of ``summary``, plus the extension sections found under ``path``."""
    rep = build_report(summary, depth=depth, world_size=world_size,
                       now=now if now is not None else time.time())
    add_sections(rep, path)
    return rep


def add_sections(rep: Report, path: str) -> None:
    """Add the Flight Recorder / NCCL RAS sections under ``path`` (or ``path/hang_detector``)
    to ``rep`` and apply the adoption rule (docs/report.md). Failures become warnings."""
    if not os.path.isdir(path):
        return
    import importlib

    hd = _hd_dir(path)
    for name, mod, sub in (("flight_recorder", "hpc_hangkit.flightrec", "flight_recorder"),
                           ("nccl_ras", "hpc_hangkit.ras", "nccl_ras")):
        if not os.path.isdir(os.path.join(hd, sub)):
            continue
        try:
            m = importlib.import_module(mod)
            sec = m.section_from_dir(hd)
        except Exception as e:  # an extension must never lose the roll call
            rep.warnings.append("%s section unavailable (%s: %s)" % (name.replace("_", " "),
                                                                     e.__class__.__name__, e))
            continue
        if sec is not None:
            rep.sections[name] = sec
    adopt_sections(rep)
