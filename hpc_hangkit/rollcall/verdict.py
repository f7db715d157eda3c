"""From facts to a verdict: group the ranks by position, classify, name the suspects.

:func:`build_report` turns a (merged) node summary into a :class:`Report`. The
classification (:func:`classify`) returns a structured :class:`Verdict`: the kind
(one of :data:`VERDICTS`), which sentence says it (``case``) and the ranks, groups and
facts that sentence names; :func:`hpc_hangkit.rollcall.prose.explain` writes the
sentence. Verdicts: docs/report.md.
"""
import json
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from hpc_hangkit.parse.exits import Exit, ExitHow
from hpc_hangkit.parse.model import Frame
from hpc_hangkit.ranges import format_ranks, ranks_label
from hpc_hangkit.rollcall.facts import RankFacts
from hpc_hangkit.rollcall.frames import (chain_rank, frames_from_json, in_backward, inside_api, key_of, position_key,
                                         user_api, user_frame)
from hpc_hangkit.rollcall.nodes import no_cyclic_gc, unpack
from hpc_hangkit.rollcall.prose import exit_public, explain

__all__ = ["VERDICTS", "ROLES", "SILENT_MIN_S", "Group", "Report", "Verdict", "build_report", "classify",
           "apply_timing", "short_error", "creation_args"]

VERDICTS = ("MISSED", "SPLIT", "TOGETHER", "GONE", "SLOW", "NO_HANG", "INCONCLUSIVE",
            "SAME_LINE_DIFFERENT_ARGS")
ROLES = ("waiting", "divergent", "exited", "progressing", "unknown")
#: a rank that wrote nothing (no dump, no check-in) for max(3 periods, this) seconds while
#: others kept writing "went silent" (cross-node clock skew stays well below it)
SILENT_MIN_S = 5.0


class Group:
    """Ranks at one position. ``chain`` is the Python call chain, innermost first;
    ``frame`` the user's frame shown as the group's line; ``top`` the innermost frame."""

    __slots__ = ("ranks", "role", "state", "chain", "native", "frame", "top", "collective", "detail", "key",
                 "exit", "branch", "inside")

    def __init__(self, ranks, role, state, chain=(), native=(), collective=None, detail=None, key=None,
                 exit=None):
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
        #: an exited group's end (:func:`~hpc_hangkit.rollcall.prose.exit_public` of its first rank's), else None
        self.exit = exit
        #: where the paths split (hpc_hangkit.rollcall.branch), a dict, or None
        self.branch = None
        #: where inside the called API its ranks are, when they differ there: [(ranks, innermost
        #: frame, the API frame)], most ranks first (:func:`_inside`); else []
        self.inside: List[Tuple[List[int], Frame, Frame]] = []

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

        d = {"ranks": list(self.ranks), "role": self.role, "state": self.state,
             "frame": fd(self.frame), "top": fd(self.top), "collective": self.collective,
             "in_collective": self.in_collective,
             "call_chain": [fd(f) for f in self.chain],
             "native_frames": [f.function + " (" + f.file + ")" for f in self.native][:12],
             "detail": self.detail}
        if self.exit is not None:
            d["exit"] = self.exit
        if self.branch is not None:
            d["branch"] = dict(self.branch)
        if self.inside:
            d["inside"] = [{"ranks": list(rs), "top": fd(top), "api": fd(api)} for rs, top, api in self.inside]
        return d

    def __repr__(self):
        return "Group(%s, %s, %s)" % (format_ranks(self.ranks), self.role, self.frame and self.frame.where())


