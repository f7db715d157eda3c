"""ranks_agree / @collective: error format, argument handling, armed and
disarmed decorator (watchdog armed in a child process, real heartbeat file)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, free_port, have_module
from hpc_hangkit.arm.agree import RanksDisagree, collective, ranks_agree


def test_disagree_message_groups_ranks_compressed():
    labels = {0: "a", 1: "a", 2: "b", 3: "b", 5: "a", 4: "c"}
    e = RanksDisagree("a", labels, "mpi4py", "COMM_WORLD of 6")
    assert isinstance(e, RuntimeError)
    assert e.groups == [("a", [0, 1, 5]), ("b", [2, 3]), ("c", [4])]
    assert str(e).splitlines() == [
        "ranks_agree: ranks disagree: 3 labels across 6 ranks (mpi4py, COMM_WORLD of 6):",
        "  ranks 0-1,5: 'a'",
        "  ranks 2-3: 'b'",
        "  rank 4: 'c'",
    ]
    assert e.labels == labels and e.label == "a" and e.backend == "mpi4py"


def _clean_world_env(monkeypatch):
    for var in ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)


def test_single_process_without_a_library_returns(monkeypatch):
    _clean_world_env(monkeypatch)
    monkeypatch.setenv("SLURM_NTASKS", "1")
    assert ranks_agree("anything") is None


def test_several_ranks_without_a_library_is_an_error(monkeypatch):
    _clean_world_env(monkeypatch)
    monkeypatch.setenv("PMI_SIZE", "4")
    with pytest.raises(RuntimeError, match="PMI_SIZE=4 .* neither torch.distributed"):
        ranks_agree("x")


def test_group_of_another_kind_is_a_type_error():
    with pytest.raises(TypeError, match="ProcessGroup or an mpi4py communicator, got list"):
        ranks_agree("x", group=[0, 1])


def test_decorator_forms_keep_metadata_and_pass_everything_through():
    @collective
    def sync_grads(a, b=2):
        """doc"""
        return a + b

    @collective(label="grad sync")
    def g():
        raise KeyError("boom")

    @collective("named")
    def h(*args, **kw):
        return args, kw

    class Trainer:
        @collective
        def step(self, x):
            return x * 2

    assert sync_grads(1, b=3) == 4 and sync_grads.__doc__ == "doc" and sync_grads.__name__ == "sync_grads"
    assert sync_grads.__wrapped__(1) == 3
    assert sync_grads.__hangkit_label__ == "entering sync_grads() [collective]"
    assert g.__hangkit_label__ == "entering grad sync [collective]"
    assert h.__hangkit_label__ == "entering named [collective]"
    assert Trainer.step.__hangkit_label__ == "entering Trainer.step() [collective]"
    assert Trainer().step(4) == 8
    assert h(1, k=2) == ((1,), {"k": 2})
    with pytest.raises(KeyError, match="boom"):
        g()
    with pytest.raises(TypeError):
        collective(42)


ARMED = r"""
import json, sys
from hpc_hangkit import collective, ranks_agree
from hpc_hangkit.arm import watchdog
from hpc_hangkit.parse.heartbeat import read_heartbeat

@collective
def sync_grads(x):
    return x + 1

class Trainer:
    @collective(label="grad sync")
    def step(self):
        return 5

core = watchdog._core
out = {}
c0 = core.counter(); sync_grads(1); out["disarmed_calls_checkpoint"] = core.counter() != c0
log = sys.argv[1]
watchdog.watch(log, period_s=60)
hb = watchdog.status()["heartbeat_path"]
sync_grads(1); out["after_function"] = read_heartbeat(hb).label
Trainer().step(); out["after_method"] = read_heartbeat(hb).label
ranks_agree("single")  # no library, one process: returns without checking in
out["after_single_agree"] = read_heartbeat(hb).label
watchdog.unwatch()
c0 = core.counter(); sync_grads(1); out["unwatched_calls_checkpoint"] = core.counter() != c0
out["imported"] = sorted(m for m in ("torch", "torch.distributed", "mpi4py", "mpi4py.MPI") if m in sys.modules)
print(json.dumps(out))
"""


def _child_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_")}
    for var in ("RANK", "WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(var, None)
    return env


@pytest.mark.timeout(60)
def test_decorator_checks_in_only_when_armed(tmp_path):
    out = subprocess.run([sys.executable, "-c", ARMED, str(tmp_path / "rank_0.log")], env=_child_env(),
                         capture_output=True, timeout=50, cwd=REPO)
    assert out.returncode == 0, out.stderr.decode()
    assert json.loads(out.stdout.decode()) == {
        "disarmed_calls_checkpoint": False,
        "after_function": "entering sync_grads() [collective]",
        "after_method": "entering grad sync [collective]",
        "after_single_agree": "entering grad sync [collective]",
        "unwatched_calls_checkpoint": False,
        "imported": [],  # hpc_hangkit never imports torch or mpi4py itself
    }


ONE_RANK = r"""
import json, os, sys
import torch.distributed as dist
from hpc_hangkit import ranks_agree
from hpc_hangkit.arm import watchdog
from hpc_hangkit.parse.heartbeat import read_heartbeat
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
dist.init_process_group("gloo", rank=0, world_size=1)
watchdog.watch(sys.argv[1], period_s=60)
ranks_agree(7)
print(json.dumps(read_heartbeat(watchdog.status()["heartbeat_path"]).label))
dist.destroy_process_group()
"""


@pytest.mark.torch
@pytest.mark.skipif(not have_module("torch"), reason="torch (CPU) is not installed")
@pytest.mark.timeout(90)
def test_one_rank_gloo_agrees_and_checks_in(tmp_path):
    out = subprocess.run([sys.executable, "-c", ONE_RANK, str(tmp_path / "rank_0.log"), str(free_port())],
                         env=_child_env(), capture_output=True, timeout=80, cwd=REPO)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    assert json.loads(out.stdout.decode().splitlines()[-1]) == "passed ranks_agree(7)"
