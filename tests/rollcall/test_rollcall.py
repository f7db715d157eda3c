"""The roll call on real dumps: the research samples, the two rules that replaced simpler
ones (outermost frame, modal position), verdict classes, missing/unwatched ranks,
heartbeats, exit evidence and the extension-section rule."""
from testlib import TESTS, dump_samples, wait_for
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from hpc_hangkit.parse.faulthandler import parse_faulthandler
from hpc_hangkit.report.render import render_json, render_text, render_tree
from hpc_hangkit.rollcall import (Report, adopt_sections, build_report, main_thread, rank_facts,
                                  report_from_dir, summarize_node, user_frame)

FIX = os.path.join(TESTS, "fixtures", "torch_samples")


def fx(*parts):
    return os.path.join(FIX, *parts)


def assemble(tmp_path, files):
    """Copy fixture files into a fresh job directory: {dest: source path}."""
    d = tmp_path / "job"
    for dest, src in files.items():
        p = d / dest
        p.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, str(p))
    return str(d)


def group_of(rep, rank):
    return next(g for g in rep.groups if rank in g.ranks)


# --- the real samples --------------------------------------------------------------

def test_gloo_divergent_barrier_names_rank1():
    rep = report_from_dir(fx("gloo_divergent_barrier"))
    assert rep.suspect_ranks == [1]
    assert rep.verdict == "SPLIT"  # rank 1 is in another collective (barrier)
    w = group_of(rep, 0)
    assert w.ranks == [0, 2, 3] and w.role == "waiting" and w.collective == "all_reduce"
    assert w.frame.file.endswith("hang_gloo.py") and (w.frame.function, w.frame.line) == ("sync_grads", 61)
    assert w.top.function == "all_reduce" and w.top.file.endswith("distributed_c10d.py")
    d = group_of(rep, 1)
    assert (d.frame.function, d.frame.line, d.collective, d.role) == ("checkpoint_barrier", 69, "barrier", "divergent")
    text = render_text(rep)
    assert "ranks 0,2-3" in text and "hang_gloo.py:61 in sync_grads" in text
    assert "via  hang_gloo.py:76 in train" in text
    assert "\n=> " in text and "suspect rank: 1" in text


def test_gloo_divergent_sleep_is_missed_rank1():
    rep = report_from_dir(fx("gloo_divergent_sleep"))
    assert rep.verdict == "MISSED" and rep.suspect_ranks == [1]
    w = group_of(rep, 0)
    assert w.ranks == [0, 2, 3] and (w.frame.function, w.frame.line) == ("sync_grads", 61)
    assert group_of(rep, 1).collective is None


@pytest.mark.parametrize("sample", ["mpi_mpich_Allreduce_buf", "mpi_mpich_allreduce_obj",
                                    "mpi_openmpi_Allreduce_buf", "mpi_openmpi_allreduce_obj"])
def test_mpi_samples_name_rank1(sample, tmp_path):
    rep = report_from_dir(fx(sample))
    assert rep.suspect_ranks == [1] and rep.verdict in ("MISSED", "SPLIT")
    assert group_of(rep, 0).ranks == [0, 2, 3] and group_of(rep, 0).frame.function == "sync_grads"
    # faulthandler alone: mpi4py's Cython frames are invisible, the top frame is the user's line
    only = assemble(tmp_path, {"watchdog/rank_%d.log" % r: fx(sample, "faulthandler", "rank_%d.log" % r)
                               for r in range(4)})
    rep = report_from_dir(only)
    assert rep.verdict == "MISSED" and rep.suspect_ranks == [1]
    w = group_of(rep, 0)
    assert w.top is w.frame and w.frame.function == "sync_grads" and w.collective is None
    assert "no collective frame visible" in render_text(rep)


