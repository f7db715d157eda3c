"""Node summaries: a report over merged per-node summaries equals the report over all raw
dumps at once (hypothesis, randomized real samples), and merge is associative/commutative."""
from testlib import TESTS
import json
import os
import random
from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings, strategies as st

from hpc_hangkit.parse.faulthandler import parse_faulthandler
from hpc_hangkit.parse.model import ParsedLog
from hpc_hangkit.parse.pyspy import parse_pyspy
from hpc_hangkit.parse.traceback import parse_tracebacks
from hpc_hangkit.rollcall import build_report, merge, summarize_node

FIX = os.path.join(TESTS, "fixtures", "torch_samples")


def _read(*parts):
    with open(os.path.join(FIX, *parts), "rb") as fh:
        return fh.read()


def _pool():
    """Real samples: hang positions, start-up dumps, mid-transition dumps, py-spy, fatal-free."""
    samples = []
    for d in ("gloo_divergent_barrier", "gloo_divergent_sleep", "mpi_mpich_allreduce_obj"):
        for r in range(4):
            lg = parse_faulthandler(_read(d, "faulthandler", "rank_%d.log" % r))
            samples.extend(lg.samples[:2] + lg.samples[-2:])
    samples.extend(parse_faulthandler(_read("gloo_sigusr1_register_running", "rank_3_head520.log")).samples[78:84])
    samples.extend(parse_pyspy(_read("gloo_divergent_barrier", "pyspy", "dump_native_rank1.txt")).samples)
    samples.extend(parse_pyspy(_read("mpi_openmpi_Allreduce_buf", "pyspy", "dump_rank1.json")).samples)
    tbs = []
    for r in range(4):
        tbs.extend(parse_tracebacks(_read("gloo_pg_timeout_10s", "stdout_rank%d.txt" % r)).values())
    return samples, tbs


POOL, TBS = _pool()
NOW = 1796070000.0

rank_spec = st.fixed_dictionaries({
    "samples": st.lists(st.integers(min_value=0, max_value=len(POOL) - 1), max_size=7),
    "extra_log": st.booleans(),
    "tb": st.one_of(st.none(), st.integers(min_value=0, max_value=len(TBS) - 1)),
    "hb": st.one_of(st.none(), st.tuples(st.sampled_from(["", "step 3", "step 4"]),
                                         st.floats(min_value=NOW - 120, max_value=NOW),
                                         st.integers(min_value=0, max_value=9))),
    "mtime": st.one_of(st.none(), st.floats(min_value=NOW - 120, max_value=NOW)),
    "unwatched": st.booleans(),
    "node": st.integers(min_value=0, max_value=4),
})


def _inputs(specs, world):
    per_node = {}
    for r, sp in enumerate(specs):
        node = per_node.setdefault(sp["node"], {"logs": [], "tbs": {}, "hbs": [], "unw": {}, "warn": []})
        if sp["unwatched"] and not sp["samples"]:
            node["unw"][r] = "arming failed for rank %d" % r
            continue
        if sp["samples"] or sp["extra_log"]:
            lg = ParsedLog("rank_%d.log" % r, rank=r, pid=1000 + r, host="n%d" % sp["node"], world=world,
                           samples=[POOL[i] for i in sp["samples"]], kind="faulthandler")
            lg.mtime = sp["mtime"]
            lg.period_s = 3.0
            lg.header = {"t": 1.0}
            node["logs"].append(lg)
            node["warn"].append("rank_%d.log: byte 7: something skipped" % r)
        if sp["extra_log"]:
            node["logs"].append(ParsedLog("stack_traces/rank_%d.log" % r, rank=r, pid=1000 + r,
                                          samples=[POOL[-1]], kind="pyspy"))
        if sp["tb"] is not None:
            node["tbs"][r] = TBS[sp["tb"]]
        if sp["hb"] is not None:
            label, wall, counter = sp["hb"]
            node["hbs"].append(SimpleNamespace(rank=r, label=label, wall_s=wall, counter=counter, period_s=3.0,
                                               world=world or -1, host="n%d" % sp["node"]))
    return per_node


def _summ(node, k, host=None):
    return summarize_node(node["logs"], tracebacks=node["tbs"], heartbeats=node["hbs"], unwatched=node["unw"],
                          warnings=node["warn"], samples=k, host=host)


