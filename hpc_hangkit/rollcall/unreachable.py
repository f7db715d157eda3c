"""Nodes the monitor could not reach: one record per node, ``unreachable/<node>.json`` beside
the rank folders (the batch monitor's view, and the capture tree it reports from), written
by the batch monitor (:mod:`hpc_hangkit.slurm.sources`) when a node did not answer its probe
in time, read by the roll call into :attr:`hpc_hangkit.rollcall.verdict.Report.unreachable`.

Record: ``{"node": str, "since": epoch s, "ranks": "0-7" (its ranks as last known from
heartbeats and summaries, a rank set; "" when none known), "why": str}``.
"""
import json
import os
from typing import List

from hpc_hangkit import fsio, layout
from hpc_hangkit.ranges import format_ranks, parse_ranks

__all__ = ["UNREACHABLE_DIR", "write_unreachable", "clear_unreachable", "read_unreachable"]

#: the folder of unreachable-node records
UNREACHABLE_DIR = "unreachable"
#: bytes of one record read at most (a record is ~100 bytes)
_MAX_RECORD = 64 * 1024


def write_unreachable(path: str, node: str, since: float, ranks, why: str) -> str:
    """Write the record of ``node`` (a Slurm node name) under ``path``; ``ranks``: its rank
    numbers; ``since``: epoch seconds it first failed to answer. Returns the file written.
    Raises ValueError for a name that is not a node name, OSError when it cannot write."""
    if not layout.HOST_RE.match(node):
        raise ValueError("invalid node name %r" % (node,))
    d = os.path.join(path, UNREACHABLE_DIR)
    os.makedirs(d, exist_ok=True)
    out = os.path.join(d, node + ".json")
    doc = {"node": node, "since": round(float(since), 3), "ranks": format_ranks(sorted(set(ranks))), "why": why}
    fsio.write_atomic(out, json.dumps(doc, sort_keys=True).encode())
    return out


def clear_unreachable(path: str, node: str) -> None:
    """Remove the record of ``node`` under ``path`` (it answered again); no error when none."""
    if not layout.HOST_RE.match(node):
        return
    try:
        os.unlink(os.path.join(path, UNREACHABLE_DIR, node + ".json"))
    except FileNotFoundError:
        pass


def read_unreachable(path: str, warnings: List[str] = None) -> List[dict]:
    """The records under ``path/unreachable`` and ``path/hang_detector/unreachable``, one per node
    (where both hold one, the earlier ``since``), sorted by node: ``[{"node", "since", "ranks", "why"}]``. A damaged record is skipped with a line in
    ``warnings``; symlinks are never followed."""
    got = {}
    for d in (os.path.join(path, UNREACHABLE_DIR),
              os.path.join(path, layout.HANG_DETECTOR_DIR, UNREACHABLE_DIR)):
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            if not name.endswith(".json"):
                continue
            fp = os.path.join(d, name)
            try:
                doc = json.loads(fsio.read_regular(fp, limit=_MAX_RECORD).decode("utf-8"))
                node = str(doc["node"])
                if not layout.HOST_RE.match(node):
                    raise ValueError("bad node name")
                rec = {"node": node, "since": float(doc["since"]), "ranks": str(doc.get("ranks") or ""),
                       "why": str(doc.get("why") or "")}
                if rec["ranks"]:
                    parse_ranks(rec["ranks"])  # a damaged rank set is a damaged record
            except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
                if warnings is not None:
                    warnings.append("%s: unreachable-node record unreadable (%s); skipped" % (name, e))
                continue
            old = got.get(node)
            if old is None or rec["since"] < old["since"]:
                got[node] = rec
    return [got[n] for n in sorted(got)]
