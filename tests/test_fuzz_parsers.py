"""Hostile input: every parser, fed random, truncated, spliced and mutated bytes built from
the real samples in tests/fixtures, raises nothing but the error it documents.

The parsers, their documented errors and the seed corpus are bench/fuzz.py's table (the
longer >= 100k-input run is ``python bench/fuzz.py``). The regression tests at the end are
inputs that once crashed a parser (found by that fuzz run).
"""
import os
import sys
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
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
