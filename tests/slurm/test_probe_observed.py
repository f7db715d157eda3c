"""The batch monitor's view holds another node's ranks as of that node's latest summary
answer, which may be many seconds old while a slow probe runs, while the monitor's own
ranks are read at every poll. A rank's silence is measured up to when its node took the
summary (``taken_at``), not up to the newest write anywhere: a late answer does not make its
ranks look gone, and a rank that really stopped writing long before its node's answer still
went silent. The direct roll call (raw files, no stamped summary) keeps its rule.

Real files: the real watchdog dumps of a 4-rank gloo hang
(tests/fixtures/torch_samples/gloo_divergent_barrier: rank 1 skipped the all_reduce the
others wait in), their headers given a 1 s watchdog period as armed ranks write it (the
silence threshold is then max(3 x 1 s, 5 s) = 5 s); the summaries are real ``slurm-probe``
answers through the framing. A summary's age is set by its ``taken_at`` and the dumps' by
their mtimes (os.utime), the two clocks the rule compares.
"""
import io
import os
import time

from testlib import gloo_node_scratch, validate_report

from hpc_hangkit import layout
from hpc_hangkit.report.render import render_json
from hpc_hangkit.rollcall import report_from_dir, report_from_summary_and_dir, summarize_dir
from hpc_hangkit.slurm import probe as slurm_probe
from hpc_hangkit.wire import parse_docs

def node_scratch(path, ranks, mtimes=None):
    """A node scratch of the real gloo dumps of ``ranks`` with ``period_s=1`` in each header;
    ``mtimes``: rank -> epoch s of its last dump (default: now)."""
    return gloo_node_scratch(path, ranks, period_s=1, mtimes=mtimes)


def summary_answer(scratch):
    """This node's summary answer to the monitor (``slurm-probe --answer summary``), through
    the framing, and the clock just before and after it was made."""
    buf = io.StringIO()
    before = time.time()
    assert slurm_probe.probe_main(scratch, out=buf, answer="summary") == 0
    after = time.time()
    docs = parse_docs(buf.getvalue())
    assert len(docs) == 1 and docs[0]["answer"] == "summary"
    return docs[0]["summary"], before, after


def shape(rep):
    return (rep.verdict, list(rep.suspect_ranks), [(list(g.ranks), g.role, g.state) for g in rep.groups])


def monitor_view(tmp_path, remote_mtimes, taken_ago):
    """The monitor's view: its own node's ranks 0-1 written just now (raw, as every poll
    mirrors them) and the other node's ranks 2-3 as its summary answer says them, taken
    ``taken_ago`` s ago (None: as the node stamped it). Returns ``(view, summary kept)``."""
    a = node_scratch(str(tmp_path / "a"), (0, 1))
    b = node_scratch(str(tmp_path / "b"), (2, 3), remote_mtimes)
    summary, before, after = summary_answer(b)
    assert before - 0.002 <= summary["taken_at"] <= after + 0.002  # stamped by the node, before its reads
    if taken_ago is not None:
        # the answer arrived late: what a probe that took taken_ago s to come back holds
        summary["taken_at"] = round(time.time() - taken_ago, 3)
    view = slurm_probe.View(str(tmp_path / "view"))
    view.apply(slurm_probe.rank_files(a))
    view.apply_summary("hk2", summary)
    return view, summary


