"""Pure parser of PyTorch Flight Recorder dumps (pickle from ``_dump_fr_trace``, JSON from
``_dump_fr_trace_json`` / the control-plane ``fr_trace_json`` handler, or our ``rank_<i>.json``).

Format (torch 2.13, dump version "2.10"): ``version``, ``pg_config``
(gloo keys it by ``''`` and omits sub-groups), ``pg_status``, ``entries[]`` with
``pg_id, process_group (name, desc), collective_seq_id, p2p_seq_id, op_id,
profiling_name ('gloo:all_reduce'), input_sizes, input_dtypes, output_sizes,
output_dtypes, state, retired, is_p2p, time_created_ns, frames[{name, filename,
line}]`` (frames innermost first; JSON dumps from torch carry none).

Pickles are loaded with an unpickler that refuses every global, so a hostile
file can build only plain containers and scalars.
"""
import io
import json
import pickle
import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple


class FRParseError(ValueError):
    """Not a Flight Recorder dump (message names the file and why)."""


@dataclass(frozen=True)
class FREntry:
    """One recorded collective. ``op``: the collective without backend prefix
    (``all_reduce``); ``pg``: process-group name; ``seq``: collective sequence
    id within the group (p2p ops: ``p2p_seq``); ``frames``: (file, line, function)
    innermost first; ``retired``: completed (gloo leaves ``state`` at "scheduled")."""

    pg: str
    pg_desc: str
    seq: int
    p2p_seq: int
    is_p2p: bool
    op: str
    profiling_name: str
    input_sizes: tuple
    input_dtypes: tuple
    output_sizes: tuple
    output_dtypes: tuple
    state: str
    retired: bool
    frames: Tuple[Tuple[str, int, str], ...] = ()

    def user_frame(self) -> Optional[Tuple[str, int, str]]:
        """The innermost frame outside torch (the user's call site), or None."""
        for f in self.frames:
            if "/torch/" not in f[0] and not f[0].startswith("<"):
                return f
        return self.frames[0] if self.frames else None

    def where(self) -> str:
        f = self.user_frame()
        return "%s:%d (%s)" % (f[0], f[1], f[2]) if f else "?"


@dataclass
class FRDump:
    """One rank's dump: ``rank`` (from the file name, or None), ``entries`` (record order),
    ``error`` (the ``dump_error`` text of a rank that could not dump), ``raw`` (the decoded
    dict, for re-writing), ``warnings``."""

    name: str
    rank: Optional[int]
    version: str = ""
    entries: List[FREntry] = field(default_factory=list)
    pg_config: dict = field(default_factory=dict)
    pg_status: dict = field(default_factory=dict)
    error: Optional[str] = None
    raw: dict = field(default_factory=dict, repr=False)
    warnings: List[str] = field(default_factory=list)


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError("global %s.%s refused (a Flight Recorder dump holds none)" % (module, name))


_RANK_RE = re.compile(r"(\d+)(?:\.(?:json|pickle|pkl))?$")


def rank_from_name(name: str) -> Optional[int]:
    """Trailing digits of a file name: ``rank_3.json`` -> 3, ``fr_host-a_12`` -> 12, else None."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    m = _RANK_RE.search(base)
    return int(m.group(1)) if m else None


def _t(v):
    if isinstance(v, (list, tuple)):
        return tuple(_t(x) for x in v)
    return v


def _entry(e: dict) -> FREntry:
    pg = e.get("process_group") or ("", "")
    name = str(e.get("profiling_name", ""))
    frames = tuple((str(f.get("filename", "")), int(f.get("line", 0) or 0), str(f.get("name", "")))
                   for f in (e.get("frames") or []) if isinstance(f, dict))
    return FREntry(pg=str(pg[0]), pg_desc=str(pg[1]) if len(pg) > 1 else "",
                   seq=int(e.get("collective_seq_id", 0) or 0), p2p_seq=int(e.get("p2p_seq_id", 0) or 0),
                   is_p2p=bool(e.get("is_p2p", False)), op=name.split(":", 1)[-1], profiling_name=name,
                   input_sizes=_t(e.get("input_sizes") or ()), input_dtypes=_t(e.get("input_dtypes") or ()),
                   output_sizes=_t(e.get("output_sizes") or ()), output_dtypes=_t(e.get("output_dtypes") or ()),
                   state=str(e.get("state", "")), retired=bool(e.get("retired", False)), frames=frames)


def parse_flightrec(data: bytes, name: str, rank: Optional[int] = None) -> FRDump:
    """Parse one dump (pickle or JSON bytes). ``rank`` defaults to :func:`rank_from_name`.

    Raises :class:`FRParseError` for empty, truncated or foreign input. A
    ``{"dump_error": ...}`` file gives a dump with ``error`` set and no entries.
    Malformed entries are skipped with a warning.
    """
    if rank is None:
        rank = rank_from_name(name)
    if not data:
        raise FRParseError("%s: empty file" % name)
    if data[:1] == b"\x80":
        try:
            doc = _SafeUnpickler(io.BytesIO(data)).load()
        except Exception as e:
            raise FRParseError("%s: unreadable pickle (%s: %s; %d bytes)" % (name, type(e).__name__, e,
                                                                             len(data))) from None
    else:
        try:
            doc = json.loads(data.decode("utf-8", "replace"))
        except (ValueError, RecursionError) as e:
            raise FRParseError("%s: not JSON or pickle (%s at byte %s)" % (name, getattr(e, "msg", e),
                                                                         getattr(e, "pos", "?"))) from None
    if not isinstance(doc, dict):
        raise FRParseError("%s: not a Flight Recorder dump (top level is %s)" % (name, type(doc).__name__))
    if "dump_error" in doc and "entries" not in doc:
        return FRDump(name=name, rank=rank, error=str(doc["dump_error"]), raw=doc)
    if "entries" not in doc:
        raise FRParseError("%s: not a Flight Recorder dump (no 'entries')" % name)
    d = FRDump(name=name, rank=rank, version=str(doc.get("version", "")), pg_config=doc.get("pg_config") or {},
               pg_status=doc.get("pg_status") or {}, raw=doc)
    for i, e in enumerate(doc.get("entries") or []):
        try:
            d.entries.append(_entry(e))
        except (TypeError, ValueError, AttributeError) as err:
            d.warnings.append("%s: entry %d skipped (%s)" % (name, i, err))
    return d
