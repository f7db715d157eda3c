"""Where the paths split (rollcall/branch.py) on call chains, without running a job;
the real hanging runs are in test_rollcall_scenarios.py."""
import os
import textwrap

import pytest

from hpc_hangkit.parse.model import Frame
from hpc_hangkit.rollcall.branch import find_branch, find_enclosing, read_source

TORCH = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def write(tmp_path, src, name="train.py"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(src))
    return str(p)


def line(path, text):
    with open(path) as f:
        return next(i for i, ln in enumerate(f, 1) if text in ln)


def test_early_exit_in_the_function_the_majority_went_into(tmp_path):
    p = write(tmp_path, """
        import torch.distributed as dist

        def step(t):
            if dist.get_rank() == 0:
                return t
            dist.all_reduce(t)
            return t

        def main(t):
            step(t)
            dist.barrier()
        """)
    rank0 = [Frame(TORCH, 1, "barrier"), Frame(p, line(p, "dist.barrier()"), "main")]
    others = [Frame(TORCH, 1, "all_reduce"), Frame(p, line(p, "dist.all_reduce(t)"), "step"),
              Frame(p, line(p, "    step(t)"), "main")]
    br, missing = find_branch(rank0, others)
    assert missing is None
    assert br == {"file": p, "line": line(p, "if dist.get_rank() == 0:"), "text": "if dist.get_rank() == 0:",
                  "kind": "early_exit", "rank_dependent": True, "rule": "inside_left_function"}


def test_rank_local_branch_and_except_handler(tmp_path):
    p = write(tmp_path, """
        import os
        import torch.distributed as dist

        def main(t, path):
            if os.path.exists(path):
                dist.broadcast(t, 0)
            try:
                t = t / len(t)
            except ZeroDivisionError:
                dist.barrier()
            dist.all_reduce(t)
        """)
    a = [Frame(TORCH, 1, "broadcast"), Frame(p, line(p, "dist.broadcast"), "main")]
    b = [Frame(TORCH, 1, "all_reduce"), Frame(p, line(p, "dist.all_reduce"), "main")]
    assert find_branch(a, b)[0] == {"file": p, "line": line(p, "if os.path.exists"),
                                    "text": "if os.path.exists(path):", "kind": "if", "rank_dependent": False,
                                    "rule": "own_frames"}
    c = [Frame(TORCH, 1, "barrier"), Frame(p, line(p, "dist.barrier"), "main")]
    assert find_branch(c, b)[0]["kind"] == "except"


def test_names_no_branch_it_did_not_find(tmp_path):
    p = write(tmp_path, """
        import torch.distributed as dist

        def main(t, flag):
            if flag:
                dist.barrier()
            dist.all_reduce(t)
        """)
    a = [Frame(TORCH, 1, "barrier"), Frame(p, line(p, "dist.barrier"), "main")]
    b = [Frame(TORCH, 1, "all_reduce"), Frame(p, line(p, "dist.all_reduce"), "main")]
    assert find_branch(a, b) == (None, None)


def test_a_rank_that_left_gets_the_rank_dependent_branch_around_the_majority(tmp_path):
    p = write(tmp_path, """
        import sys
        import torch.distributed as dist

        def step(t):
            for _ in range(3):
                dist.all_reduce(t)

        def main(t, n):
            while n > 0:
                for _ in range(dist.get_rank() + 1):
                    step(t)
                n -= 1

        sys.exit(main(None, 2))
        """)
    others = [Frame(TORCH, 1, "all_reduce"), Frame(p, line(p, "dist.all_reduce(t)"), "step"),
              Frame(p, line(p, "    step(t)"), "main"), Frame(p, line(p, "sys.exit"), "<module>")]
    loop = {"file": p, "line": line(p, "for _ in range(dist.get_rank()"),
            "text": "for _ in range(dist.get_rank() + 1):", "kind": "loop", "rank_dependent": True,
            "rule": "enclosing"}
    # step's own loop and main's while do not depend on the rank: the rank-dependent loop is named
    assert find_enclosing(others) == (loop, None)
    # the same from a rank that came back out to the final sys.exit
    assert find_branch([Frame(p, line(p, "sys.exit"), "<module>")], others) == (loop, None)
    plain = [Frame(TORCH, 1, "all_reduce"), Frame(p, line(p, "dist.all_reduce(t)"), "step")]
    assert find_enclosing(plain) == (None, None)


def test_unreadable_and_refused_sources(tmp_path):
    gone = str(tmp_path / "gone.py")
    assert find_branch([Frame(gone, 3, "f")], [Frame(gone, 5, "f")]) == (None, gone)
    real = write(tmp_path, "def f():\n    pass\n    pass\n", "real.py")
    link = str(tmp_path / "link.py")
    os.symlink(real, link)
    assert find_branch([Frame(link, 2, "f")], [Frame(link, 3, "f")]) == (None, link)
    notpy = str(tmp_path / "notes.txt")
    open(notpy, "w").write("def f():\n    pass\n    pass\n")
    assert find_branch([Frame(notpy, 2, "f")], [Frame(notpy, 3, "f")]) == (None, notpy)
    # a short path might name another file where the report runs: not read
    assert find_branch([Frame("real.py", 2, "f")], [Frame("real.py", 3, "f")]) == (None, "real.py")


@pytest.mark.skipif(os.geteuid() != 0, reason="the rule is about a report run as root")
def test_root_reads_only_world_readable_sources(tmp_path):
    """Frames come from the job's dumps: as root, a source the job's user could not read is
    never quoted (the same file made world-readable is)."""
    src = write(tmp_path, "import os\ndef f(rank, dist):\n    if rank == 0:\n        dist.barrier()\n    dist.all_reduce(1)\n",
                "secret.py")
    os.chmod(src, 0o600)
    with pytest.raises(PermissionError, match="world-readable"):
        read_source(src)
    os.chmod(src, 0o644)
    assert "dist.barrier()" in read_source(src)
