"""Each HK rule: a small wrong program is flagged at the collective's line naming the
branch's line, and its corrected version is silent; the correct patterns stay silent."""
import textwrap

import pytest

from hpc_hangkit.lint import lint_paths


def lint_tree(tmp_path, files):
    """Write ``{relpath: source}`` under tmp_path and lint it; findings at every level
    (``note`` included) as ``(file, code, line, related_line)``, one per collective line
    reported (the lines a finding merges from its branch, :attr:`Finding.also`, included):
    the tests name the collectives found, not how they are grouped by branch."""
    for rel, src in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(src))
    res = lint_paths([str(tmp_path)], level="note")
    assert res.errors == []
    return [(str(f.path)[len(str(tmp_path)) + 1:], f.code, line, f.related_line) for f in res.findings
            for line in dict.fromkeys(line for line, _ in f.places())]


def marks(src, tag):
    """1-based line of the line holding ``# tag`` in the dedented source."""
    lines = textwrap.dedent(src).splitlines()
    hits = [i for i, text in enumerate(lines, 1) if text.rstrip().endswith("# " + tag)]
    assert len(hits) == 1, tag
    return hits[0]


def expect(tmp_path, src, code):
    found = lint_tree(tmp_path, {"prog.py": src})
    assert found == [("prog.py", code, marks(src, "HERE"), marks(src, "BRANCH"))], found


def silent(tmp_path, src):
    found = lint_tree(tmp_path, {"prog.py": src})
    assert found == [], found


# ------------------------------------------------------------------ HK101
HK101_WRONG = """
import torch.distributed as dist

def evaluate(model):
    if dist.get_rank() == 0:  # BRANCH
        dist.barrier()  # HERE
        print(model)
"""
HK101_RIGHT = """
import torch.distributed as dist

def evaluate(model):
    dist.barrier()
    if dist.get_rank() == 0:
        print(model)
"""


# ------------------------------------------------------------------ HK102
HK102_WRONG = """
import torch.distributed as dist

def step(t, rank):
    if rank == 3:  # BRANCH
        return None
    dist.all_reduce(t)  # HERE
    return t
"""
HK102_RIGHT = """
import torch.distributed as dist

def step(t, rank):
    dist.all_reduce(t)
    if rank == 3:
        return None
    return t
"""




def test_hk102_continue_in_loop(tmp_path):
    expect(tmp_path, """
    import torch.distributed as dist

    def train(loader):
        rank = dist.get_rank()
        for i, batch in enumerate(range(10)):
            if i == rank:  # BRANCH
                continue
            dist.all_reduce(batch)  # HERE
    """, "HK102")


# ------------------------------------------------------------------ HK103
HK103_WRONG = """
from mpi4py import MPI

def load(comm, path):
    if comm.Get_rank() == 0:  # BRANCH
        raise RuntimeError("no config at " + path)
    return comm.bcast(path, root=0)  # HERE
"""
HK103_RIGHT = """
from mpi4py import MPI

def load(comm, path):
    if comm.Get_rank() == 0:
        print("no config at " + path)
        comm.Abort(1)
        raise RuntimeError("no config at " + path)
    return comm.bcast(path, root=0)
"""


# ------------------------------------------------------------------ HK104
HK104_WRONG = """
import torch.distributed as dist

def pair_group():
    rank = dist.get_rank()
    return dist.new_group([rank, rank ^ 1])  # HERE BRANCH
"""
HK104_RIGHT = """
import torch.distributed as dist

def pair_group():
    rank = dist.get_rank()
    return dist.new_group([rank, rank ^ 1], use_local_synchronization=True)
"""
HK104_RIGHT_ALL = """
import torch.distributed as dist

def pair_groups(world):
    groups = [dist.new_group([r, r + 1]) for r in range(0, world, 2)]
    return groups[dist.get_rank() // 2]
"""


def test_hk104_rank_dependent_group(tmp_path):
    found = lint_tree(tmp_path, {"prog.py": HK104_WRONG})
    line = marks(HK104_WRONG, "HERE BRANCH")
    assert found == [("prog.py", "HK104", line, line)], found