def test_truncated_log_is_skipped_and_the_rest_reports(tmp_path):
    d = assemble(tmp_path, {
        "watchdog/rank_0.log": fx("gloo_divergent_barrier", "faulthandler", "rank_0.log"),
        "watchdog/rank_1.log": fx("gloo_divergent_barrier", "faulthandler", "rank_1.log"),
        "watchdog/rank_3.log": fx("gloo_divergent_barrier", "faulthandler", "rank_3.log"),
        "watchdog/rank_2.log": fx("faulthandler_crash_stress", "gloo_rank2_truncated_dump_before_segv.log"),
    })
    rep = report_from_dir(d)
    assert any("rank_2.log: byte 321" in w and "truncated" in w for w in rep.warnings)
    assert rep.suspect_ranks == [1]
    assert group_of(rep, 0).ranks == [0, 3]
    g2 = group_of(rep, 2)
    assert g2.role == "unknown" and "died" in g2.detail
    text = render_text(rep)
    assert "rank_2.log: byte 321" in text and "Not seen: rank 2" in text


def test_startup_dumps_never_decide_a_position(tmp_path):
    # every rank of the real logs began with import dumps...
    for r in range(4):
        log = parse_faulthandler(open(fx("gloo_divergent_barrier", "faulthandler", "rank_%d.log" % r), "rb").read())
        f = rank_facts(log.samples, k=1000)  # K larger than the log: start-up samples still excluded
        assert f.startup >= 1 and f.state == "stuck" and f.mode == f.n
    # ...and a rank whose only dump is an import has no position at all
    data = open(fx("gloo_divergent_barrier", "faulthandler", "rank_1.log"), "rb").read()
    first_only = data[:data.index(b"Timeout", data.index(b"Timeout") + 1)]
    log = parse_faulthandler(first_only, "r1")
    assert len(log.samples) == 1
    f = rank_facts(log.samples)
    assert f.state == "unknown" and f.key is None and "start-up" in f.detail
    assert "hang_gloo.py:26" in f.detail


# --- rule 1: main thread by outermost frame (regression) -----------------------------

TELEMETRY = """
import faulthandler, os, signal, sys, threading, time
f = open(sys.argv[1], "a")
faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)
ready = threading.Event()
def http_call(depth):
    if depth:
        return http_call(depth - 1)
    ready.set()
    time.sleep(60)  # deep inside the 'HTTP client'
def telemetry():
    http_call(12)
threading.Thread(target=telemetry, name="telemetry", daemon=True).start()
ready.wait()
def allreduce_like():
    time.sleep(60)  # main thread: two frames down, blocked
print("ready", flush=True)
allreduce_like()
"""


def _dumped_whole(log, k):
    """``log`` holds ``k`` dumps and the last one is complete: both threads, each down to its
    outermost frame (``<module>`` for the main thread, ``_bootstrap`` for the telemetry one)."""
    samples = parse_faulthandler(log.read_bytes(), log.name).samples
    return (len(samples) == k and len(samples[-1].threads) == 2
            and all(t.frames and t.frames[-1].function in ("<module>", "_bootstrap") for t in samples[-1].threads))


