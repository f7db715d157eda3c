"""The streaming merge (``merge``, hpc_hangkit.rollcall.nodes.StreamMerge) equals the merge
rank by rank (its definition, below) on random splits of real node summaries: overlapping
ranks with conflicting records, warnings, unwatched ranks, hostile entries; and a report
over streamed node summaries (flat and two-level, hpc_hangkit.rollcall.stream) equals the
direct roll call over the same raw dumps (2,000 ranks from the real samples)."""
from testlib import BENCH
import json
import os
import random
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hpc_hangkit.ranges import parse_ranks
from hpc_hangkit.rollcall import build_report, merge, nodes, summarize_dir
from hpc_hangkit.rollcall.facts import RankFacts, merge_chain
from hpc_hangkit.rollcall.nodes import StreamMerge, merge_stream, parse_runs
from hpc_hangkit.rollcall.stream import merge_files, write_merged
from test_rollcall_merge import NOW, _inputs, _summ, rank_spec


def by_rank(*summaries):
    """The merge's definition, rank by rank: every summary expanded to a row per rank; a
    rank two summaries hold keeps the greater record (RankFacts.order_key); every chain of
    every summary joined by merge_chain and kept (a union, also where no rank sits any more)."""
    world = k = None
    chains, rows, unw, warns, hosts = {}, {}, {}, set(), set()
    for s in summaries:
        w, ch, rs, un, wa = nodes._unpack_rows(s)
        if w is not None:
            world = w if world is None else max(world, w)
        if isinstance(s.get("k"), int):
            k = s["k"] if k is None else max(k, s["k"])
        for cid, rec in ch.items():
            merge_chain(chains, cid, rec)
        for r, row in rs.items():
            f = RankFacts.from_summary(*row)
            old = rows.get(r)
            rows[r] = f if old is None or f.order_key() > old.order_key() else old
        for r, why in un.items():
            if r not in unw or why > unw[r]:
                unw[r] = why
        warns |= wa
        hosts |= set(s.get("hosts") or ())
    out = nodes._pack_rows(world, k if k is not None else 5, chains,
                           {r: (f.key, f.state, f.to_summary()) for r, f in rows.items()}, unw, warns,
                           all_chains=True)
    if hosts:
        out["hosts"] = sorted(hosts)
    return out


def _disk(s):
    return json.loads(json.dumps(s))  # what lands on disk as *.summary.json


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(rank_spec, min_size=1, max_size=12), again=st.lists(rank_spec, max_size=8),
       k=st.integers(1, 6), seed=st.integers(0, 2 ** 16))
def test_stream_merge_equals_merge_on_random_splits(specs, again, k, seed):
    """``again`` re-uses ranks 0.. with other evidence on other nodes: the same rank in two
    summaries, records that conflict (state, samples, exit, heartbeat), warnings and
    unwatched markers on both sides."""
    parts = [_disk(_summ(n, k, host="n%d" % i)) for i, n in sorted(_inputs(specs, None).items())]
    parts += [_disk(_summ(n, k, host="m%d" % i)) for i, n in sorted(_inputs(again, 9).items())]
    want = by_rank(*parts)
    rnd = random.Random(seed)
    rnd.shuffle(parts)
    assert merge(*parts) == want
    assert merge_stream(reversed(parts)) == want
    # a random tree of streamed merges, partly merged twice (a group summary next to its nodes)
    nodes = list(parts)
    if nodes:
        nodes.append(merge_stream(rnd.sample(parts, rnd.randint(1, len(parts)))))
    while len(nodes) > 1:
        i = rnd.randrange(len(nodes) - 1)
        j = rnd.randint(i + 1, len(nodes))
        nodes[i:j] = [_disk(merge_stream(nodes[i:j]))]
    assert nodes[0] == want
    assert merge_stream([want, want]) == want


def _pos(chain, state, ranks):
    return {"chain": chain, "state": state, "ranks": ranks}


def _s(positions=(), facts=None, unwatched=None, warnings=(), world=None, k=5, chains=None, hosts=None):
    out = {"hangkit_summary": 1, "k": k, "world": world, "chains": chains or {}, "positions": list(positions),
           "facts": facts or {}, "unwatched": unwatched or {}, "warnings": list(warnings)}
    if hosts:
        out["hosts"] = hosts
    return out


