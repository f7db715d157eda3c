"""Node summaries: the compact, mergeable form of a set of ranks' facts (``*.summary.json``).

:func:`summarize_node` (parsed logs -> summary), :func:`merge` (associative and
commutative, streamed: :class:`StreamMerge`; from files: :mod:`hpc_hangkit.rollcall.stream`),
and :func:`summarize_dir` (a directory, parsed on several cores when it is large). A
report over merged node summaries equals the report over all raw dumps at once
(tests/rollcall/test_rollcall_merge.py, test_stream_merge.py). Shape: docs/report-schema.md.
"""
import bisect
import contextlib
import gc
import os
import sys
from typing import Dict, Iterable, List, Optional, Tuple

from hpc_hangkit import layout
from hpc_hangkit.parse.exits import ExitHow
from hpc_hangkit.parse.model import LogKind, ParsedLog, Sample, no_dump_text
from hpc_hangkit.ranges import MAX_RANKS, format_ranks
from hpc_hangkit.rollcall.facts import SUMMARY_VERSION, Checkin, RankFacts, merge_chain, rank_facts, remember
from hpc_hangkit.rollcall.frames import frames_from_json
from hpc_hangkit.rollcall.read import DirContents, in_capture_tree, list_files, read_dir

__all__ = ["PARALLEL_MIN_FILES", "COVER_LIMIT", "summarize_node", "pack", "pack_positions", "unpack", "merge",
           "StreamMerge", "merge_stream", "parse_runs", "observed_times", "summarize_dir", "summarize_files",
           "positions", "split_by_rank", "workers_for", "no_cyclic_gc"]

#: raw-dump directories with at least this many files are parsed on several cores
PARALLEL_MIN_FILES = 4096