class Report:
    """The roll call. See docs/report.md for how to read it and docs/report-schema.md for ``to_dict``.
    ``ranks``: rank -> :class:`~hpc_hangkit.rollcall.facts.RankFacts`."""

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
        self.ranks: Dict[int, RankFacts] = {}
        self.samples = 5
        self.depth: Optional[int] = None
        self.now: Optional[float] = None
        self.rank_chains: Dict[int, Tuple[Frame, ...]] = {}
        #: the verdict of the stack analysis alone, before any section was adopted
        self.stack_verdict = "INCONCLUSIVE"
        #: the section whose verdict was adopted ("flight_recorder" / "nccl_ras") or None
        self.adopted_from: Optional[str] = None
        #: the node summary this report was built from (``*.summary.json`` shape), if kept
        self.summary: Optional[dict] = None
        #: nodes the monitor could not reach: ``[{"node", "since", "ranks", "why"}]``
        #: (:mod:`hpc_hangkit.rollcall.unreachable`); their ranks' facts are as last known
        self.unreachable: List[dict] = []

    def checkins(self) -> Dict[int, dict]:
        """Per rank with a heartbeat: ``{"label", "wall_s", "age_s", "counter"}`` (age vs ``self.now``)."""
        out = {}
        for r, f in sorted(self.ranks.items()):
            hb = f.hb
            if hb:
                age = None if self.now is None else max(0.0, self.now - hb.wall_s)
                out[r] = {"label": hb.label, "wall_s": hb.wall_s, "counter": hb.counter,
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
            "ranks": {str(r): f.public() for r, f in sorted(self.ranks.items())},
            "last_checkin": {str(r): c for r, c in self.checkins().items()},
            "warnings": list(self.warnings),
            "sections": dict(self.sections),
            **({"sample_spread": self.sample_spread()} if self.sample_spread() else {}),
            **({"unreachable_nodes": [dict(u) for u in self.unreachable]} if self.unreachable else {}),
        }

    def sample_spread(self) -> Optional[dict]:
        """How far apart in time the capture took the ranks' stacks (from each rank's
        ``taken``, the capture-stamped py-spy dumps), or None when no rank has one:
        ``{"spread_s", "first_t", "last_t", "ranks", "nodes": {host: {same}}}`` (seconds;
        ``*_t`` epoch seconds; ``ranks`` the ranks timed, as a range string). Ranks without
        a host are counted overall only."""
        timed = [(r, f.taken, f.host) for r, f in sorted(self.ranks.items()) if f.taken is not None]
        if not timed:
            return None

        def block(items):
            ts = [t for _, t, _ in items]
            return {"spread_s": round(max(ts) - min(ts), 3), "first_t": round(min(ts), 3),
                    "last_t": round(max(ts), 3), "ranks": format_ranks([r for r, _, _ in items])}
        out = block(timed)
        by_host: Dict[str, list] = {}
        for item in timed:
            if item[2]:
                by_host.setdefault(item[2], []).append(item)
        out["nodes"] = {h: block(v) for h, v in sorted(by_host.items())}
        return out


@dataclass
class Verdict:
    """The classifier's decision, for :func:`hpc_hangkit.rollcall.prose.explain` to put in words.

    ``kind``: one of :data:`VERDICTS`; ``case``: which sentence says it (the keys of
    ``prose._CASES``); ``suspects``: the ranks named; ``groups``: the report's groups in
    report order (roles set). The rest is what the sentence names, set where it applies:
    ``lead`` the group named first (where the collective is, the one rank, ...);
    ``others`` the groups named after it; ``n_stuck`` ranks in stuck groups; ``world``;
    ``moving`` progressing (SLOW) or still-alive (GONE) ranks; ``waiting`` stuck ranks;
    ``missing`` / ``unwatched`` / ``unknown`` the ranks that are not there and why;
    ``absent`` all of those ("Not seen"); ``checked_in`` ranks with a heartbeat
    (NO_HANG); ``details`` why no rank has a position; ``primary`` ranks that failed on
    their own, ``primary_errors`` their errors (distinct, at most three) and
    ``primary_exits`` the :class:`~hpc_hangkit.parse.exits.Exit` of each of those errors; ``victims`` ranks whose error says a
    peer went away and ``victim_errors`` (one per kind of error, at most two);
    ``label_groups`` (label, ranks) of TOGETHER ranks whose last check-ins differ, most
    ranks first; ``suspect_labels`` (label, ranks) of the suspects' last check-ins;
    ``cycle`` the ranks of a point-to-point cycle (:func:`p2p_cycle`); ``arg_groups``
    (call, ranks) of ranks at one group-creation line that passed different arguments
    (:func:`creation_args`), ordered by first rank.
    """
    kind: str
    case: str
    suspects: List[int] = field(default_factory=list)
    groups: List[Group] = field(default_factory=list)
    lead: Optional[Group] = None
    others: List[Group] = field(default_factory=list)
    n_stuck: int = 0
    world: Optional[int] = None
    moving: List[int] = field(default_factory=list)
    waiting: List[int] = field(default_factory=list)
    missing: List[int] = field(default_factory=list)
    unwatched: List[int] = field(default_factory=list)
    unknown: List[int] = field(default_factory=list)
    absent: List[int] = field(default_factory=list)
    checked_in: List[int] = field(default_factory=list)
    details: List[str] = field(default_factory=list)
    primary: List[int] = field(default_factory=list)
    primary_errors: List[str] = field(default_factory=list)
    primary_exits: List[Optional[Exit]] = field(default_factory=list)
    victims: List[int] = field(default_factory=list)
    victim_errors: List[str] = field(default_factory=list)
    label_groups: List[Tuple[str, List[int]]] = field(default_factory=list)
    suspect_labels: List[Tuple[str, List[int]]] = field(default_factory=list)
    cycle: List[int] = field(default_factory=list)
    arg_groups: List[Tuple[str, List[int]]] = field(default_factory=list)


