"""Reading a directory for the roll call: every file under it sniffed and parsed
(faulthandler logs, py-spy dumps, tracebacks, heartbeats, unwatched markers, node
summaries) into one :class:`DirContents`. Names come from :mod:`hpc_hangkit.layout`.
"""
import json
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from hpc_hangkit import fsio, layout
from hpc_hangkit.parse.exits import Exit, ExitHow
from hpc_hangkit.parse.model import ParsedLog, basename
from hpc_hangkit.rollcall.facts import SUMMARY_SUFFIX, SUMMARY_VERSION

__all__ = ["DirContents", "rank_from_name", "list_files", "read_dir", "in_capture_tree"]

_RANK_NAME_RE = re.compile(r"rank[_-]?(\d+)", re.I)
#: extension subdirectories (read by their own sections) and caches: never sniffed
_SKIP_DIRS = frozenset((layout.FLIGHT_RECORDER_DIR, layout.NCCL_RAS_DIR, layout.NVIDIA_SMI_DIR, "__pycache__",
                        "unreachable"))  # rollcall.unreachable's records, read by the pipeline
#: hpc-hangkit's own outputs and job files next to the dumps
_SKIP_FILES = frozenset((layout.REPORT_TXT, layout.REPORT_JSON, layout.EVENTS_FILE, layout.MONITOR_LOG,
                         layout.JOB_ENV_FILE))
_MAX_FILE = fsio.DEFAULT_LIMIT


def rank_from_name(name: str) -> Optional[int]:
    """Rank from a file name: ``rank_3.pid77.log``, ``dump_native_rank0.txt``, ``rank3.json`` -> int."""
    base = basename(name)
    p = layout.parse_rank_file_name(base)
    if p is not None:
        return p[0]
    m = _RANK_NAME_RE.search(base)
    return int(m.group(1)) if m else None


def in_capture_tree(path: str) -> bool:
    """True if ``path`` lies in a capture/storage copy (under ``hang_detector/``), whose file
    times say when it was copied, not when a rank wrote it."""
    return layout.HANG_DETECTOR_DIR in path.split(os.sep)


@dataclass
class DirContents:
    """Everything :func:`read_dir` found. ``logs``: parsed dumps (faulthandler, py-spy);
    ``tracebacks``: rank -> exit traceback (its exit record, stdout/stderr files, else the
    monitor's vanished record); ``heartbeats``:
    heartbeat records; ``unwatched``: rank -> why it was never armed; ``summaries``: node
    summaries (dicts, version :data:`SUMMARY_VERSION`); ``warnings``: lines about files
    skipped or damaged; ``files``: how many files were read."""
    logs: List[ParsedLog] = field(default_factory=list)
    tracebacks: Dict[int, object] = field(default_factory=dict)
    heartbeats: list = field(default_factory=list)
    unwatched: Dict[int, str] = field(default_factory=dict)
    summaries: List[dict] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    files: int = 0


def exit_record(data: bytes):
    """A rank's exit record (``exits/rank_<r>.pid<p>.txt``, docs/internals.md "Exit record")
    as a :class:`hpc_hangkit.parse.traceback.Traceback` whose ``end`` says how it exited
    (:class:`~hpc_hangkit.parse.exits.Exit`): for an exception the rank's own traceback
    (``error`` its last line), for ``sys.exit`` the traceback the record holds if any,
    else no frames. None if the header is unreadable."""
    from hpc_hangkit.parse.traceback import Traceback, parse_tracebacks

    text = data.decode("utf-8", "replace")
    head, _, rest = text.partition("\n")
    kv = dict(x.split("=", 1) for x in head[len(layout.EXIT_PREFIX):].split() if "=" in x)
    how = kv.get("how")
    try:
        status = int(kv.get("status", ""))
    except ValueError:
        return None
    if how == "exception":
        tbs = parse_tracebacks(rest.encode("utf-8"), "exit record")
        tb = tbs.get(None) or (next(iter(tbs.values())) if tbs else None)
        if tb is not None:
            return tb
        return Traceback((), rest.splitlines()[-60:], "", Exit(ExitHow.EXCEPTION, status=status))
    if how == "normal":
        return Traceback((), [], "", Exit(ExitHow.NORMAL, status=status))
    if how == "exit":
        tbs = parse_tracebacks(rest.encode("utf-8"), "exit record") if rest.strip() else {}
        tb = tbs.get(None) or (next(iter(tbs.values())) if tbs else None)
        end = Exit(ExitHow.SYS_EXIT, status=status)
        return Traceback(tb.frames, tb.lines, "", end) if tb is not None else Traceback((), [], "", end)
    return None


