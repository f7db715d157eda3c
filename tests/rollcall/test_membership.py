"""Suspects from process-group membership (evidence/flightrec.membership) and the Flight
Recorder's member count, on dumps built entry by entry in the shape torch 2.13 writes them; the
real hanging jobs are tests/scenarios20 (wrong_group.py, comm_split.py)."""
from hpc_hangkit.evidence.flightrec import _kind_text, analyse, members, membership
from hpc_hangkit.parse.flightrec import FRDump, FREntry

TORCH = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
SRC = "/job/train.py"


def entry(pg, seq, op, line, done=True, fn="main"):
    return FREntry(pg=pg, pg_desc="default_pg" if pg == "0" else "undefined", seq=seq, p2p_seq=0, is_p2p=False,
                   op=op, profiling_name="gloo:" + op, input_sizes=((8,),), input_dtypes=("Float",),
                   output_sizes=((8,),), output_dtypes=("Float",), state="scheduled", retired=done,
                   frames=((TORCH, 3252, op), (SRC, line, fn)))


def dump(rank, entries, pg_config=None):
    d = FRDump(name="rank_%d.json" % rank, rank=rank,
               pg_config=pg_config or {"": {"name": "", "desc": "", "ranks": "[]"}})
    d.entries = entries
    return d


def steps(rank, tp, n, last_tp=None, last_done=False):
    """``n`` steps of: all_reduce at line 21 on the rank's tp group, barrier at line 31 on the
    world; then one more all_reduce at line 21 on ``last_tp`` (pending unless ``last_done``)."""
    out = []
    for s in range(1, n + 1):
        out += [entry(tp, s, "all_reduce", 21, fn="tp_reduce"), entry("0", s, "barrier", 31)]
    if last_tp is not None:
        seq = n + 1
        out.append(entry(last_tp, seq, "all_reduce", 21, done=last_done, fn="tp_reduce"))
    return out


def test_a_rank_that_passed_another_group_at_one_call():
    # tp groups {0,1} (pg 1) and {2,3} (pg 2); at step 3 rank 3 calls the all_reduce on the world
    dumps = [dump(0, steps(0, "1", 2, "1", True) + [entry("0", 3, "barrier", 31, done=False)]),
             dump(1, steps(1, "1", 2, "1", True) + [entry("0", 3, "barrier", 31, done=False)]),
             dump(2, steps(2, "2", 2, "2")),
             dump(3, steps(3, "2", 2, "0"))]
    m = membership(dumps)
    assert m["suspects"] == [3]
    assert m["sites"] == [[3, SRC, 21]]
    assert "rank 3 waits at train.py:21 on process group 0 (default_pg, ranks 0-3)" in m["why"]
    assert "rank 2 waits on process group 2 (ranks 2-3)" in m["why"]
    assert "rank 3's earlier calls here were on process group 2" in m["why"]


def test_a_rank_let_through_a_group_it_is_not_in():
    # pipeline groups {0,1} (pg 1) and {2,3} (pg 2); at step 3 rank 1 picks pg 2, is no member,
    # makes no call, and waits at the world barrier with ranks 2,3; rank 0 waits on pg 1 for it
    dumps = [dump(0, steps(0, "1", 2, "1")),
             dump(1, steps(1, "1", 2) + [entry("0", 3, "barrier", 31, done=False)]),
             dump(2, steps(2, "2", 2, "2", True) + [entry("0", 3, "barrier", 31, done=False)]),
             dump(3, steps(3, "2", 2, "2", True) + [entry("0", 3, "barrier", 31, done=False)])]
    m = membership(dumps)
    assert m["suspects"] == [1] and m["sites"] == [[1, SRC, 21]]
    assert "rank 0 waits at train.py:21 on process group 1 (ranks 0-1) for rank 1" in m["why"]
    assert "made 2 calls there to its peers' 3 (ranks 2-3)" in m["why"]
    # the sequence analysis alone names rank 0 (behind on the world group)
    assert analyse(dumps)["suspect_ranks"] == [0]


def test_no_membership_suspect_when_every_rank_waits_on_one_group_or_a_buffer_wrapped():
    # a plain missed collective on the world group: the sequence analysis decides
    plain = [dump(r, [entry("0", 1, "all_reduce", 21), entry("0", 2, "all_reduce", 21, done=r == 1)])
             for r in range(4)]
    plain[1].entries = plain[1].entries + [entry("0", 3, "barrier", 31, done=False)]
    assert membership(plain) is None
    # the let-through shape, but every buffer lost its first records: counts are not compared
    dumps = [dump(0, steps(0, "1", 2, "1")),
             dump(1, steps(1, "1", 2) + [entry("0", 3, "barrier", 31, done=False)]),
             dump(2, steps(2, "2", 2, "2", True) + [entry("0", 3, "barrier", 31, done=False)]),
             dump(3, steps(3, "2", 2, "2", True) + [entry("0", 3, "barrier", 31, done=False)])]
    for d in dumps:
        d.entries = d.entries[2:]
    assert membership(dumps) is None


def test_members_come_from_pg_config_and_together_counts_them():
    cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
           "1": {"name": "1", "desc": "undefined", "ranks": "[0, 1]"}}
    dumps = [dump(r, [entry("0", 1, "all_reduce", 21, done=False)], cfg) for r in range(3)]
    mem = members(dumps)
    assert mem["0"] == ([0, 1, 2, 3], "pg_config") and mem["1"] == ([0, 1], "pg_config")
    (f,) = analyse(dumps)["pgs"]
    assert f["kind"] == "together"
    # rank 3 left no dump: the three with entries are not "every rank"
    assert _kind_text(f, mem) == "ranks 0-2 of its 4 members at the same collective; rank 3 has no entry"
    whole = [dump(r, [entry("0", 1, "all_reduce", 21, done=False)], cfg) for r in range(4)]
    assert _kind_text(analyse(whole)["pgs"][0], members(whole)) == "every member (4) at the same collective"
    # gloo: no member list, members from entries, and the text says what it cannot see
    gloo = [dump(r, [entry("0", 1, "all_reduce", 21, done=False)]) for r in range(3)]
    assert members(gloo)["0"] == ([0, 1, 2], "entries")
    assert "no member list" in _kind_text(analyse(gloo)["pgs"][0], members(gloo))