def _world_and_missing(world, facts, unwatched):
    seen = set(facts) | set(unwatched)
    if world is None and seen:
        world = None
    missing = sorted(r for r in range(world) if r not in seen) if world else []
    return world, missing


def build_report(summary: dict, *, depth: Optional[int] = None, world_size: Optional[int] = None,
                 now: Optional[float] = None, unreachable_ranks: Iterable[int] = (),
                 observed_at: Optional[Mapping[int, float]] = None) -> Report:
    """Turn a (merged) node summary into a :class:`Report`: groups, verdict, suspects, and
    the verdict's sentence (``reason``, ``why``: :func:`hpc_hangkit.rollcall.prose.explain`).

    ``depth``: group by the innermost ``depth`` frames of the call chain (None:
    the whole chain). ``world_size`` overrides the world size from the headers.
    ``now``: epoch seconds for check-in ages (default: the newest check-in).
    ``unreachable_ranks``: ranks of nodes the monitor could not reach
    (:mod:`hpc_hangkit.rollcall.unreachable`): their facts are the last ones seen, and their
    silence since then is their node's, so they are never judged to have gone silent.
    ``observed_at``: rank -> epoch seconds its facts were observed, for ranks known only from
    a node summary that its node took earlier (:func:`hpc_hangkit.rollcall.nodes.observed_times`:
    the batch monitor's view); their silence is measured up to then (:func:`apply_timing`).
    Ranks not in it (raw files read here, a collected directory) are observed now.
    """
    with no_cyclic_gc():
        return _build_report(summary, depth, world_size, now, frozenset(unreachable_ranks), observed_at)


def _build_report(summary: dict, depth: Optional[int], world_size: Optional[int], now: Optional[float],
                  unreachable_ranks: frozenset = frozenset(),
                  observed_at: Optional[Mapping[int, float]] = None) -> Report:
    world, chains, facts, unw, warns = unpack(summary)
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
    hb_walls = [f.hb.wall_s for f in facts.values() if f.hb]
    rep.now = now if now is not None else (max(hb_walls) if hb_walls else None)
    _, rep.missing_ranks = _world_and_missing(world, facts, unw)
    if world is not None:
        extra = sorted(r for r in facts if r >= world)
        if extra:
            rep.warnings.append("ranks %s are beyond the world size %d" % (format_ranks(extra), world))
    apply_timing(facts, unreachable_ranks, observed_at)
    groups = _groups(facts, chains, depth, rep.rank_chains)
    v = classify(groups, facts, rep.missing_ranks, rep.unwatched_ranks, world)
    rep.verdict, rep.suspect_ranks, rep.groups = v.kind, v.suspects, v.groups
    rep.reason, rep.why = explain(v)
    rep.stack_verdict = rep.verdict
    stuck_n = [f.n for f in facts.values() if f.state == "stuck"]
    if stuck_n and max(stuck_n) == 1 and rep.verdict not in ("INCONCLUSIVE", "NO_HANG"):
        rep.warnings.append("each rank has only one usable stack sample: the report cannot tell a stuck "
                            "rank from a slow one; take more dumps (the watchdog repeats every period)")
    return rep


