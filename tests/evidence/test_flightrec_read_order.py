"""Which of a rank's two Flight Recorder files read_dumps reads: the ranks write
``rank_<i>.pickle`` and ``rank_<i>.json`` of one buffer; the pickle is read when the JSON is
a whole dump (half the CPU), the JSON when it is a small ``dump_error`` note, and a broken
first choice beside a good second one costs nothing but the fallback (no warning)."""
from testlib import FIXTURES, REPO
import json
import os
import pickle
import sys

from hpc_hangkit.evidence.flightrec import JSON_FIRST_MAX, analyse, read_dumps

sys.path.insert(0, os.path.join(REPO, "hpc_hangkit", "boot"))   # _hangkit_fr imports its siblings
RAW = os.path.join(FIXTURES, "flight_recorder", "gloo_divergent_barrier", "pickle_raw")


def _product(tmp_path):
    """The real gloo dumps laid out as armed ranks write them (pickle + JSON of the same buffer)."""
    from hpc_hangkit.boot._hangkit_fr import _jsonable
    d = tmp_path / "flight_recorder"
    d.mkdir()
    for r in range(4):
        data = open(os.path.join(RAW, "rank_%d" % r), "rb").read()
        (d / ("rank_%d.pickle" % r)).write_bytes(data)
        (d / ("rank_%d.json" % r)).write_bytes(json.dumps(_jsonable(pickle.loads(data))).encode())
        assert os.path.getsize(d / ("rank_%d.json" % r)) > JSON_FIRST_MAX
    return d


def test_whole_json_beside_a_pickle_reads_the_pickle_and_the_same_verdict(tmp_path):
    d = _product(tmp_path)
    dumps, warns = read_dumps(str(d))
    assert [x.name for x in dumps] == ["rank_%d.pickle" % r for r in range(4)] and warns == []
    only_json = tmp_path / "json_only"
    only_json.mkdir()
    for r in range(4):
        (only_json / ("rank_%d.json" % r)).write_bytes((d / ("rank_%d.json" % r)).read_bytes())
    a, b = analyse(dumps), analyse(read_dumps(str(only_json))[0])
    assert (a["verdict"], a["suspect_ranks"]) == (b["verdict"], b["suspect_ranks"])


def test_broken_pickle_beside_a_good_json_falls_back_without_a_warning(tmp_path):
    d = _product(tmp_path)
    (d / "rank_2.pickle").write_bytes(b"\x80\x04garbage")
    dumps, warns = read_dumps(str(d))
    assert [x.name for x in dumps] == ["rank_0.pickle", "rank_1.pickle", "rank_2.json", "rank_3.pickle"]
    assert warns == []


def test_both_broken_warns_about_both(tmp_path):
    d = _product(tmp_path)
    (d / "rank_2.pickle").write_bytes(b"\x80\x04garbage")
    (d / "rank_2.json").write_bytes(b"{" * (JSON_FIRST_MAX + 10))
    dumps, warns = read_dumps(str(d))
    assert [x.rank for x in dumps] == [0, 1, 3]
    assert len(warns) == 2 and any("rank_2.pickle" in w for w in warns) and any("rank_2.json" in w for w in warns)


def test_dump_error_note_is_read_first_and_a_stale_pickle_beside_it_still_counts(tmp_path):
    """A failed dump writes only the small JSON note; an older pickle may remain beside it."""
    d = _product(tmp_path)
    (d / "rank_1.json").write_text(json.dumps({"dump_error": "RuntimeError: boom"}))
    dumps, warns = read_dumps(str(d))
    by = {x.rank: x for x in dumps}
    assert by[1].name == "rank_1.pickle" and by[1].error is None   # as before: the real dump wins
