"""Per-rank facts: one rank's samples -> :class:`RankFacts` (state, modal position, exit
evidence, check-in), and the table of call chains those facts point to.

A node summary (``*.summary.json``, :mod:`hpc_hangkit.rollcall.nodes`) stores each rank's
facts as ``"facts": {"<rank>": {...}}`` (:meth:`RankFacts.to_summary`, keys as in
docs/report-schema.md) and its chains as ``"chains": {cid: {"frames", "collective",
"native"}}`` (:func:`remember`, :func:`merge_chain`).
"""
import json
from dataclasses import dataclass, field, fields
from typing import Dict, List, Optional, Sequence, Tuple

from hpc_hangkit.parse.exits import Exit, ExitHow
from hpc_hangkit.parse.model import Frame, Sample, frame
from hpc_hangkit.rollcall.frames import (better_frames, canon, chain_id, collective_of, format_frames,
                                         frames_json, is_startup, key_of, main_thread, user_frame)
from hpc_hangkit.rollcall.prose import exit_from_text, exit_text

__all__ = ["SUMMARY_VERSION", "SUMMARY_SUFFIX", "STATES", "Checkin", "RankFacts", "rank_facts", "remember",
           "merge_chain"]

SUMMARY_VERSION = 1
SUMMARY_SUFFIX = ".summary.json"
#: a rank's state, from the most to the least decisive (the merge keeps the greater record)
STATES = ("exited", "stuck", "progressing", "unknown")


@dataclass
class Checkin:
    """A rank's newest heartbeat (``heartbeats/rank_<r>.pid<p>.hb``, read by
    :mod:`hpc_hangkit.parse.heartbeat`): its last ``checkpoint()`` label, when it was
    written (``wall_s``, epoch seconds), how many check-ins (``counter``, 0 = armed
    only) and the watchdog period (``period_s``, seconds)."""
    label: str
    wall_s: float
    counter: int
    period_s: float

    @classmethod
    def from_record(cls, hb) -> Optional["Checkin"]:
        """From a heartbeat record (attributes ``label, wall_s, counter, period_s``); None if unusable."""
        try:
            return cls(getattr(hb, "label", "") or "", float(getattr(hb, "wall_s", 0.0) or 0.0),
                       int(getattr(hb, "counter", 0) or 0), float(getattr(hb, "period_s", 0.0) or 0.0))
        except (TypeError, ValueError):
            return None

    def to_json(self) -> dict:
        """``{"label", "wall_s", "counter", "period_s"}`` (the summary's ``hb`` entry)."""
        return {"label": self.label, "wall_s": self.wall_s, "counter": self.counter, "period_s": self.period_s}

    @classmethod
    def from_json(cls, d: dict) -> "Checkin":
        """The inverse of :meth:`to_json`; missing entries read as ``""`` / 0."""
        return cls(d.get("label", ""), d.get("wall_s", 0.0), d.get("counter", 0), d.get("period_s", 0.0))



def _summary_order(exit_first: bool, host_after_hb: bool) -> Tuple[str, ...]:
    """Every key :meth:`RankFacts.to_summary` can write, in the order it writes them for
    these two placement flags (the same order as ``RankFacts._entries``)."""
    ex = ("exit", "traceback")
    return (("n", "mode", "startup") + (ex if exit_first else ())
            + ("detail", "last_write", "period_s", "pid") + (() if host_after_hb else ("host",))
            + ("note",) + (() if exit_first else ex) + ("hb",) + (("host",) if host_after_hb else ())
            + ("taken", "end"))


#: the four summary key orders, tried in this order to recover the placement flags
_ORDERS = tuple(((ef, ha), _summary_order(ef, ha))
                for ef, ha in ((False, False), (True, False), (False, True), (True, True)))

