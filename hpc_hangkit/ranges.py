"""Compressed rank sets: ``[0, 2, 3, 4, 5, 6, 7]`` <-> ``"0,2-7"``.

The one place that formats and parses rank sets (roll call, ``ranks_agree``,
reports). Like Slurm node ranges without the brackets: comma-separated items,
each a rank or an inclusive ``first-last`` run. Two consecutive ranks print as
a run (``0-1``).
"""

__all__ = ["format_ranks", "parse_ranks", "ranks_label", "MAX_RANKS"]

#: the most ranks :func:`parse_ranks` expands (16,777,216: 16x the largest jobs run today);
#: a rank set read from a file or a summary (``"0-999999999999"``) cannot make it allocate more
MAX_RANKS = 1 << 24


def format_ranks(ranks):
    """Format an iterable of non-negative ints as a compressed rank set.

    ``format_ranks([3, 0, 2, 4, 5, 6, 7, 2]) == "0,2-7"``; duplicates are
    dropped, order does not matter, an empty iterable gives ``""``.
    Raises ``TypeError`` for a non-integer (bools too) and ``ValueError`` for a
    negative rank.
    """
    values = set()
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, int):
            raise TypeError("rank must be an int, got %r" % (r,))
        if r < 0:
            raise ValueError("rank must be >= 0, got %d" % r)
        values.add(r)
    items = []
    run_start = prev = None
    for r in sorted(values):
        if prev is not None and r == prev + 1:
            prev = r
            continue
        if prev is not None:
            items.append(_item(run_start, prev))
        run_start = prev = r
    if prev is not None:
        items.append(_item(run_start, prev))
    return ",".join(items)


def ranks_label(ranks, align=False):
    """``"rank 3"`` or ``"ranks 0,2-7"`` (:func:`format_ranks` of ``ranks``, an iterable of
    non-negative ints); ``align=True`` pads the singular to the plural's width
    (``"rank  3"``) for columns. Raises like :func:`format_ranks`."""
    ranks = list(ranks)
    word = "ranks" if len(ranks) != 1 else ("rank " if align else "rank")
    return "%s %s" % (word, format_ranks(ranks))


def _item(first, last):
    return str(first) if first == last else "%d-%d" % (first, last)


def parse_ranks(text):
    """Parse a compressed rank set (``"0,2-7"``) into a sorted list of unique ints.

    Whitespace around items is ignored; ``""`` gives ``[]``. Raises
    ``ValueError`` naming the bad item for anything else (``"3-1"``, ``"a"``,
    ``"-2"``, ``"1,,2"``), and naming the text when its runs hold more than
    :data:`MAX_RANKS` ranks in all (overlaps counted; checked before anything is
    expanded). Long texts are clipped to 200 characters in messages.
    """
    text = text.strip()
    if not text:
        return []
    runs = []
    total = 0
    for item in text.split(","):
        item = item.strip()
        first, sep, last = item.partition("-")
        try:
            lo = _nonneg(first)
            hi = _nonneg(last) if sep else lo
        except ValueError:
            raise ValueError(
                "bad rank set %s: item %s is not a rank or a first-last run" % (_clip(text), _clip(item))
            ) from None
        if hi < lo:
            raise ValueError("bad rank set %s: run %r goes backwards" % (_clip(text), item))
        total += hi - lo + 1
        if total > MAX_RANKS:
            raise ValueError("bad rank set %s: more than %d ranks (MAX_RANKS)" % (_clip(text), MAX_RANKS))
        runs.append((lo, hi))
    out = set()
    for lo, hi in runs:
        out.update(range(lo, hi + 1))
    return sorted(out)


def _clip(text, n=200):
    return repr(text) if len(text) <= n else "%r... (%d characters)" % (text[:n], len(text))


def _nonneg(s):
    s = s.strip()
    if not s.isdigit():
        raise ValueError(s)
    return int(s)