def _groups(facts: Dict[int, RankFacts], chains: Dict[str, dict], depth: Optional[int],
            rank_chains: Dict[int, tuple]) -> List[Group]:
    """The ranks grouped by (state, position: :func:`~hpc_hangkit.rollcall.frames.position_key`
    of the innermost ``depth`` frames); fills ``rank_chains`` (rank -> Python chain). Unknown
    ranks and ranks without a chain form one group."""
    cache: Dict[str, tuple] = {}

    def chain_of(cid):
        if cid is None:
            return None
        c = cache.get(cid)
        if c is None:
            rec = chains.get(cid) or {}
            frames = frames_from_json(rec.get("frames"))
            py = tuple(f for f in frames if not f.native)
            nat = frames_from_json(rec.get("native")) or tuple(f for f in frames if f.native)
            gk = position_key(py, depth)
            c = cache[cid] = (py, nat, gk, rec.get("collective"))
        return c

    # ranks by (state, chain id) first: what follows depends on nothing else, and 100k
    # ranks sit at a handful of positions (the groups' order is the order of first ranks)
    by_pos: Dict[tuple, List[int]] = {}
    for r, f in facts.items():
        by_pos.setdefault((f.state, f.key), []).append(r)
    for r, f in facts.items():
        c = chain_of(f.key)
        if c is not None:
            rank_chains[r] = c[0]
    buckets: Dict[tuple, List[int]] = {}
    rep_cid: Dict[tuple, str] = {}
    crank: Dict[str, tuple] = {}

    def rank_of(cid):
        v = crank.get(cid)
        if v is None:
            v = crank[cid] = chain_rank((chains.get(cid) or {}).get("frames") or [])
        return v

    for (state, key), rs in by_pos.items():
        c = chain_of(key)
        if state == "exited" and c is None:
            buckets.setdefault(("exited", ()), []).extend(rs)  # left the program: no position
        elif state == "unknown" or c is None:
            buckets.setdefault(("unknown", None), []).extend(rs)
        else:
            buckets.setdefault((state, c[2]), []).extend(rs)
        if c is not None:
            bk = (state, c[2])
            cur = rep_cid.get(bk)
            if cur is None or (cur != key and rank_of(key) > rank_of(cur)):
                rep_cid[bk] = key
    # ranks stuck at one line of a function in which other ranks are seen looping join the loop
    loops = {gk for (st, gk) in buckets if st == "stuck" and gk and gk[1] and gk[1][0][1] == 0}
    if loops:
        for (st, gk) in list(buckets):
            if st == "stuck" and gk and gk[1] and gk[1][0][1] != 0:
                fk = gk[1]
                shape = (gk[0], ((fk[0][0], 0, fk[0][2]),) + fk[1:])
                if shape in loops:
                    buckets[(st, shape)].extend(buckets.pop((st, gk)))
    groups: List[Group] = []
    for (st, gk), rs in buckets.items():
        if st == "unknown":
            details = sorted({facts[r].detail or "no usable stack sample" for r in rs})
            groups.append(Group(rs, "unknown", "unknown", detail="; ".join(details[:4])))
            continue
        cid = rep_cid.get((st, gk))
        py, nat, _, coll = chain_of(cid) if cid else ((), (), None, None)
        if depth:
            py = py[:depth] if len(py) > depth else py
        colls = sorted({chain_of(k)[3] for k in {facts[r].key for r in rs} if k and chain_of(k)[3]})
        detail = end = None
        if st == "exited":
            exits = sorted({_norm_error(facts[r].exit): short_error(facts[r].exit)
                            for r in rs if facts[r].exit}.values())
            detail = "; ".join(exits[:3]) or None
            end = exit_public(facts[min(rs)].ending())
        elif st == "progressing":
            detail = "samples still changing: this rank is moving"
        g = Group(rs, st, st, py, nat, colls[0] if colls else coll, detail, key=cid, exit=end)
        if gk and gk[0] is not None:
            g.inside = _inside({r: chain_of(facts[r].key)[0] for r in rs})
        groups.append(g)
    return groups


def _inside(chains: Dict[int, tuple]) -> List[Tuple[List[int], Frame, Frame]]:
    """The ranks of one position (rank -> Python chain) by where they are inside the API the
    user called (:func:`~hpc_hangkit.rollcall.frames.inside_api`): ``[(ranks, innermost frame,
    the API frame)]``, most ranks first, then lowest rank; ``[]`` when all are at one place."""
    by: Dict[tuple, List[int]] = {}
    where: Dict[tuple, tuple] = {}
    seen: Dict[int, tuple] = {}  # the ranks of one chain share its tuple: each chain looked at once
    for r in sorted(chains):
        c = chains[r]
        hit = seen.get(id(c))
        if hit is None:
            inner = inside_api(c)
            hit = seen[id(c)] = (inner, key_of(inner), user_api(c) if inner else None)
        inner, k, api = hit
        by.setdefault(k, []).append(r)
        if inner:
            where.setdefault(k, (inner[0], api))
    if len(by) < 2 or len(where) < len(by):
        return []
    return [(rs, where[k][0], where[k][1]) for k, rs in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))]