@dataclass
class RankFacts:
    """What one rank's evidence says (all from its dumps, exit tracebacks and heartbeat).

    ``state``: one of :data:`STATES`. ``key``: the chain id (:func:`chain_id`) of its
    position, None when it has none. ``n``: usable samples looked at (the newest K);
    ``mode``: how many of them are at the position; ``startup``: start-up samples
    skipped. ``detail``: one line on how the state was decided (mid-transition samples,
    a polling loop, why there is no position). ``exit``: the exit error in words
    (:func:`~hpc_hangkit.rollcall.prose.exit_text` of ``ended``; what a summary stores);
    ``ended``: how it ended (:class:`~hpc_hangkit.parse.exits.Exit`; read it with
    :meth:`ending`, set it with :meth:`set_exit`); ``traceback``: its lines.
    ``last_write``: newest mtime (epoch s) of its node-scratch watchdog logs;
    ``period_s``: the watchdog period (s, from the log header); ``pid``, ``host``: of
    its newest process; ``note``: the parser's exit note of a log; ``hb``: its newest
    :class:`Checkin`; ``silent_s``: seconds it wrote nothing while others did (set by
    the report, never stored in a summary); ``taken``: when the capture took its stack
    (epoch s, the newest capture-stamped py-spy dump; None without one).
    """
    state: str = "unknown"
    key: Optional[str] = None
    n: int = 0
    mode: int = 0
    startup: int = 0
    detail: Optional[str] = None
    exit: Optional[str] = None
    traceback: Optional[List[str]] = None
    last_write: Optional[float] = None
    period_s: Optional[float] = None
    pid: Optional[int] = None
    host: Optional[str] = None
    note: Optional[str] = None
    hb: Optional[Checkin] = None
    silent_s: Optional[float] = None
    taken: Optional[float] = None
    ended: Optional[Exit] = field(default=None, compare=False)
    #: where the summary writes ``exit``/``traceback``: before the log entries when the exit
    #: came from the rank's own fatal-error dump, after them when from a traceback
    exit_first: bool = field(default=False, compare=False)
    #: ``host`` is written after ``hb`` when it came from the heartbeat (no log named it)
    host_after_hb: bool = field(default=False, compare=False)

    def _entries(self) -> List[Tuple[str, object]]:
        ex = [("exit", self.exit), ("traceback", self.traceback)]
        host = [("host", self.host)]
        out = [("n", self.n), ("mode", self.mode), ("startup", self.startup)]
        out += ex if self.exit_first else []
        out += [("detail", self.detail), ("last_write", self.last_write), ("period_s", self.period_s),
                ("pid", self.pid)]
        out += [] if self.host_after_hb else host
        out += [("note", self.note)]
        out += [] if self.exit_first else ex
        out += [("hb", self.hb.to_json() if self.hb is not None else None)]
        out += host if self.host_after_hb else []
        out += [("taken", self.taken)]
        return out

    def ending(self) -> Optional[Exit]:
        """How the rank ended: ``ended``, else what its ``exit`` words say
        (:func:`~hpc_hangkit.rollcall.prose.exit_from_text`, a summary's record), else None."""
        e = self.ended
        if e is None and self.exit:
            e = exit_from_text(self.exit)
        return e

    def set_exit(self, e: Exit) -> None:
        """Record how the rank ended: ``ended`` and its words ``exit``."""
        self.ended = e
        self.exit = exit_text(e)

    def to_summary(self) -> dict:
        """The summary's ``facts`` entry: every set entry except ``state`` and ``key`` (those
        are in ``positions``); empty values (None, 0, "", []) are left out. ``end``
        (:meth:`Exit.to_json`) only where the ``exit`` words would be read back as another end
        (an exception whose last line reads like one of the roll call's own sentences)."""
        # the same entries as _entries, read straight from the fields (packing 100k ranks
        # calls this once per rank)
        out = _entry(self.__dict__, (self.exit_first, self.host_after_hb))
        e = self.ended
        if e is not None and self.exit and exit_from_text(self.exit) != e:
            out["end"] = e.to_json()
        return out

    @classmethod
    def from_summary(cls, key: Optional[str], state: str, extra: dict) -> "RankFacts":
        """The inverse of :meth:`to_summary` (``extra``: the ``facts`` entry, may be empty;
        keys it does not know are ignored)."""
        # built field by field from the entries present: the merge of 100k ranks makes
        # one per rank and node summary, and keyword construction was its main cost
        f = cls.__new__(cls)
        d = f.__dict__
        d.update(_DEFAULTS)
        d["state"], d["key"] = state, key
        if extra.keys() <= _PLAIN_FIELDS:   # the usual entry: copied whole, in C
            d.update(extra)
            if "exit" not in extra and "traceback" not in extra:
                return f                    # no placement to recover
        else:
            for k, v in extra.items():
                if k in _PLAIN_FIELDS:
                    d[k] = v
            hb = extra.get("hb")
            if isinstance(hb, dict):
                d["hb"] = Checkin.from_json(hb)
            taken = extra.get("taken")
            if isinstance(taken, (int, float)) and not isinstance(taken, bool):
                f.taken = float(taken)
            if "end" in extra:
                d["ended"] = Exit.from_json(extra["end"])
        if ("exit" in extra or "traceback" in extra) or ("host" in extra and "hb" in extra):
            f.exit_first, f.host_after_hb = _placement(extra)
        return f

    def copy(self) -> "RankFacts":
        """A copy to change: every field, the ``traceback`` list its own (``hb`` is shared:
        a :class:`Checkin` is replaced, never changed)."""
        c = RankFacts.__new__(RankFacts)
        c.__dict__.update(self.__dict__)
        if c.traceback is not None:
            c.traceback = list(c.traceback)
        return c

    @staticmethod
    def summary_entry(key: Optional[str], state: str, extra: dict) -> dict:
        """``from_summary(key, state, extra).to_summary()``, without the record for the usual
        entry (only plain entries): what a merge writes for a rank only one summary has."""
        if not extra.keys() <= _PLAIN_FIELDS:
            return RankFacts.from_summary(key, state, extra).to_summary()
        names = tuple(extra)
        shape = _SHAPES.get(names)  # the placement and the key order depend on the names only
        if shape is None:
            flags = _placement(extra) if ("exit" in extra or "traceback" in extra) else (False, False)
            pos = _POSITION_OF[flags]
            shape = (flags, list(names) == sorted(names, key=pos.__getitem__))
            if len(_SHAPES) < 4096:
                _SHAPES[names] = shape
        vals = extra.values()
        if shape[1] and not (None in vals or 0 in vals or "" in vals or [] in vals):
            return dict(extra)      # already in its placement's order, nothing empty: as it is
        return _entry(extra, shape[0])

    def order_key(self) -> tuple:
        """Total order of two records of one rank (the merge keeps the greater): state
        (exited > stuck > progressing > unknown), then samples, then the canonical JSON."""
        d = self.to_summary()
        d.update(key=self.key, state=self.state, n=self.n, mode=self.mode, startup=self.startup)
        prio = len(STATES) - STATES.index(self.state) if self.state in STATES else 0
        return (prio, self.n, json.dumps(d, sort_keys=True, default=str))

    def public(self) -> dict:
        """The report's ``ranks`` entry (docs/report-schema.md)."""
        out = {"state": self.state, "samples_used": self.n, "samples_at_position": self.mode,
               "startup_samples": self.startup}
        for k in ("pid", "host", "detail", "exit", "traceback", "note"):
            v = getattr(self, k)
            if v:
                out[k] = v
        return out