def test_a_late_nodes_ranks_are_judged_as_of_its_answer_not_gone(tmp_path):
    """The other node took its summary 12 s ago, its ranks' last dumps 1 s before that; the
    monitor's own ranks wrote just now. Measured up to the newest write (observed now: the
    rule before taken_at) ranks 2-3 went silent 13 s ago and the verdict is GONE on them;
    measured up to their node's answer they wrote 1 s before it, and the verdict is the
    direct roll call's over all four logs."""
    now = time.time()
    view, summary = monitor_view(tmp_path, {2: now - 13, 3: now - 13}, 12)

    as_now = report_from_summary_and_dir(summarize_dir(view.path), view.path)
    assert as_now.verdict == "GONE" and {2, 3} <= set(as_now.suspect_ranks), shape(as_now)
    assert as_now.ranks[2].state == "exited" and as_now.ranks[2].silent_s >= 12.9

    direct = report_from_dir(node_scratch(str(tmp_path / "all"), range(4)))
    assert direct.verdict == "SPLIT" and direct.suspect_ranks == [1], shape(direct)
    rep = report_from_dir(view.path)
    assert shape(rep) == shape(direct)
    assert rep.ranks[2].state == rep.ranks[3].state == "stuck" and rep.ranks[2].silent_s is None
    assert "taken_at" not in rep.summary  # the merged summary is the version-1 shape as before
    validate_report(render_json(rep), "report over a view with a late node")


def test_a_rank_that_stopped_long_before_its_nodes_answer_still_went_silent(tmp_path):
    """Same late answer (12 s ago), but rank 3 of that node last dumped a minute ago, 48 s
    before its node's answer: it went silent (GONE, rank 3 the suspect with its silence to
    the answer), while rank 2, which dumped 1 s before the answer, keeps its position."""
    now = time.time()
    view, summary = monitor_view(tmp_path, {2: now - 13, 3: now - 60}, 12)
    rep = report_from_dir(view.path)
    assert rep.verdict == "GONE" and 3 in rep.suspect_ranks and 2 not in rep.suspect_ranks, shape(rep)
    assert rep.ranks[3].state == "exited"
    want = summary["taken_at"] - rep.ranks[3].last_write
    assert 47.5 < want < 48.5 and abs(rep.ranks[3].silent_s - want) <= 0.1
    assert rep.ranks[2].state == "stuck"
    assert "silent" in render_json(rep)


def test_a_rank_whose_own_files_are_here_is_observed_now(tmp_path):
    """A capture tree holding both node b's raw logs (its ranks 2-3 last dumped a minute ago)
    and the monitor's kept copy of b's summary, taken 58 s ago: the raw files are read now,
    so the ranks went silent a minute ago (GONE, as the direct roll call of the raw files
    alone says), not 2 s before the summary."""
    now = time.time()
    tree = str(tmp_path / "tree")
    node_scratch(tree, (0, 1))
    b = node_scratch(str(tmp_path / "b"), (2, 3), {2: now - 60, 3: now - 60})
    summary, _, _ = summary_answer(b)
    summary["taken_at"] = round(now - 58, 3)
    slurm_probe.View(tree).apply_summary("hk2", summary)
    node_scratch(tree, (2, 3), {2: now - 60, 3: now - 60})
    raw_only = str(tmp_path / "raw_only")
    node_scratch(raw_only, (0, 1))
    node_scratch(raw_only, (2, 3), {2: now - 60, 3: now - 60})
    want = report_from_dir(raw_only)
    assert want.verdict == "GONE" and {2, 3} <= set(want.suspect_ranks), shape(want)
    assert shape(report_from_dir(tree)) == shape(want)


def test_a_summary_without_taken_at_is_stamped_when_it_enters_the_view(tmp_path):
    """A node whose probe does not stamp its summary (an older hpc-hangkit): the view stamps
    it on arrival, so at a later roll call its ranks are still judged as of then; the caller's
    dict is left as it was."""
    b = node_scratch(str(tmp_path / "b"), (2, 3))
    summary, _, _ = summary_answer(b)
    del summary["taken_at"]
    view = slurm_probe.View(str(tmp_path / "view"))
    before = time.time()
    path = view.apply_summary("hk2", summary)
    after = time.time()
    import json
    with open(path) as f:
        kept = json.load(f)
    assert "taken_at" not in summary and before - 0.002 <= kept["taken_at"] <= after + 0.002
    assert {k: v for k, v in kept.items() if k != "taken_at"} == summary