CH = {"c1": {"frames": [["a.py", 3, "f", False]], "collective": "all_reduce"},
      "c2": {"frames": [["a.py", 9, "g", False]], "collective": None}}


HOSTILE = [
    # a rank at two positions of one summary (the later one holds), facts without a position,
    # a rank written "03", a bad rank set, a non-number rank, an out-of-range world
    _s([_pos("c1", "stuck", "0-5"), _pos("c2", "stuck", "3-4"), _pos("c2", "stuck", "x-1")],
       {"03": {"n": 5, "mode": 5}, "7": {"n": 1, "detail": "facts only"}, "x": {"n": 2}},
       {"9": "never armed", "09": "arming failed"}, ["w1"], world=1 << 30, chains=CH),
    _s([_pos("c2", "progressing", "4-6"), _pos(None, "unknown", "8")],
       {"4": {"n": 3, "mode": 1}, "8": {"detail": "only start-up dumps"}},
       {"9": "a"}, ["w2", "w1"], world=12, k=3, chains=CH, hosts=["h2"]),
    _s([_pos("c1", "exited", "5,10-11")], {"5": {"exit": "boom", "traceback": ["x"], "n": 2}}, world=8,
       chains=CH, hosts=["h1"]),
    _s([_pos("c1", "stuck", "")], {}, k=7),
]


@pytest.mark.parametrize("order", range(6))
def test_stream_merge_equals_merge_on_hostile_summaries(order):
    parts = [_disk(s) for s in HOSTILE]
    random.Random(order).shuffle(parts)
    want = by_rank(*parts)
    assert merge(*parts) == want
    assert want["facts"]["7"]["detail"] == "facts only" and _pos(None, "unknown", "7-8") in want["positions"]


def test_ranks_outside_the_coverage_map_are_records(monkeypatch):
    """Ranks at or above COVER_LIMIT (huge rank numbers in a summary) merge as records."""
    monkeypatch.setattr(nodes, "COVER_LIMIT", 6)
    parts = [_disk(s) for s in HOSTILE]
    for order in range(4):
        random.Random(order).shuffle(parts)
        assert merge(*parts) == by_rank(*parts)


def test_negative_rank_refused_like_merge():
    bad = _s([_pos("c1", "stuck", "0")], {"-1": {"n": 1}}, chains=CH)
    with pytest.raises(ValueError):
        by_rank(bad)
    with pytest.raises(ValueError):
        merge(bad)


@pytest.mark.parametrize("text", ["", "0", "0-1", "3,1-2", " 4 - 6 , 9", "5-5,5", "1-3,2-8,12", "7,,8", "3-1",
                                  "a", "-2", "1-2-3", "\u00b2", "0-16777216", "0-16777215"])
def test_parse_runs_accepts_what_parse_ranks_accepts(text):
    try:
        want = parse_ranks(text)
    except ValueError:
        with pytest.raises(ValueError):
            parse_runs(text)
        return
    runs = parse_runs(text)
    if len(want) > 100:
        assert runs == [(want[0], want[-1])]
        return
    assert [r for lo, hi in runs for r in range(lo, hi + 1)] == want
    assert all(b[0] > a[1] + 1 for a, b in zip(runs, runs[1:]))


# --- the report over node summaries equals the direct roll call ----------------------

def _gen():
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    import gen_dumps
    return gen_dumps