def _ranks(groups: List[Group]) -> List[int]:
    return sorted(r for g in groups for r in g.ranks)


def classify(groups: List[Group], facts: Dict[int, RankFacts], missing: List[int], unwatched: List[int],
             world: Optional[int]) -> Verdict:
    """The verdict over ``groups`` (from :func:`build_report`; roles are set here) given the
    ranks' ``facts``, the ranks with no data (``missing``), the never-armed ranks
    (``unwatched``) and the world size. Rules: docs/report.md."""
    stuck = [g for g in groups if g.state == "stuck"]
    prog = [g for g in groups if g.state == "progressing"]
    gone = [g for g in groups if g.state == "exited"]
    unknown = [g for g in groups if g.state == "unknown"]
    stuck.sort(key=lambda g: (-len(g.ranks), g.ranks[0]))
    for g in prog:
        g.role = "progressing"
    for g in gone:
        g.role = "exited"
    for g in unknown:
        g.role = "unknown"
    if not stuck and not prog and not gone:
        v = _nothing_stopped(groups, unknown, facts, unwatched)
    elif gone:
        v = _gone(stuck, prog, gone, unknown, facts, sum(len(g.ranks) for g in groups if g.state != "unknown"))
    elif prog:
        v = _slow(stuck, prog, unknown)
    else:
        absent = sorted(set(missing) | set(unwatched) | set(_ranks(unknown)))
        n_stuck = sum(len(g.ranks) for g in stuck)
        calls = creation_args(stuck, facts)
        if calls:
            v = _same_line_args(stuck, unknown, calls, absent, n_stuck)
        else:
            v = (_one_position if len(stuck) == 1 else _positions)(stuck, unknown, facts, missing, unwatched,
                                                                  absent, n_stuck, world)
    if v.kind != "TOGETHER":
        v.suspect_labels = _suspect_labels(v.suspects, facts)
    return v


def _nothing_stopped(groups, unknown, facts, unwatched) -> Verdict:
    """No rank has a position: NO_HANG when ranks checked in and none dumped, else INCONCLUSIVE."""
    order = sorted(groups, key=lambda g: g.ranks[0])
    hbs = [r for r, f in facts.items() if f.hb]
    if hbs and not any(f.n for f in facts.values()):
        return Verdict("NO_HANG", "no_hang", groups=order, checked_in=hbs)
    if not facts and not unwatched:
        return Verdict("INCONCLUSIVE", "no_dumps", groups=order)
    if not facts:
        return Verdict("INCONCLUSIVE", "none_watched", groups=order, unwatched=list(unwatched))
    return Verdict("INCONCLUSIVE", "no_usable_sample", groups=order,
                   details=sorted({g.detail or "" for g in unknown})[:3])


def _slow(stuck, prog, unknown) -> Verdict:
    """Some ranks still move: SLOW (no suspects)."""
    moving = _ranks(prog)
    if not stuck:
        return Verdict("SLOW", "slow_moving", groups=prog + unknown, moving=moving)
    for g in stuck:
        g.role = "waiting"
    return Verdict("SLOW", "slow_waiting", groups=stuck + prog + unknown, moving=moving, lead=stuck[0],
                   waiting=[r for g in stuck for r in g.ranks], n_stuck=sum(len(g.ranks) for g in stuck))


def _one_position(stuck, unknown, facts, missing, unwatched, absent, n_stuck, world) -> Verdict:
    """Every stuck rank at one position: MISSED (ranks not there), one rank, or TOGETHER."""
    g = stuck[0]
    g.role = "waiting"
    groups = stuck + unknown
    if absent:
        return Verdict("MISSED", "missed_absent", suspects=absent, groups=groups, lead=g, n_stuck=n_stuck,
                       world=world, missing=list(missing), unwatched=list(unwatched), unknown=_ranks(unknown))
    if n_stuck < 2:
        return Verdict("INCONCLUSIVE", "one_rank", groups=groups, lead=g)
    cycle = p2p_cycle(g, facts)
    if cycle:
        return Verdict("TOGETHER", "p2p_cycle", groups=groups, lead=g, n_stuck=n_stuck, cycle=cycle)
    labels, odd = _together_labels(g, facts)
    return Verdict("TOGETHER", "together", suspects=odd, groups=groups, lead=g, n_stuck=n_stuck,
                   label_groups=labels)


