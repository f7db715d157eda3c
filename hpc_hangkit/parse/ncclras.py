"""Pure parser of NCCL RAS output (``ncclras -f json`` and the text report).

Input is the bytes/str the ``ncclras`` client printed; nothing here runs a
process or reads the clock. Facts this relies on (NCCL 2.28.7 .. 2.32):

- JSON is one document: ``nccl_version``, ``timestamp`` (local time of the
  answering process, ``"%F %T"``, 1 s resolution), ``communicators[]`` each with
  ``hash`` (``"0x%lx"``, not zero padded), ``secondary_hash``, ``size``,
  ``ranks[]`` (``rank`` = rank *within the communicator*, ``host``, ``pid``,
  ``cuda_dev``, ``status{init_state, async_error, finalize_called,
  destroy_flag, abort_flag}``, ``collective_counts{Broadcast, Reduce,
  AllGather, ReduceScatter, AllReduce}`` = *launch* counts), ``missing_ranks[]``
  (``status{unresponsive, considered_dead}``), and ``ras{collection_time_sec,
  timeouts_count}``.
- NCCL 2.28.7 and 2.28.9 omit the comma after a missing rank's
  ``"nvml_dev": N`` (invalid JSON whenever a rank is missing). :func:`repair_json`
  inserts exactly that comma and nothing else.
- A rank's status follows NCCL's own rule (client_support.cc):
  ``abort_flag`` -> ABORT, else ``finalize_called or destroy_flag`` -> FINALIZE,
  else ``init_state == 0`` -> RUNNING, else INIT. A missing rank is NOCOMM if
  its process answered (``unresponsive`` false), else UNRESPONSIVE or DEAD.
- Communicator hashes are compared numerically (``int(hash, 16)``): the text
  report prints them as ``%016lx`` without ``0x``.
"""
import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

OPS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")

ABORT, FINALIZE, RUNNING, INIT = "ABORT", "FINALIZE", "RUNNING", "INIT"
NOCOMM, UNRESPONSIVE, DEAD = "NOCOMM", "UNRESPONSIVE", "DEAD"


class RasParseError(ValueError):
    """The input is not an ``ncclras -f json`` document (message says why and where)."""


@dataclass(frozen=True)
class RasRank:
    """One rank of one communicator as RAS reported it.

    ``rank``: rank within the communicator; ``host``: IP of its RAS interface
    (or "unknown"); ``pid``: -1 if unknown; ``status``: one of ABORT, FINALIZE,
    RUNNING, INIT (reported ranks) or NOCOMM, UNRESPONSIVE, DEAD (missing
    ranks); ``counts``: launch count per op in :data:`OPS` order (empty for a
    missing rank); ``init_state``/``async_error``: ncclResult_t values.
    """

    rank: int
    host: str
    pid: int
    cuda_dev: int
    status: str
    counts: Tuple[int, ...] = ()
    init_state: int = 0
    async_error: int = 0
    missing: bool = False

    def count(self, op: str) -> int:
        return self.counts[OPS.index(op)] if self.counts else 0


@dataclass(frozen=True)
class RasComm:
    """One communicator: ``key`` is the normalised id ``"0x<hash>"`` (lower case,
    no padding; ``":<secondary_hash>"`` appended only when two communicators of
    one poll share a hash); ``hash`` the raw string; ``ranks`` the reported
    ranks, ``missing`` the missing ones."""

    key: str
    hash: str
    secondary_hash: str
    size: int
    ranks: Tuple[RasRank, ...]
    missing: Tuple[RasRank, ...] = ()

    @property
    def short(self) -> str:
        """The hash as the text report prints it (``%016lx``)."""
        return "%016x" % int(self.hash, 16)


@dataclass
class RasPoll:
    """One parsed ``ncclras -f json`` answer.

    ``timestamp``: the answering process's local time string; ``t``: the
    poller's clock when the answer arrived (seconds; set by the caller, None
    for a file read back without one); ``raw``: the text as received (after
    repair, if any); ``repaired``: True if the 2.28.x comma bug was repaired.
    """

    nccl_version: str
    timestamp: str
    comms: Dict[str, RasComm]
    timeouts_count: int = 0
    collection_time_s: float = 0.0
    raw: str = ""
    repaired: bool = False
    t: Optional[float] = None
    warnings: List[str] = field(default_factory=list)