def test_main_thread_is_found_by_outermost_frame_not_depth(tmp_path, spawn):
    """The seed's measurement: a rank blocked two frames into a call, with a telemetry thread
    twelve frames deep, was reported as being in the HTTP call by the deepest-thread rule."""
    prog = tmp_path / "telemetry.py"
    prog.write_text(TELEMETRY)
    logs = []
    for r in range(2):
        log = tmp_path / "watchdog" / ("rank_%d.log" % r)
        log.parent.mkdir(exist_ok=True)
        log.write_text("# hpc-hangkit rank=%d world=2 local_rank=- pid=0 host=h t=0 signal=SIGUSR1 "
                       "period_s=1.0 argv=[]\n" % r)
        p = spawn([sys.executable, str(prog), str(log)], stdout=subprocess.PIPE)
        assert p.stdout.readline().strip() == b"ready"
        logs.append((p, log))
    for k in range(1, 4):
        # one signal at a time: a second SIGUSR1 sent while the first dump is being written
        # is held (faulthandler blocks it in its handler) and a third one would merge with it
        for p, _log in logs:
            os.kill(p.pid, signal.SIGUSR1)
        for _p, log in logs:
            wait_for(lambda: _dumped_whole(log, k), 30, 0.05, what="dump %d in %s" % (k, log.name))
    parsed = parse_faulthandler(logs[0][1].read_bytes(), "rank_0.log")
    assert len(parsed.samples) == 3
    s = parsed.samples[-1]
    deepest = max(s.threads, key=lambda t: len(t.frames))
    assert any(f.function == "http_call" for f in deepest.frames), "the simpler rule picks telemetry"
    m = main_thread(s)
    assert m is not deepest and m.frames[-1].function == "<module>"
    assert user_frame(m.frames).function == "allreduce_like"
    rep = report_from_dir(str(tmp_path / "watchdog"))
    assert rep.verdict == "TOGETHER"
    assert rep.groups[0].frame.function == "allreduce_like" and rep.groups[0].ranks == [0, 1]


# --- rule 2: modal position over the last K samples (regression) ---------------------

def _running_rank3_cut_after_transition():
    """The real log of a running gloo rank, cut right after its one dump that caught it
    mid-transition (between two all_reduce calls) -- a prefix of a real file."""
    data = open(fx("gloo_sigusr1_register_running", "rank_3_head520.log"), "rb").read()
    log = parse_faulthandler(data)
    odd = [i for i, s in enumerate(log.samples)
           if user_frame(main_thread(s).frames).function != "sync_grads" and i < 86]
    assert len(odd) == 1
    j = odd[0]
    return data[:log.samples[j + 1].offset]


def test_modal_position_is_not_fooled_by_one_mid_transition_sample(tmp_path):
    cut = _running_rank3_cut_after_transition()
    d = tmp_path / "job"
    shutil.copytree(fx("hung_sigusr1_register", "gloo"), str(d))
    (d / "rank_3.log").write_bytes(cut)
    last = parse_faulthandler(cut).samples[-1]
    assert user_frame(main_thread(last).frames).function == "train"  # the newest sample is off
    rep = report_from_dir(str(d), samples=5)
    assert rep.suspect_ranks == [1], render_text(rep)
    assert group_of(rep, 3).ranks == [0, 2, 3]
    assert group_of(rep, 3).frame.function == "sync_grads"
    # the simpler rule (position = last sample) puts rank 3 in a group of its own: two culprits
    simple = report_from_dir(str(d), samples=1)
    assert group_of(simple, 3).ranks == [3]
    assert simple.suspect_ranks != [1]


def test_modal_ties_go_to_the_newest():
    hung = parse_faulthandler(open(fx("hung_sigusr1_register", "gloo", "rank_0.log"), "rb").read()).samples
    other = parse_faulthandler(open(fx("hung_sigusr1_register", "gloo", "rank_1.log"), "rb").read()).samples
    a, b = hung[0], other[0]
    chains = {}
    f = rank_facts([a, a, b, b], k=4, chains=chains)
    assert chains[f.key]["frames"][0][2] == "barrier"  # b is newest
    f = rank_facts([b, b, a, a], k=4, chains=chains)
    assert chains[f.key]["frames"][0][2] == "all_reduce"
    f = rank_facts([a, b, a, b, a], k=5, chains=chains)
    assert f.state == "stuck" and f.mode == 3


# --- verdict classes -----------------------------------------------------------------

def _barrier(tmp_path, ranks, **extra):
    files = {"watchdog/rank_%d.log" % r: fx("gloo_divergent_barrier", "faulthandler", "rank_%d.log" % r)
             for r in ranks}
    files.update(extra)
    return assemble(tmp_path, files)


