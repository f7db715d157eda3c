"""Ranks that leave with no exit record (SIGKILL, the OOM killer, ``os._exit``): the monitor
sees the pid gone and writes a vanished record, the roll call says GONE.

Real processes: armed ranks of a 2-rank job (``tests/gone_jobs/vanish_job.py``) under the
real stack source and detector; the pid-reuse guard against a real child process.
"""
import json
import os
import signal
import threading
import time

import pytest

from test_run_e2e import line_of
from testlib import VANISH_JOB, inprocess_probe, start_two_ranks, wait_for

from hpc_hangkit import layout
from hpc_hangkit.capture.ranks import ALIVE, ENDED, GONE, node_liveness, rank_liveness, write_vanished

JOB = VANISH_JOB
POLL_S, CONFIRM_S = 0.5, 3.0


def proc_state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.timeout(30)
def test_liveness_of_a_real_process_alive_zombie_reused_gone(spawn, tmp_path):
    before = time.monotonic()
    p = spawn(["sleep", "600"])
    armed = time.monotonic()  # the "rank" armed after it started: the same process
    assert rank_liveness(p.pid, armed) == (ALIVE, "")
    # a heartbeat armed before this process started names another, earlier process: the
    # pid was reused, the rank that armed is gone
    assert rank_liveness(p.pid, before - 5.0) == (GONE, "pid-reused")
    os.kill(p.pid, signal.SIGKILL)
    wait_for(lambda: proc_state(p.pid) == "Z", 10, what="the killed child to be a zombie")
    assert rank_liveness(p.pid, armed) == (GONE, "zombie")  # dead, not yet reaped
    p.wait()
    assert rank_liveness(p.pid, armed) == (GONE, "no-process")
    assert rank_liveness(1, armed) == (GONE, "no-process")  # never a rank
    # on its node, a process gone with an exit record of its own (any rank name) has ended
    assert node_liveness(str(tmp_path), p.pid, armed) == (GONE, "no-process")
    (tmp_path / layout.EXITS_DIR).mkdir()
    (tmp_path / layout.EXITS_DIR / ("rank_x.pid%d.txt" % p.pid)).write_text("# hpc-hangkit exit how=normal status=0\n")
    assert node_liveness(str(tmp_path), p.pid, armed) == (ENDED, "no-process")


def test_vanished_record_read_by_the_roll_call(tmp_path):
    """The record the monitor writes is the rank's end in the roll call; the rank's own
    exit record, when there is one, wins."""
    from hpc_hangkit.rollcall.read import read_dir
    path = write_vanished(str(tmp_path), 3, 4242, "node-1", "zombie", t=1700000000.0)
    assert os.path.relpath(path, str(tmp_path)) == os.path.join(layout.VANISHED_DIR, "rank_3.pid4242.txt")
    assert open(path).read() == "# hpc-hangkit vanished pid=4242 host=node-1 t=1700000000.000 seen=zombie\n"
    from hpc_hangkit.parse.exits import ExitHow
    from hpc_hangkit.rollcall.prose import exit_text
    end = read_dir(str(tmp_path)).tracebacks[3].end       # the fact, typed; the words from prose
    assert (end.how, end.pid) == (ExitHow.VANISHED, 4242)
    assert exit_text(end) == "vanished (pid 4242 gone with no exit record: SIGKILL, the OOM killer or os._exit)"
    ex = tmp_path / layout.EXITS_DIR
    ex.mkdir()
    (ex / "rank_3.pid4242.txt").write_text("# hpc-hangkit exit how=normal status=0\n")
    end = read_dir(str(tmp_path)).tracebacks[3].end
    assert end.how is ExitHow.NORMAL and exit_text(end) == "exited normally (status 0)"
    with pytest.raises(ValueError):
        write_vanished(str(tmp_path), 3, 4242, "../x", "zombie")