def _all(per_node, k):
    whole = {"logs": [], "tbs": {}, "hbs": [], "unw": {}, "warn": []}
    for n in per_node.values():
        whole["logs"] += n["logs"]
        whole["tbs"].update(n["tbs"])
        whole["hbs"] += n["hbs"]
        whole["unw"].update(n["unw"])
        whole["warn"] += n["warn"]
    return _summ(whole, k)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(rank_spec, min_size=1, max_size=12), world=st.one_of(st.none(), st.integers(1, 14)),
       k=st.integers(1, 6), depth=st.one_of(st.none(), st.integers(1, 4)), seed=st.integers(0, 2 ** 16))
def test_merge_of_node_summaries_equals_the_direct_report(specs, world, k, depth, seed):
    per_node = _inputs(specs, world)
    direct = build_report(_all(per_node, k), depth=depth, now=NOW).to_dict()
    nodes = [_summ(n, k, host="n%d" % i) for i, n in sorted(per_node.items())]
    nodes = [json.loads(json.dumps(s)) for s in nodes]  # what lands on disk as *.summary.json
    rnd = random.Random(seed)
    rnd.shuffle(nodes)
    # a random merge tree (STAT-style fan-in), not just a flat fold
    while len(nodes) > 1:
        i = rnd.randrange(len(nodes) - 1)
        nodes[i:i + 2] = [merge(nodes[i], nodes[i + 1])]
    merged = build_report(nodes[0], depth=depth, now=NOW).to_dict()
    assert merged == direct


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(rank_spec, min_size=3, max_size=10), again=st.lists(rank_spec, min_size=3, max_size=10),
       k=st.integers(1, 6))
def test_merge_is_associative_commutative_and_idempotent(specs, again, k):
    """Also when the same rank shows up in several summaries with different evidence
    (a rank's files captured twice, a restarted rank): the merge must not depend on order."""
    per_node = _inputs(specs, None)
    dup = _inputs(again, None)  # ranks 0.. again, on other "nodes", with other samples
    parts = [_summ(n, k) for _, n in sorted(per_node.items())] + [_summ(n, k) for _, n in sorted(dup.items())]
    while len(parts) < 3:
        parts.append(_summ({"logs": [], "tbs": {}, "hbs": [], "unw": {}, "warn": []}, k))
    a, b, c = parts[0], parts[-1], merge(*parts[1:-1])
    assert merge(a, merge(b, c)) == merge(merge(a, b), c) == merge(c, b, a) == merge(b, a, c)
    assert merge(a, a) == merge(a)


def _rank2(sample, node):
    """The node summary (k=1) of rank 2 alone with one sample of the pool, on host n<node>."""
    none = {"samples": [], "extra_log": False, "tb": None, "hb": None, "mtime": None, "unwatched": False,
            "node": node}
    return _summ(_inputs([none, none, dict(none, samples=[sample])], None)[node], 1)


def test_a_chain_no_rank_sits_at_any_more_still_shapes_it_in_a_later_merge():
    """The chains table of a merge of merges equals the flat merge's. Rank 2 sits at the
    barrier in ``a`` (a py-spy --native dump: native frames), at the all_reduce in ``b`` (a
    faulthandler dump; the greater record, by host n1 > n0: it wins); rank 9 exited at the
    barrier in ``c`` (a traceback: no native frames). merge(a, b) has no rank at the barrier
    any more; it must still keep a's barrier record, or merge(merge(a, b), c) loses the
    native frames that merge(a, merge(b, c)) and merge(a, b, c) keep."""
    a, b = _rank2(54, 0), _rank2(1, 1)
    c = _summ({"logs": [], "tbs": {9: TBS[1]}, "hbs": [], "unw": {}, "warn": []}, 1)
    barrier = a["positions"][0]["chain"]
    assert a["positions"] == [{"chain": barrier, "state": "stuck", "ranks": "2"}]
    assert a["chains"][barrier]["native"]
    assert b["positions"][0]["chain"] != barrier and b["positions"][0]["ranks"] == "2"
    assert c["positions"] == [{"chain": barrier, "state": "exited", "ranks": "9"}]
    assert "native" not in c["chains"][barrier]

    flat = merge(a, b, c)
    assert flat["positions"][0] == b["positions"][0]   # rank 2: b's record won
    assert flat["chains"][barrier]["native"] == a["chains"][barrier]["native"]
    on_disk = [json.loads(json.dumps(s)) for s in (merge(b, a), c)]
    for tree in (merge(merge(a, b), c), merge(a, merge(b, c)), merge(merge(a, c), b), merge(c, merge(b, a)),
                 merge(*on_disk)):
        assert tree == flat
    assert merge(flat, flat) == flat
    assert build_report(merge(merge(a, b), c), now=NOW).to_dict() == build_report(flat, now=NOW).to_dict()