def test_together_missing_unwatched_and_inconclusive(tmp_path):
    d = _barrier(tmp_path, [0, 2, 3])
    rep = report_from_dir(d)
    assert rep.verdict == "TOGETHER" and rep.suspect_ranks == []
    assert "not a missed collective" in rep.reason and "Flight Recorder" in rep.reason
    rep = report_from_dir(d, world_size=4)
    assert rep.verdict == "MISSED" and rep.suspect_ranks == [1] and rep.missing_ranks == [1]
    assert "missing ranks" in render_text(rep)
    un = os.path.join(d, "unwatched")
    os.makedirs(un)
    with open(os.path.join(un, "rank_1.pid77.txt"), "w") as fh:
        fh.write("faulthandler.register failed: signal SIGURG already in use\n")
    rep = report_from_dir(d, world_size=5)
    assert rep.unwatched_ranks == [1] and rep.missing_ranks == [4]
    assert rep.suspect_ranks == [1, 4]
    text = render_text(rep)
    assert "rank 1: faulthandler.register failed" in text
    one = _barrier(tmp_path / "one", [2])
    rep = report_from_dir(one)
    assert rep.verdict == "INCONCLUSIVE" and "one rank" in rep.why
    empty = tmp_path / "empty"
    empty.mkdir()
    rep = report_from_dir(str(empty))
    assert rep.verdict == "INCONCLUSIVE" and "no stack dumps" in rep.why


def test_depth_limits_the_grouping(tmp_path):
    d = assemble(tmp_path, {
        "a/rank_0.log": fx("gloo_divergent_barrier", "faulthandler", "rank_0.log"),
        "a/rank_2.log": fx("gloo_divergent_barrier", "faulthandler", "rank_2.log"),
        "b/rank_3.log": fx("hung_sigusr1_register", "gloo", "rank_3.log"),
    })
    full = report_from_dir(d)
    assert [g.ranks for g in full.groups] == [[0, 2], [3]]  # same all_reduce, different callers
    one = report_from_dir(d, depth=1)
    assert one.verdict == "TOGETHER" and one.groups[0].ranks == [0, 2, 3]
    assert len(one.groups[0].chain) == 1


def test_gone_from_exit_tracebacks_all_exited():
    rep = report_from_dir(fx("gloo_pg_timeout_10s"))
    assert rep.verdict == "GONE" and rep.suspect_ranks == [1]
    assert all(f.state == "exited" for f in rep.ranks.values())
    assert "Timed out waiting 10000ms" in rep.ranks[1].exit
    text = render_text(rep)
    assert text.index("rank 1 last traceback") < text.index("rank 0 last traceback")


def test_gone_from_a_real_fatal_dump(tmp_path):
    from hpc_hangkit.boot import _hangkit_core as core

    d = _barrier(tmp_path, [0, 2, 3])
    log = os.path.join(d, "watchdog", "rank_1.pid9.log")
    with open(log, "w") as fh:
        fh.write(core.header_line(1, 4, 1, 9, "vm", 1.0, "SIGURG", 3.0, ["x.py"]))
    code = textwrap.dedent("""
        import ctypes, faulthandler, sys
        f = open(sys.argv[1], "a")
        faulthandler.enable(file=f)
        def load_shard():
            ctypes.string_at(0)
        load_shard()
    """)
    p = subprocess.run([sys.executable, "-c", code, log], stderr=subprocess.PIPE, timeout=30)
    assert p.returncode == -signal.SIGSEGV
    rep = report_from_dir(d)
    assert rep.verdict == "GONE" and rep.suspect_ranks == [1], render_text(rep)
    assert rep.ranks[1].exit == "Fatal Python error: Segmentation fault"
    assert group_of(rep, 1).frame.function == "load_shard"
    assert group_of(rep, 0).role == "waiting"
    assert "Segmentation fault" in render_text(rep)