# ------------------------------------------------------------------ HK105 / HK205
HK105_WRONG = """
import torch.distributed as dist

def batches_for(rank):
    return 5 if rank == 0 else 6

def train(t):
    for b in range(batches_for(dist.get_rank())):  # BRANCH
        dist.all_reduce(t)  # HERE
"""
HK105_RIGHT = """
import torch
import torch.distributed as dist

def batches_for(rank):
    return 5 if rank == 0 else 6

def train(t):
    n = torch.tensor(batches_for(dist.get_rank()))
    dist.all_reduce(n, op=dist.ReduceOp.MIN)
    for b in range(int(n)):
        dist.all_reduce(t)
"""
HK205_WRONG = """
import os
import torch.distributed as dist

def train(t, shard_dir):
    files = os.listdir(shard_dir)
    for f in files:  # BRANCH
        dist.all_reduce(t)  # HERE
"""


# ------------------------------------------------------------------ HK106
HK106_WRONG = """
import torch.distributed as dist

def exchange(t, buf):
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.send(t, dst=(rank + 1) % world)  # HERE
    dist.recv(buf, src=(rank - 1) % world)  # BRANCH
"""
HK106_RIGHT = """
import torch.distributed as dist

def exchange(t, buf):
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank % 2 == 0:
        dist.send(t, dst=(rank + 1) % world)
        dist.recv(buf, src=(rank - 1) % world)
    else:
        dist.recv(buf, src=(rank - 1) % world)
        dist.send(t, dst=(rank + 1) % world)
"""


# ------------------------------------------------------------------ HK201 / HK202 / HK203
HK201_WRONG = """
import os
import torch.distributed as dist

def maybe_resume(path, state):
    if os.path.exists(path):  # BRANCH
        dist.broadcast(state, src=0)  # HERE
"""
HK201_RIGHT = """
import os
import torch
import torch.distributed as dist

def maybe_resume(path, state):
    found = torch.tensor(int(os.path.exists(path)))
    dist.all_reduce(found, op=dist.ReduceOp.MIN)
    if found.item():
        dist.broadcast(state, src=0)
"""
def test_a_rank_test_around_a_rank_local_test_is_the_rank_tests_finding(tmp_path):
    """The more certain guard names the finding (ESR PR 57's shape): the file check inside
    ``if rank == 0:`` only narrows which of rank 0's runs reach the barrier."""
    expect(tmp_path, """
    import os
    from mpi4py import MPI

    def catalogue(comm, path):
        comm.Barrier()

    def main(path):
        comm = MPI.COMM_WORLD
        if comm.Get_rank() == 0:  # BRANCH
            if os.path.exists(path):
                catalogue(comm, path)  # HERE
    """, "HK101")
    # the inner file check alone is still a rank-local finding
    expect(tmp_path, """
    import os
    from mpi4py import MPI

    def main(path):
        comm = MPI.COMM_WORLD
        if os.path.exists(path):  # BRANCH
            comm.Barrier()  # HERE
    """, "HK201")


def test_the_quoted_lines_leave_out_their_comments_but_not_a_hash_in_a_string(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent("""
    import os
    import torch.distributed as dist

    def sync(t):
        dist.all_reduce(t)  # every rank's sum

    def main(t, tag):
        if os.path.exists(tag + "#ckpt"):  # only after a crash
            sync(t)
    """))
    (f,) = lint_paths([str(tmp_path)]).findings
    assert f.related_text == 'if os.path.exists(tag + "#ckpt"):'
    assert '`if os.path.exists(tag + "#ckpt"):`' in f.message and "crash" not in f.message
    assert [x["text"] for x in f.to_dict()["related"]] == [
        'if os.path.exists(tag + "#ckpt"):', "dist.all_reduce(t)"]


