"""What the monitor sees of uneven_ddp.py before any capture: the ranks' own watchdog dumps
(tests/scenarios20/fixtures/ddp_backward_watchdog: the real logs of one run of that program under
``hpc-hangkit run``, paths made neutral). Ranks 0-2 wait in DDP's gradient all_reduce, which the
reducer issues from C++ inside backward, so their Python stacks end in autograd's engine with no
collective frame; rank 3 waits in the evaluation's all_reduce. The roll call must not name the
three waiting ranks as suspects."""
import os
import shutil

from hpc_hangkit.parse.model import Frame
from hpc_hangkit.report.render import render_text
from hpc_hangkit.rollcall import report_from_dir
from hpc_hangkit.rollcall.frames import in_backward
from testlib import TESTS

FIX = os.path.join(TESTS, "scenarios20", "fixtures", "ddp_backward_watchdog")


def marks(script):
    out = {}
    with open(os.path.join(TESTS, "scenarios20", script)) as f:
        for i, line in enumerate(f, 1):
            tag = line.rsplit("# ", 1)[-1].split()[0] if "# " in line else ""
            if tag.endswith("_LINE"):
                out[tag[:-5]] = i
    return out


def test_ranks_in_autograd_backward_are_the_waiting_majority(tmp_path):
    d = tmp_path / "watchdog"
    shutil.copytree(FIX, d)
    rep = report_from_dir(str(d))
    text = render_text(rep)
    m = marks("uneven_ddp.py")
    assert rep.verdict == "SPLIT" and rep.suspect_ranks == [3], text
    (waiting,) = [g for g in rep.groups if 0 in g.ranks]
    (short,) = [g for g in rep.groups if 3 in g.ranks]
    assert waiting.ranks == [0, 1, 2] and waiting.role == "waiting" and waiting.frame.line == m["BACKWARD"]
    assert waiting.collective is None  # nothing claims a collective the frames do not show
    assert short.ranks == [3] and short.frame.line == m["EVAL"] and short.collective == "all_reduce"
    assert "in autograd's backward at uneven_ddp.py:%d in train" % m["BACKWARD"] in text


def test_in_backward_only_when_no_user_frame_is_inward():
    lib = "/usr/lib/python3.11/site-packages/torch/autograd/graph.py"
    user = "/home/user/jobs/train.py"
    eng = Frame(lib, 824, "_engine_run_backward")
    assert in_backward([eng, Frame(user, 26, "train")])
    # a user's backward hook running inside the engine: the rank is in the user's code
    assert not in_backward([Frame(user, 9, "hook"), eng, Frame(user, 26, "train")])
    assert not in_backward([Frame(user, 26, "train")])