HB_PROG = """
import os, sys, time
from hpc_hangkit.boot import _hangkit_core as core
rank, label, then = int(sys.argv[2]), sys.argv[3], sys.argv[4]
scr = sys.argv[1]
world = int(sys.argv[5]) if len(sys.argv) > 5 else 2
pid = os.getpid()
core.arm(dest=os.path.join(scr, "watchdog", "rank_%d.pid%d.log" % (rank, pid)), period_s=0.3, rank=rank,
         world=world, heartbeat_path=os.path.join(scr, "heartbeats", "rank_%d.pid%d.hb" % (rank, pid)))
core.checkpoint(label)
def blocked_here():
    time.sleep(1.6)
blocked_here()
if then != "-":
    core.checkpoint(then)
"""


def test_heartbeat_labels_and_checkin_after_dump(tmp_path):
    prog = tmp_path / "hb.py"
    prog.write_text(HB_PROG)
    scr = tmp_path / "scratch"
    for r, label, then in ((0, "step 12", "-"), (1, "step 11", "step 12")):
        subprocess.run([sys.executable, str(prog), str(scr), str(r), label, then], check=True, timeout=60)
    rep = report_from_dir(str(scr), now=None)
    ck = rep.checkins()
    assert ck[0]["label"] == "step 12" and ck[1]["label"] == "step 12"
    assert rep.ranks[0].state == "stuck"
    assert rep.ranks[1].state == "progressing"  # it checked in after its last dump
    assert rep.verdict == "SLOW" and rep.suspect_ranks == []
    text = render_text(rep)
    assert 'rank 0 last checked in: "step 12"' in text and " ago" in text


def test_extension_section_rule():
    base = build_report(summarize_node([parse_faulthandler(
        open(fx("gloo_divergent_barrier", "faulthandler", "rank_%d.log" % r), "rb").read(), "r%d" % r)
        for r in (0, 2, 3)]))
    assert base.verdict == "TOGETHER"
    base.sections["nccl_ras"] = {"summary": "equal counts", "verdict": "TOGETHER", "suspect_ranks": [2],
                                 "groups": [], "text": ["x"]}
    base.sections["flight_recorder"] = {"summary": "rank 0 all_reduce sizes [[8]] vs [[4]]",
                                        "verdict": "SAME_LINE_DIFFERENT_ARGS", "suspect_ranks": [0],
                                        "groups": [], "text": ["pg 0: sizes differ"]}
    adopt_sections(base)
    assert base.verdict == "SAME_LINE_DIFFERENT_ARGS" and base.suspect_ranks == [0]
    assert base.stack_verdict == "TOGETHER" and base.adopted_from == "flight_recorder"
    assert any("flight recorder" in w for w in base.warnings)
    d = base.to_dict()
    assert d["verdict_from"] == "flight_recorder" and d["sections"]["flight_recorder"]["text"]
    assert "[flight recorder]" in render_text(base) and "pg 0: sizes differ" in render_text(base)
    # a RAS TOGETHER never adds suspects; a stack verdict that is not TOGETHER/INCONCLUSIVE stays
    r2 = Report()
    r2.verdict = r2.stack_verdict = "INCONCLUSIVE"
    r2.sections["nccl_ras"] = {"summary": "s", "verdict": "TOGETHER", "suspect_ranks": [2]}
    adopt_sections(r2)
    assert r2.verdict == "TOGETHER" and r2.suspect_ranks == []
    r3 = Report()
    r3.verdict = r3.stack_verdict = "MISSED"
    r3.suspect_ranks = [1]
    r3.sections["flight_recorder"] = {"summary": "s", "verdict": "SAME_LINE_DIFFERENT_ARGS", "suspect_ranks": [0]}
    adopt_sections(r3)
    assert r3.verdict == "MISSED" and r3.suspect_ranks == [1]


