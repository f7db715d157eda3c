"""Real torch 2.13 Flight Recorder pickles parse: they share frame dicts between entries."""
from testlib import TESTS
import glob
import os

from hpc_hangkit.evidence.flightrec import analyse
from hpc_hangkit.parse.flightrec import parse_flightrec

HERE = TESTS
D = os.path.join(HERE, "fixtures", "flight_recorder", "torch_2_13_shared_refs")


def test_real_torch_2_13_pickles_with_shared_frame_dicts_parse_cleanly():
    paths = sorted(glob.glob(os.path.join(D, "rank_*.pickle")))
    assert len(paths) == 4
    dumps = []
    for p in paths:
        with open(p, "rb") as f:
            d = parse_flightrec(f.read(), os.path.basename(p))
        assert d.entries and not d.warnings, (p, d.warnings)
        assert any(fr[2] == "sync_grads" for e in d.entries for fr in e.frames)
        dumps.append(d)
    res = analyse(dumps)
    # same sequence id, different collectives: rank 1 in barrier, the rest in all_reduce
    assert res["verdict"] == "SPLIT", res
    groups = {tuple(g["ranks"]): g["op"] for f in res["pgs"] for g in f["groups"]}
    assert groups == {(0, 2, 3): "all_reduce", (1,): "barrier"}, res