#: the auto check-in's group-creation label: ``torch.distributed.new_group make=1 ranks=[0, 1]``
#: (boot/_hangkit_autocheckin.py ``_wrap_maker``), `` local`` with use_local_synchronization
_MAKE_LABEL = re.compile(r"^torch\.distributed\.(\w+) make=(\d+) (\w+)=(.*?)( local)?$")


def creation_args(stuck: List[Group], facts: Dict[int, RankFacts]) -> List[Tuple[str, List[int]]]:
    """Ranks stuck in one process-group creation call at one line with different arguments.

    From the auto check-in labels (``torch.distributed.new_group make=N ranks=[...]``): every
    rank of the ``stuck`` groups has a user frame at the same file:line, a call chain through
    that creation function, and a last check-in from it with the same count of creation calls
    and no ``use_local_synchronization``, and the arguments differ. Returns ``[(call, ranks)]``,
    ``call`` as ``new_group(ranks=[0, 1])``, ordered by first rank; ``[]`` otherwise (also when
    a rank never checked in: the labels are only evidence when every rank has one)."""
    if sum(len(g.ranks) for g in stuck) < 2 or len({g.frame and (g.frame.file, g.frame.line) for g in stuck}) != 1 \
            or stuck[0].frame is None:
        return []
    by: Dict[str, List[int]] = {}
    made = set()
    for g in stuck:
        for r in g.ranks:
            hb = facts[r].hb
            m = _MAKE_LABEL.match(hb.label or "") if hb and hb.counter else None
            if m is None or m.group(5):
                return []
            op = m.group(1)
            if not any(f.function.rsplit(".", 1)[-1] == op for f in g.chain):
                return []  # checked in at a creation call, but no longer in it
            made.add((op, m.group(2)))
            by.setdefault("%s(%s=%s)" % (op, m.group(3), m.group(4)), []).append(r)
    if len(made) != 1 or len(by) < 2:
        return []
    return sorted(((call, sorted(rs)) for call, rs in by.items()), key=lambda kv: kv[1][0])


def _same_line_args(stuck, unknown, calls, absent, n_stuck) -> Verdict:
    """SAME_LINE_DIFFERENT_ARGS: every stuck rank in one group-creation call, with different
    arguments (:func:`creation_args`). The call is the bug, not a rank: no suspects."""
    for g in stuck:
        g.role = "waiting"
        mine = set(g.ranks)
        g.detail = "; ".join("%s in %s" % (ranks_label(sorted(mine & set(rs))), call)
                             for call, rs in calls if mine & set(rs))
    return Verdict("SAME_LINE_DIFFERENT_ARGS", "same_line_args", groups=stuck + unknown, lead=stuck[0],
                   n_stuck=n_stuck, absent=absent, arg_groups=calls)


_P2P_LABEL = re.compile(r"\b(send|recv|isend|irecv)\b.*\bpeer=(\d+)")


def p2p_cycle(g: Group, facts: Dict[int, RankFacts]) -> List[int]:
    """Every rank of ``g`` blocked in the same point-to-point call (all ``send``, or all
    ``recv``; from the auto check-in labels ``torch.distributed.send p2p=N ... peer=P``),
    their peers closing a cycle: the cycle as ranks ``[0, 1, 0]`` (first rank repeated at
    the end), else ``[]``. A cycle of sends (or of receives) is a point-to-point ordering
    deadlock: each waits for a peer that waits for it."""
    peer: Dict[int, int] = {}
    ops = set()
    for r in g.ranks:
        hb = facts[r].hb
        m = _P2P_LABEL.search(hb.label) if hb and hb.counter else None
        if m is None:
            return []
        ops.add(m.group(1).lstrip("i"))
        peer[r] = int(m.group(2))
    if len(ops) != 1:
        return []
    start = min(peer)
    path, r = [start], peer[start]
    while r in peer and r not in path:
        path.append(r)
        r = peer[r]
    if r != start or len(path) < 2:
        return []
    return path + [start]


