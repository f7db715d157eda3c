"""Hostile Flight Recorder dumps: refused with FRParseError naming the file and the byte
offset, never another exception, never more than a small multiple of the input allocated.

The fixtures under tests/fixtures/flight_recorder/hostile are the inputs bench/fuzz.py
isolated (mutations of the real pickle_raw/rank_0 dump) that made CPython's unpickler
allocate the size a length field or memo index claims (the fuzz run's 12 GiB growth).
Allocation is measured with tracemalloc (it sees the unpickler's PyMem allocations).
"""
from testlib import REPO, TESTS
import copy
import glob
import json
import os
import pickle
import tracemalloc

import pytest

from hpc_hangkit.evidence import flightrec
from hpc_hangkit.parse import flightrec as fr
from hpc_hangkit.parse.flightrec import FRParseError, parse_flightrec

FIX = os.path.join(TESTS, "fixtures", "flight_recorder")
HOSTILE = sorted(glob.glob(os.path.join(FIX, "hostile", "*.pickle")))
REAL = os.path.join(FIX, "gloo_divergent_barrier", "pickle_raw", "rank_0")


def _real():
    with open(REAL, "rb") as f:
        return f.read()


def peak_of(fn, *a):
    """(result or the FRParseError raised, peak bytes allocated while running fn)."""
    tracemalloc.start()
    try:
        try:
            out = fn(*a)
        except FRParseError as e:
            out = e
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def bound(data):
    return fr.MAX_EXPANSION * len(data) + (64 << 10)


def test_fixtures_are_present():
    assert [os.path.basename(p) for p in HOSTILE] == [
        "rank_0_long_binput_memo.pickle", "rank_1_bytearray8.pickle", "rank_2_binbytes.pickle",
        "rank_3_binbytes8.pickle"]


@pytest.mark.parametrize("path", HOSTILE, ids=os.path.basename)
def test_isolated_fuzz_inputs_are_refused_within_the_memory_bound(path):
    with open(path, "rb") as f:
        data = f.read()
    name = os.path.basename(path)
    err, peak = peak_of(parse_flightrec, data, name)
    assert isinstance(err, FRParseError), err
    assert name in str(err) and " at byte " in str(err), str(err)
    assert peak < bound(data), (peak, str(err))


def test_what_each_fixture_claims():
    msgs = {}
    for p in HOSTILE:
        with open(p, "rb") as f:
            try:
                parse_flightrec(f.read(), os.path.basename(p))
            except FRParseError as e:
                msgs[os.path.basename(p)] = str(e)
    assert "LONG_BINPUT memo index 1678019589 out of order" in msgs["rank_0_long_binput_memo.pickle"]
    assert "opcode 0x96" in msgs["rank_1_bytearray8.pickle"]  # BYTEARRAY8
    assert "BINBYTES claims 2491230356 bytes" in msgs["rank_2_binbytes.pickle"]
    assert "BINBYTES8 claims 7592901227597004875 bytes" in msgs["rank_3_binbytes8.pickle"]


def test_read_dumps_skips_hostile_files_with_a_warning_and_keeps_the_rest(tmp_path):
    with open(HOSTILE[0], "rb") as f:
        (tmp_path / "rank_0").write_bytes(f.read())
    with open(HOSTILE[2], "rb") as f:
        (tmp_path / "rank_2").write_bytes(f.read())
    (tmp_path / "rank_1").write_bytes(_real())
    dumps, warns = flightrec.read_dumps(str(tmp_path))
    assert [d.rank for d in dumps] == [1]
    assert any("rank_0" in w and "at byte 58" in w for w in warns), warns
    assert any("rank_2" in w and "at byte 238" in w for w in warns), warns


# --- crafted pickles: each refused at the opcode that would blow up -----------------

def _frame(body):
    return b"\x80\x04" + body + b"."


