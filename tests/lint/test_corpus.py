"""`hpc-hangkit lint` scored on the corpus of real rank-divergence bugs (tests/lint/corpus/).

Every case is a public issue or pull request (link in its header), written as a small excerpt
in the shape of the original: the program before the fix (``bug``), after it (``fixed``) and a
correct look-alike (``alike``). The real lint runs in-process over each; a bug counts as found
when one finding names both the collective's line and the deciding branch's line with the
expected code; every finding on a fixed or look-alike unit is a false alarm. The floors below
are what the engine measured at the end of the session (a regression gate, not a goal):
raise them when the engine improves. The table is printed (``pytest -s``) and recorded in
docs/lint-measured.md ("Measured on the corpus and real projects").
"""
import importlib.util
import os

import pytest

from testlib import REPO

CORPUS = os.path.join(REPO, "tests", "lint", "corpus")

#: bugs found with both lines and the expected code, per expected code
FOUND_FLOOR = {"HK101": 15, "HK102": 3, "HK103": 1, "HK105": 1, "HK107": 1, "HK201": 1, "HK202": 6}
#: false alarms allowed on fixed + look-alike units, per reported code (absent: 0)
FALSE_ALARM_CEILING = {}
MIN_CASES = 20


def _score_module():
    spec = importlib.util.spec_from_file_location("hk_corpus_score", os.path.join(CORPUS, "score.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


S = _score_module()


def test_every_case_has_a_source_a_fix_a_look_alike_and_expected_lines():
    units = S.units(CORPUS)
    cases = {}
    for u in units:
        cases.setdefault(u.case, {})[u.variant] = u
    assert len([c for c in cases if c.startswith("c")]) >= MIN_CASES
    for case, d in cases.items():
        if case.startswith("p"):
            # a look-alike of a measured false alarm: correct code only, with its source
            assert set(d) == {"alike"}, case
            assert d["alike"].source and d["alike"].source.startswith("https://github.com/"), case
            assert not d["alike"].expects, case
            continue
        assert set(d) == set(S.VARIANTS), case
        bug = d["bug"]
        assert bug.source and bug.source.startswith("https://github.com/"), case
        assert bug.expects, "%s: the bug names no expected finding" % case
        for e in bug.expects:
            for path, line in e.collective + e.branch:
                assert os.path.isfile(path) and path.startswith(os.path.realpath(bug.path)), (case, path)
                with open(path) as f:
                    assert 0 < line <= len(f.read().splitlines()), (case, path, line)
        assert not d["fixed"].expects and not d["alike"].expects, case


@pytest.mark.timeout(120)
def test_recall_and_false_alarms_per_rule_do_not_regress():
    sc = S.score(CORPUS)
    print("\n" + S.render(sc))
    for code, floor in FOUND_FLOOR.items():
        assert sc.rules.get(code, {}).get("found", 0) >= floor, (code, S.render(sc))
    for code, row in sc.rules.items():
        fa = row["fa_fixed"] + row["fa_alike"]
        assert fa <= FALSE_ALARM_CEILING.get(code, 0), (code, fa, S.render(sc))


def _keys(result):
    out = set()
    for f in result.findings:
        d = f.to_dict()
        rel = d.get("related")
        rel = rel if isinstance(rel, list) else [rel]
        out.add((os.path.realpath(d["path"]), d["line"], d["code"],
                 tuple(sorted((str(r.get("path") or ""), r.get("line")) for r in rel if r))))
    return out


@pytest.mark.timeout(120)
def test_lint_a_b_and_lint_b_a_give_the_same_findings():
    # c14's variants are scripts with the same module names (__main__, trainer) and no package:
    # one run over all of them must keep each file's functions apart.
    from hpc_hangkit.lint import lint_paths
    paths = [u.path for u in S.units(CORPUS)]
    forward = lint_paths(paths)
    backward = lint_paths(list(reversed(paths)))
    assert _keys(forward) == _keys(backward)
    one_by_one = set()
    for p in paths:
        one_by_one |= _keys(lint_paths([p]))
    assert _keys(forward) == one_by_one


@pytest.mark.timeout(120)
def test_worker_processes_give_what_one_process_gives(tmp_path):
    # the per-file phases run in forked workers (lint_paths(jobs=N)): findings (with their
    # chains and levels), unparsable files, file and line counts must equal the serial run's,
    # in the same order; a file that does not parse and a configured collective included
    from hpc_hangkit.lint import lint_paths
    (tmp_path / "broken.py").write_text("def f(:\n")
    (tmp_path / "own.py").write_text("import torch.distributed as dist\n\ndef f(t):\n"
                                     "    if dist.get_rank() == 0:\n        my_halo(t)\n")
    paths = [CORPUS, str(tmp_path)]
    one = lint_paths(paths, jobs=1, collectives=["my_halo"])
    two = lint_paths(paths, jobs=2, collectives=["my_halo"])
    assert len(one.findings) > 20 and one.errors and one.files > 60
    assert [f.to_dict() for f in two.findings] == [f.to_dict() for f in one.findings]
    assert (two.errors, two.files, two.lines) == (one.errors, one.files, one.lines)
    assert any(f.path.endswith("own.py") for f in two.findings)


@pytest.mark.timeout(120)
def test_the_lint_leaves_no_syntax_tree_for_the_cyclic_collector():
    # lint_paths runs with the cyclic collector off (it cost a third of the CPU time on the
    # installed torch); that is only safe while no reference cycle holds a tree: every tree
    # and every fact must be freed by reference counts when the run returns
    import ast
    import gc
    from hpc_hangkit.lint import lint_paths

    def live_nodes():
        return sum(1 for o in gc.get_objects() if isinstance(o, ast.AST))
    gc.collect()
    before = live_nodes()
    gc.disable()
    try:
        res = lint_paths([CORPUS], jobs=1)
        after = live_nodes()
    finally:
        gc.enable()
    assert len(res.findings) > 20
    assert after - before < 100, (before, after)