def test_flight_recorder_section_from_a_real_capture_tree(tmp_path):
    hd = tmp_path / "out" / "hang_detector"
    shutil.copytree(fx("gloo_divergent_barrier", "faulthandler"), str(hd / "watchdog"))
    shutil.copytree(os.path.join(os.path.dirname(FIX), "flight_recorder", "gloo_divergent_barrier", "pickle_raw"),
                    str(hd / "flight_recorder"))
    rep = report_from_dir(str(tmp_path / "out"))
    assert rep.suspect_ranks == [1] and rep.stack_verdict == "SPLIT"
    assert "flight_recorder" in rep.sections, rep.warnings
    assert rep.verdict == "SPLIT"  # stacks already decided: the section is evidence, not the verdict
    assert "[flight recorder]" in render_text(rep)


def test_json_shape_and_tree():
    rep = report_from_dir(fx("gloo_divergent_barrier"))
    import json

    d = json.loads(render_json(rep))
    assert d["schema_version"] == 1 and d["verdict"] == "SPLIT" and d["suspect_ranks"] == [1]
    roles = {tuple(g["ranks"]): g["role"] for g in d["groups"]}
    assert roles == {(0, 2, 3): "waiting", (1,): "divergent"}
    g = d["groups"][0]
    assert g["frame"] == {"file": "/home/user/hangdemo/jobs/hang_gloo.py", "line": 61, "function": "sync_grads"}
    assert g["call_chain"][0]["function"] == "all_reduce" and g["call_chain"][-1]["function"] == "<module>"
    assert d["missing_ranks"] == [] and d["unwatched_ranks"] == [] and isinstance(d["warnings"], list)
    tree = render_tree(rep)
    assert "[0-3] hang_gloo.py:85 in <module>" in tree
    assert "+-[0,2-3] hang_gloo.py:76 in train" in tree and "+-[1] hang_gloo.py:78 in train *" in tree


def test_user_frame_rules():
    from hpc_hangkit.parse.model import frame

    sp = "/v/lib/python3.11/site-packages/"
    torch_top = (frame(sp + "torch/distributed/distributed_c10d.py", 3252, "all_reduce"),
                 frame(sp + "torch/distributed/c10d_logger.py", 83, "wrapper"))
    # plain script
    ch = torch_top + (frame("/home/u/train.py", 61, "sync_grads"), frame("/home/u/train.py", 85, "<module>"))
    assert user_frame(ch).line == 61
    # the user's package installed in site-packages, run with python -m
    ch = torch_top + (frame(sp + "mytrainer/loop.py", 61, "sync_grads"),
                      frame("/v/lib/python3.11/runpy.py", 88, "_run_code"))
    assert user_frame(ch).file.endswith("mytrainer/loop.py")
    # py-spy text: relative paths
    ch = (frame("torch/distributed/distributed_c10d.py", 3252, "all_reduce"), frame("signal.py", 82, "sigwait"),
          frame("hang_gloo.py", 61, "sync_grads"))
    assert user_frame(ch).file == "hang_gloo.py"
    # -c / stdin code is the user's; native frames never are
    ch = (frame("libc.so.6", 0, "clock_nanosleep", True), frame("<string>", 5, "load_shard"))
    assert user_frame(ch).function == "load_shard"
    assert user_frame(()) is None


SLOW_PROG = """
import os, sys, time
from hpc_hangkit.boot import _hangkit_core as core
scr, rank = sys.argv[1], int(sys.argv[2])
core.arm(dest=os.path.join(scr, "watchdog", "rank_%d.pid%d.log" % (rank, os.getpid())), period_s=0.2,
         rank=rank, world=2)
def load(): time.sleep(0.15)
def forward(): time.sleep(0.15)
def backward(): time.sleep(0.15)
def optimise(): time.sleep(0.15)
def log_metrics(): time.sleep(0.15)
def save(): time.sleep(0.15)
end = time.time() + 3.0
while time.time() < end:
    for phase in (load, forward, backward, optimise, log_metrics, save):
        phase()
"""