# --- per-rank analysis ----------------------------------------------------------

def rank_facts(samples: Sequence[Sample], k: int = 5, chains: Optional[dict] = None,
               memo: Optional[dict] = None) -> RankFacts:
    """Analyse one rank's samples (parsed dumps, oldest first) into its :class:`RankFacts`
    (``state``, ``key``, ``n``, ``mode``, ``startup``, ``detail``, ``exit``, ``traceback``).

    ``k``: how many of the newest usable samples decide the position (modal,
    ties to the newest). ``chains``: dict cid -> chain record, filled in with
    the chains this rank uses. ``memo``: frames tuple -> chain id ("" = start-up),
    shared between the ranks of one node to hash each distinct chain once.
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
            cid = memo[frames_t] = "" if is_startup(frames_t) else chain_id(key_of(frames_t))
        if not cid:
            startup += 1
            last_startup = frames_t
            continue
        usable.append((cid, frames_t))
    out = RankFacts(startup=startup)
    if fatal is not None:
        s, t = fatal
        fr = t.frames if t is not None else ()
        out.state = "exited"
        out.set_exit(Exit(ExitHow.FATAL, error=s.fatal))
        out.exit_first = True
        if fr:
            out.key = remember(chains, fr)
            out.traceback = [out.exit] + format_frames(fr)
        return out
    if not usable:
        if startup:
            u = user_frame(last_startup) if last_startup else None
            out.detail = ("only start-up dumps (%d, import in progress%s): the rank never got past "
                             "start-up while watched" % (startup, ", last at %s" % u.where() if u else ""))
        elif no_main:
            out.detail = "no dump has a Python main thread"
        else:
            out.detail = "no stack samples"
        return out
    last = usable[-k:] if k and k > 0 else usable
    counts: Dict[str, int] = {}
    newest: Dict[str, int] = {}
    for i, (cid, _) in enumerate(last):
        counts[cid] = counts.get(cid, 0) + 1
        newest[cid] = i
    mode = max(counts, key=lambda c: (counts[c], newest[c]))
    n = len(last)
    out.n = n
    out.mode = counts[mode]
    out.key = mode
    # only the samples AT the rank's position shape the chains table (representative frames,
    # collective, native frames): what a node summary keeps is then exactly what shaped it
    def keep(cid):
        for c, fr in last:
            if c == cid:
                remember(chains, fr)

    loop = _loop_position(last) if n >= 3 and n - counts[mode] >= 2 else None
    if loop is not None:
        # the same function on the same call path in every sample, only the line moves (and
        # not just once): a polling loop. Its position is the loop (line 0), not one line.
        func_frames, lines = loop
        out.state = "stuck"
        out.key = remember(chains, func_frames)
        out.mode = n
        out.detail = "looping in %s (lines %s): the same call, only the line changes" % (
            func_frames[0].function, ", ".join(str(x) for x in lines))
        return out
    if n >= 3 and counts[mode] * 2 <= n:
        out.state = "progressing"
        out.key = last[-1][0]
        keep(out.key)
        out.detail = "%d different positions in its last %d samples: still moving" % (len(counts), n)
    else:
        keep(mode)
        out.state = "stuck"
        if counts[mode] < n:
            out.detail = "%d of its last %d samples here (the others caught it mid-transition)" % (
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
        shapes.add((canon(py[0])[0], canon(py[0])[2]) + key_of(py[1:]))
        lines.add(py[0].line)
        if first is None:
            first = py
        if len(shapes) > 1:
            return None
    f0 = first[0]
    return (frame(f0.file, 0, f0.function),) + first[1:], sorted(lines)


_RECS: Dict[tuple, tuple] = {}


def remember(chains: dict, frames_t: Sequence[Frame]) -> str:
    """Add one chain (innermost first) to the chains table ``chains`` (cid -> record
    ``{"frames", "collective", "native"}``, content-addressed by its grouping key); returns its id."""
    hit = _RECS.get(frames_t)
    if hit is None:
        fj = frames_json(frames_t)
        nat = [f for f in fj if f[3]]
        hit = (chain_id(key_of(frames_t)), {"frames": fj, "collective": collective_of(frames_t),
                                         "native": nat or None})
        if len(_RECS) > 100_000:
            _RECS.clear()
        _RECS[tuple(frames_t)] = hit
    cid, rec = hit
    old = chains.get(cid)
    if old is None:
        chains[cid] = rec  # shared, never mutated: merge_chain copies before changing
    elif old is not rec:
        merge_chain(chains, cid, rec)
    return cid


def merge_chain(chains: dict, cid: str, rec: dict) -> None:
    """Merge one chain record into the table by fixed orders (so any merge order gives the
    same table): representative frames by :func:`~hpc_hangkit.rollcall.frames.chain_rank`, the smallest collective name,
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
    if better_frames(rf, frames):
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