@contextlib.contextmanager
def no_cyclic_gc():
    """The cyclic garbage collector paused (if it runs), restored after. Reading, merging
    and judging 100k ranks allocates millions of objects that form no cycles; the
    collector's passes over them were over a third of the roll call's CPU at 100k ranks."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


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
    claims: Dict[int, int] = {}      # world size -> how many files claim it
    for lg in logs:
        if lg.rank is None:
            if lg.samples:
                warns.add("%s: no rank in its header or name; its %d dump(s) are not in the roll call"
                          % (lg.name, len(lg.samples)))
            continue
        if not 0 <= int(lg.rank) < MAX_WORLD:
            warns.add("%s: rank %d is beyond any job (%d ranks at most); file ignored"
                      % (lg.name, int(lg.rank), MAX_WORLD))
            continue
        per_rank.setdefault(int(lg.rank), []).append(lg)
        if lg.world and world_size is None:
            claims[int(lg.world)] = claims.get(int(lg.world), 0) + 1
    chains: Dict[str, dict] = {}
    facts: Dict[int, RankFacts] = {}
    memo: Dict[tuple, str] = {}
    tmps: Dict[int, dict] = {}  # per rank: the chain records its own evidence produced
    # (fatal, threads) of every sample -> (facts, chain records): rank_facts reads nothing
    # else, and at scale most ranks' samples are the same thread objects (the parser shares
    # equal dumps), so each distinct history is analysed once; the key holds its threads alive
    done: Dict[tuple, Tuple[RankFacts, dict]] = {}
    for r, lgs in per_rank.items():
        # oldest process first (header t), watchdog dumps before py-spy dumps (taken at capture)
        if len(lgs) > 1:
            lgs.sort(key=lambda g: (0 if g.kind is LogKind.FAULTHANDLER else 1,
                                    (g.header or {}).get("t") or 0.0, g.name))
        samples_all: List[Sample] = []
        for g in lgs:
            samples_all.extend(g.samples)
        sig = tuple([(s.fatal, tuple(s.threads)) for s in samples_all])
        hit = done.get(sig)
        if hit is None:
            tmp = {}
            hit = done[sig] = (rank_facts(samples_all, samples, tmp, memo), tmp)
        f = hit[0].copy()
        tmps[r] = dict(hit[1])
        writes = [g.mtime for g in lgs if g.kind is LogKind.FAULTHANDLER and g.mtime is not None and g.samples]
        if writes:
            f.last_write = round(max(writes), 3)
        periods = [g.period_s for g in lgs if g.period_s]
        if periods:
            f.period_s = max(periods)
        g0 = next((g for g in reversed(lgs) if g.kind is LogKind.FAULTHANDLER and g.pid), None) or lgs[-1]
        if g0.pid is not None:
            f.pid = g0.pid
        if g0.host:
            f.host = g0.host
        taken = [smp.t for g in lgs if g.kind is LogKind.PYSPY for smp in g.samples if smp.t is not None]
        if taken:
            f.taken = round(max(taken), 3)
        notes = [no_dump_text(g.no_dump) for g in lgs if g.kind is LogKind.UNAVAILABLE and g.no_dump is not None]
        ex = [g.exit_note for g in lgs if g.exit_note]
        if ex and f.exit is None:
            f.note = ex[-1]
            notes.append(ex[-1])
        if notes and f.state == "unknown":
            f.detail = "; ".join(sorted(set(notes)))
        facts[r] = f
    for r, tb in (tracebacks or {}).items():
        r = int(r)
        f = facts.get(r)
        if f is None:
            f = facts[r] = RankFacts()
        f.state = "exited"
        f.set_exit(tb.end)
        f.traceback = list(tb.lines[-60:])
        if tb.frames:
            f.key = remember(tmps.setdefault(r, {}), tb.frames)
        elif tb.end.how is ExitHow.NORMAL:
            f.key = None  # it returned from the program: its last dump is history, not where it left
        f.detail = None
    # only the record of each rank's FINAL position enters the table: a node summary keeps
    # exactly the chains its ranks sit at, so merging summaries rebuilds the same table
    seen: Dict[str, int] = {}
    for r, tmp in tmps.items():
        key = facts[r].key
        rec = tmp.get(key) if key else None
        if rec is not None and seen.get(key) != id(rec):
            merge_chain(chains, key, rec)
            seen[key] = id(rec)
    for hb in heartbeats or ():
        r = getattr(hb, "rank", None)
        if r is None or (isinstance(r, int) and r < 0):
            continue
        if int(r) >= MAX_WORLD:
            warns.add("a heartbeat claims rank %d, beyond any job (%d ranks at most); ignored"
                      % (int(r), MAX_WORLD))
            continue
        d = Checkin.from_record(hb)
        if d is None:
            continue
        f = facts.get(int(r))
        if f is None:
            f = facts[int(r)] = RankFacts(detail="a heartbeat but no stack dump")
        old = f.hb
        if old is None or (d.wall_s, d.counter) > (old.wall_s, old.counter):
            f.hb = d
        w = getattr(hb, "world", None)
        if world_size is None and isinstance(w, int) and w > 0:
            claims[w] = claims.get(w, 0) + 1
        if f.host is None and getattr(hb, "host", None):
            f.host = hb.host
            f.host_after_hb = True
    world = world_size if world_size is not None else credible_world(claims, warns)
    return pack(world, samples, chains, facts, dict(unwatched or {}), warns, host)


#: ranks below this have a byte in the merge's coverage map (16 MiB at most); others are records
COVER_LIMIT = MAX_RANKS

#: no job has more ranks: a larger rank or world size in a dump or heartbeat is damage
#: (a flipped byte) or a forgery, and is ignored with a warning, so that the report's
#: memory follows the files it reads, never a number written in them
MAX_WORLD = 1 << 20


def credible_world(claims: Dict[int, int], warns: set) -> Optional[int]:
    """The world size the input supports: the largest of ``claims`` (world size -> number
    of files claiming it) that is at most :data:`MAX_WORLD`; each claim above it is named
    in ``warns`` (without counts, so that summaries merge to the same warnings in any
    order). None when there is no usable claim."""
    ok = [w for w in claims if 0 < w <= MAX_WORLD]
    for w in sorted(set(claims) - set(ok)):
        if w > MAX_WORLD:
            warns.add("a world size of %d is claimed, beyond any job (%d ranks at most);"
                      " ignored" % (w, MAX_WORLD))
    return max(ok) if ok else None


def pack(world: Optional[int], k: int, chains: Dict[str, dict], facts: Dict[int, RankFacts],
         unwatched: Dict[int, str], warns: Iterable[str], host: Optional[str] = None) -> dict:
    """A node summary dict (version :data:`SUMMARY_VERSION`) of ``facts`` (rank -> facts):
    ranks grouped into ``positions`` by (chain, state), only the chains they use, unwatched
    markers and warnings sorted; ``hosts`` is ``[host]`` when given."""
    return _pack_rows(world, k, chains, {r: (f.key, f.state, f.to_summary()) for r, f in facts.items()},
                      unwatched, warns, host)


def _pack_rows(world: Optional[int], k: int, chains: Dict[str, dict], rows: Dict[int, tuple],
               unwatched: Dict[int, str], warns: Iterable[str], host: Optional[str] = None,
               all_chains: bool = False) -> dict:
    """:func:`pack` of ``rows``: rank -> ``(chain id, state, summary entry)``; ``all_chains``
    as in :func:`pack_positions`."""
    groups: Dict[tuple, List[int]] = {}
    slim: Dict[str, dict] = {}
    for r, (key, state, extra) in rows.items():
        groups.setdefault((key, state), []).append(r)
        if extra:
            slim[str(r)] = extra
    positions = [(min(rs), key, state, format_ranks(rs)) for (key, state), rs in groups.items()]
    return pack_positions(world, k, chains, positions, slim, unwatched, warns, host, all_chains)


def pack_positions(world: Optional[int], k: int, chains: Dict[str, dict], positions: List[tuple],
                   slim: Dict[str, dict], unwatched: Dict[int, str], warns: Iterable[str],
                   host: Optional[str] = None, all_chains: bool = False) -> dict:
    """The summary dict of ``positions``: ``(first rank, chain id, state, rank set text)``
    per (chain, state), rank sets disjoint; ``slim``: ``"<rank>"`` -> non-empty facts entry.
    Positions are written by first rank, and only the chains they use (every chain of
    ``chains`` with ``all_chains``: a merge's table, see :func:`merge`)."""
    used = set(chains) if all_chains else {key for _, key, _, _ in positions if key is not None}
    positions = [{"chain": key, "state": state, "ranks": text}
                 for _, key, state, text in sorted(positions, key=lambda p: (p[0], str((p[1], p[2]))))]
    out = {"hangkit_summary": SUMMARY_VERSION, "k": k, "world": world,
           "chains": {c: {kk: v for kk, v in chains[c].items() if v is not None or kk == "collective"}
                      for c in sorted(used) if c in chains},
           "positions": positions, "facts": slim,
           "unwatched": {str(r): unwatched[r] for r in sorted(unwatched)},
           "warnings": sorted(warns)}
    if host:
        out["hosts"] = [host]
    return out


def _unpack_rows(summary: dict) -> Tuple[Optional[int], dict, Dict[int, tuple], Dict[int, str], set]:
    """:func:`unpack` with each rank as ``(chain id, state, facts entry)`` (the entry as
    the summary has it, ``{}`` when none), not yet a record."""
    chains = dict(summary.get("chains") or {})
    rows: Dict[int, tuple] = {}
    for p in summary.get("positions") or ():
        try:
            runs = parse_runs(str(p.get("ranks", "")))
        except ValueError:
            continue
        row = (p.get("chain"), p.get("state") or "unknown", {})
        for lo, hi in runs:
            rows.update(dict.fromkeys(range(lo, hi + 1), row))
    for rs, extra in (summary.get("facts") or {}).items():
        try:
            r = int(rs)
        except ValueError:
            continue
        key, state, _ = rows.get(r) or (None, "unknown", None)
        rows[r] = (key, state, extra or {})
    unw = {}
    for rs, why in (summary.get("unwatched") or {}).items():
        try:
            unw[int(rs)] = str(why)
        except ValueError:
            continue
    warns = set(summary.get("warnings") or ())
    world = summary.get("world")
    world = credible_world({world: 1}, warns) if isinstance(world, int) else None
    return world, chains, rows, unw, warns


def unpack(summary: dict) -> Tuple[Optional[int], dict, Dict[int, RankFacts], Dict[int, str], set]:
    """``(world, chains, facts, unwatched, warnings)`` of a node summary (the inverse of
    :func:`pack`); entries that do not parse (a bad rank range or rank) are skipped."""
    world, chains, rows, unw, warns = _unpack_rows(summary)
    facts = {r: RankFacts.from_summary(key, state, extra) for r, (key, state, extra) in rows.items()}
    return world, chains, facts, unw, warns


def merge(*summaries: dict) -> dict:
    """Merge node summaries into one (associative and commutative).

    Ranks are unions; a rank present in two summaries keeps the record that is
    greatest in a fixed total order (exited > stuck > progressing > unknown,
    then more samples, then the canonical JSON) so the result does not depend on
    the order of merging. Chains are content-addressed (same id = same
    position) and a union: every chain of every summary is kept, also one that no
    rank sits at any more (a rank's record that lost still shaped it), each record
    joined by :func:`~hpc_hangkit.rollcall.facts.merge_chain`, so that a merge of
    merges equals the flat merge; the report reads only the chains ranks sit at.
    Warnings and unwatched markers are unions; world is the maximum.
    Facts are written in rank order. Streamed (:class:`StreamMerge`): ranks stay runs
    per position, a record is made only for a rank that two summaries hold.
    Raises ``ValueError`` for a negative rank.
    """
    return merge_stream(summaries)


def parse_runs(text: str) -> List[Tuple[int, int]]:
    """A rank set (``"0,2-7"``, see :mod:`hpc_hangkit.ranges`) as sorted, disjoint,
    non-adjacent runs ``[(first, last), ...]``, without expanding it. Accepts and refuses
    exactly what :func:`hpc_hangkit.ranges.parse_ranks` does (``ValueError``)."""
    text = text.strip()
    if not text:
        return []
    runs = []
    total = 0
    for item in text.split(","):
        first, sep, last = item.strip().partition("-")
        first, last = first.strip(), last.strip()
        if not first.isdigit() or (sep and not last.isdigit()):
            raise ValueError("bad rank set: item %r is not a rank or a first-last run" % item[:200])
        lo = int(first)                     # int() refuses what isdigit() takes but is no number
        hi = int(last) if sep else lo
        if hi < lo:
            raise ValueError("bad rank set: run %r goes backwards" % item[:200])
        total += hi - lo + 1
        if total > MAX_RANKS:
            raise ValueError("bad rank set: more than %d ranks (MAX_RANKS)" % MAX_RANKS)
        runs.append((lo, hi))
    if len(runs) > 1:
        runs.sort()
        out = [runs[0]]
        for lo, hi in runs[1:]:
            plo, phi = out[-1]
            if lo <= phi + 1:
                if hi > phi:
                    out[-1] = (plo, hi)
            else:
                out.append((lo, hi))
        runs = out
    return runs


def _better(old, row):
    """The greater of two rows of one rank (``(chain id, state, entry)`` or a record), in
    :meth:`RankFacts.order_key` order; the old one on a tie (ties write alike)."""
    if old is None:
        return row
    if isinstance(old, tuple):
        old = RankFacts.from_summary(*old)
    f = row if isinstance(row, RankFacts) else RankFacts.from_summary(*row)
    return f if f.order_key() > old.order_key() else old


class StreamMerge:
    """Node summaries folded in one at a time (:meth:`add`); :meth:`result` is their
    :func:`merge`. Ranks are kept as runs ``[first, last]`` per (chain, state) position; a
    byte per rank (the coverage map, ranks below :data:`COVER_LIMIT`) tells whether a rank
    was seen before; a record is made only for a rank that two summaries hold (or that the
    map cannot hold: negative or huge); facts entries are kept only for ranks that carry one.
    ``share``: the result may hold the summaries' own facts entries, not copies (for
    summaries nobody changes later: :mod:`hpc_hangkit.rollcall.stream` reads them from files).
    Not thread-safe; :meth:`result` once.
    """

    def __init__(self, share: bool = False) -> None:
        self.share = share
        self.world: Optional[int] = None
        self.k: Optional[int] = None
        self.chains: Dict[str, dict] = {}
        self.unwatched: Dict[int, str] = {}
        self.warnings: set = set()
        self.hosts: set = set()
        self._runs: Dict[tuple, List[list]] = {}   # (chain id, state) -> [[first, last], ...]
        self._facts: Dict[int, object] = {}        # rank -> its facts entry (first summary with it)
        self._cover = bytearray()                  # 1 at each rank seen (ranks < COVER_LIMIT)
        self._rows: Dict[int, object] = {}         # rank held twice (or not mappable) -> best row

    # --- folding in ------------------------------------------------------------------

    def add(self, summary: dict) -> None:
        """Fold in one node summary (a dict of the ``*.summary.json`` shape); entries that do
        not parse are skipped as :func:`~hpc_hangkit.rollcall.nodes.merge` skips them."""
        s = summary
        warns = set(s.get("warnings") or ())
        w = s.get("world")
        w = credible_world({w: 1}, warns) if isinstance(w, int) else None
        if w is not None:
            self.world = w if self.world is None else max(self.world, w)
        if isinstance(s.get("k"), int):
            self.k = s["k"] if self.k is None else max(self.k, s["k"])
        for cid, rec in dict(s.get("chains") or {}).items():
            merge_chain(self.chains, cid, rec)
        unw: Dict[int, str] = {}
        for rs, why in (s.get("unwatched") or {}).items():
            try:
                unw[int(rs)] = str(why)
            except ValueError:
                continue
        for r, why in unw.items():
            if r not in self.unwatched or why > self.unwatched[r]:
                self.unwatched[r] = why
        self.warnings |= warns
        self.hosts |= set(s.get("hosts") or ())
        self._add_ranks(s)

    def _add_ranks(self, s: dict) -> None:
        keys: List[tuple] = []
        pos: List[tuple] = []                      # (first, last, position index)
        for p in s.get("positions") or ():
            try:
                runs = parse_runs(str(p.get("ranks", "")))
            except ValueError:
                continue
            i = len(keys)
            keys.append((p.get("chain"), p.get("state") or "unknown"))
            pos.extend((lo, hi, i) for lo, hi in runs)
        sf: Dict[int, object] = {}
        for rs, extra in (s.get("facts") or {}).items():
            try:
                sf[int(rs)] = extra
            except ValueError:
                continue
        pos.sort()
        for a, b in zip(pos, pos[1:]):
            if b[0] <= a[1]:
                # a rank at two positions of one summary (the later one holds): rank by rank
                _, _, rows, _, _ = _unpack_rows(s)
                for r, row in rows.items():
                    self._add_rank(r, row)
                return
        if sf:
            # ranks with facts but no position are (no chain, unknown)
            if pos and all(b[0] == a[1] + 1 for a, b in zip(pos, pos[1:])):
                lo, hi = pos[0][0], pos[-1][1]
                alone = [r for r in sf if not lo <= r <= hi] if (min(sf) < lo or max(sf) > hi) else []
            else:
                starts = [p[0] for p in pos]
                alone = []
                for r in sf:
                    i = bisect.bisect_right(starts, r) - 1
                    if i < 0 or pos[i][1] < r:
                        alone.append(r)
            if alone:
                keys.append((None, "unknown"))
                pos.extend((r, r, len(keys) - 1) for r in alone)
        held: List[int] = []                       # ranks made rows here: their entries are in them
        for lo, hi, i in pos:
            key, state = keys[i]
            if lo < 0 or hi >= COVER_LIMIT:
                for r in range(lo, hi + 1):
                    if 0 <= r < COVER_LIMIT:
                        self._add_rank(r, (key, state, sf.get(r) or {}))
                    else:
                        self._rows[r] = _better(self._rows.get(r), (key, state, sf.get(r) or {}))
                    held.append(r)
                continue
            cover = self._cover
            if hi >= len(cover):
                cover.extend(bytes(max(hi + 1 - len(cover), len(cover), 4096)))
            if cover.find(1, lo, hi + 1) < 0:
                cover[lo:hi + 1] = b"\x01" * (hi + 1 - lo)
                self._run(key, state, lo, hi)
                continue
            for r in range(lo, hi + 1):            # overlaps a summary before: rank by rank
                if cover[r]:
                    self._rows[r] = _better(self._rows.get(r), (key, state, sf.get(r) or {}))
                    held.append(r)
                else:
                    cover[r] = 1
                    self._run(key, state, r, r)
        if held:
            for r in held:
                sf.pop(r, None)
        self._facts.update(sf)

    def _run(self, key, state, lo: int, hi: int) -> None:
        runs = self._runs.get((key, state))
        if runs is None:
            self._runs[(key, state)] = [[lo, hi]]
        elif runs[-1][1] + 1 == lo:
            runs[-1][1] = hi                       # summaries in rank order: one run grows
        else:
            runs.append([lo, hi])

    def _add_rank(self, r: int, row: tuple) -> None:
        """One rank's row (``(chain id, state, entry)``), rank in the coverage map."""
        cover = self._cover
        if r >= len(cover):
            cover.extend(bytes(max(r + 1 - len(cover), len(cover), 4096)))
        if cover[r]:
            self._rows[r] = _better(self._rows.get(r), row)
            return
        cover[r] = 1
        self._run(row[0], row[1], r, r)
        if row[2]:
            self._facts[r] = row[2]

    # --- the result --------------------------------------------------------------------

    def result(self) -> dict:
        """The merged summary (the shape of :func:`~hpc_hangkit.rollcall.nodes.merge`; facts
        in rank order). Raises ``ValueError`` for a negative rank (as ``merge`` does)."""
        with no_cyclic_gc():
            return self._result()

    def _result(self) -> dict:
        held = sorted(self._rows)
        groups: Dict[tuple, List[tuple]] = {}
        facts = self._facts
        for ks, runs in self._runs.items():
            kept = groups.setdefault(ks, [])
            for lo, hi in runs:
                i = bisect.bisect_left(held, lo)
                j = bisect.bisect_right(held, hi)
                if i == j:
                    kept.append((lo, hi))
                    continue
                cur = lo
                for r in held[i:j]:                # the first summary's row of a rank held twice
                    self._rows[r] = _better(self._rows[r], (ks[0], ks[1], facts.pop(r, None) or {}))
                    if r > cur:
                        kept.append((cur, r - 1))
                    cur = r + 1
                if cur <= hi:
                    kept.append((cur, hi))
        self._runs = {}
        for r in held:
            v = self._rows[r]
            if isinstance(v, tuple):
                groups.setdefault((v[0], v[1]), []).append((r, r))
                facts[r] = v[2]
            else:
                groups.setdefault((v.key, v.state), []).append((r, r))
                facts[r] = v.to_summary()
        self._rows = {}
        positions = []
        for (key, state), runs in groups.items():
            if not runs:
                continue
            runs.sort()
            if runs[0][0] < 0:
                raise ValueError("rank must be >= 0, got %d" % runs[0][0])
            items = []
            plo, phi = runs[0]
            for lo, hi in runs[1:]:
                if lo == phi + 1:
                    phi = hi
                    continue
                items.append(str(plo) if plo == phi else "%d-%d" % (plo, phi))
                plo, phi = lo, hi
            items.append(str(plo) if plo == phi else "%d-%d" % (plo, phi))
            positions.append((runs[0][0], key, state, ",".join(items)))
        slim: Dict[str, dict] = {}
        entry = RankFacts.summary_entry
        as_is: Dict[tuple, bool] = {}              # entry names -> written as they are
        for r in sorted(facts):
            e = facts.pop(r)
            if not e:
                continue
            if type(e) is dict and all(e.values()):
                names = tuple(e)
                ok = as_is.get(names)
                if ok is None:
                    # the entry does not depend on the position; with no empty value, only hb
                    # and taken are rewritten by value (RankFacts.from_summary), the rest by names
                    out = entry(None, "unknown", e)
                    ok = as_is[names] = (list(out.items()) == list(e.items()) and "hb" not in e
                                         and "taken" not in e)
                if ok:
                    slim[str(r)] = e if self.share else dict(e)
                    continue
            e = entry(None, "unknown", e)
            if e:
                slim[str(r)] = e
        self._facts = {}
        # every chain, also one no rank sits at any more (its rank's record lost to another
        # summary's): dropping it here would drop what it adds to that chain's record in a
        # later merge, and the table would depend on the grouping of the merges
        out = pack_positions(self.world, self.k if self.k is not None else 5, self.chains, positions, slim,
                             self.unwatched, self.warnings, all_chains=True)
        if self.hosts:
            out["hosts"] = sorted(self.hosts)
        return out


def merge_stream(summaries: Iterable[dict]) -> dict:
    """:func:`merge` of ``summaries``, an iterable consumed one summary at a time (a
    generator that reads them from files keeps one in memory)."""
    m = StreamMerge()
    with no_cyclic_gc():
        for s in summaries:
            m.add(s)
    return m.result()


def positions(logs: Iterable[ParsedLog], samples: int = 5) -> Dict[int, Tuple[RankFacts, Optional[tuple]]]:
    """Per rank of the parsed ``logs``: ``(facts, chain)``, ``chain`` being its position's
    frames (tuple of Frame, innermost first) or None. Logs without a rank are ignored."""
    s = summarize_node(list(logs), samples=samples)
    _, chains, facts, _, _ = unpack(s)
    out = {}
    for r, f in facts.items():
        rec = chains.get(f.key) if f.key else None
        out[r] = (f, frames_from_json(rec["frames"]) if rec else None)
    return out


def _dedupe(logs: List[ParsedLog]) -> List[ParsedLog]:
    """The same process's log copied twice (scratch + hang_detector/watchdog): keep the fuller copy."""
    best: Dict[tuple, ParsedLog] = {}
    rest = []
    for lg in logs:
        if lg.kind is LogKind.FAULTHANDLER and lg.pid is not None and lg.rank is not None:
            k = (lg.rank, lg.pid)
            old = best.get(k)
            if old is None or (len(lg.samples), lg.mtime or 0.0, lg.name) > (
                    len(old.samples), old.mtime or 0.0, old.name):
                best[k] = lg
        else:
            rest.append(lg)
    return list(best.values()) + rest


def _fix_ranks(logs: List[ParsedLog]) -> None:
    """A log without a rank takes the rank of the other logs of its pid, when that is unique."""
    if all(lg.rank is not None for lg in logs):
        return
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


def summarize_files(path: str, files: List[str], *, world_size: Optional[int] = None, samples: int = 5) -> dict:
    """The node summary of only ``files`` (paths under ``path``, see :func:`read_dir`), in
    this process: what :func:`summarize_dir` gives for a directory holding just those files
    (a node's probe answer summarizes its rank folders, not its capture tree)."""
    with no_cyclic_gc():
        return _summarize_files((path, files, world_size, samples))


def _summarize_files(args) -> dict:
    """Worker: the node summary of ``files`` under ``path`` (a disjoint set of whole ranks)."""
    path, files, world_size, samples = args
    return _summarize_contents(read_dir(path, files), world_size, samples)


def workers_for(n_files: int, workers: Optional[int]) -> int:
    """Worker processes for parsing ``n_files`` files: ``workers`` when given (at least 1), else 1
    below :data:`PARALLEL_MIN_FILES` files, else one per available core up to 8."""
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


def split_by_rank(path: str, files: List[str], workers: int):
    """``(serial, buckets)``: files routed to worker buckets by rank, and the rest.

    Only rank-side files whose name carries the rank (``watchdog/rank_<r>.pid<p>.log``,
    ``heartbeats/rank_<r>.pid<p>.hb``) are routed.  Everything else (captures, py-spy
    dumps, tracebacks, markers, summaries, rank-less logs) is parsed here first, and a
    rank it mentions keeps all its files here too, so every rank's data is summarized
    in exactly one place and the merge equals the serial summary.
    """
    routed: Dict[int, List[str]] = {}
    pid_ranks: Dict[int, set] = {}
    serial: List[str] = []
    for fp in files:
        parent = os.path.basename(os.path.dirname(fp))
        parsed = layout.parse_rank_file_name(os.path.basename(fp))
        if (parsed and parsed[0] is not None and (parent, parsed[2]) in (
                (layout.WATCHDOG_DIR, "log"), (layout.HEARTBEAT_DIR, "hb"))
                and not in_capture_tree(fp[len(path):])):
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


def _summary_ranks(summary: dict) -> List[Tuple[int, int]]:
    """The ranks of a node summary (its positions and facts) as runs ``[(first, last)]``;
    entries that do not parse are skipped (as :func:`unpack` skips them)."""
    runs: List[Tuple[int, int]] = []
    pos = summary.get("positions")
    for p in pos if isinstance(pos, list) else ():
        try:
            runs.extend(parse_runs(str(p.get("ranks", "")) if isinstance(p, dict) else ""))
        except ValueError:
            continue
    facts = summary.get("facts")
    for rs in facts if isinstance(facts, dict) else ():
        if str(rs).isdigit():
            runs.append((int(rs), int(rs)))
    return runs


def observed_times(summaries: Iterable[dict], local: Iterable[dict] = ()) -> Dict[int, float]:
    """rank -> epoch seconds its facts were observed, for the ranks of ``summaries`` that
    carry ``taken_at`` (when their node took them: the batch monitor's probe answers, see
    :func:`hpc_hangkit.slurm.probe.node_summary`), for
    :func:`hpc_hangkit.rollcall.verdict.apply_timing`. Ranks that ``local`` (summaries of
    raw files read here) also holds are left out: they are observed now. A rank in several
    timed summaries gets the earliest time, so its silence is never overstated. A summary
    without a usable ``taken_at`` gives nothing."""
    out: Dict[int, float] = {}
    for s in summaries:
        t = s.get("taken_at")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < float("inf"):
            continue
        t = float(t)
        for lo, hi in _summary_ranks(s):
            for r in range(max(lo, 0), hi + 1):
                old = out.get(r)
                if old is None or t < old:
                    out[r] = t
    if out:
        lo_all, hi_all = min(out), max(out)
        for s in local:
            for lo, hi in _summary_ranks(s):
                for r in range(max(lo, lo_all), min(hi, hi_all) + 1):
                    out.pop(r, None)
    return out


def summarize_dir(path: str, *, world_size: Optional[int] = None, samples: int = 5,
                  workers: Optional[int] = None, observed: Optional[Dict[int, float]] = None) -> dict:
    """Read ``path`` (see :func:`read_dir`) and return its node summary merged with any
    ``*.summary.json`` found there.

    ``observed``: a dict filled with :func:`observed_times` of the summaries found (rank ->
    epoch s its node took its facts; empty when none carries ``taken_at``), for the roll
    call's silence rule; the summary returned does not hold it.

    ``workers``: processes that parse raw dumps (default: one per available core, up
    to 8, when the directory holds at least :data:`PARALLEL_MIN_FILES` files; 1 =
    serial).  They are forked, so only from a process with no other threads; with
    threads running the parse is serial.  The result does not depend on it: ranks are split whole between the
    processes and their summaries merged (:func:`merge`).  If the worker processes
    cannot be started the directory is parsed serially.
    """
    if not os.path.exists(path):
        raise FileNotFoundError("no such file or directory: %s" % path)
    with no_cyclic_gc():
        return _summarize_dir(path, world_size, samples, workers, observed)


def _summarize_dir(path: str, world_size: Optional[int], samples: int, workers: Optional[int],
                   observed: Optional[Dict[int, float]] = None) -> dict:
    files = list_files(path)
    n = workers_for(len(files), workers)
    if n > 1 and (not hasattr(os, "fork") or _other_threads()):
        n = 1  # workers are forked: never from a process with other threads (their locks)
    parts: List[dict] = []
    if n > 1:
        c, buckets = split_by_rank(path, files, n)
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
    if observed is not None and c.summaries:
        observed.update(observed_times(c.summaries, [own, *parts]))
    if parts:
        return merge(own, *parts, *c.summaries)
    if c.summaries:
        return merge(own, *c.summaries) if (c.logs or c.unwatched or c.tracebacks or c.heartbeats) else merge(
            *c.summaries)
    return own

