"""The roll call's output, byte for byte, for every golden case (tests/report/golden.py).

Each case is built from tests/fixtures/ in a fresh temporary directory with fixed file
times and a fixed report clock; the only normalization is the absolute temporary
directory, replaced by ``<tmp>``. After an intended change to the report, run
``python3 tests/report/golden.py --regenerate`` and review the diff it prints.
"""
import json

import pytest

import golden


@pytest.mark.parametrize("case", sorted(golden.CASES))
def test_golden(case):
    out = golden.outputs(golden.CASES[case])
    assert set(out) == set(golden.OUTPUTS)
    diffs = [golden.diff(case, name, text) for name, text in sorted(out.items())]
    diffs = [d for d in diffs if d]
    assert not diffs, "output differs from tests/report/golden/%s (regenerate: python3 tests/report/" \
                      "golden.py --regenerate %s):\n%s" % (case, case, "".join(diffs))


def test_a_one_word_change_to_a_verdict_sentence_is_a_difference():
    case = "gloo_divergent_barrier"
    text = golden.read_golden(case, "report.txt")
    sentence = text[text.index("\n=> "):]
    changed = text.replace(sentence, sentence.replace(" collectives", " calls", 1))
    assert changed != text
    d = golden.diff(case, "report.txt", changed)
    assert "-=> the ranks wait in 2 different collectives" in d and "+=> the ranks wait in 2 different calls" in d


def test_the_cases_cover_every_stack_verdict():
    from hpc_hangkit.rollcall.verdict import VERDICTS

    seen = {json.loads(golden.read_golden(c, "report.json"))["stack_verdict"] for c in golden.CASES}
    assert seen == set(VERDICTS)
    adopted = {json.loads(golden.read_golden(c, "report.json"))["verdict_from"] for c in golden.CASES}
    assert adopted == {"stacks", "flight_recorder", "nccl_ras"}