def _entry(d: dict, flags: Tuple[bool, bool]) -> dict:
    """The summary entry of the fields ``d`` (a record's ``__dict__`` or an entry; missing
    ones are empty) in the key order of placement ``flags``: empty values left out."""
    pos = _POSITION_OF[flags]
    out = {}
    for k in sorted(d.keys() & pos.keys(), key=pos.__getitem__):
        v = d[k]
        if v not in (None, 0, "", []):
            out[k] = v.to_json() if k == "hb" else v
    return out


def _placement(extra: dict) -> Tuple[bool, bool]:
    """``(exit_first, host_after_hb)`` of a summary entry: the first placement whose key
    order its keys follow (an entry that to_summary wrote follows exactly one of them, or
    several that write alike); the default one when none does."""
    for flags, pos in _POSITIONS:
        try:
            at = [pos[k] for k in extra]
        except KeyError:            # an entry no placement writes: default placement
            break
        if all(a < b for a, b in zip(at, at[1:])):
            return flags
    return (False, False)


#: each placement with the position of every key in its order, in :data:`_ORDERS`' order
_POSITIONS = tuple((flags, {k: i for i, k in enumerate(order)}) for flags, order in _ORDERS)
#: the position of every summary key for each ``(exit_first, host_after_hb)``
_POSITION_OF = dict(_POSITIONS)
#: names of a plain summary entry, in its order -> (its placement, whether in that order)
_SHAPES: Dict[tuple, Tuple[Tuple[bool, bool], bool]] = {}
#: every field's default, for :meth:`RankFacts.from_summary`
_DEFAULTS = {f.name: f.default for f in fields(RankFacts)}
#: the summary entries copied as they are (``hb`` and ``taken`` are checked)
_PLAIN_FIELDS = frozenset(("n", "mode", "startup", "detail", "exit", "traceback", "last_write", "period_s",
                           "pid", "host", "note"))
