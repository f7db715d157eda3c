"""`hpc-hangkit report PATH [--json] [--depth N] [--tree] [--svg FILE]`: output, exit status,
node summaries written and read back, and the real console entry point."""
from testlib import TESTS, validate_report
import json
import os
import shutil
import subprocess
import sys
import xml.dom.minidom

from click.testing import CliRunner

from hpc_hangkit.cli import cli

FIX = os.path.join(TESTS, "fixtures", "torch_samples")
BARRIER = os.path.join(FIX, "gloo_divergent_barrier")


def run(*args):
    r = CliRunner().invoke(cli, ["report"] + list(args), catch_exceptions=False)
    return r.exit_code, r.output


def test_text_report_and_tree():
    code, out = run(BARRIER, "--tree")
    assert code == 0
    assert out.startswith("hpc-hangkit roll call: SPLIT")
    assert "ranks 0,2-3  waiting at     hang_gloo.py:61 in sync_grads" in out
    assert "=> the ranks wait in 2 different collectives" in out and "suspect rank: 1" in out
    assert "call-prefix tree" in out and "+-[1] hang_gloo.py:78 in train *" in out


def test_json_report():
    code, out = run(BARRIER, "--json")
    assert code == 0
    d = validate_report(out, "report --json")
    assert d["schema_version"] == 1 and d["verdict"] == "SPLIT" and d["suspect_ranks"] == [1]
    assert [(g["ranks"], g["role"]) for g in d["groups"]] == [([0, 2, 3], "waiting"), ([1], "divergent")]
    assert d["groups"][0]["frame"]["line"] == 61
    assert "tree" not in d
    code, out = run(BARRIER, "--json", "--tree")
    tree = validate_report(out, "report --json --tree")["tree"]
    assert [t["ranks"] for t in tree] == ["0-3"] and tree[0]["frame"]["function"] == "<module>"
    assert [c["ranks"] for c in tree[0]["children"]] == ["0,2-3", "1"]


def test_depth_and_samples_options():
    code, out = run(BARRIER, "--json", "--depth", "1", "--samples", "3")
    d = validate_report(out, "report --json --depth 1")
    assert code == 0 and d["depth"] == 1 and d["samples_per_rank"] == 3
    assert all(len(g["call_chain"]) == 1 for g in d["groups"])
    assert run(BARRIER, "--depth", "0")[0] == 2


def test_svg_picture(tmp_path):
    svg = tmp_path / "tree.svg"
    code, out = run(BARRIER, "--svg", str(svg))
    assert code == 0 and str(svg) in out
    doc = xml.dom.minidom.parse(str(svg))
    root = doc.documentElement
    assert root.tagName == "svg" and root.getAttribute("xmlns") == "http://www.w3.org/2000/svg"
    texts = [t.firstChild.data for t in doc.getElementsByTagName("text") if t.firstChild]
    assert any("SPLIT" in t for t in texts)
    assert any(t.startswith("0,2-3 (3)") for t in texts) and any(t.startswith("1 (1)") for t in texts)
    assert not doc.getElementsByTagName("script")


def test_bad_usage_exits_2(tmp_path):
    code, out = run(str(tmp_path / "nope"))
    assert code == 2 and "no such file" in out
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("nothing to see\n")
    code, out = run(str(tmp_path / "empty"))
    assert code == 2 and "no stack dumps" in out
    assert CliRunner().invoke(cli, ["report"]).exit_code == 2


def test_node_summaries_round_trip(tmp_path):
    """Two "nodes" write summaries; a report over the summaries alone equals the direct one."""
    nodes = tmp_path / "nodes"
    for node, ranks in (("a", (0, 1)), ("b", (2, 3))):
        d = tmp_path / node
        (d / "watchdog").mkdir(parents=True)
        for r in ranks:
            shutil.copyfile(os.path.join(BARRIER, "faulthandler", "rank_%d.log" % r), str(d / "watchdog" / ("rank_%d.log" % r)))
        nodes.mkdir(exist_ok=True)
        code, _ = run(str(d), "--summary-out", str(nodes / ("%s.summary.json" % node)))
        assert code == 0
    code, merged = run(str(nodes), "--json")
    assert code == 0
    code, direct = run(os.path.join(BARRIER, "faulthandler"), "--json")
    a, b = validate_report(merged, "merged report --json"), validate_report(direct, "direct report --json")
    for d in (a, b):
        d.pop("last_checkin")
    assert a == b and a["suspect_ranks"] == [1]


def test_console_script_entry_point():
    p = subprocess.run([sys.executable, "-m", "hpc_hangkit", "report", os.path.join(FIX, "gloo_divergent_sleep")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 0, p.stderr
    assert b"hpc-hangkit roll call: MISSED" in p.stdout and b"rank 1 is where the bug is" in p.stdout


def test_unwritable_outputs_are_usage_errors(tmp_path):
    """--svg / --summary-out that cannot be written: one line naming the path and the reason, exit 2, no traceback."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    for opt, path, why in (("--svg", "/proc/nope/t.svg", "directory /proc/nope does not exist"),
                           ("--summary-out", "/proc/x.summary.json", "cannot create files in /proc"),
                           ("--svg", str(afile / "t.svg"), "is not a directory")):
        r = CliRunner().invoke(cli, ["report", BARRIER, opt, path])
        assert r.exit_code == 2, r.output
        assert r.exception is None or isinstance(r.exception, SystemExit)
        assert "Invalid value for '%s': cannot write %s: " % (opt, path) in r.output and why in r.output
        assert "Traceback" not in r.output
    assert sorted(os.listdir(str(tmp_path))) == ["afile"]  # the probe leaves nothing behind


def test_write_time_failure_is_one_line(tmp_path):
    """A path that became unwritable after the check: ClickException (exit 1) naming option, path, OS reason."""
    import click
    import pytest

    from hpc_hangkit.cli._paths import write_output

    with pytest.raises(click.ClickException) as ei:
        write_output(str(tmp_path / "gone" / "t.svg"), "<svg/>", "--svg")
    msg = ei.value.format_message()
    assert msg == "cannot write --svg %s: No such file or directory" % (tmp_path / "gone" / "t.svg")
    write_output(str(tmp_path / "t.svg"), "<svg/>", "--svg")
    assert (tmp_path / "t.svg").read_text() == "<svg/>"