_MISSING_COMMA = re.compile(r'("nvml_dev":\s*-?\d+)(\s*\n\s*"status")')


def repair_json(text: str) -> Tuple[str, bool]:
    """Insert the comma NCCL 2.28.7/2.28.9 omit after a missing rank's ``"nvml_dev": N``.

    Returns ``(text, repaired)``. Only that exact pattern (``"nvml_dev": <int>``
    followed by a line starting ``"status"``) is touched.
    """
    fixed, n = _MISSING_COMMA.subn(r"\1,\2", text)
    return fixed, n > 0


def rank_status(status: dict) -> str:
    """NCCL's status rule for a reported rank (see module docstring)."""
    if status.get("abort_flag"):
        return ABORT
    if status.get("finalize_called") or status.get("destroy_flag"):
        return FINALIZE
    if _int(status.get("init_state", 0), 0) == 0:  # hostile 1e999 / "x": not an init state
        return RUNNING
    return INIT


def missing_status(status: dict) -> str:
    """Status of a missing rank: NOCOMM (its process answered), DEAD or UNRESPONSIVE."""
    if status.get("considered_dead"):
        return DEAD
    if status.get("unresponsive"):
        return UNRESPONSIVE
    return NOCOMM


def comm_key(hash_: str, secondary: str = "") -> str:
    """Normalised communicator key: ``0x<hex>`` of ``int(hash, 16)``, plus ``:secondary``."""
    try:
        h = "0x%x" % int(str(hash_), 16)
    except ValueError:
        h = str(hash_)
    return h + (":" + secondary.lower() if secondary else "")


def _int(v, default=-1):
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return default


def parse_ncclras_json(data, name: str = "<ncclras>") -> RasPoll:
    """Parse one ``ncclras -f json`` document (bytes or str).

    Repairs the 2.28.x missing comma first if plain ``json.loads`` fails.
    Raises :class:`RasParseError` (naming ``name`` and the line/column) for
    empty, truncated or non-RAS input. Unknown keys are ignored; a rank entry
    without ``collective_counts`` gets all-zero counts and a warning.
    """
    if isinstance(data, bytes):
        text = data.decode("utf-8", "replace")
    else:
        text = data
    if not text.strip():
        raise RasParseError("%s: empty ncclras output" % name)
    repaired = False
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        fixed, repaired = repair_json(text)
        try:
            doc = json.loads(fixed)
        except (ValueError, RecursionError) as e:
            raise RasParseError("%s: not valid ncclras JSON (line %s col %s: %s)"
                                % (name, getattr(e, "lineno", "?"), getattr(e, "colno", "?"),
                                   getattr(e, "msg", e))) from None
        text = fixed
    if not isinstance(doc, dict) or "communicators" not in doc:
        raise RasParseError("%s: JSON is not an ncclras STATUS document (no 'communicators')" % name)
    warnings: List[str] = []
    comms: Dict[str, RasComm] = {}
    for ci, c in enumerate(doc.get("communicators") or []):
        if not isinstance(c, dict) or "hash" not in c:
            warnings.append("%s: communicator #%d has no hash; skipped" % (name, ci))
            continue
        ranks = []
        for r in c.get("ranks") or []:
            if not isinstance(r, dict):
                warnings.append("%s: comm %s has a rank entry that is not an object; skipped" % (name, c["hash"]))
                continue
            cc = r.get("collective_counts")
            if not isinstance(cc, dict):
                warnings.append("%s: comm %s rank %s has no collective_counts" % (name, c["hash"], r.get("rank")))
                cc = {}
            st = r.get("status") if isinstance(r.get("status"), dict) else {}
            ranks.append(RasRank(rank=_int(r.get("rank")), host=str(r.get("host", "unknown")),
                                 pid=_int(r.get("pid")), cuda_dev=_int(r.get("cuda_dev")),
                                 status=rank_status(st), counts=tuple(_int(cc.get(op), 0) for op in OPS),
                                 init_state=_int(st.get("init_state"), 0),
                                 async_error=_int(st.get("async_error"), 0)))
        missing = []
        for r in c.get("missing_ranks") or []:
            if not isinstance(r, dict):
                warnings.append("%s: comm %s has a missing-rank entry that is not an object; skipped"
                                % (name, c["hash"]))
                continue
            missing.append(RasRank(rank=_int(r.get("rank")), host=str(r.get("host", "unknown")),
                                   pid=_int(r.get("pid")), cuda_dev=_int(r.get("cuda_dev")),
                                   status=missing_status(r.get("status") if isinstance(r.get("status"), dict)
                                                         else {}), missing=True))
        sec = str(c.get("secondary_hash", ""))
        key = comm_key(c["hash"])
        if key in comms:  # same commHash twice: the secondary hash tells them apart
            key = comm_key(c["hash"], sec)
        comms[key] = RasComm(key=key, hash=str(c["hash"]), secondary_hash=sec,
                             size=_int(c.get("size"), len(ranks) + len(missing)),
                             ranks=tuple(sorted(ranks, key=lambda x: x.rank)),
                             missing=tuple(sorted(missing, key=lambda x: x.rank)))
    ras = doc.get("ras") or {}
    try:
        ctime = float(ras.get("collection_time_sec", 0.0))
    except (TypeError, ValueError):
        ctime = 0.0
    return RasPoll(nccl_version=str(doc.get("nccl_version", "")), timestamp=str(doc.get("timestamp", "")),
                   comms=comms, timeouts_count=_int(ras.get("timeouts_count"), 0),
                   collection_time_s=ctime, raw=text, repaired=repaired, warnings=warnings)