CRAFTED = {
    "memo index far ahead (LONG_BINPUT)": (_frame(b"}r\x00\x00\x00\x10"), "memo index 268435456 out of order"),
    "memo index far ahead (BINPUT)": (_frame(b"}q\x05"), "memo index 5 out of order"),
    "BINUNICODE8 length past the end": (_frame(b"\x8d" + (1 << 40).to_bytes(8, "little") + b"ab"), "claims"),
    "BINUNICODE length past the end": (_frame(b"X" + (1 << 31).to_bytes(4, "little") + b"ab"), "claims"),
    "FRAME past the end": (b"\x80\x04\x95" + (1 << 40).to_bytes(8, "little") + b"}.", "FRAME larger"),
    "LONG4 (unbounded int)": (_frame(b"\x8b" + (1 << 30).to_bytes(4, "little")), "opcode 0x8b"),
    "LONG1 of 200 bytes": (_frame(b"\x8a\xc8" + b"\x01" * 200), "LONG1 integer of 200 bytes"),
    "global": (pickle.dumps(os.system), "refused"),
    "protocol 1": (b"\x80\x01}.", "protocol 1"),
    "text opcodes after PROTO (LIST, PUT)": (_frame(b"(lp0\n"), "opcode 0x6c"),
    "empty-dict flood": (_frame(b"}" * 200000), "would allocate over"),
    "MARK flood": (_frame(b"(" * 200000), "STOP with"),
    "no STOP": (b"\x80\x04}", "no STOP"),
    "BINGET of nothing": (_frame(b"h\x07"), "memo index never stored"),
    "APPEND to a dict": (_frame(b"}K\x01a"), "APPEND to a non-list"),
    "SETITEM on an empty stack": (_frame(b"s"), "stack underflow"),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_pickle_refused(case):
    data, why = CRAFTED[case]
    err, peak = peak_of(parse_flightrec, data, "rank_5")
    assert isinstance(err, FRParseError), (case, err)
    assert "rank_5" in str(err) and why in str(err), str(err)
    assert peak < bound(data), (case, peak)


def test_text_protocol_pickle_is_not_unpickled():
    # not starting with PROTO: read as JSON, refused as such
    with pytest.raises(FRParseError, match="not JSON or pickle"):
        parse_flightrec(b"(lp0\n.", "rank_0")


def crafted_graphs():
    """(a list holding itself, a list to put twice, 40 doublings of a tuple, a list nested
    MAX_DEPTH + 2 levels deep): what the decoded-object checks must refuse."""
    cyc = []
    cyc.append(cyc)
    dag = ("a", "b")
    for _ in range(40):
        dag = (dag, dag)
    deep = [1]
    for _ in range(fr.MAX_DEPTH + 1):
        deep = [deep]
    return cyc, [1, 2], dag, deep


def test_reference_cycle_and_doubling_tuples_refused_shared_containers_allowed():
    cyc, shared, dag, deep = crafted_graphs()
    # a list or dict referenced twice is a DAG (torch 2.13 shares stack-frame dicts): parsed
    d = parse_flightrec(pickle.dumps({"entries": [{"frames": [shared]}, {"frames": [shared]}]}), "rank_0")
    assert len(d.entries) == 2
    ddag = {"x": 1}
    for _ in range(40):  # a doubling DAG of dicts in lists: refused by its expanded size
        ddag = [ddag, ddag]
    for doc, why in (({"entries": cyc}, "nested deeper than %d" % fr.MAX_DEPTH),  # a cycle
                     ({"entries": [ddag]}, "would allocate over"),
                     ({"entries": [dag]}, "would allocate over"),
                     ({"entries": deep}, "nested deeper than %d" % fr.MAX_DEPTH),
                     ({"entries": [], "pg_status": {(1, 2): {}}}, "non-scalar key")):
        data = pickle.dumps(doc)
        err, peak = peak_of(parse_flightrec, data, "rank_0")
        assert isinstance(err, FRParseError) and why in str(err), str(err)
        assert peak < bound(data)


def test_json_floods_and_nesting_refused_within_the_bound():
    for data, why in ((b'{"entries": [' + b"{}," * 200000 + b"{}]}", "JSON objects/arrays"),
                      (b'{"entries": [' + b"[]," * 200000 + b"[]]}", "JSON objects/arrays"),
                      (json.dumps({"entries": [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}).encode(),
                       "nested deeper than %d" % fr.MAX_DEPTH)):
        err, peak = peak_of(parse_flightrec, data, "rank_0.json")
        assert isinstance(err, FRParseError) and why in str(err), str(err)
        assert "rank_0.json" in str(err) and "at byte" in str(err)
        assert peak < bound(data)
    # brackets inside strings are not nesting
    ok = parse_flightrec(json.dumps({"entries": [], "version": "[" * 100 + "{" * 100}).encode(), "rank_0.json")
    assert ok.entries == []


def test_size_cap_is_checked_before_decoding(monkeypatch):
    monkeypatch.setattr(fr, "MAX_DUMP_BYTES", len(_real()) - 1)
    with pytest.raises(FRParseError, match=r"rank_0: refused at byte %d: larger than" % (len(_real()) - 1)):
        parse_flightrec(_real(), "rank_0")
    assert fr.MAX_DUMP_BYTES == len(_real()) - 1


def test_documented_cap_is_a_few_hundred_mib():
    assert 64 << 20 <= fr.MAX_DUMP_BYTES <= 512 << 20


def test_malformed_entries_and_tables_become_warnings():
    doc = {"version": "2.10", "pg_config": [1], "pg_status": {"0": {"last_enqueued_collective": 1}, "1": 7},
           "entries": [{"process_group": {"1": 2}}, {"collective_seq_id": 1e308 * 10},
                       {"input_sizes": [{"a": 1}]}, 5, {"profiling_name": "gloo:barrier", "collective_seq_id": 3}]}
    for data in (json.dumps(doc).encode(), pickle.dumps(doc)):
        d = parse_flightrec(data, "rank_0")
        assert [(e.op, e.seq) for e in d.entries] == [("barrier", 3)]
        assert len(d.warnings) == 6, d.warnings
        assert d.pg_config == {} and d.pg_status == {"0": {"last_enqueued_collective": 1}}


def _big(n=2000):
    with open(REAL, "rb") as f:
        d0 = pickle.load(f)
    big = dict(d0)
    # deepcopy keeps the (immutable) process_group tuple shared across entries, as Python may
    big["entries"] = [copy.deepcopy(d0["entries"][i % len(d0["entries"])]) for i in range(n)]
    return big


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_real_shaped_2000_entry_dump_parses_within_the_bound(protocol):
    data = pickle.dumps(_big(), protocol=protocol)
    d, peak = peak_of(parse_flightrec, data, "rank_0")
    assert not isinstance(d, FRParseError), d
    assert len(d.entries) == 2000 and not d.warnings
    assert peak < bound(data)
    # and the real dump is far from the budget: half of it still passes the scan
    old = fr.MAX_EXPANSION
    try:
        fr.MAX_EXPANSION = old / 1.5
        fr._scan_pickle(data, "rank_0")
    finally:
        fr.MAX_EXPANSION = old


def test_real_dumps_still_parse_alike():
    for r in range(4):
        with open(os.path.join(FIX, "gloo_divergent_barrier", "pickle_raw", "rank_%d" % r), "rb") as f:
            p = parse_flightrec(f.read(), "rank_%d" % r)
        with open(os.path.join(FIX, "gloo_divergent_barrier", "json", "rank_%d.json" % r), "rb") as f:
            j = parse_flightrec(f.read(), "rank_%d.json" % r)
        assert [(e.pg, e.seq, e.op) for e in p.entries] == [(e.pg, e.seq, e.op) for e in j.entries]
        assert p.entries and not p.warnings and not j.warnings


# --- what parses must also survive the analysis and the torchfrtrace rewrite --------------

def test_mutated_dumps_that_parse_survive_analyse_and_the_rewrite(tmp_path):
    import random
    import sys
    import warnings

    sys.path.insert(0, os.path.join(REPO, "bench"))
    import fuzz

    seeds = fuzz.corpus()
    all_seeds = [s for v in seeds.values() for s in v]
    good = []
    for r in (1, 2, 3):
        with open(os.path.join(FIX, "gloo_divergent_barrier", "pickle_raw", "rank_%d" % r), "rb") as f:
            good.append(parse_flightrec(f.read(), "rank_%d" % r))
    rng = random.Random(7)
    parsed = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3000):
            data = fuzz.mutate(rng, seeds["flightrec"], all_seeds)
            try:
                d = parse_flightrec(data, "rank_0")
            except FRParseError:
                continue
            parsed += 1
            flightrec.analyse([d] + good)
            for raw in flightrec.fixed_for_torchfrtrace([d] + good).values():
                pickle.dumps(raw)
    assert parsed > 50, parsed  # the mutations do reach the analysis
