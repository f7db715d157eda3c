"""Positions are what the user called, on a real 4-rank gloo job through `hpc-hangkit run`:
ranks at one user line in one distributed API are one group even when they sit at
different internal lines and sequence ids inside it (docs/report.md, "How a rank's
position is found").
"""
import os
import sys

import pytest

from conftest import REPO
from test_run_e2e import EXIT_HANG, HangkitRun, clean_env, line_of, needs_torch

JOB = os.path.join(REPO, "tests", "position_jobs", "gloo_object_bcast.py")


@needs_torch
@pytest.mark.timeout(150)
def test_majority_in_broadcast_object_list_with_root_at_another_seq_is_one_group(spawn, tmp_path, port):
    env = clean_env(tmp_path)
    env["HANGKIT_AUTO_CHECKIN"] = "1"
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
                "--master-addr", "127.0.0.1", "--master-port", str(port), JOB]
    run = HangkitRun(spawn, tmp_path, ["--mode", "fail"], launcher, env=env)
    assert run.wait(120) == EXIT_HANG, run.stderr()[-4000:]
    rep = run.report()
    # two groups, both in a collective, 3 of 4 at one: SPLIT with the odd rank named (split_majority)
    assert rep["verdict"] == "SPLIT" and rep["suspect_ranks"] == [3], rep
    g = {tuple(x["ranks"]): x for x in rep["groups"]}
    assert sorted(g) == [(0, 1, 2), (3,)], rep["groups"]
    bcast, odd = g[(0, 1, 2)], g[(3,)]
    assert (bcast["frame"]["file"], bcast["frame"]["line"]) == (JOB, line_of(JOB, "POSITION bcast"))
    assert (odd["frame"]["file"], odd["frame"]["line"]) == (JOB, line_of(JOB, "POSITION all_reduce"))
    assert bcast["role"] == "waiting" and odd["role"] == "divergent"
    # the API named is the one the user called, not the broadcast it runs
    assert bcast["collective"] == "broadcast_object_list" and odd["collective"] == "all_reduce"
    # the root really sits elsewhere inside it (the sizes broadcast, the receivers at the bytes'):
    # shown inside the group, not splitting it
    inside = [(x["ranks"], x["api"]["function"], x["api"]["line"]) for x in bcast["inside"]]
    assert [(rs, fn) for rs, fn, _ in inside] == [([0, 2], "broadcast_object_list"), ([1], "broadcast_object_list")]
    assert inside[0][2] != inside[1][2], inside
    # the Flight Recorder agrees that the root is at another sequence id than its receivers
    pg0 = next(p for p in rep["sections"]["flight_recorder"]["pgs"] if p["pg"] == "0")
    seqs = {tuple(x["ranks"]): x["seq"] for x in pg0["groups"]}
    assert seqs[(1,)] != seqs[(0, 2)], pg0
    # and places each at the user's line, not at the auto check-in wrapper between it and torch
    where = {tuple(x["ranks"]): x["where"] for x in pg0["groups"]}
    assert where[(1,)].startswith("%s:%d " % (JOB, line_of(JOB, "POSITION bcast"))), where
    text = (run.hd / "report.txt").read_text()
    assert "inside  rank 1: distributed_c10d.py:%d in broadcast_object_list" % inside[1][2] in text, text
    assert "suspect rank: 3" in text, text