HK202_WRONG = """
import torch.distributed as dist

def sync(batch, t):
    if not batch:  # BRANCH
        return
    dist.all_reduce(t)  # HERE
"""
HK202_RIGHT = """
import torch
import torch.distributed as dist

def sync(batch, t):
    empty = torch.tensor(int(not batch))
    dist.all_reduce(empty, op=dist.ReduceOp.MAX)
    if empty.item():
        return
    dist.all_reduce(t)
"""
HK203_RIGHT = """
import time
import torch.distributed as dist

def checked(t, start):
    dist.all_reduce(t)
    if time.time() - start > 60:
        raise TimeoutError("too slow")
"""
HK205_RIGHT = """
import os
from mpi4py import MPI

def train(comm, t, shard_dir):
    n = comm.allreduce(len(os.listdir(shard_dir)), op=MPI.MIN)
    for i in range(n):
        comm.Allreduce(MPI.IN_PLACE, t)
"""
HK203_WRONG = """
import time
import torch.distributed as dist

def checked(t, start):
    if time.time() - start > 60:  # BRANCH
        raise TimeoutError("too slow")
    dist.all_reduce(t)  # HERE
"""






def test_collective_in_except_handler_is_rank_local(tmp_path):
    expect(tmp_path, """
    import torch.distributed as dist

    def step(t, batch):
        try:
            t = t / len(batch)
        except ZeroDivisionError:  # BRANCH
            dist.barrier()  # HERE
    """, "HK201")


# ------------------------------------------------------------------ silent patterns
@pytest.mark.parametrize("src", [
    # complementary branches that each reach the same collective
    """
    import torch.distributed as dist
    def share(t):
        if dist.get_rank() == 0:
            t.fill_(1)
            dist.broadcast(t, src=0)
        else:
            dist.broadcast(t, src=0)
    """,
    # every path returns after the same collective
    """
    import torch.distributed as dist
    def verdict(ok, t):
        if dist.get_rank() == 0 and not ok:
            dist.all_reduce(t)
            return False
        dist.all_reduce(t)
        return True
    """,
    # a rank-0-only block with no collective inside
    """
    import torch.distributed as dist
    def log(loss):
        dist.all_reduce(loss)
        if dist.get_rank() == 0:
            print(loss)
            with open("log.txt", "a") as f:
                f.write(str(loss))
        dist.barrier()
    """,
    # a condition agreed by a collective before use (mpi4py pickle API)
    """
    import os
    from mpi4py import MPI
    def resume(comm, path):
        found = comm.allreduce(os.path.exists(path), op=MPI.LAND)
        if found:
            comm.Barrier()
    """,
    # broadcast decides
    """
    import torch.distributed as dist
    def stop(flag):
        flags = [flag if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(flags, src=0)
        if flags[0]:
            dist.barrier()
    """,
    # world-size guards are the same on every rank
    """
    import os
    import torch.distributed as dist
    def sync(t):
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size > 1:
            dist.all_reduce(t)
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()
    """,
    # ranks outside a group skip its collectives by design
    """
    import torch.distributed as dist
    def reduce_in(group, t):
        if dist.get_rank(group) < 0:
            return
        dist.all_reduce(t, group=group)
    """,
    # point-to-point under a rank branch is how p2p is written
    """
    import torch.distributed as dist
    def hand(t):
        if dist.get_rank() == 0:
            dist.send(t, dst=1)
        else:
            dist.recv(t, src=0)
    """,
    # a local loop variable named rank takes its iterable's value
    """
    import torch.distributed as dist
    def groups(world):
        for rank in range(world):
            if rank % 2 == 0:
                dist.new_group([rank, rank + 1])
    """,
])
def test_correct_patterns_are_silent(tmp_path, src):
    silent(tmp_path, src)