def vanished_record(data: bytes):
    """The monitor's vanished record (``vanished/rank_<r>.pid<p>.txt``, docs/internals.md
    "Vanished record") as a :class:`hpc_hangkit.parse.traceback.Traceback` with no frames and
    ``end`` a VANISHED :class:`~hpc_hangkit.parse.exits.Exit` of its pid. None if the line is
    not one (no prefix, no integer pid)."""
    from hpc_hangkit.parse.traceback import Traceback

    kv = _vanished_fields(data)
    try:
        pid = int(kv.get("pid", ""))
    except (ValueError, AttributeError):
        return None
    return Traceback((), [], "", Exit(ExitHow.VANISHED, pid=pid))


def _vanished_fields(data: bytes) -> Optional[dict]:
    """The ``key=value`` fields of a vanished record's line (``pid``, ``host``, ``t``, ``seen``),
    or None when the line is not one."""
    head = data.decode("utf-8", "replace").partition("\n")[0]
    if not head.startswith(layout.VANISHED_PREFIX):
        return None
    return dict(x.split("=", 1) for x in head[len(layout.VANISHED_PREFIX):].split() if "=" in x)


def _record_time(data: bytes) -> Optional[float]:
    """The ``t=`` (epoch s) of a vanished record's line, or None."""
    try:
        return float((_vanished_fields(data) or {})["t"])
    except (KeyError, ValueError):
        return None


def _first_confirmed(paths: List[str], warnings: List[str]) -> Optional[float]:
    """The earliest ``t`` (epoch s) of a ``confirmed`` event in the monitors' ``events.jsonl``
    files ``paths`` (docs/internals.md), or None."""
    first = None
    for p in paths:
        data = _safe_read(p, warnings)
        for line in (data or b"").splitlines():
            if b'"confirmed"' not in line:
                continue
            try:
                ev = json.loads(line)
                t = float(ev["t"]) if ev.get("kind") == "confirmed" else None
            except (ValueError, TypeError, KeyError, AttributeError):
                continue
            if t is not None and (first is None or t < first):
                first = t
    return first


def _safe_read(path: str, warnings: List[str], stat_out: Optional[list] = None) -> Optional[bytes]:
    """The bytes of the regular file ``path`` (at most :data:`_MAX_FILE`, with a warning when
    cut); None, silently, for a symlink or a special file; None with a warning when it cannot
    be read. ``stat_out`` gets the file's mtime (epoch s) appended."""
    try:
        fd, st = fsio.open_regular(path)
    except fsio.NotRegular:
        return None
    except OSError as e:
        if os.path.islink(path):  # O_NOFOLLOW refused it; asked only here: one lstat less per file
            return None
        warnings.append("%s: cannot read (%s); skipped" % (path, e.strerror or e))
        return None
    try:
        if stat_out is not None:
            stat_out.append(st.st_mtime)
        data = fsio.read_fd(fd, st.st_size, _MAX_FILE + 1)
    except OSError as e:
        warnings.append("%s: cannot read (%s); skipped" % (path, e.strerror or e))
        return None
    finally:
        os.close(fd)
    if len(data) > _MAX_FILE:
        warnings.append("%s: larger than %d bytes; only the first %d bytes are read" % (path, _MAX_FILE, _MAX_FILE))
        data = data[:_MAX_FILE]
    return data


