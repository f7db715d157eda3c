"""`hpc-hangkit lint`: exit statuses, formats (SARIF validated against the 2.1.0 schema),
pyproject settings, the handed hang scenarios."""
import json
import os
import subprocess
import sys
import textwrap

import jsonschema
import pytest

from testlib import FIXTURES, REPO, TESTS

SARIF_SCHEMA = os.path.join(FIXTURES, "sarif", "sarif-schema-2.1.0.json")
SCENARIOS = os.path.join(TESTS, "scenarios")


def lint(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.run([sys.executable, "-m", "hpc_hangkit", "lint", *args], cwd=cwd or REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def mark_line(path, tag):
    with open(path) as f:
        return next(i for i, text in enumerate(f, 1) if "MARK: " + tag in text)


def line_of(path, text):
    with open(path) as f:
        return next(i for i, line in enumerate(f, 1) if text in line)


WRONG = """
import torch.distributed as dist

def evaluate(model):
    if dist.get_rank() == 0:
        dist.barrier()
"""


def test_exit_1_with_sarif_that_validates(tmp_path):
    (tmp_path / "prog.py").write_text(WRONG)
    (tmp_path / "bad.py").write_text("def f(:\n")
    r = lint("--format", "sarif", str(tmp_path))
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    with open(SARIF_SCHEMA) as f:
        schema = json.load(f)
    jsonschema.Draft4Validator(schema).validate(doc)
    (res,) = doc["runs"][0]["results"]
    assert res["ruleId"] == "HK101" and res["level"] == "error"
    assert res["locations"][0]["physicalLocation"]["region"]["startLine"] == 6
    assert res["relatedLocations"][0]["physicalLocation"]["region"]["startLine"] == 5
    inv = doc["runs"][0]["invocations"][0]
    notes = inv["toolExecutionNotifications"]
    assert len(notes) == 1 and "bad.py" in notes[0]["message"]["text"] and notes[0]["level"] == "error"
    # the run did not check all it was asked to, as the exit status says
    assert inv["executionSuccessful"] is False
    assert "bad.py: cannot check: SyntaxError" in r.stderr


def test_jobs_option_gives_the_same_output(tmp_path):
    (tmp_path / "prog.py").write_text(WRONG)
    (tmp_path / "other.py").write_text(WRONG)
    one, two = lint("--jobs", "1", str(tmp_path)), lint("--jobs", "2", str(tmp_path))
    assert one.returncode == two.returncode == 1 and one.stdout == two.stdout
    assert lint("--jobs", "0", str(tmp_path)).returncode == 2


def test_exit_0_when_clean_and_text_format(tmp_path):
    (tmp_path / "prog.py").write_text("import torch.distributed as dist\ndist.barrier()\n")
    r = lint(str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "0 findings in 1 file (2 lines)\n"


def test_text_and_json_name_both_lines(tmp_path):
    p = tmp_path / "prog.py"
    p.write_text(WRONG)
    r = lint(str(p))
    assert r.returncode == 1
    assert r.stdout.splitlines()[0] == (
        "%s:6:9: HK101 [error] barrier is reached only on ranks where the rank-dependent condition is true "
        "(line 5: `if dist.get_rank() == 0:`)" % p)
    doc = json.loads(lint("--format", "json", str(p)).stdout)
    assert doc["findings"][0]["related"] == [
        {"path": str(p), "line": 5, "text": "if dist.get_rank() == 0:", "role": "branch"}]
    assert doc["findings"][0]["severity"] == "error"


@pytest.mark.parametrize("args", [["--select", "HK999"], ["--format", "xml"], ["/nonexistent/x.py"]])
def test_exit_2_on_bad_usage(args):
    r = lint(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Error" in r.stderr


def test_select_ignore_and_pyproject(tmp_path):
    (tmp_path / "prog.py").write_text(WRONG + textwrap.dedent("""
        import os
        def resume(p, t):
            if os.path.exists(p):
                dist.broadcast(t, 0)
        def sync(t):
            my_sync(t)
        def guarded(t):
            if dist.get_rank() == 1:
                my_sync(t)
        """))
    codes = lambda r: sorted(line.split()[1] for line in r.stdout.splitlines()[:-1])  # noqa: E731
    assert codes(lint(str(tmp_path))) == ["HK101", "HK201"]
    assert codes(lint("--select", "HK2", str(tmp_path))) == ["HK201"]
    assert codes(lint("--ignore", "HK201", str(tmp_path))) == ["HK101"]
    (tmp_path / "pyproject.toml").write_text(
        '[tool.hpc-hangkit.lint]\nignore = ["HK2"]\ncollectives = ["my_sync"]\n')
    assert codes(lint(".", cwd=str(tmp_path))) == ["HK101", "HK101"]
    (tmp_path / "vendored").mkdir()
    (tmp_path / "vendored" / "other.py").write_text(WRONG)
    assert codes(lint(".", cwd=str(tmp_path))) == ["HK101", "HK101", "HK101"]
    (tmp_path / "pyproject.toml").write_text(
        '[tool.hpc-hangkit.lint]\nignore = ["HK2"]\ncollectives = ["my_sync"]\nexclude = ["vendored/*"]\n')
    assert codes(lint(".", cwd=str(tmp_path))) == ["HK101", "HK101"]
    # the command line's codes are the whole choice: the file's ignore does not take HK2 away
    assert codes(lint("--select", "HK2", ".", cwd=str(tmp_path))) == ["HK201"]
    (tmp_path / "pyproject.toml").write_text('[tool.hpc-hangkit.lint]\nignore = ["HK150"]\n')
    r = lint(".", cwd=str(tmp_path))
    assert r.returncode == 2 and "unknown rule code 'HK150' in " in r.stderr and "pyproject.toml" in r.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.hpc-hangkit.lint]\nignores = ["HK2"]\n')
    r = lint(".", cwd=str(tmp_path))
    assert r.returncode == 2 and "unknown key 'ignores'" in r.stderr


def test_handed_scenarios_flag_the_branch_lines():
    r = lint("--format", "json", SCENARIOS)
    got = {(os.path.basename(f["path"]), f["code"], f["line"], f["related"][0]["line"])
           for f in json.loads(r.stdout)["findings"]}
    s3 = os.path.join(SCENARIOS, "scenario3_inner_barrier.py")
    s4 = os.path.join(SCENARIOS, "scenario4_uneven_data.py")
    s7 = os.path.join(SCENARIOS, "scenario7_alive_but_stuck.py")
    assert got == {
        # the inner barrier under `if rank == 0 and epoch == 1`
        ("scenario3_inner_barrier.py", "HK101", mark_line(s3, "inner-barrier"),
         line_of(s3, "if rank == 0 and epoch == 1:")),
        # step() (all_reduce) once per batch, and the batch count comes from the rank
        ("scenario4_uneven_data.py", "HK105", line_of(s4, "        step(batch)"),
         line_of(s4, "for batch in range(batches_for(rank)):")),
        # rank 1 calls a function that never returns, then the others' all_reduce
        ("scenario7_alive_but_stuck.py", "HK102", mark_line(s7, "train-allreduce"),
         line_of(s7, "if rank == 1 and step == 5:")),
    }, got


def test_examples_flag_the_skipped_sync():
    r = lint(os.path.join(REPO, "examples"))
    lines = r.stdout.splitlines()
    assert r.returncode == 1 and lines[-1].startswith("2 findings (2 errors) in ")
    # each is reached through a helper: its line, then the collective's own line
    assert [os.path.basename(line.split(":")[0]) + ":" + line.split(":")[1] + " " + line.split()[1]
            for line in lines[:-1]] == [
        "gloo_divergent.py:%d HK101" % line_of(os.path.join(REPO, "examples", "gloo_divergent.py"), "            sync_grads(grads)"),
        "gloo_divergent.py:%d HK101" % line_of(os.path.join(REPO, "examples", "gloo_divergent.py"), "dist.all_reduce(grads)"),
        "mpi_divergent.py:%d HK101" % line_of(os.path.join(REPO, "examples", "mpi_divergent.py"), "            global_norm(comm, local)"),
        "mpi_divergent.py:%d HK101" % line_of(os.path.join(REPO, "examples", "mpi_divergent.py"), "= comm.allreduce(")]


CHAIN = {
    "pkg/__init__.py": "",
    "pkg/comm.py": """
        import torch.distributed as dist


        def sync(t):
            dist.all_reduce(t)
        """,
    "pkg/steps.py": """
        from pkg import comm


        def finish(t):
            comm.sync(t)
        """,
    "train.py": """
        import torch.distributed as dist
        from pkg.steps import finish


        def main(t):
            if dist.get_rank() == 0:
                finish(t)
        """,
}


def _write(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))


def test_a_finding_through_helpers_names_the_chain_in_text_json_and_sarif(tmp_path):
    _write(tmp_path, CHAIN)
    train, steps, comm = (str(tmp_path / p) for p in ("train.py", "pkg/steps.py", "pkg/comm.py"))
    text = lint(str(tmp_path)).stdout
    assert "%s:7:9: HK101 [error] finish() (reaches all_reduce)" % train in text
    assert "all_reduce at comm.py:5" in text and "sync() at steps.py:5" in text
    # reported at the collective's own line too: a second line an editor can jump to
    assert "%s:5:5: HK101 [error] all_reduce: the collective of the finding at %s:7:9 (line 6: " \
           "`if dist.get_rank() == 0:`), through finish() -> sync() -> all_reduce" % (comm, train) in text.splitlines()
    assert text.splitlines()[-1] == "1 finding (1 error) in 4 files (17 lines)"
    doc = json.loads(lint("--format", "json", str(tmp_path)).stdout)
    (f,) = doc["findings"]
    assert [(r["role"], r["path"], r["line"]) for r in f["related"]] == [
        ("branch", train, 6), ("call", steps, 5), ("collective", comm, 5)]
    assert f["collective"] == {"path": comm, "line": 5, "col": 5, "text": "dist.all_reduce(t)", "what": "all_reduce"}
    sarif = json.loads(lint("--format", "sarif", str(tmp_path)).stdout)
    with open(SARIF_SCHEMA) as fh:
        jsonschema.Draft4Validator(json.load(fh)).validate(sarif)
    (res,) = sarif["runs"][0]["results"]
    rels = res["relatedLocations"]
    assert [(r["physicalLocation"]["artifactLocation"]["uri"].rsplit("/", 1)[-1],
             r["physicalLocation"]["region"]["startLine"]) for r in rels] == [
        ("train.py", 6), ("steps.py", 5), ("comm.py", 5)]
    # the call and the collective are both locations of the result; the message links the
    # branch and the collective (relatedLocation ids 1 and 3)
    assert [(r["physicalLocation"]["artifactLocation"]["uri"].rsplit("/", 1)[-1],
             r["physicalLocation"]["region"]["startLine"], r["physicalLocation"]["region"]["startColumn"])
            for r in res["locations"]] == [("train.py", 7, 9), ("comm.py", 5, 5)]
    assert res["message"]["text"].endswith("Branch: [line 6](1); the collective: [all_reduce at comm.py:5](3)")


def test_two_scripts_of_one_name_are_both_checked_in_either_order(tmp_path):
    # a/train.py and b/train.py, no __init__.py: the same module name, two modules
    _write(tmp_path, {
        "a/train.py": """
            import torch.distributed as dist


            def step(t):
                if dist.get_rank() == 0:
                    dist.barrier()
            """,
        "b/train.py": """
            import torch.distributed as dist


            def step(t):
                if dist.get_rank() == 1:
                    return
                dist.all_reduce(t)
            """})
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    ab = json.loads(lint("--format", "json", a, b).stdout)["findings"]
    ba = json.loads(lint("--format", "json", b, a).stdout)["findings"]
    key = sorted((os.path.relpath(f["path"], str(tmp_path)), f["line"], f["code"]) for f in ab)
    assert key == [("a/train.py", 6, "HK101"), ("b/train.py", 7, "HK102")]
    assert key == sorted((os.path.relpath(f["path"], str(tmp_path)), f["line"], f["code"]) for f in ba)


def test_rank_sources_and_collectives_from_pyproject(tmp_path):
    _write(tmp_path, {
        "pyproject.toml": '[tool.hpc-hangkit.lint]\nrank_sources = ["should_save"]\n'
                          'collectives = ["gathered_forward"]\n',
        "m.py": """
            def save(args, enc, x):
                y = enc.gathered_forward(x)
                if args.should_save:
                    enc.gathered_forward(x)
                return y
            """})
    r = lint("--format", "json", "m.py", cwd=str(tmp_path))
    assert [(f["code"], f["line"]) for f in json.loads(r.stdout)["findings"]] == [("HK101", 4)]
    (tmp_path / "pyproject.toml").write_text('[tool.hpc-hangkit.lint]\ncollectives = ["gathered_forward"]\n')
    r = lint("--format", "json", "m.py", cwd=str(tmp_path))
    assert json.loads(r.stdout)["findings"] == []  # should_save is not a rank source by itself


def test_sarif_uris_are_file_uris_for_absolute_paths_and_encoded(tmp_path):
    """SARIF's artifactLocation.uri is a URI: an absolute path becomes a file:// URI that
    names the same file, a relative one a relative reference; a space or '#' in a name is
    percent-encoded."""
    from urllib.parse import unquote, urlparse

    d = tmp_path / "my proj#1"
    d.mkdir()
    (d / "train.py").write_text(
        "import torch.distributed as dist\n\n"
        "def step(t):\n"
        "    if dist.get_rank() == 0:\n"
        "        dist.all_reduce(t)\n")
    sarif = json.loads(lint("--format", "sarif", str(d)).stdout)
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"]
            for res in sarif["runs"][0]["results"] for loc in res["locations"]}
    assert uris and all(u.startswith("file:///") and " " not in u and "#" not in u for u in uris), uris
    assert {unquote(urlparse(u).path) for u in uris} == {str(d / "train.py")}
    rel = json.loads(lint("--format", "sarif", "train.py", cwd=str(d)).stdout)
    (u,) = {(loc["physicalLocation"]["artifactLocation"]["uri"], loc["physicalLocation"]["artifactLocation"]["uriBaseId"])
            for res in rel["runs"][0]["results"] for loc in res["locations"]}
    # relative to the directory the lint ran in, which the log names
    assert u == ("train.py", "%SRCROOT%")
    with open(SARIF_SCHEMA) as f:
        jsonschema.Draft4Validator(json.load(f)).validate(rel)
    base = rel["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    assert base.endswith("/") and unquote(urlparse(base).path) == str(d) + "/"
    assert rel["runs"][0]["invocations"][0]["executionSuccessful"] is True


def test_a_file_that_cannot_be_parsed_fails_the_run(tmp_path):
    # a CI gate must not pass on code the lint never checked
    (tmp_path / "bad.py").write_text("def f(:\n")
    r = lint(str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "bad.py: cannot check: SyntaxError" in r.stdout
    assert "0 findings in 0 files (0 lines); 1 file could not be checked (above)" in r.stdout


def test_a_file_nested_too_deep_for_the_lint_is_reported_and_the_others_are_checked(tmp_path):
    """A long chain of operators (a generated formula) that Python compiles but that recurses
    past the lint's limit: that file is reported as not checked, the run fails, and the other
    files' findings are all there, in every format."""
    (tmp_path / "prog.py").write_text(WRONG)
    (tmp_path / "gen.py").write_text("import torch.distributed as dist\n\ndef f(t):\n    y = %s\n    dist.barrier()\n"
                                     % " + ".join(["t"] * 1500))
    compile((tmp_path / "gen.py").read_text(), "gen.py", "exec")
    r = lint(str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert "gen.py: cannot check: RecursionError" in r.stdout
    assert "prog.py:6:9: HK101 [error]" in r.stdout
    doc = json.loads(lint("--format", "json", str(tmp_path)).stdout)
    assert [f["path"].endswith("prog.py") for f in doc["findings"]] == [True]
    assert [e["path"].endswith("gen.py") for e in doc["errors"]] == [True]


HELPER = """
import torch.distributed as dist

def sync(t):
    dist.all_reduce(t){collective}

def evaluate(t):
    if dist.get_rank() == 0:{branch}
        sync(t){call}
"""


@pytest.mark.parametrize("where", ["branch", "call", "collective"])
def test_an_ignore_on_the_branch_the_call_or_the_helpers_collective_silences_it(tmp_path, where):
    marks = {k: ("  # hangkit: ignore[HK1]" if k == where else "") for k in ("branch", "call", "collective")}
    (tmp_path / "prog.py").write_text(HELPER.format(**marks))
    r = lint("--format", "json", str(tmp_path))
    assert r.returncode == 0 and json.loads(r.stdout)["findings"] == [], r.stdout + r.stderr


@pytest.mark.parametrize("comment", ["# hangkit: ignore HK101", "# hangkit: ignored", "# hangkit: ignore[]",
                                     "# hangkit: ignore HK1 # reason"])
def test_a_malformed_ignore_silences_nothing_and_is_warned_of(tmp_path, comment):
    (tmp_path / "prog.py").write_text(HELPER.format(branch="  " + comment, call="", collective=""))
    r = lint("--format", "json", str(tmp_path))
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and [f["code"] for f in doc["findings"]] == ["HK101"], r.stdout
    (w,) = doc["warnings"]
    assert w["line"] == 8 and "silences nothing" in w["message"] and "warning:" in r.stderr


def test_the_files_exclude_is_relative_to_its_project_wherever_the_lint_runs(tmp_path):
    """The pyproject's ``exclude = ["vendored/*"]`` leaves vendored/ out when the lint runs
    from a sub-directory, with --config from elsewhere, and for files named one by one (as a
    pre-commit hook would name them)."""
    proj = tmp_path / "proj"
    (proj / "vendored").mkdir(parents=True)
    (proj / "src").mkdir()
    (proj / "vendored" / "other.py").write_text(WRONG)
    (proj / "src" / "prog.py").write_text(WRONG)
    (proj / "pyproject.toml").write_text('[tool.hpc-hangkit.lint]\nexclude = ["vendored/*"]\n')
    paths = lambda r: sorted(os.path.normpath(line.split(":")[0]) for line in r.stdout.splitlines()[:-1])  # noqa: E731
    assert paths(lint(".", cwd=str(proj))) == ["src/prog.py"]
    assert paths(lint("..", cwd=str(proj / "src"))) == ["../src/prog.py"]
    assert paths(lint("--config", str(proj / "pyproject.toml"), str(proj), cwd=str(tmp_path))) == \
        [str(proj / "src" / "prog.py")]
    assert paths(lint("src/prog.py", "vendored/other.py", cwd=str(proj))) == ["src/prog.py"]
    # the command line's own --exclude is relative to where it runs
    assert paths(lint("--exclude", "src/*", ".", cwd=str(proj))) == []  # nothing left: usage error
    r = lint("--exclude", "src/*", ".", cwd=str(proj))
    assert r.returncode == 2 and "(after exclude)" in r.stderr


def test_an_ignore_of_a_code_no_rule_has_is_warned_of(tmp_path):
    (tmp_path / "prog.py").write_text(HELPER.format(branch="  # hangkit: ignore[HK999]", call="", collective=""))
    r = lint(str(tmp_path))
    assert r.returncode == 1 and "prog.py:8: warning: `# hangkit: ignore[HK999]`: no rule has code HK999" in r.stdout


def test_an_unknown_table_of_ours_in_pyproject_is_refused(tmp_path):
    (tmp_path / "prog.py").write_text(WRONG)
    (tmp_path / "pyproject.toml").write_text('[tool.hpc-hangkit.linter]\nignore = ["HK1"]\n')
    r = lint(str(tmp_path), cwd=str(tmp_path))
    assert r.returncode == 2 and "unknown table [tool.hpc-hangkit.linter]" in r.stderr


def test_a_path_with_no_python_file_is_bad_usage(tmp_path):
    # a gate pointed at the wrong folder must not pass without reading anything
    (tmp_path / "empty").mkdir()
    r = lint(str(tmp_path / "empty"))
    assert r.returncode == 2 and "no Python file to check" in r.stderr
    (tmp_path / "empty" / "prog.py").write_text(WRONG)
    r = lint("--exclude", "prog.py", str(tmp_path / "empty"))
    assert r.returncode == 2 and "(after exclude)" in r.stderr
    (tmp_path / "one.py").write_text("x = 1\n")
    assert lint(str(tmp_path / "one.py")).stdout == "0 findings in 1 file (1 line)\n"


#: a rank-local check (warning), a process-wide rank test (error), and a place on one axis of
#: a layout tested before a broadcast on another axis's group (note: which ranks the group
#: holds decides it, and the lint cannot see that)
LEVELS = WRONG + """
import os
from colossalai.context import ParallelMode
from colossalai.core import global_context as gpc

def resume(p, t):
    if os.path.exists(p):
        dist.broadcast(t, 0)

def load_weight(weight, src):
    if gpc.get_local_rank(ParallelMode.PARALLEL_2D_COL) == 0:
        dist.broadcast(weight, src=src, group=gpc.get_group(ParallelMode.PARALLEL_2D_ROW))
"""


def test_level_chooses_the_least_certain_level_reported(tmp_path):
    (tmp_path / "prog.py").write_text(LEVELS)
    note_line = line_of(tmp_path / "prog.py", "group=gpc.get_group")

    def found(*args, cwd=None):
        r = lint("--format", "json", *args, cwd=cwd)
        doc = json.loads(r.stdout)
        return r.returncode, sorted((f["code"], f["severity"]) for f in doc["findings"]), doc["below"]

    assert found(str(tmp_path)) == (1, [("HK101", "error"), ("HK201", "warning")], {"note": 1})
    assert found("--level", "note", str(tmp_path)) == (
        1, [("HK101", "error"), ("HK101", "note"), ("HK201", "warning")], {})
    assert found("--level", "error", str(tmp_path)) == (1, [("HK101", "error")], {"warning": 1, "note": 1})
    assert json.loads(lint("--format", "json", "--level", "error", str(tmp_path)).stdout)["level"] == "error"
    # each line says its level; the hint names the level that shows what was left out
    r = lint("--level", "note", str(tmp_path))
    assert sorted(line.split()[2] for line in r.stdout.splitlines()[:-1]) == ["[error]", "[note]", "[warning]"]
    (tmp_path / "warn.py").write_text("import os\nimport torch.distributed as dist\n\ndef resume(p, t):\n"
                                      "    if os.path.exists(p):\n        dist.broadcast(t, 0)\n")
    r = lint("--level", "error", str(tmp_path / "warn.py"))
    assert r.stdout.splitlines()[-1].endswith("; not shown: 1 warning (--level warning)"), r.stdout
    (tmp_path / "warn.py").unlink()
    # the text count line says what was left out, and how to see it
    r = lint(str(tmp_path))
    assert r.stdout.splitlines()[-1] == ("2 findings (1 error, 1 warning) in 1 file (18 lines); "
                                         "not shown: 1 note (--level note)")
    # a note alone does not fail the default gate; asked for, it does, and SARIF says `note`
    (tmp_path / "prog.py").write_text(LEVELS.replace("if dist.get_rank() == 0:", "if True:").replace(
        "if os.path.exists(p):", "if True:"))
    assert lint(str(tmp_path)).returncode == 0
    r = lint("--level", "note", "--format", "sarif", str(tmp_path))
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    with open(SARIF_SCHEMA) as f:
        jsonschema.Draft4Validator(json.load(f)).validate(doc)
    (res,) = doc["runs"][0]["results"]
    assert res["level"] == "note" and res["locations"][0]["physicalLocation"]["region"]["startLine"] == note_line
    assert doc["runs"][0]["properties"] == {"level": "note", "below": {}}
    doc = json.loads(lint("--format", "sarif", str(tmp_path)).stdout)
    assert doc["runs"][0]["results"] == [] and doc["runs"][0]["properties"] == {"level": "warning", "below": {"note": 1}}
    # the file's level, replaced by the command line's; a bad one is refused at once
    (tmp_path / "pyproject.toml").write_text('[tool.hpc-hangkit.lint]\nlevel = "note"\n')
    assert lint(".", cwd=str(tmp_path)).returncode == 1
    assert lint("--level", "warning", ".", cwd=str(tmp_path)).returncode == 0
    (tmp_path / "pyproject.toml").write_text('[tool.hpc-hangkit.lint]\nlevel = "info"\n')
    r = lint(".", cwd=str(tmp_path))
    assert r.returncode == 2 and 'level must be one of "error", "warning", "note", not \'info\'' in r.stderr


@pytest.mark.parametrize("content, says", [
    (b'[tool.hpc_hangkit.lint]\nignore = ["HK1"]\n', "[tool.hpc_hangkit] is not read: the table is [tool.hpc-hangkit.lint]"),
    (b'[tool.hpc-hangkit.lint]\nselect = []\n', "select is empty"),
    (b'\xff\xfe[tool.hpc-hangkit.lint]\n', "pyproject.toml: not valid TOML"),
    (b'[tool.hpc-hangkit]\nfoo = 1\n', "unknown key 'foo' in [tool.hpc-hangkit]"),
])
def test_a_settings_file_that_would_be_misread_is_refused_naming_it(tmp_path, content, says):
    (tmp_path / "prog.py").write_text(WRONG)
    (tmp_path / "pyproject.toml").write_bytes(content)
    r = lint(".", cwd=str(tmp_path))
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_an_empty_select_is_bad_usage(tmp_path):
    (tmp_path / "prog.py").write_text(WRONG)
    r = lint("--select", "", str(tmp_path))
    assert r.returncode == 2 and "--select is empty" in r.stderr


def test_an_ignore_written_inside_a_string_is_not_a_comment(tmp_path):
    (tmp_path / "prog.py").write_text(WRONG.replace(
        "def evaluate(model):\n",
        'HELP = "silence with # hangkit: ignore HK101"\nDOC = """\n# hangkit: ignore[HK101]\n"""\n\n'
        "def evaluate(model):\n"))
    r = lint(str(tmp_path))
    # neither read as an ignore (the finding stays) nor warned of as a malformed one
    assert "warning:" not in r.stdout and "HK101 [error]" in r.stdout, r.stdout


def test_a_file_python_would_not_decode_is_not_checked_and_a_declared_encoding_is_read(tmp_path):
    (tmp_path / "bad.py").write_bytes(b'import torch.distributed as dist\nx = "\xff"\n')
    (tmp_path / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\n" + WRONG.encode() + b'NAME = "\xe9"\n')
    r = lint(str(tmp_path))
    assert r.returncode == 1
    assert "bad.py: cannot check:" in r.stdout and "latin.py:7:9: HK101 [error]" in r.stdout, r.stdout


def test_select_and_ignore_repeat(tmp_path):
    (tmp_path / "prog.py").write_text(WRONG + textwrap.dedent("""
        import os
        def resume(p, t):
            if os.path.exists(p):
                dist.broadcast(t, 0)
        """))
    codes = lambda r: sorted(line.split()[1] for line in r.stdout.splitlines()[:-1])  # noqa: E731
    assert codes(lint("--select", "HK101", "--select", "HK201", str(tmp_path))) == ["HK101", "HK201"]
    assert codes(lint("--ignore", "HK101", "--ignore", "HK201", str(tmp_path))) == []


def test_a_sub_projects_pyproject_without_our_table_does_not_hide_the_parents(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.hpc-hangkit.lint]\nignore = ["HK1"]\n')
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "pyproject.toml").write_text('[project]\nname = "sub"\n')
    (sub / "prog.py").write_text(WRONG)
    r = lint(".", cwd=str(sub))
    assert r.returncode == 0 and "0 findings" in r.stdout, r.stdout


#: one rank's raise before three collectives: one bug, one fix at line 4
ONE_RAISE = """
import torch.distributed as dist

def step(t, rank):
    if rank == 0:{branch_ignore}
        raise RuntimeError("bad")
    dist.all_reduce(t){first_ignore}
    dist.barrier()
    dist.broadcast(t, 0)
    if rank == 1:
        dist.barrier()
"""


def _one_raise(tmp_path, branch_ignore="", first_ignore=""):
    p = tmp_path / "prog.py"
    p.write_text(textwrap.dedent(ONE_RAISE).lstrip("\n").format(branch_ignore=branch_ignore,
                                                                 first_ignore=first_ignore))
    return p


def test_one_finding_per_deciding_line_in_text_json_and_sarif(tmp_path):
    p = _one_raise(tmp_path)
    text = lint(str(p)).stdout.splitlines()
    # the raise at line 4 decides lines 6-8: one finding, at the first, naming the others;
    # line 9's own branch is another finding
    assert text[0] == ("%s:6:5: HK103 [error] all_reduce comes after a rank-dependent raise with no abort: the "
                       "ranks that raise leave the others waiting (line 4: `if rank == 0:`); line 4 decides "
                       "barrier (line 7), broadcast (line 8) too" % p)
    assert text[1].startswith("%s:10:9: HK101 [error] barrier is reached only on ranks" % p), text
    assert text[-1] == "2 findings (2 errors) in 1 file (10 lines)"
    doc = json.loads(lint("--format", "json", str(p)).stdout)
    first = doc["findings"][0]
    assert [(r["role"], r["line"], r["text"], r.get("what")) for r in first["related"]] == [
        ("branch", 4, "if rank == 0:", None), ("also", 7, "dist.barrier()", "barrier"),
        ("also", 8, "dist.broadcast(t, 0)", "broadcast")]
    assert [r["role"] for r in doc["findings"][1]["related"]] == ["branch"]
    sarif = json.loads(lint("--format", "sarif", str(p)).stdout)
    with open(SARIF_SCHEMA) as fh:
        jsonschema.Draft4Validator(json.load(fh)).validate(sarif)
    res = sarif["runs"][0]["results"][0]
    assert [(r["physicalLocation"]["region"]["startLine"], r["message"]["text"]) for r in res["relatedLocations"]] == [
        (4, "the branch that decides which ranks reach it"), (7, "another collective the same branch decides"),
        (8, "another collective the same branch decides")]


def test_silencing_one_collective_of_a_branch_leaves_the_others_and_the_branch_line_silences_all(tmp_path):
    p = _one_raise(tmp_path, first_ignore="  # hangkit: ignore[HK103]")
    doc = json.loads(lint("--format", "json", str(p)).stdout)
    assert [(f["code"], f["line"], [r["line"] for r in f["related"]]) for f in doc["findings"]] == [
        ("HK103", 7, [4, 8]), ("HK101", 10, [9])]
    assert doc["findings"][0]["message"].endswith("line 4 decides broadcast (line 8) too")
    p = _one_raise(tmp_path, branch_ignore="  # hangkit: ignore[HK103]")
    doc = json.loads(lint("--format", "json", str(p)).stdout)
    assert [(f["code"], f["line"]) for f in doc["findings"]] == [("HK101", 10)]


def test_both_sides_of_one_rank_test_are_one_finding(tmp_path):
    p = tmp_path / "prog.py"
    p.write_text(textwrap.dedent("""
        import torch.distributed as dist

        def save(t, objs):
            if dist.get_rank() == 0:
                dist.gather_object(objs, None, dst=0)
            else:
                dist.all_reduce(t)
    """).lstrip("\n"))
    (f,) = json.loads(lint("--format", "json", str(p)).stdout)["findings"]
    assert (f["code"], f["line"], [(r["role"], r["line"]) for r in f["related"]]) == (
        "HK101", 5, [("branch", 4), ("also", 7)])


#: a test of a local that takes its rank dependence two assignments away, and one set under a
#: rank branch: the message says where each comes from
ORIGIN = """
import torch.distributed as dist

def setup(pg):
    return (dist.get_rank(pg), pg)

def step(pg, t):
    env = setup(pg)
    group = env[1]
    if group is not None:
        dist.barrier()
    store = None
    if dist.get_rank() == 0:
        store = open("log", "w")
    if store is None:
        dist.all_reduce(t)
"""


def test_the_message_says_where_the_tests_rank_dependence_comes_from(tmp_path):
    p = tmp_path / "prog.py"
    p.write_text(textwrap.dedent(ORIGIN).lstrip("\n"))
    doc = json.loads(lint("--format", "json", str(p)).stdout)
    first, second = doc["findings"]
    assert first["message"].endswith("(line 9: `if group is not None:`; `group` from line 8: `group = env[1]`; "
                                     "`env` from line 7: `env = setup(pg)`)"), first["message"]
    assert [(r["role"], r["line"], r.get("what")) for r in first["related"]] == [
        ("branch", 9, None), ("origin", 8, "group"), ("origin", 7, "env")]
    # `store = None` is the same everywhere: the branch it is set under decides
    assert second["message"].endswith("(line 14: `if store is None:`; `store` is set under line 12: "
                                      "`if dist.get_rank() == 0:`)"), second["message"]
    sarif = json.loads(lint("--format", "sarif", str(p)).stdout)
    with open(SARIF_SCHEMA) as fh:
        jsonschema.Draft4Validator(json.load(fh)).validate(sarif)
    assert [r["message"]["text"] for r in sarif["runs"][0]["results"][0]["relatedLocations"]] == [
        "the branch that decides which ranks reach it", "where the test's group gets its rank dependence",
        "where the test's env gets its rank dependence"]


def test_sarif_links_name_the_branch_and_the_collective_with_origin_lines_before_the_chain(tmp_path):
    files = dict(CHAIN)
    files["train.py"] = files["train.py"].replace("if dist.get_rank() == 0:", "r = dist.get_rank()\n            if r == 0:")
    _write(tmp_path, files)
    sarif = json.loads(lint("--format", "sarif", str(tmp_path)).stdout)
    (res,) = sarif["runs"][0]["results"]
    rels = {r["id"]: r for r in res["relatedLocations"]}
    text = res["message"]["text"]
    import re
    (branch_id, coll_id) = [int(x) for x in re.findall(r"\]\((\d+)\)", text)]
    assert rels[branch_id]["message"]["text"] == "the branch that decides which ranks reach it", text
    assert rels[coll_id]["message"]["text"] == "the collective: all_reduce", text
    assert any(r["message"]["text"].startswith("where the test's r ") for r in rels.values())
