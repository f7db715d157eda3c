"""Capture chooses where py-spy --native is worth it: real armed processes that really
hang (three wait in an all_reduce of a stand-in torch.distributed module, one in its
barrier), the real watchdog, the real py-spy, the real orchestrator."""
from testlib import REPO, dump_samples, wait_for
import os
import subprocess
import sys
import textwrap

import pytest

from hpc_hangkit.capture import native
from hpc_hangkit.capture import orchestrator as cap
from hpc_hangkit.capture.ranks import discover_ranks
from hpc_hangkit.config import load_settings
from hpc_hangkit.gather import roll_call_under
from hpc_hangkit.parse.pyspy import parse_pyspy

# a stand-in for torch.distributed: what matters to the roll call is the file path
COMM = """
import threading
_never = threading.Event()
def all_reduce(t):
    _never.wait()
def barrier():
    _never.wait()
"""

RANK = """
import importlib.util, os, sys
from hpc_hangkit.arm import watchdog
rank = int(sys.argv[2])
watchdog.watch(os.path.join(sys.argv[1], "rank_%d.pid%d.log" % (rank, os.getpid())), period_s=0.3)
spec = importlib.util.spec_from_file_location("c10d_standin", sys.argv[3])
dist = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dist)

def sync_grads():
    dist.all_reduce([1.0])

def end_of_epoch():
    dist.barrier()

print("armed", flush=True)
if rank == 1:
    end_of_epoch()      # the rank-local branch: skips sync_grads
else:
    sync_grads()
"""


@pytest.fixture
def hung_ranks(tmp_path, spawn):
    scratch = tmp_path / "scratch"
    (scratch / "watchdog").mkdir(parents=True)
    comm = tmp_path / "lib" / "torch" / "distributed" / "c10d_standin.py"
    comm.parent.mkdir(parents=True)
    comm.write_text(COMM)
    prog = tmp_path / "train.py"
    prog.write_text(textwrap.dedent(RANK))
    for rank in range(4):
        env = dict(os.environ, PYTHONPATH=REPO, RANK=str(rank), WORLD_SIZE="4")
        p = spawn([sys.executable, str(prog), str(scratch / "watchdog"), str(rank), str(comm)],
                  stdout=subprocess.PIPE, env=env)
        assert p.stdout.readline() == b"armed\n"
    wait_for(lambda: len([n for n in dump_samples(str(scratch / "watchdog")).values() if n]) == 4, 30,
             what="a watchdog dump of every rank")
    return str(scratch)


def _stack_file(hd, rank):
    with open(os.path.join(hd, "stack_traces", "rank_%d.log" % rank), "rb") as f:
        return f.read()


@pytest.mark.timeout(120)
def test_native_only_for_the_suspect_and_one_per_waiting_group(hung_ranks, tmp_path):
    s = load_settings(env={}, path=os.devnull)
    assert s.native_stacks == "auto"
    hd = str(tmp_path / "hd")
    ctx = cap.CaptureContext(s, hung_ranks, hd, discover_ranks(hung_ranks), roll_call=roll_call_under(s))
    assert sorted(ctx.ranks) == [0, 1, 2, 3]
    res = cap.capture(ctx)
    plan = ctx.sampling
    assert {r for r, p in plan.items() if p.native} == {0, 1}, plan
    assert plan[1].why == "suspect" and plan[0].why.startswith("represents its group (3 rank(s) here in all_reduce")
    for r in (2, 3):
        assert not plan[r].native and plan[r].nonblocking
    for r in range(4):
        data = _stack_file(hd, r)
        lg = parse_pyspy(data, "rank_%d.log" % r)
        cap_fields = lg.header["capture"]
        assert cap_fields["rank"] == str(r) and cap_fields["native"] == ("yes" if r in (0, 1) else "no")
        assert lg.samples and lg.samples[0].t is not None      # when it was taken
        funcs = [f.function for t in lg.samples[0].threads if t.current for f in t.frames]
        assert ("barrier" if r == 1 else "all_reduce") in funcs, (r, data[:600])   # every Python stack
        if r in (2, 3):
            assert cap_fields["nonblocking"] == "yes"
            assert cap_fields["why"].startswith("native stack not taken: rank %d waits in all_reduce at "
                                                "c10d_standin.py:5 " % r), cap_fields
            assert "with rank 0, whose native stack stands for the group" in cap_fields["why"]
        else:
            assert "why" not in cap_fields
    # the roll call over the capture still reads every rank, and the why-lines lose nothing
    from hpc_hangkit.rollcall import report_from_dir
    rep = report_from_dir(hd)
    assert rep.suspect_ranks == [1] and sorted(rep.ranks) == [0, 1, 2, 3]
    spread = rep.sample_spread()                 # every stack file says when it was taken
    assert spread["ranks"] == "0-3" and len(spread["nodes"]) == 1 and spread["spread_s"] < 60
    assert not [p for p in res.problems if "py-spy" in p], res.problems


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode,natives", [("all", {0, 1, 2, 3}), ("none", set())])
def test_native_stacks_setting(hung_ranks, tmp_path, mode, natives):
    s = load_settings(env={"HANGKIT_NATIVE_STACKS": mode}, path=os.devnull)
    hd = str(tmp_path / "hd")
    ctx = cap.CaptureContext(s, hung_ranks, hd, discover_ranks(hung_ranks), roll_call=roll_call_under(s))
    cap.capture(ctx)
    got = {r for r in range(4) if parse_pyspy(_stack_file(hd, r)).header["capture"]["native"] == "yes"}
    assert got == natives
    if mode == "none":
        assert parse_pyspy(_stack_file(hd, 2)).header["capture"]["why"] == "native_stacks = none"


def test_plan_without_a_roll_call_samples_everything_natively():
    p = native.plan([3, 1], None)
    assert sorted(p) == [1, 3] and all(s.native and not s.nonblocking for s in p.values())
    with pytest.raises(ValueError, match="native_stacks must be auto, all or none"):
        native.plan([1], None, mode="some")


def test_known_suspects_of_the_job_get_native_even_inside_a_group():
    """On a node of a multi-node job the local roll call may not see the suspects: the
    monitor's suspects are passed in."""
    from hpc_hangkit.rollcall.verdict import Group
    from hpc_hangkit.parse.model import frame

    class Rep:
        suspect_ranks = []
        groups = [Group([4, 5, 6], "waiting", "stuck", chain=(frame("torch/distributed/c10d.py", 9, "all_reduce"),
                                                               frame("train.py", 25, "sync_grads")),
                        collective="all_reduce")]
    p = native.plan([4, 5, 6], Rep, suspects=[6])
    assert {r for r, s in p.items() if s.native} == {6}
    assert "with rank 6" in p[4].why
