"""Compressed rank sets (hpc_hangkit.ranges): exact cases and a round trip."""
import pytest
from hypothesis import given, strategies as st

from hpc_hangkit.ranges import format_ranks, parse_ranks


@pytest.mark.parametrize(
    "ranks, text",
    [
        ([], ""),
        ([5], "5"),
        ([0, 1], "0-1"),
        ([0, 2, 3, 4, 5, 6, 7], "0,2-7"),
        ([7, 6, 0, 2, 5, 4, 3, 3], "0,2-7"),
        ([1, 3, 5], "1,3,5"),
        ([0, 1, 2, 10, 11, 100], "0-2,10-11,100"),
    ],
)
def test_format_and_parse(ranks, text):
    assert format_ranks(ranks) == text
    assert parse_ranks(text) == sorted(set(ranks))


@pytest.mark.parametrize("bad", ["a", "3-1", "-2", "1,,2", "1-", "1-2-3", "0x3"])
def test_parse_rejects_with_the_item(bad):
    with pytest.raises(ValueError, match="bad rank set"):
        parse_ranks(bad)


def test_format_rejects_non_ranks():
    with pytest.raises(TypeError):
        format_ranks([1, "2"])
    with pytest.raises(TypeError):
        format_ranks([True])
    with pytest.raises(ValueError):
        format_ranks([-1])


@given(st.sets(st.integers(min_value=0, max_value=5000), max_size=200))
def test_round_trip(ranks):
    text = format_ranks(ranks)
    assert parse_ranks(text) == sorted(ranks)
    # never longer than listing every rank
    assert len(text) <= len(",".join(map(str, sorted(ranks))))