def _positions(stuck, unknown, facts, missing, unwatched, absent, n_stuck, world) -> Verdict:
    """Two or more stuck positions: SPLIT (different collectives, or no majority) or MISSED
    (one position is the collective; the others went elsewhere)."""
    big = stuck[0]
    majority = len(big.ranks) > len(stuck[1].ranks) and len(big.ranks) * 2 > n_stuck
    known = [g for g in stuck if g.in_collective]
    for g in stuck:
        g.role = "waiting"
    kw = dict(groups=stuck + unknown, n_stuck=n_stuck, absent=absent)
    if len(known) >= 2:
        if not majority:
            return Verdict("SPLIT", "split_no_majority", others=stuck, **kw)
        lead, case, kind = big, "split_majority", "SPLIT"
    elif len(known) == 1 and majority and big is not known[0] and in_backward(big.chain):
        # the majority stands in autograd's backward with no collective frame: under DDP the
        # gradient all_reduce is issued from C++ there, so they most likely wait in it
        lead, case, kind = big, "split_backward", "SPLIT"
    elif len(known) == 1:
        lead, case, kind = known[0], "missed_one_collective", "MISSED"
    elif majority:
        lead, case, kind = big, "missed_majority", "MISSED"
    else:
        return Verdict("SPLIT", "split_places", others=stuck, **kw)
    others = [g for g in stuck if g is not lead]
    for g in others:
        g.role = "divergent"
    return Verdict(kind, case, suspects=_ranks(others), lead=lead,
                   others=stuck if case in ("split_majority", "split_backward") else others, **kw)


def _together_labels(g: Group, facts: Dict[int, RankFacts]) -> Tuple[List[Tuple[str, List[int]]], List[int]]:
    """TOGETHER at one line, but their last check-ins differ (e.g. one rank a step or a
    collective sequence number behind): ``(labels, suspects)``, labels most ranks first,
    suspects the minority labels' ranks when one label holds a majority; ``([], [])`` when
    some rank never checked in or all labels agree."""
    by: Dict[str, List[int]] = {}
    for r in g.ranks:
        hb = facts[r].hb
        if not hb or not hb.counter:
            return [], []  # labels are only evidence when every rank checked in
        by.setdefault(hb.label or "", []).append(r)
    if len(by) < 2:
        return [], []
    top = sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    if len(top[0][1]) * 2 <= len(g.ranks):
        return top, []
    return top, sorted(r for _, v in top[1:] for r in v)


def _suspect_labels(suspects: List[int], facts: Dict[int, RankFacts]) -> List[Tuple[str, List[int]]]:
    """The suspects' last check-in labels (label, ranks), sorted by label; none when more than three."""
    labels: Dict[str, List[int]] = {}
    for r in suspects:
        f = facts.get(r)
        hb = f.hb if f is not None else None
        if hb and hb.counter > 0:
            labels.setdefault(hb.label or "(no label)", []).append(r)
    return sorted(labels.items()) if len(labels) <= 3 else []


_CONSEQUENCE_RE = re.compile(r"closed by peer|reset by peer|remote worker|remote process|[Tt]imed out|"
                             r"[Tt]imeout|Broken pipe|Connection refused|ECONNRESET|peer .*(exit|crash)|"
                             r"DistNetworkError|aborted by another rank", re.I)


def _is_consequence(f: RankFacts) -> bool:
    """True for a rank whose exception or fatal error says a PEER went away or never
    answered (timeouts, connection closed/reset by peer): a victim, not the culprit."""
    e = f.ending()
    return (e is not None and e.how in (ExitHow.EXCEPTION, ExitHow.FATAL) and bool(e.error)
            and bool(_CONSEQUENCE_RE.search(e.error)))


def short_error(err: Optional[str], limit: int = 110) -> str:
    """An exit error as one short line: gloo's ``[/path/file.cc:NN] `` prefix dropped, cut at ``limit``."""
    if not err:
        return "no traceback"
    e = re.sub(r"\[/[^\]]*\.(cc|cpp|h|hpp):\d+\] ", "", err)
    e = e.split(". This is typically", 1)[0]
    return e if len(e) <= limit else e[:limit - 3] + "..."


def _distinct_errors(ranks: List[int], facts: Dict[int, RankFacts]) -> List[Tuple[str, Optional[Exit]]]:
    """The distinct short exit errors of ``ranks`` (:func:`short_error`), sorted, at most
    three, each with the :class:`~hpc_hangkit.parse.exits.Exit` of its lowest rank."""
    by: Dict[str, Optional[Exit]] = {}
    for r in sorted(ranks):
        t = short_error(facts[r].exit)
        if t not in by:
            by[t] = facts[r].ending()
    return sorted(by.items(), key=lambda kv: kv[0])[:3]


def _norm_error(err: str) -> str:
    return re.sub(r"\d+", "N", short_error(err))