def test_slow_ranks_whose_samples_keep_changing(tmp_path):
    """Two real processes that never stop moving (watchdog armed, no checkpoint): SLOW, no suspect."""
    prog = tmp_path / "slow.py"
    prog.write_text(SLOW_PROG)
    scr = tmp_path / "scratch"
    ps = [subprocess.Popen([sys.executable, str(prog), str(scr), str(r)]) for r in range(2)]
    for p in ps:
        assert p.wait(timeout=60) == 0
    rep = report_from_dir(str(scr))
    assert rep.verdict == "SLOW", render_text(rep)
    assert rep.suspect_ranks == [] and {g.role for g in rep.groups} == {"progressing"}
    assert all(f.state == "progressing" and f.mode * 2 <= f.n for f in rep.ranks.values())
    assert "no hang" in render_text(rep)


QUIET_PROG = """
import os, sys, time
from hpc_hangkit.boot import _hangkit_core as core
scr, rank, period, stay, checkins = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
pid = os.getpid()
core.arm(dest=os.path.join(scr, "watchdog", "rank_%d.pid%d.log" % (rank, pid)), period_s=period, rank=rank,
         world=2, heartbeat_path=os.path.join(scr, "heartbeats", "rank_%d.pid%d.hb" % (rank, pid)))
for i in range(checkins):
    core.checkpoint("step %d" % i)
    time.sleep(0.05)
def waiting_for_peer():
    time.sleep(stay)
waiting_for_peer()
"""


def test_a_rank_that_went_silent_is_gone(tmp_path):
    """Rank 0 exits cleanly (no traceback); rank 1 keeps dumping: rank 0 went silent -> GONE."""
    prog = tmp_path / "quiet.py"
    prog.write_text(QUIET_PROG)
    scr = tmp_path / "scratch"
    early = subprocess.Popen([sys.executable, str(prog), str(scr), "0", "0.3", "1.0", "0"])
    late = subprocess.Popen([sys.executable, str(prog), str(scr), "1", "0.3", "8.0", "0"])
    assert early.wait(timeout=60) == 0 and late.wait(timeout=60) == 0
    rep = report_from_dir(str(scr))
    assert rep.verdict == "GONE" and rep.suspect_ranks == [0], render_text(rep)
    assert rep.ranks[0].state == "exited" and "went silent" in rep.ranks[0].exit
    assert group_of(rep, 1).role == "waiting" and group_of(rep, 1).frame.function == "waiting_for_peer"
    # in a capture/storage copy file times mean nothing: no rank is called silent there
    shutil.copytree(str(scr), str(tmp_path / "out" / "hang_detector"))
    copy = report_from_dir(str(tmp_path / "out"))
    assert all(f.state != "exited" for f in copy.ranks.values()), render_text(copy)


def test_no_hang_when_ranks_check_in_and_never_dump(tmp_path):
    prog = tmp_path / "quiet.py"
    prog.write_text(QUIET_PROG)
    scr = tmp_path / "scratch"
    for r in range(2):
        subprocess.run([sys.executable, str(prog), str(scr), str(r), "30", "0.1", "3"], check=True, timeout=60)
    rep = report_from_dir(str(scr))
    assert rep.verdict == "NO_HANG", render_text(rep)
    assert rep.checkins()[1]["label"] == "step 2" and rep.checkins()[1]["counter"] == 3


def test_together_at_one_line_but_a_rank_checked_in_a_step_behind(tmp_path):
    """Same line everywhere (TOGETHER), but rank 1's last checkpoint label is a step behind."""
    prog = tmp_path / "hb.py"
    prog.write_text(HB_PROG)
    scr = tmp_path / "scratch"
    for r, label in ((0, "step 12"), (1, "step 11"), (2, "step 12")):
        subprocess.run([sys.executable, str(prog), str(scr), str(r), label, "-", "3"], check=True, timeout=60)
    rep = report_from_dir(str(scr))
    assert rep.verdict == "TOGETHER" and rep.suspect_ranks == [1], render_text(rep)
    text = render_text(rep)
    assert 'rank 1 at "step 11"' in text
    assert 'last check-in: "step 12"' in text and '(rank 1)' in text