# ------------------------------------------------------------------ rank dependence
def test_rank_from_environment_helper_and_self_attribute(tmp_path):
    src = """
    import os
    import torch.distributed as dist

    def should_publish():
        return int(os.environ["SLURM_PROCID"]) == 0

    class Trainer:
        def __init__(self):
            self.leader = dist.get_rank() == 0

        def save(self, t):
            if self.leader:  # BRANCH
                dist.barrier()  # HERE

    def publish(t):
        if should_publish():  # BRANCH2
            dist.all_reduce(t)  # HERE2
    """
    found = lint_tree(tmp_path, {"prog.py": src})
    assert found == [("prog.py", "HK101", marks(src, "HERE"), marks(src, "BRANCH")),
                     ("prog.py", "HK101", marks(src, "HERE2"), marks(src, "BRANCH2"))], found


def test_wrapper_libraries_are_collectives(tmp_path):
    src = """
    def finish(accelerator, trainer, metrics):
        if accelerator.is_main_process:  # BRANCH
            accelerator.wait_for_everyone()  # HERE
        if trainer.is_global_zero:  # BRANCH2
            trainer.strategy.barrier("save")  # HERE2
    """
    found = lint_tree(tmp_path, {"prog.py": src})
    assert found == [("prog.py", "HK101", marks(src, "HERE"), marks(src, "BRANCH")),
                     ("prog.py", "HK101", marks(src, "HERE2"), marks(src, "BRANCH2"))], found


def test_marked_function_is_a_collective(tmp_path):
    src = """
    import hpc_hangkit
    from mpi4py import MPI

    @hpc_hangkit.collective
    def exchange_halo(u):
        pass  # the real exchange is in C

    def step(comm, u):
        if comm.rank == 0:  # BRANCH
            exchange_halo(u)  # HERE
    """
    expect(tmp_path, src, "HK101")


def test_collective_three_calls_down_in_another_module(tmp_path):
    files = {
        "pkg/__init__.py": "",
        "pkg/comm.py": """
            import torch.distributed as dist

            def _reduce(t):
                dist.all_reduce(t)
            """,
        "pkg/helpers.py": """
            from pkg.comm import _reduce

            def normalize(t):
                _reduce(t)
                return t

            class Metrics:
                def update(self, t):
                    return self._sync(t)

                def _sync(self, t):
                    return normalize(t)
            """,
        "train.py": """
            import torch.distributed as dist
            from pkg import helpers

            def epoch(m, t):
                if dist.get_rank() == 0:  # BRANCH
                    helpers.Metrics().update(t)  # BUILT
                    helpers.normalize(t)  # HERE
            """,
    }
    found = lint_tree(tmp_path, files)
    src = files["train.py"]
    # Metrics().update: a method of the object built in the same expression, down to _reduce
    assert found == [("train.py", "HK101", marks(src, "BUILT"), marks(src, "BRANCH")),
                     ("train.py", "HK101", marks(src, "HERE"), marks(src, "BRANCH"))], found


def test_self_method_chain_reaches_collective(tmp_path):
    src = """
    import torch.distributed as dist

    class Metrics:
        def update(self, t):
            if dist.get_rank() == 0:  # BRANCH
                self._sync(t)  # HERE

        def _sync(self, t):
            return self._reduce(t)

        def _reduce(self, t):
            dist.all_reduce(t)
    """
    expect(tmp_path, src, "HK101")


def test_inline_ignore(tmp_path):
    src = """
    import torch.distributed as dist

    def evaluate(model):
        if dist.get_rank() == 0:
            dist.barrier()  # hangkit: ignore[HK101]
        if dist.get_rank() == 1:  # hangkit: ignore
            dist.barrier()
        if dist.get_rank() == 2:  # BRANCH
            dist.barrier()  # HERE hangkit: ignore[HK102]
    """
    expect(tmp_path, src.replace("# HERE hangkit", "# hangkit").replace(
        "ignore[HK102]", "ignore[HK102]  # HERE"), "HK101")


def test_unparsable_file_is_an_error_not_a_crash(tmp_path):
    (tmp_path / "bad.py").write_text("def f(:\n")
    (tmp_path / "ok.py").write_text(textwrap.dedent(HK101_WRONG))
    res = lint_paths([str(tmp_path)])
    assert [f.code for f in res.findings] == ["HK101"]
    assert len(res.errors) == 1 and res.errors[0][0].endswith("bad.py") and "SyntaxError" in res.errors[0][1]


