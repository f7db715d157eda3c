"""SAME_LINE_DIFFERENT_ARGS from group creation on a real 4-rank gloo job through
`hpc-hangkit run`: each rank builds only the group it computed for itself (sglang #15805
shape), so the ranks wait inside ``new_group`` at one line, split between two torch-internal
frames. The auto check-in's labels carry each rank's list; the roll call shows the lists and
names no single rank.
"""
import os
import sys

import pytest

from test_run_e2e import EXIT_HANG, HangkitRun, clean_env, line_of, needs_torch

from conftest import REPO

JOB = os.path.join(REPO, "tests", "newgroup_jobs", "gloo_new_group.py")


@needs_torch
@pytest.mark.timeout(150)
def test_ranks_building_different_groups_at_one_line_are_same_line_different_args(spawn, tmp_path, port):
    env = clean_env(tmp_path)
    env.update(HANGKIT_AUTO_CHECKIN="1", TORCH_DIST_INIT_BARRIER="1")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
                "--master-addr", "127.0.0.1", "--master-port", str(port), JOB]
    run = HangkitRun(spawn, tmp_path, ["--mode", "fail"], launcher, env=env)
    assert run.wait(120) == EXIT_HANG, run.stderr()[-4000:]
    rep = run.report()
    assert rep["verdict"] == rep["stack_verdict"] == "SAME_LINE_DIFFERENT_ARGS", rep["summary"]
    assert rep["suspect_ranks"] == [], rep["summary"]
    line = line_of(JOB, "NEWGROUP: each rank passes its own list here")
    assert sorted(r for g in rep["groups"] for r in g["ranks"]) == [0, 1, 2, 3]
    calls = {0: "new_group(ranks=[0, 1, 2])", 1: "new_group(ranks=[0, 1, 2])",
             2: "new_group(ranks=[2, 3])", 3: "new_group(ranks=[2, 3])"}
    for g in rep["groups"]:
        assert g["role"] == "waiting", g
        assert (g["frame"]["file"], g["frame"]["line"], g["frame"]["function"]) == (JOB, line, "build_tp_group"), g
        for r in g["ranks"]:  # the group's detail names each of its ranks' list
            assert calls[r] in g["detail"], g
    text = (run.hd / "report.txt").read_text().replace("\n   ", " ")
    assert ("ranks 0-1 in new_group(ranks=[0, 1, 2]); ranks 2-3 in new_group(ranks=[2, 3]) at "
            "gloo_new_group.py:%d in build_tp_group: every rank must call new_group with the same list, "
            "or pass use_local_synchronization=True" % line) in text, text
    assert "suspect rank" not in text, text
    assert [e["kind"] for e in run.events()].count("confirmed") == 1, run.events()