POLL_PROG = """
import os, sys, time
from hpc_hangkit.boot import _hangkit_core as core
scr, rank = sys.argv[1], int(sys.argv[2])
core.arm(dest=os.path.join(scr, "watchdog", "rank_%d.pid%d.log" % (rank, os.getpid())), period_s=0.17,
         rank=rank, world=3)
def poll_until_done():
    while True:
        time.sleep(0.03)  # like req.Test() in mpi4py: C code, no Python frame of its own
        time.sleep(0.03)
def elsewhere():
    time.sleep(60)
if rank == 1:
    elsewhere()
else:
    poll_until_done()
"""


def test_a_polling_loop_is_stuck_not_slow(tmp_path, spawn):
    """Ranks spinning in a polling loop (only the line moves, within one function) are stuck
    in that loop, not progressing: the sample-change rule alone would call them moving."""
    prog = tmp_path / "poll.py"
    prog.write_text(POLL_PROG)
    scr = tmp_path / "scratch"
    for r in range(3):
        spawn([sys.executable, str(prog), str(scr), str(r)])
    # every rank's last K=5 samples (rank_facts' window) all taken in its steady state: the
    # first dump may catch a rank before it reached its loop, so a few more than 5
    wait_for(lambda: (lambda n: len(n) == 3 and min(n.values()) >= 8)(dump_samples(str(scr / "watchdog"))),
             60, what="8 dumps from each of the 3 ranks", detail=lambda: dump_samples(str(scr / "watchdog")))
    rep = report_from_dir(str(scr))
    assert rep.verdict == "MISSED" and rep.suspect_ranks == [1], render_text(rep)
    loop = group_of(rep, 0)
    assert loop.ranks == [0, 2] and loop.frame.function == "poll_until_done"
    for r in (0, 2):
        f = rep.ranks[r]
        assert f.state == "stuck"
        if f.mode == f.n and "looping" in (f.detail or ""):
            assert loop.frame.line == 0  # the loop, not one of its lines


def test_capture_tree_and_scratch_together_are_not_double_counted(tmp_path):
    """The capture copies watchdog logs into hang_detector/; reading both must count each process once."""
    d = tmp_path / "job"
    shutil.copytree(fx("gloo_divergent_barrier", "faulthandler"), str(d / "scratch" / "watchdog"))
    shutil.copytree(fx("gloo_divergent_barrier", "faulthandler"), str(d / "out" / "hang_detector" / "watchdog"))
    rep = report_from_dir(str(d))
    one = report_from_dir(str(d / "scratch"))
    assert rep.to_dict()["groups"] == one.to_dict()["groups"]
    assert [f["samples_used"] for f in rep.to_dict()["ranks"].values()] == [5, 5, 5, 5]


def test_pyspy_only_and_rank_from_pid(tmp_path):
    rep = report_from_dir(fx("gloo_divergent_barrier", "pyspy"))
    assert rep.suspect_ranks == [1] and group_of(rep, 0).ranks == [0, 2, 3]
    assert group_of(rep, 0).frame.line == 61
    # a py-spy dump whose name carries no rank gets it from the watchdog header with its pid
    d = _barrier(tmp_path, [0, 2, 3])
    shutil.copyfile(fx("gloo_divergent_barrier", "pyspy", "dump_native_rank1.txt"),
                    os.path.join(d, "pyspy_pid7699.txt"))
    shutil.copyfile(fx("gloo_divergent_barrier", "faulthandler", "rank_1.log"), os.path.join(d, "r1.log"))
    rep = report_from_dir(d)
    assert rep.suspect_ranks == [1] and rep.ranks[1].pid == 7699
    os.remove(os.path.join(d, "r1.log"))
    rep = report_from_dir(d)  # no header with that pid: the dump cannot be placed, and says so
    assert 1 not in rep.ranks and any("pyspy_pid7699.txt: no rank" in w for w in rep.warnings)
