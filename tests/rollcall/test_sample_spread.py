"""How far apart in time the capture took the ranks' stacks: each capture-stamped py-spy
dump carries its time; report.json carries the spread (overall, per node), the text
report says it when it exceeds 1 s, and node summaries carry it through a merge."""
import json
import os

from hpc_hangkit.evidence.stacks import capture_header
from hpc_hangkit.report.render import render_json, render_text
from hpc_hangkit.rollcall import merge, report_from_dir, summarize_dir
from hpc_hangkit.rollcall.verdict import build_report

DUMP = """Process %(pid)d: /venv/bin/python /jobs/train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread %(pid)d (idle): "MainThread"
    %(fn)s (torch/distributed/distributed_c10d.py:%(line)d)
    %(caller)s (train.py:%(cline)d)
    main (train.py:80)
    <module> (train.py:85)
"""


def _capture_tree(root, times, hosts):
    """A captured tree: rank r's py-spy dump stamped ``times[r]`` on host ``hosts[r]``;
    rank 1 elsewhere (barrier), the others in the all_reduce."""
    d = os.path.join(root, "stack_traces")
    os.makedirs(d, exist_ok=True)
    for r, t in times.items():
        pid = 1000 + r
        body = DUMP % ({"pid": pid, "fn": "barrier", "line": 4100, "caller": "end_of_epoch", "cline": 70}
                       if r == 1 else
                       {"pid": pid, "fn": "all_reduce", "line": 3252, "caller": "sync_grads", "cline": 61})
        with open(os.path.join(d, "rank_%d.log" % r), "wb") as f:
            f.write(capture_header(r, pid, hosts[r], t, 0.2, r in (0, 1), r not in (0, 1),
                                   None if r in (0, 1) else "native stack not taken: test") + body.encode())
    return root


def test_spread_overall_and_per_node_in_json_and_text(tmp_path):
    t0 = 1764622000.0
    times = {0: t0, 1: t0 + 0.2, 2: t0 + 2.4, 3: t0 + 2.9}
    hosts = {0: "hk1", 1: "hk1", 2: "hk2", 3: "hk2"}
    rep = report_from_dir(_capture_tree(str(tmp_path), times, hosts))
    doc = json.loads(render_json(rep))
    sp = doc["sample_spread"]
    assert sp["spread_s"] == 2.9 and sp["first_t"] == t0 and sp["last_t"] == t0 + 2.9 and sp["ranks"] == "0-3"
    assert sp["nodes"]["hk1"]["spread_s"] == 0.2 and sp["nodes"]["hk1"]["ranks"] == "0-1"
    assert sp["nodes"]["hk2"]["spread_s"] == 0.5 and sp["nodes"]["hk2"]["ranks"] == "2-3"
    text = " ".join(render_text(rep).split())     # the line is wrapped at 100 columns
    assert "stacks taken 2.9 s apart (first to last capture sample of ranks 0-3; per node: hk1 0.2 s, " \
           "hk2 0.5 s)" in text
    assert rep.suspect_ranks == [1]


def test_spread_within_a_second_is_not_in_the_text(tmp_path):
    t0 = 1764622000.0
    rep = report_from_dir(_capture_tree(str(tmp_path), {0: t0, 1: t0 + 0.4, 2: t0 + 0.9},
                                        {0: "hk1", 1: "hk1", 2: "hk1"}))
    assert json.loads(render_json(rep))["sample_spread"]["spread_s"] == 0.9
    assert "stacks taken" not in render_text(rep)


def test_no_capture_stamp_no_spread(tmp_path):
    d = tmp_path / "stack_traces"
    d.mkdir()
    (d / "rank_0.log").write_text(DUMP % {"pid": 5, "fn": "all_reduce", "line": 1, "caller": "f", "cline": 2})
    doc = json.loads(render_json(report_from_dir(str(tmp_path))))
    assert "sample_spread" not in doc


def test_node_summaries_carry_the_times_through_a_merge(tmp_path):
    t0 = 1764622000.0
    a = summarize_dir(_capture_tree(str(tmp_path / "a"), {0: t0, 1: t0 + 0.3}, {0: "hk1", 1: "hk1"}))
    b = summarize_dir(_capture_tree(str(tmp_path / "b"), {2: t0 + 0.5, 3: t0 + 1.5}, {2: "hk2", 3: "hk2"}))
    rep = build_report(merge(a, b))
    sp = rep.sample_spread()
    assert sp["spread_s"] == 1.5 and sorted(sp["nodes"]) == ["hk1", "hk2"]
    assert build_report(merge(b, a)).sample_spread() == sp