def test_main_process_first_pairs_are_silent(tmp_path):
    silent(tmp_path, """
    import torch.distributed as dist
    from contextlib import contextmanager

    @contextmanager
    def main_process_first():
        is_main = dist.get_rank() == 0
        if not is_main:
            dist.barrier()
        yield
        if is_main:
            dist.barrier()
    """)


def test_data_loader_loop_alone_is_not_rank_local(tmp_path):
    silent(tmp_path, """
    def evaluate(accelerator, model, eval_dataloader):
        for batch in eval_dataloader:
            preds = accelerator.gather_for_metrics(model(batch))
    """)


def test_non_members_leaving_under_local_synchronization_is_silent(tmp_path):
    silent(tmp_path, """
    import torch.distributed as dist

    def make(ranks, use_local_synchronization=False):
        if use_local_synchronization:
            if ranks is not None and dist.get_rank() not in ranks:
                return None
        return dist.new_group(ranks, use_local_synchronization=use_local_synchronization)
    """)


@pytest.mark.parametrize("src,code", [
    (HK101_WRONG, "HK101"),
    (HK102_WRONG, "HK102"),
    (HK103_WRONG, "HK103"),
    (HK105_WRONG, "HK105"),
    (HK205_WRONG, "HK205"),
    (HK106_WRONG, "HK106"),
    (HK201_WRONG, "HK201"),
    (HK202_WRONG, "HK202"),
    (HK203_WRONG, "HK203"),
], ids=[
    "HK101_WRONG", "HK102_WRONG", "HK103_WRONG", "HK105_WRONG", "HK205_WRONG", "HK106_WRONG", "HK201_WRONG",
    "HK202_WRONG", "HK203_WRONG",
])
def test_wrong_program_is_flagged_at_the_collective_naming_the_branch(tmp_path, src, code):
    expect(tmp_path, src, code)


@pytest.mark.parametrize("src", [
    HK101_RIGHT,
    HK102_RIGHT,
    HK103_RIGHT,
    HK104_RIGHT,
    HK104_RIGHT_ALL,
    HK105_RIGHT,
    HK106_RIGHT,
    HK201_RIGHT,
    HK202_RIGHT,
    HK203_RIGHT,
    HK205_RIGHT,
], ids=[
    "HK101_RIGHT", "HK102_RIGHT", "HK103_RIGHT", "HK104_RIGHT", "HK104_RIGHT_ALL", "HK105_RIGHT", "HK106_RIGHT",
    "HK201_RIGHT", "HK202_RIGHT", "HK203_RIGHT", "HK205_RIGHT",
])
def test_corrected_program_is_silent(tmp_path, src):
    silent(tmp_path, src)


# torch.distributed.checkpoint's save/load are collectives (every rank plans its share); the
# shape of KempnerForge #49 and DeepSpeed #797 with DCP: a save under the rank test
DCP_WRONG = """
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import state_dict_loader


def save(model, path):
    if dist.get_rank() == 0:  # BRANCH
        dcp.save({"model": model.state_dict()}, checkpoint_id=path)  # HERE
    dist.barrier()
"""


def test_distributed_checkpoint_save_and_load_are_collectives(tmp_path):
    expect(tmp_path, DCP_WRONG, "HK101")
    found = lint_tree(tmp_path, {"prog.py": """
    import torch.distributed as dist
    from torch.distributed.checkpoint import state_dict_loader


    def load(sd, path):
        if dist.get_rank() != 0:  # BRANCH
            return
        state_dict_loader.load(sd, checkpoint_id=path)  # HERE
    """})
    assert [(c, line) for _, c, line, _ in found] == [("HK102", 9)], found


def test_torch_save_on_rank_zero_and_dcp_on_every_rank_are_silent(tmp_path):
    silent(tmp_path, """
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp


    def save(model, path):
        dcp.save({"model": model.state_dict()}, checkpoint_id=path)
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), path + ".pt")
            model.save(path)
        dist.barrier()
    """)