def _gone(stuck, prog, gone, unknown, facts: Dict[int, RankFacts], total_seen: int) -> Verdict:
    """GONE: some ranks exited. Exits whose error says a peer went away are victims;
    the suspects are the ranks that failed on their own, else the ranks that did not
    fail that way (the other side), else the minority of the last positions."""
    exited = _ranks(gone)
    victims = [r for r in exited if _is_consequence(facts[r])]
    primary = [r for r in exited if r not in victims]
    alive = stuck + prog
    alive_ranks = _ranks(alive)
    errs = sorted({_norm_error(facts[r].exit or "") for r in victims})
    verr = [short_error(facts[min(r for r in victims if _norm_error(facts[r].exit or "") == e)].exit)
            for e in errs[:2]]
    for g in stuck:
        g.role = "waiting"
    kw = dict(victims=victims, victim_errors=verr)
    if primary:
        first = set(primary)
        ends = _distinct_errors(primary, facts)
        groups = [g for g in gone if set(g.ranks) & first] + stuck + \
            [g for g in gone if not set(g.ranks) & first] + prog + unknown
        return Verdict("GONE", "gone_primary", suspects=primary, groups=groups, primary=primary,
                       primary_errors=[t for t, _ in ends], primary_exits=[e for _, e in ends],
                       lead=stuck[0] if stuck else None, moving=alive_ranks, **kw)
    if alive:
        for g in alive:
            g.role = "divergent"
        return Verdict("GONE", "gone_alive", suspects=alive_ranks, groups=alive + gone + unknown, others=alive,
                       moving=alive_ranks, **kw)
    # everyone is gone, all as victims: the last positions still show who went the other way
    gone.sort(key=lambda g: (-len(g.ranks), g.ranks[0]))
    big = gone[0]
    if len(gone) > 1 and len(big.ranks) > len(gone[1].ranks) and len(big.ranks) * 2 > total_seen:
        return Verdict("GONE", "gone_all_majority", suspects=_ranks(gone[1:]), groups=gone + unknown, lead=big,
                       others=gone[1:], **kw)
    return Verdict("GONE", "gone_all", groups=gone + unknown, **kw)


def apply_timing(facts: Dict[int, RankFacts], unreachable_ranks: Iterable[int] = (),
                 observed_at: Optional[Mapping[int, float]] = None) -> None:
    """Wall-clock evidence (log mtimes, heartbeat times), applied to ``facts`` before grouping:

    - a stuck rank that checked in (heartbeat counter > 0) after its last dump is
      *progressing*: its dumps are history;
    - a rank that wrote nothing (no dump, no check-in) for more than
      max(3 watchdog periods, SILENT_MIN_S = 5 s) while another rank kept writing *went silent*:
      a watched rank that is stuck keeps dumping every period, so it exited, was
      killed, or its node is gone (state *exited*) -- except ``unreachable_ranks``, whose node
      did not answer the monitor: what they last showed is all there is, not an end.
      Its silence runs from its last write to when its facts were observed
      (``observed_at[rank]``, epoch s: when its node took the summary they come from),
      at most to the newest write of any rank; a rank not in ``observed_at`` is observed
      now, so its silence runs to that newest write. A node whose answer is late thus
      never makes its ranks look gone.
    Copies whose mtimes were reset (a plain copy) look fresh and change nothing.
    """
    held = set(unreachable_ranks)
    seen = observed_at or {}
    lasts: Dict[int, float] = {}
    for r, f in facts.items():
        ts = [t for t in (f.last_write, f.hb.wall_s if f.hb else None) if t is not None]
        if ts:
            lasts[r] = max(ts)
    if len(lasts) < 2:
        return
    ref = max(lasts.values())
    for r, f in facts.items():
        hb = f.hb
        lw = f.last_write
        if f.state == "stuck" and hb and lw is not None and hb.counter > 0 and hb.wall_s > lw + 0.01:
            f.state = "progressing"
            f.detail = "checked in (%s) %.0f s after its last dump: moving" % (
                json.dumps(hb.label or ""), hb.wall_s - lw)
        period = f.period_s or (hb.period_s if hb else None)
        if lw is not None and period and f.state in ("stuck", "progressing", "unknown") and r not in held:
            at = seen.get(r)
            silent = (ref if at is None or at > ref else at) - lasts[r]
            if silent > max(3 * period, SILENT_MIN_S):
                f.state = "exited"
                f.silent_s = round(silent, 1)
                f.set_exit(Exit(ExitHow.SILENT, silent_s=silent))
