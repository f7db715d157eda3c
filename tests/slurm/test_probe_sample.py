"""The batch monitor's probe of another node samples that node's quiet ranks first
(``slurm-probe --sample-signal``), so remote ranks get a fresh stack at every probe, as the
monitor's own node does at every poll, not only once per watchdog period.

Real armed ranks on this host stand for the other node (watchdog period 600 s: any dump
in their logs within the test came from the probe's request); the probe runs in-process.
"""
import io
import os

import pytest

from testlib import inprocess_probe, start_two_ranks, wait_for

from hpc_hangkit import layout
from hpc_hangkit.parse.faulthandler import parse_faulthandler
from hpc_hangkit.parse.heartbeat import read_heartbeats
from hpc_hangkit.slurm import probe as slurm_probe
from hpc_hangkit.slurm import sources as slurm_sources

def dumps(scratch, pid):
    d = os.path.join(scratch, layout.WATCHDOG_DIR)
    logs = [os.path.join(d, rf.name) for rf in layout.list_rank_files(d, ext="log") if rf.pid == pid]
    return sum(len(parse_faulthandler(open(p, "rb").read(), p).samples) for p in logs)


@pytest.mark.timeout(60)
def test_probe_samples_quiet_ranks_and_leaves_moving_ones_alone(spawn, tmp_path):
    scratch, procs, settings = start_two_ranks(spawn, tmp_path, 600.0)
    hb = os.path.join(scratch, layout.HEARTBEAT_DIR)
    wait_for(lambda: all(h.age_s() >= 0.5 for h in read_heartbeats(hb) if h.rank == 0), 10,
             what="rank 0 quiet for 0.5 s")
    wait_for(lambda: any(h.rank == 1 and h.counter > 0 for h in read_heartbeats(hb)), 30,
             what="rank 1 checking in")
    assert dumps(scratch, procs[0].pid) == 0  # the watchdog's own period is far away

    buf = io.StringIO()
    assert slurm_probe.probe_main(scratch, out=buf, sample_signal=settings.watchdog_signal, quiet_s=0.5) == 0
    files = slurm_probe.probe_files(buf.getvalue())
    # the answer already holds the quiet rank's fresh dump: it was asked for before the files were read
    wd = [rel for rel in files if rel.startswith(layout.WATCHDOG_DIR + "/rank_0.")]
    assert wd and b"vanish_job.py" in files[wd[0]]["data"], (wd, files.keys())
    assert dumps(scratch, procs[0].pid) == 1
    # the computing rank checks in all the time: not quiet, not signalled
    assert dumps(scratch, procs[1].pid) == 0

    # without a signal the probe only reads
    slurm_probe.probe_main(scratch, out=io.StringIO())
    assert dumps(scratch, procs[0].pid) == 1

    # a rank that never checked in is sampled however short its quiet (one armed a moment
    # ago: its first position comes with the time it got there); a checking-in one is not
    slurm_probe.probe_main(scratch, out=io.StringIO(), sample_signal=settings.watchdog_signal, quiet_s=3600.0)
    assert dumps(scratch, procs[0].pid) == 2
    assert dumps(scratch, procs[1].pid) == 0


@pytest.mark.timeout(90)
def test_an_answer_after_a_long_gap_is_a_baseline_not_progress(spawn, tmp_path):
    """A probe runs only on suspicion, so an answer can come long after the previous one: what
    the other node's ranks did in that gap (here rank 1 checks in all the time) is not progress
    "since the previous poll". Answers that follow each other count again, however long the
    previous probe took (a probe's own time is time watched).

    The monitor's clock is the test's (the gaps are exact, whatever the load); before each
    answer whose progress is asserted the test waits, in real time, for rank 1 to check in
    after the previous probe read its heartbeat."""
    remote, _, _ = start_two_ranks(spawn, tmp_path, 0.5)
    hb = os.path.join(remote, layout.HEARTBEAT_DIR)
    clock = [1000.0]
    probe_s = [0.0]  # how long (test clock) the next probe takes
    read = inprocess_probe(remote)

    def probe(nodes):
        clock[0] += probe_s[0]
        return read(nodes)

    local = tmp_path / "local"
    local.mkdir()
    poll_s = 0.5
    src = slurm_sources.SlurmStackSource(str(local), slurm_probe.View(str(tmp_path / "view")), ["hk2"], probe=probe,
                                         idle_probe_s=0.0, world_size=2, host="monitor-node", poll_interval_s=poll_s)
    src.background.clock = lambda: clock[0]
    src.min_probe_interval_s = 1e9  # the test starts every probe itself
    assert src.fresh_gap_s() == 2 * poll_s
    src.poll(0.0)  # the first poll starts the first probe
    src.background.wait(30)
    t = [0.0]

    def rank1_counter():
        return max((h.counter for h in read_heartbeats(hb) if h.rank == 1), default=-1)

    def answer(gap_s, took_s=0.0, checked_in=True):
        """Let ``gap_s`` (test clock) pass, probe (taking ``took_s``), poll: the ranks that
        progressed. ``checked_in``: first wait for rank 1 to check in again."""
        if checked_in:
            c = rank1_counter()
            wait_for(lambda: rank1_counter() > c, 30, what="rank 1 checking in")
        clock[0] += gap_s
        probe_s[0] = took_s
        assert src.background.start(["hk2"])
        src.background.wait(30)
        t[0] += poll_s
        got = src.poll(t[0]).get("stacks")
        return dict(got[1].progressed) if got else {}

    answer(0.0)
    answer(poll_s)  # both ranks known now
    assert 1 in answer(poll_s)  # a prompt answer: rank 1's check-ins since the previous one are progress
    assert 1 not in answer(8 * poll_s), "an answer after a gap is a new baseline"
    assert 1 in answer(poll_s)  # and the next prompt one counts again
    answer(poll_s, took_s=6 * poll_s)  # a slow probe (a node slow to answer)
    assert 1 in answer(poll_s), "the answer after a slow probe is prompt: its gap is one poll"
    assert 1 not in answer(2 * poll_s + 0.01), "just past two polls is a gap"
    assert 1 in answer(2 * poll_s), "two polls is not"


@pytest.mark.timeout(60)
def test_batch_monitor_samples_its_own_ranks_through_their_watchdog_thread(spawn, tmp_path):
    """The batch monitor polls a copy of its node's scratch (the view): the on-demand samples it
    asks its own ranks for must be awaited in the logs the ranks write, not in the copy, where
    they never show: that wait timed out every poll and escalated to a C-level faulthandler
    dump (a crash risk for a running rank, and a second wasted second per poll)."""
    scratch, procs, _ = start_two_ranks(spawn, tmp_path, 600.0)
    src = slurm_sources.SlurmStackSource(scratch, slurm_probe.View(str(tmp_path / "view")), [], world_size=2)
    outcomes = []
    for t in range(4):
        src.poll(float(t))
        outcomes.append(dict(src.inner.sample_outcomes))
    # rank 0 is quiet (sampled every poll after the first); rank 1 checks in (never sampled)
    assert all(o == {procs[0].pid: "thread"} for o in outcomes[1:]), outcomes
