"""`hpc-hangkit run` usage errors: refused (exit 2) before anything is created or started.

No job is started here: each case must fail while click parses the command
line, so the working directory stays empty (no ./hangkit-run-<time>/).
"""
from testlib import REPO
import os

from click.testing import CliRunner

from hpc_hangkit.cli import cli
from hpc_hangkit.outpath import output_problem


def invoke(tmp_path, monkeypatch, *args):
    monkeypatch.chdir(str(tmp_path))
    r = CliRunner().invoke(cli, ["run"] + list(args))
    assert "Traceback" not in r.output
    return r


def test_misspelled_option_is_not_a_launcher(tmp_path, monkeypatch):
    r = invoke(tmp_path, monkeypatch, "--confirm", "6", "--", "true")
    assert r.exit_code == 2, r.output
    assert "No such option '--confirm'. Did you mean '--confirm-duration'?" in r.output
    assert "launcher not found" not in r.output
    r = invoke(tmp_path, monkeypatch, "--poll-intervall=1", "true")
    assert r.exit_code == 2 and "No such option '--poll-intervall'" in r.output
    assert "'--poll-interval'" in r.output
    r = invoke(tmp_path, monkeypatch, "--", "-x", "true")  # after --: a launcher still never starts with '-'
    assert r.exit_code == 2 and "No such option '-x'" in r.output
    assert os.listdir(str(tmp_path)) == []


def test_unwritable_json_out_and_out_refused_up_front(tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = (("--json-out", "/proc/nope/r.json", "cannot write /proc/nope/r.json: cannot create files in /proc"),
             ("--out", "/proc/nope", "cannot create /proc/nope: cannot create files in /proc"),
             ("--out", str(afile / "out"), "%s is not a directory" % afile),
             ("--json-out", str(tmp_path), "it is a directory"),
             ("--out", str(afile), "it exists and is not a directory"))
    for opt, path, why in cases:
        r = invoke(tmp_path, monkeypatch, opt, path, "--", "true")
        assert r.exit_code == 2, (opt, path, r.output)
        assert "Invalid value for '%s'" % opt in r.output and why in r.output, r.output
    assert sorted(os.listdir(str(tmp_path))) == ["afile"]


def test_output_problem_accepts_creatable_paths(tmp_path):
    """What `run` creates itself (parents of --json-out, --out) passes; nothing is left behind by the probe."""
    assert output_problem(str(tmp_path / "a" / "b" / "r.json"), "file", make_parents=True) is None
    assert output_problem(str(tmp_path / "a" / "b"), "dir", make_parents=True) is None
    assert output_problem(str(tmp_path / "r.json"), "file", make_parents=False) is None
    assert "does not exist" in output_problem(str(tmp_path / "a" / "r.json"), "file", make_parents=False)
    assert os.listdir(str(tmp_path)) == []


def test_console_entry_point_refuses_before_creating(tmp_path):
    """The user's exact command through the real entry point: exit 2, click's suggestion, no run directory."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "hpc_hangkit", "run", "--confirm", "6", "--", "true"],
                       cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                       env=dict(os.environ, PYTHONPATH=REPO))
    err = p.stderr.decode()
    assert p.returncode == 2, err
    assert "Did you mean '--confirm-duration'?" in err and "Traceback" not in err
    assert os.listdir(str(tmp_path)) == []
