"""Real-cluster test of the monitor's probe: a 2-node job whose ranks hang, and the second
node's slurmd stopped (SIGSTOP: the daemon is there, the connection opens, nothing answers)
while they do. The probe still ends at its deadline, the report names the node and its ranks
as unreachable, and the hang is confirmed without waiting for that node.

The testbed's SlurmdTimeout is 30 s: slurmctld pings every node every SlurmdTimeout/3 s and
sets a node DOWN once it has not answered for SlurmdTimeout s, and a job with a DOWN node is
killed (or requeued). So the slurmd is stopped for well under 30 s (the test resumes it as
soon as the report is written, at the latest :data:`MAX_STOP_S` after stopping it), and the
teardown resumes it, cancels the job and returns the node to service if it still went DOWN.

Runs against the cluster of tests/slurm/test_slurm_cluster.py (HK_ROOT, SLURM_CONF).
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from testlib import validate_report, wait_for
from test_slurm_cluster import HK_ROOT, WORK, cluster, gloo_script, jobs, node_scratch, out_of  # noqa: F401

pytestmark = pytest.mark.slurm

#: seconds the slurmd stays stopped at most (SlurmdTimeout is 30 s)
MAX_STOP_S = 22.0

RANK = r'''
import os, threading, time
rank = int(os.environ["SLURM_PROCID"])
if rank < 2:
    threading.Event().wait()  # PROBE wait: here
else:
    import _hangkit_core  # the armed watchdog (the boot directory is on PYTHONPATH)
    while True:
        time.sleep(0.2)  # PROBE tick: here
        _hangkit_core.checkpoint("tick")
'''

JOB = """#!/bin/bash
#SBATCH -N2 --ntasks-per-node=2 -t 3 -o %(work)s/out-%%j.txt
srun %(py)s %(work)s/probe_rank.py
"""


def slurmd_pid(node):
    with open(os.path.join(HK_ROOT, "run", "slurmd-%s.pid" % node)) as f:
        return int(f.read().strip())


def node_state(node):
    out = subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, timeout=30).stdout.decode().split()
    return out[0] if out else "?"


@pytest.fixture
def stopped_slurmd():
    """``stop(node)`` SIGSTOPs a node's slurmd; teardown SIGCONTs it and returns the node to
    service if it went DOWN (it must not: the test asserts it)."""
    stopped = []

    def stop(node):
        pid = slurmd_pid(node)
        os.kill(pid, signal.SIGSTOP)
        stopped.append((node, pid))
        return pid

    def resume():
        while stopped:
            node, pid = stopped.pop()
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    stop.resume = resume
    yield stop
    resume()
    for node in ("hk1", "hk2"):
        if any(s in node_state(node) for s in ("down", "drain", "fail")):
            subprocess.run(["scontrol", "update", "nodename=" + node, "state=resume"], timeout=30)


@pytest.mark.timeout(240)
def test_a_node_whose_slurmd_stops_is_named_unreachable_and_the_hang_still_confirmed(jobs, stopped_slurmd):
    with open(os.path.join(WORK, "probe_rank.py"), "w") as f:
        f.write(RANK)
    os.chmod(os.path.join(WORK, "probe_rank.py"), 0o644)
    j = jobs.submit("probe-gone", JOB % {"work": WORK, "py": sys.executable}, "--hang-detect=observe",
                    "--export=ALL,HANGKIT_PROBE_ANSWER=summary")
    hk1 = node_scratch("hk1", j)
    # the monitor has hk2's summary answer (its ranks 2-3 known by their facts)
    def view_summary():
        got = glob.glob(os.path.join(hk1, ".monitor_view.*", "nodes", "hk2.summary.json"))
        if not got:
            return None
        doc = json.load(open(got[0]))
        return got[0] if doc.get("facts") and any(p["ranks"] == "2-3" for p in doc["positions"]) else None
    summary = wait_for(view_summary, 120, 0.5, what="the monitor's view of hk2's summary answer")
    view = os.path.dirname(os.path.dirname(summary))
    assert not os.listdir(os.path.join(view, "watchdog")) or all(
        not n.startswith(("rank_2.", "rank_3.")) for n in os.listdir(os.path.join(view, "watchdog")))
    mon_log = os.path.join(hk1, "hang_detector", "monitor.log")
    assert "HANG CONFIRMED" not in out_of(j)  # ranks 2-3 check in: no hang yet

    stopped_slurmd("hk2")
    t_stop = time.monotonic()
    rec = wait_for(lambda: os.path.exists(os.path.join(view, "unreachable", "hk2.json")) and json.load(
        open(os.path.join(view, "unreachable", "hk2.json"))), MAX_STOP_S, 0.5, what="hk2 named unreachable",
        detail=lambda: open(mon_log).read()[-3000:])
    assert rec["node"] == "hk2" and rec["ranks"] == "2-3", rec
    report = os.path.join(hk1, "hang_detector", "report.json")
    try:
        # the monitor writes report.json, publishes it, then logs the confirmation to the job's
        # output: wait for the last of them, not the first
        wait_for(lambda: os.path.exists(report) and "HANG CONFIRMED in job %s attempt 0" % j in out_of(j),
                 max(1.0, MAX_STOP_S - (time.monotonic() - t_stop)), 0.5,
                 what="the report and its confirmation, hk2 still silent", detail=lambda: open(mon_log).read()[-3000:])
    finally:
        stopped_slurmd.resume()
    assert "HANG CONFIRMED in job %s attempt 0" % j in out_of(j)
    rep = validate_report(open(report).read(), "the monitor's report.json")
    assert [(u["node"], u["ranks"]) for u in rep["unreachable_nodes"]] == [("hk2", "2-3")]
    assert {"0", "1", "2", "3"} <= set(rep["ranks"]) and not rep["missing_ranks"]
    txt = open(os.path.join(hk1, "hang_detector", "report.txt")).read()
    assert "unreachable nodes" in txt and "node hk2: ranks 2-3, since" in txt
    log = open(mon_log).read()
    # the probe that met the silent node ended at its deadline (10 s with the testbed's 1 s
    # polls) plus srun's stop, and the capture did not wait for hk2
    took = [float(x) for x in re.findall(r"probe: 0 of 1 node\(s\) answered in ([0-9.]+) s; not hk2: no answer "
                                         r"within the probe's 10 s deadline", log)]
    assert took and max(took) < 10 + 2 + 3, log[-3000:]
    assert "capture: node(s) hk2 unreachable (no answer to the probe), not waited for" in log
    # the node came back in time: not DOWN, and it answers again
    wait_for(lambda: "node hk2 answers the probe again" in open(mon_log).read(), 60, 0.5,
             what="hk2 answering again")
    assert not any(s in node_state("hk2") for s in ("down", "drain", "fail")), node_state("hk2")


@pytest.mark.timeout(300)
def test_summary_answers_give_the_raw_answers_verdict_on_a_real_hang(jobs):
    """The 4-rank gloo job across both nodes (rank 1 skips an all_reduce), watched once with
    the other node answering raw and once answering with its node summary: the monitor's
    roll call at the confirmation (over its view) and the confirmed report agree."""
    seen = {}
    for answer in ("raw", "summary"):
        j = jobs.submit("gloo-" + answer, gloo_script("always", time_min=2), "--hang-detect=observe",
                        "--export=ALL,HANGKIT_PROBE_ANSWER=" + answer)
        wait_for(lambda: "HANG CONFIRMED in job %s attempt 0" % j in out_of(j), 150, 0.5,
                 what="the confirmation (%s answers)" % answer, detail=lambda: out_of(j)[-3000:])
        view = glob.glob(os.path.join(node_scratch("hk1", j), ".monitor_view.*"))[0]
        kept = os.listdir(os.path.join(view, "nodes")) if os.path.isdir(os.path.join(view, "nodes")) else []
        assert kept == (["hk2.summary.json"] if answer == "summary" else []), kept
        wd = os.listdir(os.path.join(view, "watchdog"))
        assert any(n.startswith("rank_2.") for n in wd) == (answer == "raw"), wd
        # the monitor's own roll call at the confirmation: over its view (raw files or summary)
        suspected = re.search(r"hang CONFIRMED stacks: .*\(verdict (\w+), suspects (\[[0-9, ]*\])\)", out_of(j))
        rep = validate_report(open(os.path.join(node_scratch("hk1", j), "hang_detector", "report.json")).read(),
                              "report.json (%s answers)" % answer)
        seen[answer] = (suspected.groups() if suspected else None, rep["verdict"], rep["suspect_ranks"])
        subprocess.run(["scancel", j], timeout=30)
    assert seen["summary"] == seen["raw"], seen
    assert seen["raw"][2] == [1]
