"""Where ``py-spy dump --native`` is worth its cost at capture, and how each rank is sampled.

A native dump costs about 0.6 s of CPU per rank (and py-spy is known to slow down
or hang on torch processes with many threads), while the rank's Python stack is in
its watchdog dump already. A native stack tells something new only for:

- the **suspects** (the ranks elsewhere: why they are where they are);
- **one representative of each waiting group** (what the majority waits in, down
  to the C++ frame; the others of the group stand at the same place);
- ranks whose stack stops in a call the roll call **cannot name** (no known
  collective): whatever blocks there is only visible in C.

Every rank still gets its Python stack (``py-spy dump`` without ``--native``); those
whose stack stands still inside a known collective are sampled ``--nonblocking``
(pausing a process that is not moving buys nothing). Each rank sampled without
``--native`` gets one *why-line* saying so.

Pure: :func:`plan` reads a roll-call report of this node's ranks (taken right after
the on-demand dumps), never the file system. Setting ``native_stacks``:
``auto`` (the rule above), ``all``, ``none``.
"""
import os
from dataclasses import dataclass
from typing import Dict, Iterable, Optional


@dataclass(frozen=True)
class Sampling:
    """How one rank is sampled: ``native`` (``--native``), ``nonblocking``
    (``--nonblocking``, Python-only dumps only) and ``why``: the reason, one line (for a
    rank without ``--native`` it is the why-line written into its stack file)."""

    native: bool
    nonblocking: bool
    why: str


def _label(g) -> str:
    f = getattr(g, "frame", None)
    where = "%s:%d" % (os.path.basename(f.file), f.line) if f is not None else "?"
    return "in %s at %s" % (g.collective, where) if g.collective else "at %s" % where


def plan(ranks: Iterable[int], report=None, suspects: Iterable[int] = (),
         mode: str = "auto") -> Dict[int, Sampling]:
    """``{rank: Sampling}`` for every rank of ``ranks`` (this node's live ranks).

    ``report``: the roll call over this node's rank files (a
    :class:`hpc_hangkit.rollcall.Report`: ``groups`` with ``ranks``, ``collective``,
    ``frame``, ``state``; ``suspect_ranks``), or None when it could not be made
    (then every rank is sampled ``--native``, blocking: nothing tells them apart).
    ``suspects``: the suspect ranks of the whole job, when the caller knows them
    (the monitor's confirmation). ``mode``: ``auto``, ``all`` or ``none``.
    Raises ValueError for another mode.
    """
    ranks = sorted(set(int(r) for r in ranks))
    if mode not in ("auto", "all", "none"):
        raise ValueError("native_stacks must be auto, all or none, got %r" % (mode,))
    if mode == "all":
        return {r: Sampling(True, False, "native_stacks = all") for r in ranks}
    if mode == "none":
        return {r: Sampling(False, False, "native_stacks = none") for r in ranks}
    if report is None:
        return {r: Sampling(True, False, "no roll call of this node to choose from") for r in ranks}
    local = set(ranks)
    sus = (set(int(r) for r in suspects) | set(report.suspect_ranks or [])) & local
    out: Dict[int, Sampling] = {}
    for g in report.groups or []:
        members = [r for r in g.ranks if r in local]
        if not members:
            continue
        rep = next((r for r in members if r in sus), members[0])
        waiting = g.collective is not None and getattr(g, "state", "stuck") == "stuck"
        for r in members:
            if r in out:
                continue
            if r in sus:
                out[r] = Sampling(True, False, "suspect")
            elif getattr(g, "frame", None) is None:
                out[r] = Sampling(True, False, "no position in the roll call (%s)"
                                  % (getattr(g, "detail", None) or "no usable stack sample"))
            elif g.collective is None:
                out[r] = Sampling(True, False, "stack stops in a call the roll call cannot name")
            elif r == rep:
                out[r] = Sampling(True, False, "represents its group (%d rank(s) here %s)"
                                  % (len(members), _label(g)))
            else:
                out[r] = Sampling(False, waiting,
                                  "native stack not taken: rank %d waits %s with rank %d, whose "
                                  "native stack stands for the group (native_stacks = auto)"
                                  % (r, _label(g), rep))
    for r in ranks:
        if r not in out:
            out[r] = Sampling(True, False, "not in the roll call (no watchdog dump to go by)")
    return out


def native_count(p: Dict[int, Sampling]) -> Optional[int]:
    """How many ranks of a plan get ``--native``."""
    return sum(1 for s in p.values() if s.native)