def list_files(path: str) -> List[str]:
    """Every file under ``path`` (or ``[path]`` for a file), sorted, skipping the
    extension subdirectories and never descending into symlinked directories."""
    if os.path.isfile(path):
        return [path]
    files: List[str] = []
    for root, dirs, names in os.walk(path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        pre = os.path.join(root, "")
        files.extend([pre + n for n in sorted(names)])
    return files


def read_dir(path: str, files: Optional[List[str]] = None) -> DirContents:
    """Read and parse every file under ``path`` (recursively, never following symlinks),
    or only ``files`` (paths under ``path``) when given.

    Sniffs each file: faulthandler logs (watchdog/, stack_traces/, any file with
    a dump marker), py-spy text/JSON dumps, ``*.summary.json`` node summaries,
    ``heartbeats/*.hb`` (via :mod:`hpc_hangkit.parse.heartbeat` when present),
    ``exits/*.txt`` exit records, ``vanished/*.txt`` vanished records, ``unwatched/*.txt`` markers, and text files holding Python tracebacks. Files
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
        files = list_files(path)
    prefix = path if path.endswith(os.sep) else path + os.sep
    hb_files: List[str] = []
    vanished: Dict[int, tuple] = {}  # rank -> (end, t epoch s or None, name): the monitor's records
    events: List[str] = []  # the monitors' events.jsonl files
    abs_dirs: Dict[str, str] = {}  # directory -> its absolute path (once per directory, not per file)
    for fp in files:
        if fp == path:
            name = os.path.basename(fp)
        elif fp.startswith(prefix):          # list_files joins under path: no relpath (abspath, cwd) per file
            name = fp[len(prefix):]
        else:
            name = os.path.relpath(fp, path)
        d, base = os.path.split(fp)
        if base in _SKIP_FILES:
            if base == layout.EVENTS_FILE:
                events.append(fp)
            continue
        if base.endswith(layout.HEARTBEAT_SUFFIX):
            if not os.path.islink(fp):
                hb_files.append(fp)
            continue
        parent = os.path.basename(d)
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
        if parent == layout.EXITS_DIR and data.startswith(layout.EXIT_PREFIX.encode()):
            r = rank_from_name(base)
            end = exit_record(data)
            if r is not None and end is not None:
                if end.frames or r not in out.tracebacks:  # the rank's own traceback, else its own end
                    out.tracebacks[r] = end
            elif r is not None:
                out.warnings.append("%s: exit record unreadable; skipped" % name)
            continue
        if parent == layout.VANISHED_DIR and base.endswith(layout.UNWATCHED_SUFFIX):
            r = rank_from_name(base)
            end = vanished_record(data)
            if r is None or end is None:
                out.warnings.append("%s: vanished record unreadable; skipped" % name)
            else:
                vanished[r] = (end, _record_time(data), name)
            continue
        if parent == layout.UNWATCHED_DIR and base.endswith(layout.UNWATCHED_SUFFIX):
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
                    parent == layout.STACK_TRACES_DIR):
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
        ad = abs_dirs.get(d)
        if ad is None:
            ad = abs_dirs[d] = os.path.abspath(d)
        if mt and not in_capture_tree(os.path.join(ad, base)):
            # file times are trusted only where the ranks write (node scratch), never in
            # capture/storage copies, whose times say when they were copied
            lg.mtime = mt[0]
        out.warnings.extend(lg.warnings)
        out.logs.append(lg)
    confirmed = _first_confirmed(events, out.warnings) if vanished else None
    for r, (end, t, name) in sorted(vanished.items()):
        if confirmed is not None and t is not None and t > confirmed:
            # the job's own end (time limit, scancel) after an observe-mode confirmation kills
            # the ranks one by one: the first to go is not what the hang was
            out.warnings.append("%s: rank %d vanished %.1f s after the hang was confirmed (the job's "
                                "end: time limit, scancel?): not part of this roll call" % (name, r, t - confirmed))
            continue
        # the rank's own record (or traceback) says more than the monitor's observation
        out.tracebacks.setdefault(r, end)
    out.heartbeats.extend(_read_heartbeats(hb_files, out.warnings))
    return out


def _read_heartbeats(paths: List[str], warnings: List[str]) -> list:
    """Heartbeat records of the ``rank_<r>.pid<pid>.hb`` files among ``paths``, sorted by
    (directory, rank, pid); problems become warnings, never exceptions."""
    hb_names = {rf.name for rf in layout.rank_files({os.path.basename(p) for p in paths}, "hb")}
    paths = [p for p in paths if os.path.basename(p) in hb_names]
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
