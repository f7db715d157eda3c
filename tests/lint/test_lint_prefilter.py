"""The taint's prefilters are shortcuts only: a function whose words (model.scopes) name nothing
the taint reads a level from gets no taint (calls.Project._rankish), and a function whose words
name no world-size call has no world-size locals (taint.world_locals). Every program of the
rule and precision tests and of the corpus gives the same findings with both shortcuts turned
off; and the spellings the word tests narrowed to are still read through a helper (torch's
random numbers under `import torch`, a renamed clock, a per-rank batch by its name, the host's
name in a module that names nothing else rank-local)."""
import os
import shutil
import textwrap

import pytest

import test_lint_precision
import test_lint_rules
from hpc_hangkit.lint import calls, lint_paths, taint
from test_lint_rules import expect

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def _programs():
    """``{file name: source}``: the precision tests' flagged and silent programs, the rule
    tests' programs (their module-level sources), each in its own file."""
    out = {}
    for table, tag in ((test_lint_precision.FLAGGED, "f"), (test_lint_precision.SILENT, "s")):
        for name, value in table.items():
            src = value[1] if isinstance(value, tuple) else value
            out["%s_%s.py" % (tag, name)] = textwrap.dedent(src)
    for name, value in vars(test_lint_rules).items():
        if name.isupper() and isinstance(value, str) and "import" in value:
            out["r_%s.py" % name.lower()] = textwrap.dedent(value)
    return out


def _findings(root):
    res = lint_paths([str(root)], level="note", jobs=1)
    assert res.errors == []
    return [(os.path.relpath(f.path, str(root)), f.line, f.col, f.code, f.severity, f.related_line, f.message)
            for f in res.findings]


@pytest.mark.timeout(300)
def test_the_prefilters_change_no_finding(tmp_path, monkeypatch):
    for rel, src in _programs().items():
        (tmp_path / rel).write_text(src)
    shutil.copytree(CORPUS, str(tmp_path / "corpus"), ignore=shutil.ignore_patterns("*.md", "__pycache__"))
    filtered = _findings(tmp_path)
    assert len(filtered) > 100  # the programs hold bugs: the comparison below is not of two empty lists
    monkeypatch.setattr(calls.Project, "_rankish", lambda self, mod, ff: True)
    whole = taint.world_locals
    monkeypatch.setattr(taint, "world_locals", lambda fn, words=None: whole(fn))
    assert _findings(tmp_path) == filtered


#: each reads its rank-local value in a helper, whose facts (built before the rules, by the
#: prefilter's leave) hand it to the caller that branches
NARROWED = {
    "torch_random_numbers_through_import_torch": ("HK201", """
import torch
import torch.distributed as dist

def coin():
    return torch.rand(1).item() < 0.5

def maybe_sync(t):
    if coin():  # BRANCH
        dist.all_reduce(t)  # HERE
"""),
    "a_renamed_clock": ("HK201", """
from time import perf_counter as clock
import torch.distributed as dist

def over(start, limit):
    return clock() - start > limit

def sync(t, start, limit):
    if over(start, limit):  # BRANCH
        dist.all_reduce(t)  # HERE
"""),
    # a module whose text names no rank source but the host: no gate on the module's text
    # (before stop 43 one left these two silent)
    "the_host_name_through_a_helper": ("HK201", """
import socket
import torch.distributed as dist

def on_head():
    return socket.gethostname() == "gpu01"

def sync():
    if on_head():  # BRANCH
        dist.barrier()  # HERE
"""),
    "an_aliased_module_whose_call_names_nothing_rank_local": ("HK201", """
import platform as pf
import torch.distributed as dist

def on_head():
    return pf.node() == "gpu01"

def sync():
    if on_head():  # BRANCH
        dist.barrier()  # HERE
"""),
    "a_per_rank_batch_by_its_name": ("HK201", """
import torch.distributed as dist

def has_data(local_batch):
    return len(local_batch) > 0

def step(local_batch, t):
    if has_data(local_batch):  # BRANCH
        dist.all_reduce(t)  # HERE
"""),
}


@pytest.mark.parametrize("name", sorted(NARROWED))
def test_the_narrowed_words_still_read(tmp_path, name):
    code, src = NARROWED[name]
    expect(tmp_path, src, code)