RANKS = 2000
PER_NODE = 8


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """2,000 ranks of real watchdog dumps (bench/gen_dumps.py: the real gloo samples, deep
    chains, helper threads, start-up and mid-transition samples, 3 divergent ranks), and the
    same dumps summarised node by node (8 ranks each) as ``*.summary.json`` files."""
    gen = _gen()
    base = tmp_path_factory.mktemp("stream_job")
    raw = str(base / "raw")
    suspects, _ = gen.generate(raw, RANKS, 5, 3)
    nodes = base / "nodes"
    nodes.mkdir()
    names = sorted(os.listdir(os.path.join(raw, "watchdog")),
                   key=lambda n: int(n.split("_")[1].split(".")[0]))
    paths = []
    for i in range(0, RANKS, PER_NODE):
        nd = base / "node" / ("n%04d" % (i // PER_NODE)) / "watchdog"
        nd.mkdir(parents=True)
        for n in names[i:i + PER_NODE]:
            os.link(os.path.join(raw, "watchdog", n), str(nd / n))
        p = str(nodes / ("n%04d.summary.json" % (i // PER_NODE)))
        with open(p, "w") as fh:
            json.dump(summarize_dir(str(nd.parent), world_size=None), fh)
        paths.append(p)
    return {"raw": raw, "suspects": suspects, "paths": paths, "base": base}


def _load(p):
    with open(p) as fh:
        return json.load(fh)


def test_report_over_streamed_node_summaries_equals_the_direct_roll_call(job):
    direct = build_report(summarize_dir(job["raw"]), now=NOW)
    assert direct.verdict == "SPLIT" and list(direct.suspect_ranks) == job["suspects"]
    paths = list(job["paths"])
    random.Random(1).shuffle(paths)
    flat = merge_files(paths)
    assert flat == by_rank(*[_load(p) for p in paths])
    assert build_report(flat, now=NOW).to_dict() == direct.to_dict()


def test_two_level_merge_gives_the_same_report(job):
    """Summaries of summaries (groups of 50 nodes, written by write_merged), read back by
    summarize_dir like any node summary: the same report as the direct roll call."""
    direct = build_report(summarize_dir(job["raw"]), now=NOW)
    top = job["base"] / "groups"
    top.mkdir()
    paths = job["paths"]
    for g in range(0, len(paths), 50):
        write_merged(paths[g:g + 50], str(top / ("group_%04d.summary.json" % (g // 50))))
    assert len(os.listdir(str(top))) == (len(paths) + 49) // 50
    two = summarize_dir(str(top))
    assert two == merge_files([str(top / n) for n in sorted(os.listdir(str(top)))])
    rep = build_report(two, now=NOW)
    assert rep.verdict == direct.verdict and rep.suspect_ranks == direct.suspect_ranks
    assert rep.to_dict() == direct.to_dict()


def test_merge_files_skips_unreadable_files_with_a_warning(tmp_path):
    good = tmp_path / "a.summary.json"
    good.write_text(json.dumps(HOSTILE[1]))
    bad = tmp_path / "b.summary.json"
    bad.write_text("{not json")
    other = tmp_path / "c.summary.json"
    other.write_text(json.dumps({"hangkit_summary": 99}))
    link = tmp_path / "d.summary.json"
    link.symlink_to(good)
    out = merge_files([str(good), str(bad), str(other), str(link), str(tmp_path / "missing.summary.json")])
    want = by_rank(HOSTILE[1])
    extra = set(out["warnings"]) - set(want["warnings"])
    assert {k: v for k, v in out.items() if k != "warnings"} == {k: v for k, v in want.items() if k != "warnings"}
    assert len(extra) == 4 and all(any(n in w for w in extra) for n in ("b.summary", "c.summary", "d.summary",
                                                                       "missing.summary"))


def test_stream_merge_keeps_runs_not_ranks():
    """12,500 in-order node summaries of 8 ranks at one position: one run, not 100k ranks."""
    m = StreamMerge()
    for n in range(12500):
        m.add({"hangkit_summary": 1, "positions": [_pos("c1", "stuck", "%d-%d" % (8 * n, 8 * n + 7))],
               "chains": CH})
    assert m._runs == {("c1", "stuck"): [[0, 99999]]}
    out = m.result()
    assert out["positions"] == [_pos("c1", "stuck", "0-99999")] and out["facts"] == {}


def test_merge_copies_facts_entries_merge_files_need_not():
    """merge() of the caller's dicts never hands back the caller's entries (a change to the
    result must not change the inputs); merge_files owns what it read."""
    s = _disk(HOSTILE[1])
    out = merge(s)
    assert out["facts"]["4"] == s["facts"]["4"] and out["facts"]["4"] is not s["facts"]["4"]
