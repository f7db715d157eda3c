"""Hostile input: every parser, fed random, truncated, spliced and mutated bytes built from
the real samples in tests/fixtures, raises nothing but the error it documents.

The parsers, their documented errors and the seed corpus are bench/fuzz.py's table (the
longer >= 100k-input run is ``python bench/fuzz.py``). The regression tests at the end are
inputs that once crashed a parser (found by that fuzz run).
"""
from testlib import REPO
import os
import sys
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(REPO, "bench"))
import fuzz  # noqa: E402

SEEDS = fuzz.corpus()
ALL_SEEDS = [s for v in SEEDS.values() for s in v]
NAMES = sorted(SEEDS)
FAST = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck),
                derandomize=True)


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    return fuzz.Targets(str(tmp_path_factory.mktemp("fuzz")))


def _call(targets, name, data):
    fn, allowed = targets.table[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fn(data)
        except allowed as e:
            assert str(e), "%s raised %s with an empty message" % (name, type(e).__name__)


def test_every_target_has_real_seeds(targets):
    assert set(NAMES) == set(targets.table)
    for name in NAMES:
        assert SEEDS[name], "no seed for %s: tests/fixtures changed?" % name


@pytest.mark.parametrize("name", NAMES)
def test_seeds_parse(targets, name):
    for s in SEEDS[name]:
        _call(targets, name, s)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", NAMES)
@FAST
@given(data=st.binary(max_size=400))
def test_random_bytes(targets, name, data):
    _call(targets, name, data)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", NAMES)
@FAST
@given(i=st.integers(min_value=0), cut=st.floats(min_value=0, max_value=1))
def test_truncated(targets, name, i, cut):
    s = SEEDS[name][i % len(SEEDS[name])]
    _call(targets, name, s[:int(len(s) * cut)])


@pytest.mark.timeout(180)  # once exceeded 60 s on flightrec under load 7+ (slow spliced pickle? see H7 report)
@pytest.mark.parametrize("name", NAMES)
@FAST
@given(i=st.integers(min_value=0), j=st.integers(min_value=0), a=st.floats(min_value=0, max_value=1),
       b=st.floats(min_value=0, max_value=1))
def test_spliced(targets, name, i, j, a, b):
    s = SEEDS[name][i % len(SEEDS[name])]
    o = ALL_SEEDS[j % len(ALL_SEEDS)]
    _call(targets, name, s[:int(len(s) * a)] + o[int(len(o) * b):])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", NAMES)
@FAST
@given(rng=st.randoms(use_true_random=False))
def test_mutated(targets, name, rng):
    _call(targets, name, fuzz.mutate(rng, SEEDS[name], ALL_SEEDS))


# --- regressions: inputs that crashed a parser --------------------------------------

DEEP = b'{"a":' * 5000


def test_pyspy_deeply_nested_json(targets):
    _call(targets, "pyspy", DEEP)


def test_flightrec_deeply_nested_json(targets):
    _call(targets, "flightrec", b"[" * 100000)


def test_ncclras_deeply_nested_json(targets):
    _call(targets, "ncclras_json", b"[" * 100000)


def test_ncclras_infinite_count(targets):
    seed = next(s for s in SEEDS["ncclras_json"] if b'"collective_counts"' in s)
    i = seed.index(b'"collective_counts"')
    j = seed.index(b":", seed.index(b":", i) + 1) + 1  # first count value
    k = j
    while seed[k:k + 1] in b" 0123456789":
        k += 1
    _call(targets, "ncclras_json", seed[:j] + b" 1e999" + seed[k:])


def test_config_toml_huge_integer(targets):
    _call(targets, "config_toml", b"poll_interval_s = " + b"9" * 400 + b"\n")


def test_sstat_huge_ntasks_and_days(targets):
    _call(targets, "sstat", b"4242.0|" + b"9" * 300 + b"|00:01:02|1K|1K\n")
    _call(targets, "sstat", b"4242.0|1|" + b"9" * 300 + b"-00:01:02|1K|1K\n")


def test_faulthandler_header_deeply_nested_argv(targets):
    hdr = (b"# hpc-hangkit rank=1 world=2 local_rank=- pid=3 host=h t=1 signal=SIGURG period_s=1 argv="
           + b"[" * 100000 + b"\nStack (most recent call first):\n  File \"a.py\", line 1 in <module>\n")
    _call(targets, "faulthandler", hdr)


def test_rollcall_deeply_nested_node_summary(tmp_path):
    from hpc_hangkit.rollcall import report_from_dir

    (tmp_path / "node1.summary.json").write_bytes(b"[" * 100000)
    rep = report_from_dir(str(tmp_path))
    assert any("node1.summary.json" in w for w in rep.warnings)


# found by the 100k run after heartbeat and the memory limit were added (seed 1) -------

def test_faulthandler_timeout_with_a_400_digit_hour_count(targets):
    _call(targets, "faulthandler", b"Timeout (" + b"9" * 400 + b":00:00)!\nThread 0x1 (most recent call first):\n"
                                   b'  File "a.py", line 1 in f\n')


def test_flightrec_infinite_sequence_id_skips_the_entry(targets):
    from hpc_hangkit.parse.flightrec import parse_flightrec

    d = parse_flightrec(b'{"entries": [{"collective_seq_id": 1e999, "profiling_name": "gloo:barrier"}, '
                        b'{"collective_seq_id": 2, "profiling_name": "gloo:barrier"}]}', "rank_0.json")
    assert [e.seq for e in d.entries] == [2]
    assert d.warnings and "entry 0 skipped" in d.warnings[0] and "rank_0.json" in d.warnings[0]


def test_ncclras_infinite_init_state(targets):
    from hpc_hangkit.parse.ncclras import parse_ncclras_json

    seed = next(s for s in SEEDS["ncclras_json"] if b'"init_state"' in s)
    i = seed.index(b'"init_state"')
    j = seed.index(b":", i) + 1
    k = j
    while seed[k:k + 1] in b" 0123456789":
        k += 1
    _call(targets, "ncclras_json", seed[:j] + b" 1e999" + seed[k:])
    parse_ncclras_json(seed[:j] + b" 1e999" + seed[k:], "x.json")  # parses: the rank counts as running


def test_ncclras_rank_entries_that_are_not_objects(targets):
    from hpc_hangkit.parse.ncclras import parse_ncclras_json

    doc = b'{"communicators": [{"hash": "0x1", "size": 2, "ranks": [5, {"rank": 1, "status": 3}], ' \
          b'"missing_ranks": ["x"]}]}'
    poll = parse_ncclras_json(doc, "x.json")
    assert poll.warnings and "not an object" in " ".join(poll.warnings)


def test_sstat_counter_times_ntasks_overflow(targets):
    from hpc_hangkit.slurmjob import parse_sstat

    assert parse_sstat("4242.0|" + "9" * 400 + "|00:01:02|1K|1K\n4242.1|2|00:00:01|1K|1K\n")[0].step == "4242.1"
    assert parse_sstat("4242.0|2|00:00:01|" + "9" * 400 + "|1K\n") == []  # inf bytes: not a counter


# --- the heartbeat record reader (read by the monitor and the epilog from job files) ---

HB = SEEDS["heartbeat"][0]


def test_heartbeat_seed_is_a_real_record(targets):
    from hpc_hangkit.parse.heartbeat import read_heartbeat

    assert len(HB) == 512
    path = os.path.join(targets.tmp, "rank_3.pid16135.hb")
    with open(path, "wb") as fh:
        fh.write(HB)
    hb = read_heartbeat(path, timeout_s=0)
    assert (hb.rank, hb.world, hb.local_rank, hb.counter, hb.label, hb.signal) == (3, 4, 1, 8, "allreduce grads",
                                                                                  "SIGURG")


@pytest.mark.parametrize("cut", [0, 1, 8, 128, 136, 511])
def test_heartbeat_truncated_is_none_with_a_warning_naming_file_and_offset(targets, cut):
    from hpc_hangkit.parse.heartbeat import HeartbeatWarning, read_heartbeat

    path = os.path.join(targets.tmp, "rank_0.pid2.hb")
    with open(path, "wb") as fh:
        fh.write(HB[:cut])
    with pytest.warns(HeartbeatWarning, match=r"rank_0\.pid2\.hb: truncated at byte offset %d" % cut):
        assert read_heartbeat(path, timeout_s=0) is None


def test_heartbeat_torn_foreign_and_hostile_fields(targets):
    import struct

    from hpc_hangkit.parse.heartbeat import HeartbeatWarning, read_heartbeat

    path = os.path.join(targets.tmp, "rank_0.pid3.hb")
    odd = bytearray(HB)
    struct.pack_into("<Q", odd, 128, 19)  # a writer inside forever
    bad_magic = b"XXXXXXXX" + HB[8:]
    bad_version = HB[:8] + struct.pack("<II", 99, 512) + HB[16:]
    for data, why in ((bytes(odd), "torn"), (bad_magic, "bad magic"), (bad_version, "unsupported record version")):
        with open(path, "wb") as fh:
            fh.write(data)
        with pytest.warns(HeartbeatWarning, match=why):
            assert read_heartbeat(path, timeout_s=0) is None
    # hostile values in a well-formed record: returned as read, never raised
    weird = bytearray(HB)
    struct.pack_into("<i", weird, 16, -5)                          # rank
    struct.pack_into("<i", weird, 36, 0x7FFFFFFF)                  # signum: no such signal
    struct.pack_into("<d", weird, 40, float("nan"))                # period
    weird[64:128] = b"../../etc\x00\xff\xfe" + b"\x00" * 53         # host: not a path here, just text
    weird[152:352] = b"\xff" * 200                                 # label: invalid UTF-8
    with open(path, "wb") as fh:
        fh.write(bytes(weird))
    hb = read_heartbeat(path, timeout_s=0)
    assert hb is not None and hb.rank == -5 and hb.host.startswith("../../etc")
    assert isinstance(hb.signal, str) and isinstance(hb.label, str)


def test_heartbeat_symlink_and_fifo_are_refused(targets, tmp_path):
    from hpc_hangkit.parse.heartbeat import HeartbeatWarning, read_heartbeat

    real = tmp_path / "real.hb"
    real.write_bytes(HB)
    link = tmp_path / "rank_0.pid4.hb"
    link.symlink_to(real)
    with pytest.warns(HeartbeatWarning, match="cannot open"):
        assert read_heartbeat(str(link), timeout_s=0) is None
    fifo = tmp_path / "rank_0.pid5.hb"
    os.mkfifo(str(fifo))
    with pytest.warns(HeartbeatWarning, match="not a regular file"):
        assert read_heartbeat(str(fifo), timeout_s=0) is None