# optimum-neuron PR #925 (bench/recall4/t07): the object a factory function returns is typed by
# what the factory builds, so its method's collective is reached through it
FACTORY = {
    "hub.py": """
    import torch.distributed as dist


    class Proxy:
        def __init__(self, repo):
            self.repo = repo

        def synchronize(self):
            dist.barrier()

        def describe(self):
            return self.repo


    def make_proxy(repo):
        proxy = Proxy(repo)
        return proxy
    """,
    "train.py": """
    import torch.distributed as dist
    from hub import make_proxy


    def push(repo):
        if dist.get_rank() == 0:
            p = make_proxy(repo)
            p.synchronize()
            print(p.describe())
    """}


def test_a_method_of_what_a_factory_returns_is_followed(tmp_path):
    assert lint_tree(tmp_path, FACTORY) == [("train.py", "HK101", 9, 7)]


def test_a_factory_of_two_classes_types_nothing(tmp_path):
    files = dict(FACTORY)
    files["hub.py"] = FACTORY["hub.py"].replace("""        proxy = Proxy(repo)
        return proxy""", """        if repo:
            return Proxy(repo)
        return Local(repo)


    class Local:
        def synchronize(self):
            pass""")
    assert lint_tree(tmp_path, files) == []


# recall5 t04 (Zero-to-Wan PR #1) and t02 (bergson PR #376): FSDP's optimizer-state gather and a
# DTensor's full_tensor() are collectives; mpi4jax's allreduce is mpi4py's
@pytest.mark.parametrize("call, imports", [
    ("FSDP.optim_state_dict(model, opt)", "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP"),
    ("model.weight.full_tensor()", "import torch"),
    ("mpi4jax.allreduce(model, op=None)", "import mpi4jax"),
])
def test_fsdp_state_gathers_dtensor_full_tensor_and_mpi4jax_are_collectives(tmp_path, call, imports):
    expect(tmp_path, """
%s
import torch.distributed as dist


def save(model, opt):
    if dist.get_rank() == 0:  # BRANCH
        state = %s  # HERE
        print(state)
""" % (imports, call), "HK101")


def test_fsdp_gather_on_every_rank_and_a_plain_tensor_method_are_silent(tmp_path):
    silent(tmp_path, """
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


    def save(model, opt, path):
        state = FSDP.optim_state_dict(model, opt)
        if dist.get_rank() == 0:
            torch.save(state, path)
            torch.save(model.state_dict(), path + ".model")
    """)


# netket #651's gradient sum (recall5 t07): `tree_map(sum_inplace, grads)` applies a function
# whose mpi4jax allreduce every rank must reach; map() likewise
@pytest.mark.parametrize("apply", ["tree_map(sum_inplace, grads)", "list(map(sum_inplace, grads))"])
def test_a_function_applied_by_tree_map_or_map_is_reached(tmp_path, apply):
    expect(tmp_path, """
import mpi4jax
from jax.tree_util import tree_map
from mpi4py import MPI


def sum_inplace(x):
    res, _ = mpi4jax.allreduce(x, op=MPI.SUM, comm=MPI.COMM_WORLD)
    return res


def gradient(grads):
    if MPI.COMM_WORLD.Get_rank() == 0:  # BRANCH
        return %s  # HERE
    return grads
""" % apply, "HK101")


def test_a_function_only_handed_on_is_not_applied(tmp_path):
    silent(tmp_path, """
    import threading
    import mpi4jax
    from mpi4py import MPI


    def sum_inplace(x):
        res, _ = mpi4jax.allreduce(x, op=MPI.SUM, comm=MPI.COMM_WORLD)
        return res


    def start(grads):
        if MPI.COMM_WORLD.Get_rank() == 0:
            print(sorted(grads, key=sum_inplace))
            threading.Thread(target=sum_inplace, args=(grads,))
    """)
