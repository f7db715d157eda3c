"""hpc_hangkit/report/schema.json: the page generated from it, the schema against the code
and real reports, and the check that every test's report JSON matches it."""
import json
import os
import subprocess
import sys

import jsonschema
import pytest

from hpc_hangkit.report import schema_doc
from hpc_hangkit.report.render import render_json
from hpc_hangkit.rollcall import ROLES, VERDICTS, report_from_dir
from testlib import FIXTURES, REPO, TESTS, report_errors, report_violations_under, validate_report

SCHEMA = schema_doc.load_schema()
SAMPLES = os.path.join(FIXTURES, "torch_samples")


def test_checked_in_page_is_the_generators_output():
    with open(os.path.join(REPO, "docs", "report-schema.md"), encoding="utf-8") as f:
        page = f.read()
    assert page == schema_doc.markdown(), (
        "docs/report-schema.md is stale: python3 -m hpc_hangkit.report.schema_doc > docs/report-schema.md")


def test_generator_runs_as_a_module():
    p = subprocess.run([sys.executable, "-m", "hpc_hangkit.report.schema_doc"], cwd=REPO, timeout=60,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=REPO))
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode() == schema_doc.markdown()


def test_schema_is_valid_and_its_examples_match_it():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert report_errors(SCHEMA["examples"][0]) == []
    ns = dict(SCHEMA["$defs"]["node_summary"], **{"$defs": SCHEMA["$defs"]})
    jsonschema.Draft202012Validator(ns).validate(ns["examples"][0])


def test_enums_are_the_codes():
    assert SCHEMA["$defs"]["verdict"]["enum"] == list(VERDICTS)
    assert SCHEMA["properties"]["groups"]["items"]["properties"]["role"]["enum"] == list(ROLES)


def _sample_dirs():
    return sorted(d for d in os.listdir(SAMPLES) if os.path.isdir(os.path.join(SAMPLES, d)))


@pytest.mark.parametrize("sample", _sample_dirs())
def test_real_reports_match(sample):
    """Every recorded sample, with the tree and with a grouping depth: exactly the schema."""
    rep = report_from_dir(os.path.join(SAMPLES, sample))
    validate_report(render_json(rep, tree=True), where=sample)
    validate_report(render_json(report_from_dir(os.path.join(SAMPLES, sample), depth=2)), where=sample)


def _broken(**change):
    d = json.loads(json.dumps(SCHEMA["examples"][0]))
    for k, v in change.items():
        if v is KeyError:
            del d[k]
        else:
            d[k] = v
    return d


@pytest.mark.parametrize("change, needle", [
    ({"verdict": "MAYBE"}, "verdict: 'MAYBE' is not one of"),
    ({"summary": KeyError}, "(top): 'summary' is a required property"),
    ({"surprise": 1}, "Additional properties are not allowed ('surprise'"),
    ({"suspect_ranks": ["1"]}, "suspect_ranks.0: '1' is not of type 'integer'"),
    ({"ranks": {"r0": {"state": "stuck", "samples_used": 1, "samples_at_position": 1, "startup_samples": 0}}},
     "ranks: 'r0' does not match"),
])
def test_validator_rejects_broken_reports(change, needle):
    errs = report_errors(_broken(**change))
    assert any(needle in e for e in errs), errs
    with pytest.raises(AssertionError, match="does not match"):
        validate_report(_broken(**change))


def test_broken_group_is_named_by_path():
    d = _broken()
    d["groups"][1]["role"] = "sleeping"
    del d["groups"][0]["frame"]
    errs = report_errors(d)
    assert "groups.1.role: 'sleeping' is not one of ['waiting', 'divergent', 'exited', 'progressing', " \
           "'unknown']" in errs, errs
    assert "groups.0: 'frame' is a required property" in errs, errs


def test_reports_under_finds_report_json_and_json_out_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")  # not this test's tmp_path: the check would fail it
    (root / "a" / "hang_detector").mkdir(parents=True)
    (root / "a" / "hang_detector" / "report.json").write_text("{not json")
    (root / "r.json").write_text(json.dumps(_broken(verdict="MAYBE"), indent=2))
    (root / "fine.json").write_text(json.dumps(_broken(), indent=2))
    (root / "rank_0.json").write_text('{"entries": []}')       # a Flight Recorder dump: not a report
    (root / "n.summary.json").write_text('{"hangkit_summary": 1}')
    bad = report_violations_under(str(root))
    assert sorted(os.path.relpath(p, str(root)) for p in bad) == [os.path.join("a", "hang_detector", "report.json"),
                                                                 "r.json"]
    assert bad[str(root / "r.json")] == [e for e in report_errors(_broken(verdict="MAYBE"))]


_INNER_CONFTEST = """
import importlib.util, sys
sys.path.insert(0, %(tests)r)
spec = importlib.util.spec_from_file_location("hk_tests_conftest", %(conftest)r)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
globals().update({k: v for k, v in vars(mod).items() if not k.startswith("__")})
"""

_INNER_TESTS = """
import json

def test_broken_report_json(tmp_path):
    (tmp_path / "out" / "hang_detector").mkdir(parents=True)
    (tmp_path / "out" / "hang_detector" / "report.json").write_text('{"schema_version": 1, "verdict": "MAYBE"}')

def test_broken_json_out(tmp_path):
    (tmp_path / "r.json").write_text('{"schema_version": 2}')

def test_valid_report(tmp_path):
    (tmp_path / "report.json").write_text(json.dumps(%(example)r))

def test_without_tmp_path():
    pass
"""


@pytest.mark.timeout(120)
def test_autouse_check_fails_a_test_that_leaves_a_broken_report(tmp_path_factory):
    """The fixture in tests/conftest.py, run by a real pytest: the two tests that leave
    a broken report error at teardown, naming the file; the others pass."""
    d = tmp_path_factory.mktemp("inner")
    (d / "conftest.py").write_text(_INNER_CONFTEST % {"tests": TESTS, "conftest": os.path.join(TESTS, "conftest.py")})
    (d / "test_inner.py").write_text(_INNER_TESTS % {"example": SCHEMA["examples"][0]})
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                        "--rootdir", str(d), str(d / "test_inner.py")], cwd=str(d), timeout=100,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, TESTS])))
    out = p.stdout.decode()
    assert p.returncode == 1, out
    assert "4 passed, 2 errors" in out, out
    assert "ERROR at teardown of test_broken_report_json" in out and "ERROR at teardown of test_broken_json_out" in out
    assert "out/hang_detector/report.json:\n" in out and "(top): 'groups' is a required property" in out, out
    assert "verdict: 'MAYBE' is not one of" in out and "r.json:\n" in out and "schema_version: 1 was expected" in out
