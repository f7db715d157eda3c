"""read_dumps' fast path for pickles: a forked child (RLIMIT_AS, RLIMIT_CPU) unpickles each file without
the opcode scan and checks the decoded objects; the parent unpickles only what passed. Hostile bytes
(tests/fixtures/flight_recorder/hostile: the fuzz run's 12 GiB allocations) must be refused by the
child, cost the parent nothing, and still be named with their byte offset (the scan runs for them);
everything else must give the same dumps as the scan path."""
from testlib import REPO, TESTS
import copy
import glob
import os
import pickle
import random
import sys
import tracemalloc
import warnings

import pytest

from hpc_hangkit.evidence import flightrec
from hpc_hangkit.parse import flightrec as fr
from hpc_hangkit.parse.flightrec import FRParseError, check_decoded, check_pickle_unscanned, parse_flightrec
from test_flightrec_hostile import crafted_graphs

FIX = os.path.join(TESTS, "fixtures", "flight_recorder")
HOSTILE = sorted(glob.glob(os.path.join(FIX, "hostile", "*.pickle")))
RAW = os.path.join(FIX, "gloo_divergent_barrier", "pickle_raw")


def _read(p):
    with open(p, "rb") as f:
        return f.read()


def _real(r=0):
    return _read(os.path.join(RAW, "rank_%d" % r))


def _serial(monkeypatch, d):
    with monkeypatch.context() as m:
        m.setattr(flightrec, "PRECHECK_MIN_FILES", 1 << 30)
        return flightrec.read_dumps(d)


def _same(a, b):
    assert [(x.name, x.rank, x.entries, x.raw, x.warnings, x.error) for x in a[0]] == \
           [(x.name, x.rank, x.entries, x.raw, x.warnings, x.error) for x in b[0]]
    assert a[1] == b[1]


@pytest.mark.timeout(120)
def test_child_refuses_the_hostile_fixtures_and_the_parent_allocates_nothing_for_them():
    if flightrec._single_threaded():
        _child_refuses_check()
        return
    # earlier tests left threads in this process (fsspec, asyncio), and read_dumps never
    # forks from a threaded process: check the child path in a fresh interpreter
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.run([sys.executable, "-c", "import test_flightrec_precheck as t; t._child_refuses_check()"],
                       cwd=here, env=dict(os.environ, PYTHONPATH=os.pathsep.join([here, TESTS, REPO])),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=100)
    assert p.returncode == 0, p.stdout.decode(errors="replace")[-3000:]


def _child_refuses_check():
    assert flightrec._single_threaded()
    blobs = [(os.path.basename(p), _read(p)) for p in HOSTILE] + [("rank_%d" % r, _real(r)) for r in range(4)]
    tracemalloc.start()
    try:
        verdicts = list(flightrec._precheck_verdicts(blobs))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert verdicts[:len(HOSTILE)] == [False] * len(HOSTILE)
    assert all(type(v) is bytes for v in verdicts[len(HOSTILE):]), verdicts  # summaries of the real dumps
    for (name, data), v in zip(blobs[len(HOSTILE):], verdicts[len(HOSTILE):]):
        lazy, full = fr.dump_from_summary(v, data, name), parse_flightrec(data, name)
        assert lazy.last_per_pg() == full.last_per_pg() and lazy.has_entries() and not lazy.warnings
        assert (lazy.raw, lazy.entries, lazy.version, lazy.pg_config, lazy.pg_status) == \
            (full.raw, full.entries, full.version, full.pg_config, full.pg_status)
    assert peak < 1 << 20, peak  # the 20 GiB memo / 7e18-byte BINBYTES8 were tried in the child only


@pytest.mark.timeout(120)
def test_read_dumps_with_hostile_pickles_names_them_and_matches_the_scan_path(tmp_path, monkeypatch):
    for i, p in enumerate(HOSTILE):
        (tmp_path / ("rank_%d" % i)).write_bytes(_read(p))
    for r in range(4):
        (tmp_path / ("rank_%d" % (10 + r))).write_bytes(_real(r))
    fast = flightrec.read_dumps(str(tmp_path))
    assert [d.rank for d in fast[0]] == [10, 11, 12, 13]
    assert any("rank_0" in w and "at byte 58" in w and "LONG_BINPUT memo index" in w for w in fast[1]), fast[1]
    assert any("rank_2" in w and "at byte 238" in w and "BINBYTES claims" in w for w in fast[1]), fast[1]
    assert len(fast[1]) == len(HOSTILE)
    _same(fast, _serial(monkeypatch, str(tmp_path)))


@pytest.mark.timeout(120)
def test_json_beside_the_pickle_is_read_and_the_pickle_skipped(tmp_path, monkeypatch):
    for r in range(4):
        (tmp_path / ("rank_%d.json" % r)).write_bytes(_read(os.path.join(FIX, "gloo_divergent_barrier", "json",
                                                                           "rank_%d.json" % r)))
        (tmp_path / ("rank_%d.pickle" % r)).write_bytes(b"\x80\x04truncated" if r == 2 else _real(r))
    dumps, warns = flightrec.read_dumps(str(tmp_path))
    assert [d.name for d in dumps] == ["rank_%d.json" % r for r in range(4)] and warns == []
    # a rank whose JSON holds only dump_error still gets its pickle
    (tmp_path / "rank_1.json").write_bytes(b'{"dump_error": "timed out"}')
    dumps, warns = flightrec.read_dumps(str(tmp_path))
    assert [d.name for d in dumps] == ["rank_0.json", "rank_1.pickle", "rank_2.json", "rank_3.json"]
    _same((dumps, warns), _serial(monkeypatch, str(tmp_path)))


