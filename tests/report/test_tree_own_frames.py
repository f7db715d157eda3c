"""The call-prefix tree leaves out hpc-hangkit's own frames (the auto check-in's wrapper, on
by default, sits between every wrapped collective call and torch), as the groups do: a reader
must not see hpc-hangkit on the suspects' path of a hang it only watched."""
import os
import shutil

from hpc_hangkit.parse.model import is_library_path, is_own_frame
from hpc_hangkit.report.html import render_html
from hpc_hangkit.report.render import render_svg, render_tree
from hpc_hangkit.rollcall import report_from_dir

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "torch_samples",
                   "gloo_new_group", "faulthandler")


def _report(tmp_path):
    d = tmp_path / "job" / "watchdog"
    d.mkdir(parents=True)
    for name in os.listdir(FIX):
        shutil.copyfile(os.path.join(FIX, name), str(d / name))
    return report_from_dir(str(tmp_path / "job"))


def test_wrapper_frames_are_in_the_chains_but_not_in_the_tree(tmp_path):
    rep = _report(tmp_path)
    # the real dumps (armed with auto check-in) hold the wrapper in every rank's chain
    assert any(is_own_frame(f.file) for ch in rep.rank_chains.values() for f in ch)
    tree = render_tree(rep)
    assert "_hangkit_autocheckin" not in tree and "wrapper" in tree  # torch's own c10d wrapper stays
    assert "gloo_new_group.py" in tree
    assert "_hangkit_autocheckin" not in render_svg(rep)
    page = render_html(rep)
    tree_part = page[page.index('id="tree"'):]
    assert "_hangkit_autocheckin" not in tree_part.split("</section>", 1)[0]


def test_own_frame_rule():
    assert is_own_frame("/opt/site/boot/_hangkit_autocheckin.py")   # a site's boot directory
    assert is_own_frame("/usr/lib/python3/dist-packages/hpc_hangkit/arm/agree.py")
    assert not is_own_frame("/home/u/hangkit_train.py") and not is_own_frame("/home/u/train.py")
    assert is_library_path("/opt/site/boot/_hangkit_autocheckin.py")