@pytest.mark.timeout(60)
def test_sigkilled_rank_confirmed_gone_within_the_window(spawn, tmp_path):
    from hpc_hangkit.detect.detector import Detector
    from hpc_hangkit.detect.monitor import Monitor, stack_judge
    from hpc_hangkit.evidence.stacks import StackSource

    scratch, procs, _ = start_two_ranks(spawn, tmp_path, 0.5)
    src = StackSource(scratch, stack_judge(), world_size=2, sample_signal="SIGURG")
    mon = Monitor(Detector(POLL_S, CONFIRM_S, 1.0, 2.0), [src], hd_dir=str(tmp_path / "hd"))
    polls = []
    stop = threading.Event()

    def alive():
        polls.append(time.monotonic())
        return not stop.is_set()

    t = threading.Thread(target=mon.run, args=(alive, stop.wait), daemon=True)
    t.start()
    try:
        # rank 1 computes and checks in (moving): no stall until it dies; polls see both alive
        wait_for(lambda: len(polls) >= 4, 20, what="four polls")
        assert not mon.history, [e.to_dict() for e in mon.history]
        killed = time.time()
        os.kill(procs[1].pid, signal.SIGKILL)  # left unreaped: a zombie until the teardown
        wait_for(lambda: mon.confirmed, 30, what="the confirmation")
    finally:
        stop.set()
        t.join(10)
    ev = mon.confirmed[0]
    with open(os.path.join(str(tmp_path / "hd"), layout.EVENTS_FILE)) as f:
        conf = next(json.loads(line) for line in f if '"confirmed"' in line)
    t_conf = conf["t"]
    # a poll is the monitor's resolution: on a loaded node one takes longer than its interval
    poll_s = max(POLL_S, conf["slowest_poll_s"])
    print("confirmed %.1f s after the SIGKILL (window %.1f s, poll %.1f s, slowest poll %.1f s)"
          % (t_conf - killed, CONFIRM_S, POLL_S, conf["slowest_poll_s"]))
    assert t_conf - killed <= CONFIRM_S + 2 * poll_s
    assert ev.detail.verdict == "GONE" and ev.detail.suspect_ranks == [1], str(ev.detail)
    rec = os.path.join(scratch, layout.VANISHED_DIR, "rank_1.pid%d.txt" % procs[1].pid)
    with open(rec) as f:
        line = f.read()
    assert line.startswith("# hpc-hangkit vanished pid=%d " % procs[1].pid), line
    assert line.endswith(" seen=zombie\n"), line  # killed, not reaped: gone all the same
    rep = ev.detail.report
    g = {tuple(x.ranks): x for x in rep.groups}
    assert g[(1,)].role == "exited" and g[(1,)].exit["how"] == "vanished", g
    assert g[(0,)].role == "waiting" and g[(0,)].frame.line == line_of(JOB, "VANISH wait: here"), g
    assert ("rank 1 vanished (pid %d gone with no exit record: SIGKILL, the OOM killer or os._exit)"
            % procs[1].pid) in rep.reason, rep.reason


@pytest.mark.timeout(60)
def test_batch_monitor_hears_of_a_vanished_rank_on_another_node_from_its_probe(spawn, tmp_path):
    """The Slurm batch monitor cannot read another node's /proc: that node's probe
    (``slurm-probe``, here run in-process on the "remote" scratch) says whether each
    heartbeat's process lives, and the monitor records the vanished rank in its view and in
    its own node scratch (which its capture copies)."""
    from hpc_hangkit.slurm import probe as slurm_probe
    from hpc_hangkit.slurm import sources as slurm_sources

    remote, procs, _ = start_two_ranks(spawn, tmp_path, 0.5)  # the "other node": this host's ranks
    probe = inprocess_probe(remote)
    local = tmp_path / "local"
    local.mkdir()
    src = slurm_sources.SlurmStackSource(str(local), slurm_probe.View(str(tmp_path / "view")), ["hk2"], probe=probe,
                                         idle_probe_s=0.0, world_size=2, host="monitor-node")
    t = [0.0]

    def poll_after_probe():
        src.background.wait(30)
        t[0] += POLL_S
        src.poll(t[0])
        return src.view.liveness

    live = wait_for(poll_after_probe, 20, what="a probe answer with the ranks' liveness")
    assert set(v.state for v in live.values()) == {ALIVE}, live
    for _ in range(2):
        poll_after_probe()  # seen alive
    os.kill(procs[1].pid, signal.SIGKILL)  # a zombie until the teardown
    name = "rank_1.pid%d.txt" % procs[1].pid
    mine = local / layout.VANISHED_DIR / name
    wait_for(lambda: poll_after_probe() and mine.exists(), 20, what="the vanished record")
    assert mine.read_text().endswith(" seen=zombie\n"), mine.read_text()
    assert (tmp_path / "view" / layout.VANISHED_DIR / name).read_text() == mine.read_text()
    assert not (local / layout.VANISHED_DIR / ("rank_0.pid%d.txt" % procs[0].pid)).exists()
