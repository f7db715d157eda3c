"""RankFacts <-> the summary's ``facts`` entry: every combination of entries and placements
round-trips to the same keys in the same order (node summaries on disk must not change)."""
import itertools

from hpc_hangkit.rollcall.facts import Checkin, RankFacts

VALUES = dict(n=5, mode=4, startup=1, detail="d", exit="E", traceback=["a"], last_write=1.5, period_s=2.0,
              pid=7, host="h", note="n", hb=Checkin("label", 1.0, 3, 2.0), taken=9.0)


def test_every_entry_subset_and_placement_round_trips():
    names = sorted(VALUES)
    checked = 0
    for mask in range(1 << len(names)):
        kw = {k: VALUES[k] for i, k in enumerate(names) if mask >> i & 1}
        for exit_first, host_after_hb in itertools.product((False, True), repeat=2):
            # the placements exist only where there is something to place
            if exit_first and not ("exit" in kw or "traceback" in kw):
                continue
            if host_after_hb and not ("host" in kw and "hb" in kw):
                continue
            f = RankFacts(state="stuck", key="k", **kw)
            f.exit_first, f.host_after_hb = exit_first, host_after_hb
            entry = f.to_summary()
            back = RankFacts.from_summary("k", "stuck", entry)
            assert list(back.to_summary().items()) == list(entry.items()), (kw, exit_first, host_after_hb)
            assert back == f
            checked += 1
    assert checked > 8000


def test_unknown_entries_are_ignored_and_keep_the_default_placement():
    back = RankFacts.from_summary("k", "stuck", {"n": 2, "exit": "E", "from_a_newer_version": 1})
    assert back.n == 2 and back.exit == "E" and not back.exit_first and not back.host_after_hb


def test_summary_entry_is_the_round_trip_of_any_entry():
    """What a merge writes for a rank only one summary has: the entry of the record the
    summary's entry reads as, key for key and in order, whatever the entry's order, empty
    values or unknown names (the usual entry is taken as it is)."""
    import random

    rnd = random.Random(5)
    plain = ["n", "mode", "startup", "detail", "exit", "traceback", "last_write", "period_s", "pid", "host", "note"]
    odd = {"n": 0, "detail": "", "traceback": [], "pid": None, "hb": {"label": "x", "wall_s": 1.0},
           "taken": 3, "newer": 1, "mode": False}
    for _ in range(3000):
        names = rnd.sample(plain, rnd.randint(0, len(plain)))
        if rnd.random() < 0.5:
            names.sort(key=plain.index)
        extra = {k: VALUES[k] for k in names}
        for k in rnd.sample(sorted(odd), rnd.choice((0, 0, 1, 2))):
            extra[k] = odd[k]
        want = RankFacts.from_summary("k", "stuck", extra).to_summary()
        got = RankFacts.summary_entry("k", "stuck", extra)
        assert list(got.items()) == list(want.items()), extra
        assert got is not extra