# --- text report (``ncclras`` / ``ncclras -f text``) -------------------------

_VERSION = re.compile(r"^NCCL version (\S+)")
_BLOCK = re.compile(r"^#(\d+)-(\d+) \(([0-9a-f]+)\) (.+)$")
_OPDIFF = re.compile(r"^\s+Communicator ranks have different (\w+) operation counts")
_COUNT_N = re.compile(r"^\s+(\d+) ranks have launched up to operation (\d+)")
_COUNT_1 = re.compile(r"^\s+Rank (\d+) has launched up to operation (\d+)")


@dataclass
class RasTextReport:
    """What :func:`parse_ncclras_text` extracts from a text report.

    ``nccl_version``; ``complete``: False when the report stops after
    ``Communicators...`` (the client was killed before RAS answered);
    ``blocks``: one dict per ``#g-i (hash) KIND`` block in Errors/Warnings:
    ``{"comm": "#0-0", "hash": "0x...", "kinds": [...], "ops": {op: [(n_ranks|None, count, rank|None)]}, "lines": [...]}``.
    """

    nccl_version: str = ""
    complete: bool = False
    blocks: List[dict] = field(default_factory=list)
    text: str = ""


def parse_ncclras_text(data, name: str = "<ncclras>") -> RasTextReport:
    """Parse the human-readable RAS report (tolerant: never raises on odd input)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    rep = RasTextReport(text=text)
    cur = None
    op = None
    for line in text.splitlines():
        m = _VERSION.match(line)
        if m:
            rep.nccl_version = m.group(1)
            continue
        if line.startswith("Errors") or line.startswith("Warnings"):
            rep.complete = True
        m = _BLOCK.match(line)
        if m:
            cur = {"comm": "#%s-%s" % (m.group(1), m.group(2)), "hash": "0x%x" % int(m.group(3), 16),
                   "kinds": m.group(4).split(","), "ops": {}, "lines": []}
            rep.blocks.append(cur)
            op = None
            continue
        if cur is None:
            continue
        if not line.strip():
            cur = None
            continue
        cur["lines"].append(line.strip())
        m = _OPDIFF.match(line)
        if m:
            op = m.group(1)
            cur["ops"].setdefault(op, [])
            continue
        if op:
            m = _COUNT_N.match(line)
            if m:
                cur["ops"][op].append((int(m.group(1)), int(m.group(2)), None))
                continue
            m = _COUNT_1.match(line)
            if m:
                cur["ops"][op].append((1, int(m.group(2)), int(m.group(1))))
    return rep