def _big(n=2000):
    d0 = pickle.loads(_real())
    return dict(d0, entries=[copy.deepcopy(d0["entries"][i % len(d0["entries"])]) for i in range(n)])


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_real_shaped_dump_passes_the_decoded_check_with_room(protocol, monkeypatch):
    data = pickle.dumps(_big(), protocol=protocol)
    with monkeypatch.context() as m:
        m.setattr(fr, "MAX_EXPANSION", fr.MAX_EXPANSION / 4)  # the references budget: 4x to spare
        check_pickle_unscanned(data, "rank_0")
    d = parse_flightrec(data, "rank_0", prechecked=True)
    assert d.entries == parse_flightrec(data, "rank_0").entries and len(d.entries) == 2000


def _refusal(doc):
    with pytest.raises(FRParseError) as ei:
        check_pickle_unscanned(pickle.dumps(doc, protocol=5), "rank_7")  # 5: bytearray by BYTEARRAY8
    assert "rank_7" in str(ei.value) and "at byte 0 (whole file)" in str(ei.value)
    return str(ei.value)


def test_decoded_check_refuses_cycles_sharing_dags_depth_and_foreign_types():
    cyc, shared, dag, deep = crafted_graphs()
    ok = deep[0][0][0]  # MAX_DEPTH - 1 lists: MAX_DEPTH levels with the dict around them
    assert "nested deeper than" in _refusal({"entries": cyc})  # a cycle is infinitely deep
    check_pickle_unscanned(pickle.dumps({"entries": [shared, shared]}), "rank_7")  # a DAG: allowed
    assert "references" in _refusal({"entries": [dag]})
    assert "nested deeper than %d" % fr.MAX_DEPTH in _refusal({"entries": deep})
    check_pickle_unscanned(pickle.dumps({"entries": ok}), "rank_7")
    # tuple keys: refused by the scan, passed by the child (its per-file CPU-time check bounds a crafted
    # hash collision); the dump parses the same either way
    tk = pickle.dumps({"entries": [], "pg_status": {(1, 2): {}}})
    check_pickle_unscanned(tk, "rank_7")
    assert parse_flightrec(tk, "rank_7", prechecked=True).pg_status == {(1, 2): {}}
    assert "a set object" in _refusal({"entries": [{1, 2}]})
    assert "a bytearray object" in _refusal({"entries": [bytearray(b"x")]})
    with pytest.raises(pickle.UnpicklingError, match="refused"):
        check_pickle_unscanned(pickle.dumps({"entries": [os.system]}), "rank_7")


def test_decoded_check_depth_agrees_with_the_scan_at_the_limit():
    for levels in (fr.MAX_DEPTH - 1, fr.MAX_DEPTH, fr.MAX_DEPTH + 1):
        doc = []
        for _ in range(levels - 1):
            doc = [doc]
        data = pickle.dumps(doc)
        try:
            fr._scan_pickle(data, "x")
            scan_ok = True
        except FRParseError:
            scan_ok = False
        try:
            check_decoded(pickle.loads(data), "x", len(data))
            tree_ok = True
        except FRParseError:
            tree_ok = False
        assert scan_ok == tree_ok == (levels <= fr.MAX_DEPTH), levels


@pytest.mark.timeout(300)
def test_mutated_pickles_through_the_child_parse_and_survive_analysis(tmp_path, monkeypatch):
    """Mutations of the real dumps (bench/fuzz.py's mutator) written as rank files: the fast path never
    raises, and gives the scan path's dump (and warning) for every file the scan accepts."""
    sys.path.insert(0, os.path.join(REPO, "bench"))
    import fuzz

    seeds = fuzz.corpus()
    all_seeds = [s for v in seeds.values() for s in v]
    rng = random.Random(11)
    pickles = [s for s in seeds["flightrec"] if s[:1] == b"\x80"]
    n = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(2000):  # mostly pickles; JSON dumps go through the children too
            data = fuzz.mutate(rng, pickles if i % 4 else seeds["flightrec"], all_seeds)
            (tmp_path / ("rank_%d" % i)).write_bytes(data)
            n += 1
    fast = flightrec.read_dumps(str(tmp_path))
    slow = _serial(monkeypatch, str(tmp_path))
    fast_by = {d.rank: d for d in fast[0]}
    for d in slow[0]:  # the scan's acceptances: the same dump from the fast path
        f = fast_by.pop(d.rank)
        assert (f.entries, f.raw, f.warnings) == (d.entries, d.raw, d.warnings), d.name
    good = [parse_flightrec(_real(r), "rank_%d" % (10000 + r)) for r in (1, 2, 3)]
    for d in fast_by.values():  # accepted by the fast path only: plain data all the same
        flightrec.analyse([d] + good)
        for raw in flightrec.fixed_for_torchfrtrace([d] + good).values():
            pickle.dumps(raw)
    assert n > 1000 and len(slow[0]) >= 5 and len(fast[0]) >= len(slow[0]), (n, len(slow[0]), len(fast[0]))
