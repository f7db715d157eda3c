"""TOGETHER on real gloo jobs through `hpc-hangkit run`: every rank in one distributed call
with nothing moving is confirmed after together_confirm_s (here 12 s; confirm window 6 s,
poll 1 s), captured, and failed in fail mode; controls that must never confirm.
"""
import os
import sys

import pytest

from conftest import REPO
from test_run_e2e import EXIT_HANG, HangkitRun, clean_env, line_of, needs_torch

JOB = os.path.join(REPO, "tests", "together_jobs", "gloo_together.py")
TOGETHER_S = 12


def run_job(spawn, tmp_path, port, nproc, *args):
    env = clean_env(tmp_path)
    env["HANGKIT_TOGETHER_CONFIRM_S"] = str(TOGETHER_S)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                "--master-addr", "127.0.0.1", "--master-port", str(port), JOB] + list(args)
    return HangkitRun(spawn, tmp_path, ["--mode", "fail"], launcher, env=env)


def confirmed(run):
    return [e for e in run.events() if e["kind"] == "confirmed"]


@needs_torch
@pytest.mark.timeout(150)
def test_all_ranks_frozen_in_one_barrier_is_confirmed_together(spawn, tmp_path, port):
    run = run_job(spawn, tmp_path, port, 4, "frozen")
    assert run.wait(120) == EXIT_HANG, run.stderr()[-4000:]
    (ev,) = confirmed(run)
    assert ev["key"] == "stacks/together", ev
    assert ev["stalled_for_s"] >= TOGETHER_S - 6 - 1, ev  # the together wait, then the confirm window
    rep = run.report()
    assert rep["stack_verdict"] == "TOGETHER" if "stack_verdict" in rep else rep["verdict"] == "TOGETHER", rep
    (g,) = rep["groups"]
    assert g["ranks"] == [0, 1, 2, 3] and g["collective"] == "barrier"
    assert g["frame"]["file"] == JOB and g["frame"]["line"] == line_of(JOB, "TOGETHER barrier: every rank")
    assert "captured" in run.kinds()


@needs_torch
@pytest.mark.timeout(150)
@pytest.mark.parametrize("scenario", ["long", "sleeping"])
def test_controls_never_confirmed(spawn, tmp_path, port, scenario):
    """``long``: every rank at one all_reduce line for 20 s (longer than together_confirm_s),
    moving; ``sleeping``: every rank sleeps 20 s outside any distributed call."""
    run = run_job(spawn, tmp_path, port, 4, scenario, "20")
    assert run.wait(120) == 0, run.stderr()[-4000:]
    assert confirmed(run) == [], run.events()


@needs_torch
@pytest.mark.timeout(150)
def test_two_ranks_each_sending_first_is_a_named_p2p_cycle(spawn, tmp_path, port):
    """Megatron-LM #5100 shape: two ranks each dist.send a large tensor to the other before
    dist.recv. Confirmed as TOGETHER; the auto check-in's peer= labels name the cycle."""
    env = clean_env(tmp_path)
    env.update(HANGKIT_TOGETHER_CONFIRM_S=str(TOGETHER_S), HANGKIT_AUTO_CHECKIN="1")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                "--master-addr", "127.0.0.1", "--master-port", str(port), JOB, "sendsend"]
    run = HangkitRun(spawn, tmp_path, ["--mode", "fail"], launcher, env=env)
    assert run.wait(120) == EXIT_HANG, run.stderr()[-4000:]
    (ev,) = confirmed(run)
    assert ev["key"] == "stacks/together", ev
    rep = run.report()
    (g,) = rep["groups"]
    assert g["ranks"] == [0, 1] and g["frame"]["line"] == line_of(JOB, "TOGETHER sendsend: both ranks")
    assert rep["suspect_ranks"] == []
    text = (run.hd / "report.txt").read_text().replace("\n   ", " ")
    assert "ranks 0 -> 1 -> 0 each wait to send before receiving at gloo_together.py:%d" % line_of(
        JOB, "TOGETHER sendsend: both ranks") in text, text
    assert "a point-to-point ordering deadlock, not a missed collective" in text
