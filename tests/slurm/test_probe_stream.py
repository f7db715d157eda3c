"""The batch monitor's probe of the other nodes, read as it streams: each node's answer is
decoded when its last line arrives, a node that does not answer by the deadline is named
(with its ranks as last known) and not waited for, and a node may answer with its node
summary instead of its raw files, which gives the same roll call.

Real files throughout: the real watchdog dumps of a 4-rank gloo hang
(tests/fixtures/torch_samples/gloo_divergent_barrier: rank 1 skipped the all_reduce the others
wait in), real armed ranks for the progress rules, a fake ``srun`` (tests/fakeslurm.py) only
where the streaming helper needs a process that prints and then never ends.
"""
import io
import json
import os
import shutil
import socket

import pytest

from fakeslurm import FakeCommands, Reply
from testlib import gloo_node_scratch, start_two_ranks, validate_report, wait_for

from hpc_hangkit import layout
from hpc_hangkit import slurmjob
from hpc_hangkit.parse.heartbeat import read_heartbeats
from hpc_hangkit.report.render import render_json, render_text
from hpc_hangkit.rollcall import report_from_dir
from hpc_hangkit.slurm import probe as slurm_probe
from hpc_hangkit.slurm import sources as slurm_sources
from hpc_hangkit.wire import DocReader, emit_doc, parse_docs

HOST = socket.gethostname().split(".")[0]
node_scratch = gloo_node_scratch


def answer_doc(scratch, answer, samples=5):
    """A node's answer through the framing: ``(doc, bytes it carries before compression)``."""
    buf = io.StringIO()
    assert slurm_probe.probe_main(scratch, out=buf, answer=answer, samples=samples) == 0
    docs = parse_docs(buf.getvalue())
    assert len(docs) == 1
    doc = docs[0]
    if answer == "raw":
        return doc, sum(len(f["data"]) for f in slurm_probe.doc_files(doc).values())
    return doc, len(json.dumps(doc))


def summary_view(path, local, remote, host="hk2"):
    """A monitor's view at ``path``: the node scratch ``local``'s raw files, and the node
    scratch ``remote`` as node ``host``'s summary answer."""
    view = slurm_probe.View(path)
    view.apply(slurm_probe.rank_files(local))
    view.apply_summary(host, answer_doc(remote, "summary")[0]["summary"])
    return view


def shape(rep):
    return (rep.verdict, list(rep.suspect_ranks), [(list(g.ranks), g.role, g.state) for g in rep.groups])


def test_each_answer_is_decoded_when_its_last_line_arrives():
    a, b = io.StringIO(), io.StringIO()
    emit_doc({"host": "hk2", "pad": os.urandom(3000).hex()}, a)  # random: compresses to many lines
    emit_doc({"host": "hk3"}, b)
    la = ["0: " + ln for ln in a.getvalue().splitlines()]
    lb = ["1: " + ln for ln in b.getvalue().splitlines()]
    assert len(la) > 2 and len(lb) == 1
    rd = DocReader()
    got = [rd.feed(ln) for ln in la[:-1]]
    assert got == [None] * (len(la) - 1) and rd.incomplete()
    assert rd.feed(lb[0]) == {"host": "hk3"}  # the short answer is not held up by the long one
    assert rd.feed("srun: some message") is None
    assert rd.feed(la[-1])["host"] == "hk2"
    assert rd.incomplete() == {}


def test_a_summary_answer_gives_the_raw_answers_roll_call(tmp_path):
    """The monitor's node holds ranks 0-1, the other node ranks 2-3: the roll call over the view
    is the same whether the other node answered with its raw files or with its node summary,
    and the same as the direct roll call over all four logs."""
    direct = node_scratch(str(tmp_path / "all"), range(4))
    a = node_scratch(str(tmp_path / "a"), (0, 1))
    b = node_scratch(str(tmp_path / "b"), (2, 3))
    raw_doc, _ = answer_doc(b, "raw")
    sum_doc, _ = answer_doc(b, "summary")
    assert sum_doc["answer"] == "summary" and "files" not in sum_doc

    raw_view = slurm_probe.View(str(tmp_path / "raw_view"))
    raw_view.apply(slurm_probe.rank_files(a))
    raw_view.apply(slurm_probe.doc_files(raw_doc))
    sum_view = slurm_probe.View(str(tmp_path / "sum_view"))
    sum_view.apply(slurm_probe.rank_files(a))
    sum_view.apply_summary("hk2", sum_doc["summary"])
    assert len(os.listdir(os.path.join(sum_view.path, layout.WATCHDOG_DIR))) == 2  # node a's raw files only

    want = shape(report_from_dir(direct))
    assert want[0] == "SPLIT" and want[1] == [1], want
    assert shape(report_from_dir(raw_view.path)) == want
    assert shape(report_from_dir(sum_view.path)) == want


def test_a_summary_answer_grows_with_positions_not_with_dump_bytes(tmp_path):
    """Four times the dumps (a hang four times as long): the raw answer grows, the summary
    answer does not (the ranks sit at the same positions)."""
    short = node_scratch(str(tmp_path / "short"), range(4), copies=1)
    long_ = node_scratch(str(tmp_path / "long"), range(4), copies=4)
    _, raw_short = answer_doc(short, "raw")
    _, raw_long = answer_doc(long_, "raw")
    s_short, sum_short = answer_doc(short, "summary")
    s_long, sum_long = answer_doc(long_, "summary")
    assert raw_long > raw_short  # (at most 64 KiB of each log: the probe's tail)
    assert s_short["summary"]["positions"] == s_long["summary"]["positions"]
    assert sum_long <= sum_short + 200 and 10 * sum_short < raw_short  # times and counts, no dumps


def stream_probe(nodes_to_scratch, answer, silent=()):
    """A streaming probe (the shape :func:`hpc_hangkit.slurm.sources.srun_probe` returns) that
    runs ``slurm-probe`` in this process for each node instead of through srun: each answer
    goes through the framing, line by line; the nodes in ``silent`` do not answer."""
    def probe(nodes, fold):
        rd = DocReader()
        missing = {}
        for n in nodes:
            if n in silent or n not in nodes_to_scratch:
                missing[n] = "no answer within the probe's 10 s deadline"
                continue
            buf = io.StringIO()
            slurm_probe.probe_main(nodes_to_scratch[n], out=buf, answer=answer)
            for ln in buf.getvalue().splitlines():
                doc = rd.feed(ln)
                if doc is not None:
                    fold(doc)
        return missing
    probe.streams = True
    return probe


@pytest.mark.timeout(90)
def test_a_node_that_does_not_answer_is_named_with_its_ranks_and_the_monitor_goes_on(spawn, tmp_path):
    """Real armed ranks stand for the other node (rank 0 blocked, rank 1 checking in), which
    answers with its summary. Its check-ins are progress through the per-rank facts; then it
    stops answering: the view's roll call names it and its ranks as unreachable (text, JSON
    per the schema) and the polls go on; when it answers again the record is gone."""
    remote, _, _ = start_two_ranks(spawn, tmp_path, 600.0)
    silent = set()
    probe = stream_probe({HOST: remote}, "summary", silent)
    local = tmp_path / "local"
    local.mkdir()
    src = slurm_sources.SlurmStackSource(str(local), slurm_probe.View(str(tmp_path / "view")), [HOST],
                                         probe=probe, idle_probe_s=0.0, world_size=2, host="monitor-node",
                                         poll_interval_s=0.5)
    src.min_probe_interval_s = 1e9  # the test starts every probe itself
    t = [0.0]

    def answer():
        assert src.background.start([HOST])
        assert src.background.wait(30)
        t[0] += 0.5
        return src.poll(t[0]).get("stacks")

    src.poll(0.0)  # the first poll starts the first probe
    src.background.wait(30)
    answer()  # the first answers: a baseline
    seen = next(rr.counter for rr in src.remote[HOST].values() if rr.rank == 1)
    hb_dir = os.path.join(remote, layout.HEARTBEAT_DIR)
    wait_for(lambda: any(h.rank == 1 and h.counter > seen for h in read_heartbeats(hb_dir)), 30,
             what="rank 1 checking in after the baseline")  # (a loaded machine may starve it a while)
    got = answer()
    assert got is not None and 1 in got[1].progressed and 0 not in got[1].progressed, got
    assert "heartbeat" in got[1].progressed[1]
    assert not src.unreachable
    assert os.listdir(os.path.join(src.view.path, slurm_probe.NODES_DIR)) == [HOST + ".summary.json"]

    silent.add(HOST)
    got = answer()
    assert set(src.unreachable) == {HOST} and src.unreachable[HOST]["ranks"] == [0, 1]
    assert got is not None and not got[1].progressed  # nothing new from it: no progress, no error
    det = src.rollcall()
    rep = det.report
    assert [u["node"] for u in rep.unreachable] == [HOST] and rep.unreachable[0]["ranks"] == "0-1"
    assert "node %s: ranks 0-1, since" % HOST in render_text(rep)
    doc = validate_report(render_json(rep), "report with an unreachable node")
    assert doc["unreachable_nodes"][0]["node"] == HOST
    from hpc_hangkit.report.html import render_html
    assert "node %s unreachable (did not answer the monitor's probe): ranks 0-1" % HOST in render_html(rep)
    since = src.unreachable[HOST]["since"]
    answer()  # still silent: the record keeps its first time
    assert src.unreachable[HOST]["since"] == since

    silent.clear()
    answer()
    assert not src.unreachable
    assert src.rollcall().report.unreachable == []
    assert "unreachable_nodes" not in json.loads(render_json(src.rollcall().report))


@pytest.mark.timeout(60)
def test_the_stream_hands_over_each_line_and_stops_srun_at_the_deadline(tmp_path, monkeypatch):
    """A step whose first node answered and whose second never does (srun prints the answer,
    then waits): the answer is handed over, and at the deadline srun is stopped and the call
    returns, naming the deadline."""
    fake = FakeCommands(tmp_path / "bin")
    fake.add("srun", Reply([], stdout="0: hpc-hangkit-doc a 1/1 xyz\n", sleep_s=120))
    monkeypatch.setenv("PATH", fake.path())
    lines = []
    res = slurmjob.srun_overlap_stream("77", ["hk2", "hk3"], ["true"], lines.append, deadline_s=1.0)
    assert lines == ["0: hpc-hangkit-doc a 1/1 xyz"]
    assert res.timed_out and res.returncode is None
    call = fake.calls("srun")[0]
    assert call[:4] == ["--overlap", "--jobid", "77", "-w"] and "hk2,hk3" in call

    fake.add("srun", Reply([], stdout="1: last line without a newline", rc=3))
    lines.clear()
    res = slurmjob.srun_overlap_stream("77", ["hk2"], ["true"], lines.append, deadline_s=30.0)
    assert lines == ["1: last line without a newline"] and not res.timed_out and res.returncode == 3


def test_the_answer_shape_and_the_deadline_follow_the_job_and_the_poll_interval():
    assert slurm_sources.probe_answer(1) == "raw" and slurm_sources.probe_answer(3) == "raw"
    assert slurm_sources.probe_answer(slurm_sources.SUMMARY_MIN_NODES) == "summary"
    assert slurm_sources.probe_answer(1, {slurm_sources.PROBE_ANSWER_ENV: "summary"}) == "summary"
    assert slurm_sources.probe_answer(100, {slurm_sources.PROBE_ANSWER_ENV: "RAW"}) == "raw"
    with pytest.raises(ValueError, match="raw, summary or auto"):
        slurm_sources.probe_answer(1, {slurm_sources.PROBE_ANSWER_ENV: "tails"})
    assert slurm_sources.probe_deadline_s(1.0) == slurm_sources.PROBE_DEADLINE_MIN_S
    assert slurm_sources.probe_deadline_s(15.0) == 30.0
    assert slurm_sources.probe_deadline_s(600.0) == slurm_sources.PROBE_DEADLINE_MAX_S


@pytest.mark.timeout(60)
def test_srun_probe_folds_the_answer_that_came_and_names_the_silent_node(tmp_path, monkeypatch):
    """``srun_probe`` over a srun that prints one node's real summary answer and never ends (the
    other node's slurmd is gone): that answer is folded, the silent node is named with the
    deadline as the reason, and the node side is asked for summaries with the monitor's K."""
    b = node_scratch(str(tmp_path / "b"), (2, 3))
    doc, _ = answer_doc(b, "summary", samples=3)
    doc["host"] = "hk2"  # as node hk2 says it
    buf = io.StringIO()
    emit_doc(doc, buf)
    text = "".join("0: " + ln + "\n" for ln in buf.getvalue().splitlines())
    fake = FakeCommands(tmp_path / "bin")
    fake.add("srun", Reply([], stdout=text, sleep_s=120))
    monkeypatch.setenv("PATH", fake.path())
    probe = slurm_sources.srun_probe("77", "/scratch/job_77/attempt_0", ["hpc-hangkit"], answer="summary",
                                     samples=3, deadline_s=1.0)
    assert probe.streams
    folded = []
    missing = probe(["hk2", "hk3"], folded.append)
    assert list(missing) == ["hk3"] and "1 s deadline" in missing["hk3"]
    assert [d["answer"] for d in folded] == ["summary"] and folded[0]["summary"]["k"] == 3
    argv = fake.calls("srun")[0]
    tail = argv[argv.index("--") + 1:]
    assert tail[:4] == ["hpc-hangkit", "slurm-probe", "--scratch", "/scratch/job_77/attempt_0"]
    assert tail[4:8] == ["--answer", "summary", "--samples", "3"]


def test_an_unreachable_nodes_ranks_keep_their_last_positions_and_are_not_judged_gone(tmp_path):
    """The other node's last answer is a minute old (its node went silent) while this node's
    ranks keep writing: without its unreachable record the roll call would call its ranks
    gone silent (exited: GONE); with it, they keep the positions last seen and the verdict is
    the direct roll call's."""
    import time
    from hpc_hangkit.rollcall.unreachable import write_unreachable

    a = node_scratch(str(tmp_path / "a"), (0, 1))
    b = node_scratch(str(tmp_path / "b"), (2, 3))
    old = time.time() - 60
    for name in os.listdir(os.path.join(b, layout.WATCHDOG_DIR)):
        os.utime(os.path.join(b, layout.WATCHDOG_DIR, name), (old, old))
    view = summary_view(str(tmp_path / "view"), a, b)
    silent = report_from_dir(view.path)
    assert silent.verdict == "GONE" and {2, 3} <= set(silent.suspect_ranks), shape(silent)
    write_unreachable(view.path, "hk2", old, [2, 3], "no answer within the probe's 10 s deadline")
    held = report_from_dir(view.path)
    assert shape(held) == shape(report_from_dir(node_scratch(str(tmp_path / "all"), range(4))))
    assert held.verdict == "SPLIT" and held.suspect_ranks == [1]
    assert [u["ranks"] for u in held.unreachable] == ["2-3"]


def remote_rank(rank, stack, seen_at, host="hk2", counter=0, busy=0, **node_times):
    """Rank ``rank``'s facts as another node's answer gives them, taken when this monitor's
    clock read ``seen_at``; ``node_times``: ``moved_at``/``checkpoint_at`` as that many seconds
    before the take (the node's clock)."""
    taken = 5000.0  # the node's clock: any offset from the monitor's
    rr = slurm_sources.RemoteRank("rank_%d.pid%d.hb" % (rank, 4000 + rank), dict({
        "rank": rank, "pid": 4000 + rank, "host": host, "counter": counter, "busy": busy, "label": "",
        "armed_mono_s": 1.0, "stack": stack, "ended": False},
        **{k: taken - ago for k, ago in node_times.items()}))
    rr.date(seen_at, taken)
    return rr


def remote_facts_source(tmp_path):
    """A stack source over a view of this node's ranks 0-1 (raw files) and node hk2's ranks
    2-3 (its summary), whose per-rank facts are the list returned (replace an entry to
    change what hk2 says), after its first poll at t=100: ``(view, facts, source)``."""
    from hpc_hangkit.detect.monitor import stack_judge
    from hpc_hangkit.evidence.stacks import StackSource

    a = node_scratch(str(tmp_path / "a"), (0, 1))
    b = node_scratch(str(tmp_path / "b"), (2, 3))
    view = summary_view(str(tmp_path / "view"), a, b)
    facts = [remote_rank(2, "s2", 100.0), remote_rank(3, "s3", 100.0)]
    src = StackSource(view.path, stack_judge(), sample_signal=None, remote_facts=lambda: facts)
    assert src.poll(100.0)["stacks"][0] is False     # the first look: a baseline
    return view, facts, src


def test_a_change_another_node_reports_is_dated_when_that_node_took_it(tmp_path):
    """A slow probe: rank 3's node took its answer (its stack moved) at t=104, the answer
    reached the monitor's poll at t=110. The stall that follows starts at 104, when the
    change was seen, not at 110; a change of this node's own files in the same poll is
    dated by the poll."""
    view, facts, src = remote_facts_source(tmp_path)
    first = src.poll(101.0)["stacks"]
    assert first[0] is True and first[1].verdict == "SPLIT" and first[2] == 100.0
    facts[1] = remote_rank(3, "s3-moved", 104.0)
    moved = src.poll(110.0)["stacks"]
    assert moved[0] is False and moved[1].progressed == {3: "stack moved (on hk2)"}
    stalled, _, since = src.poll(111.0)["stacks"]
    assert stalled and since == 104.0

    # a move of this node's own files in the same poll as a dated remote one: the poll's time
    facts[1] = remote_rank(3, "s3-again", 112.0)
    wd = os.path.join(view.path, layout.WATCHDOG_DIR)
    rank0 = next(n for n in os.listdir(wd) if n.startswith("rank_0."))
    pid = int(rank0.split(".pid")[1].split(".")[0])
    shutil.copy(os.path.join(wd, rank0), os.path.join(wd, "rank_0.pid%d.log" % (pid + 1)))  # a new process
    both = src.poll(118.0)["stacks"]
    assert both[0] is False and set(both[1].progressed) == {0, 3}, both[1].progressed
    assert both[1].progressed[0].startswith("new process")
    stalled, _, since = src.poll(119.0)["stacks"]
    assert stalled and since == 118.0


def test_a_change_is_dated_when_its_node_knows_it_happened_before_the_take(tmp_path):
    """The node's answer says when the rank's stack last moved (``moved_at``, its watchdog
    thread's look) and when it last checked in (``checkpoint_at``): a change of stack or
    heartbeat counter is dated then, not when the node took its answer (seconds of probe
    later); a time after the take counts as the take."""
    _, facts, src = remote_facts_source(tmp_path)
    facts[1] = remote_rank(3, "s3-moved", 108.0, moved_at=5.5)
    assert src.poll(109.0)["stacks"][0] is False
    stalled, _, since = src.poll(110.0)["stacks"]
    assert stalled and since == 102.5

    facts[0] = remote_rank(2, "s2", 115.0, counter=4, checkpoint_at=2.0)  # a check-in, no move
    got = src.poll(116.0)["stacks"]
    assert got[0] is False and got[1].progressed[2].startswith("heartbeat 0->4")
    stalled, _, since = src.poll(117.0)["stacks"]
    assert stalled and since == 113.0

    facts[1] = remote_rank(3, "s3-again", 120.0, moved_at=-3.0)  # the node's look came after its take
    src.poll(121.0)
    stalled, _, since = src.poll(122.0)["stacks"]
    assert stalled and since == 120.0

    facts[0] = remote_rank(2, "s2", 124.0, counter=4, busy=1, checkpoint_at=2.0, busy_at=1.0)  # running Python
    got = src.poll(124.5)["stacks"]
    assert got[0] is False and got[1].progressed[2].startswith("main thread running Python")
    stalled, _, since = src.poll(125.0)["stacks"]
    assert stalled and since == 123.0

    facts.append(remote_rank(4, "s4", 130.0, moved_at=4.0))  # a process that started late
    got = src.poll(131.0)["stacks"]
    assert got[0] is False and got[1].progressed[4].startswith("new process")
    stalled, _, since = src.poll(132.0)["stacks"]
    assert stalled and since == 126.0


@pytest.mark.timeout(90)
def test_a_node_answer_says_when_its_blocked_rank_last_moved_and_its_busy_rank_checked_in(spawn, tmp_path):
    """Real armed ranks (watchdog period 0.4 s: the watchdog thread looks every 0.1 s): the
    node's facts give the blocked rank's last move (before the answer, never before it
    blocked, the same at the next answer) and the computing rank's last check-in; a dump
    newer than the watchdog thread's last look (a C-level dump: that thread could not run)
    gives no move time."""
    import time

    from testlib import blocked_in

    spawned = time.time()
    remote, procs, _ = start_two_ranks(spawn, tmp_path, 0.4)
    wait_for(lambda: blocked_in(procs[0].pid) not in (None, "running"), 30, what="rank 0 blocked")
    blocked = time.time()
    hb_dir = os.path.join(remote, layout.HEARTBEAT_DIR)
    # (a dump of the blocked stack, and looks of the watchdog thread well after it)
    wait_for(lambda: any(h.rank == 0 and h.checked_mono_s > time.monotonic() - 0.05 for h in read_heartbeats(hb_dir))
             and time.time() > blocked + 1.0, 30, what="looks after rank 0 blocked")

    def facts():
        before = time.time()
        got = {f["rank"]: f for f in slurm_probe.rank_facts_of_node(remote).values()}
        return got, before, time.time()

    got, before, after = facts()
    after += 0.002  # the times are rounded to the millisecond, and read through two clocks
    r0, r1 = got[0], got[1]
    assert "checkpoint_at" not in r0 and r0["counter"] == 0
    assert spawned < r0["moved_at"] <= after
    assert r1["counter"] > 0 and before - 30 < r1["checkpoint_at"] <= after
    assert ("busy_at" in r1) == (r1["busy"] > 0) and before - 30 < r1.get("busy_at", after) <= after
    wait_for(lambda: any(h.rank == 0 and h.checked_mono_s > time.monotonic() - 0.05 for h in read_heartbeats(hb_dir))
             and time.time() > after + 0.5, 30, what="more looks")
    again, _, _ = facts()
    # the same move (each answer converts it to the wall clock anew, to the millisecond)
    assert abs(again[0]["moved_at"] - r0["moved_at"]) <= 0.002 and again[0]["stack"] == r0["stack"]
    wd = os.path.join(remote, layout.WATCHDOG_DIR)
    log0 = next(n for n in os.listdir(wd) if n.startswith("rank_0."))
    future = time.time() + 60
    os.utime(os.path.join(wd, log0), (future, future))
    late, _, _ = facts()
    assert "moved_at" not in late[0] and late[0]["stack"] == r0["stack"]


def test_the_time_a_node_took_its_answer_is_kept_within_the_probe(tmp_path):
    """A node's ``taken_at`` (its own clock) becomes this monitor's monotonic time; a node
    whose clock is far off is held to the probe that carried its answer (not before it
    started, not after the answer arrived); no number: the arrival."""
    import time
    src = slurm_sources.SlurmStackSource(str(tmp_path / "s"), slurm_probe.View(str(tmp_path / "v")), [])
    now_mono, now_wall = time.monotonic(), time.time()
    started, arrived = now_mono - 8.0, now_mono - 0.5
    got = src.taken_mono(now_wall - 5.0, started, arrived)
    assert abs(got - (now_mono - 5.0)) < 0.5
    assert src.taken_mono(now_wall + 3600, started, arrived) == arrived
    assert src.taken_mono(now_wall - 3600, started, arrived) == started
    assert src.taken_mono(None, started, arrived) == arrived
    assert src.taken_mono("soon", started, arrived) == arrived


def test_python_m_slurm_probe_answers_as_the_cli_without_loading_it(tmp_path):
    """``python -m hpc_hangkit slurm-probe`` (how the monitor runs the probe on every node at
    every poll) gives the CLI command's answer without importing click or the roll call's
    report stages; a bad option still fails with a usage error."""
    import subprocess
    import sys

    from click.testing import CliRunner

    from hpc_hangkit.cli import cli

    b = node_scratch(str(tmp_path / "b"), (2, 3))
    argv = ["slurm-probe", "--scratch", b, "--answer", "summary", "--samples", "3"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(slurm_probe.__file__))))
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "hpc_hangkit"] + argv, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    loaded = {ln.rsplit("|", 1)[-1].strip() for ln in p.stderr.decode().splitlines() if ln.startswith("import time:")}
    assert "hpc_hangkit.rollcall.nodes" in loaded
    assert not {"click", "hpc_hangkit.cli", "hpc_hangkit.rollcall.verdict", "hpc_hangkit.rollcall.pipeline"} & loaded
    fast = parse_docs(p.stdout.decode())
    res = CliRunner().invoke(cli, argv)
    assert res.exit_code == 0, res.output
    via_cli = parse_docs(res.output)
    for d in fast + via_cli:
        d["summary"].pop("taken_at")
    assert fast == via_cli and fast[0]["answer"] == "summary"
    bad = subprocess.run([sys.executable, "-m", "hpc_hangkit", "slurm-probe", "--scratch", b, "--samples", "0"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert bad.returncode == 2 and b"--samples" in bad.stderr


def test_sstat_runs_beside_the_polls_and_its_newest_answer_is_the_evidence(tmp_path):
    """sstat asks every node of the job (seconds at 32 nodes): a stalled poll does not wait for
    it, it takes the newest finished answer (its counters as the step evidence, and the rule
    that a job with no user step running is not hung)."""
    import threading

    from hpc_hangkit.slurmjob import StepStat

    gates, calls = [threading.Event(), threading.Event()], []

    def stats():
        calls.append(1)
        n = len(calls)
        assert gates[min(n, 2) - 1].wait(60)  # each call answers when the test lets it
        batch = StepStat("7.batch", 1, 1.0, 0.0, 0.0)
        return [batch] if n == 1 else [batch, StepStat("7.0", 4, 8.0, 0.0, 0.0)]

    scratch = node_scratch(str(tmp_path / "a"), range(4))
    src = slurm_sources.SlurmStackSource(scratch, slurm_probe.View(str(tmp_path / "view")), [], stats=stats)
    assert src.poll(100.0)["stacks"][0] is False           # the first look: a baseline
    stalled, det, _ = src.poll(101.0)["stacks"]
    assert stalled and det.verdict == "SPLIT"
    assert getattr(det, "steps", None) is None and calls == [1]  # sstat has not answered: no wait
    gates[0].set()
    src._stats_bg.wait(60)
    # the first answer: only the batch step runs, so nothing is hung
    assert src.poll(102.0)["stacks"][0] is False
    gates[1].set()
    src._stats_bg.wait(60)                                 # that poll started the next call
    stalled, det, _ = src.poll(103.0)["stacks"]
    assert stalled and det.steps["7.0"]["ntasks"] == 4 and det.steps["7.0"]["cpu_delta_s"] is None
    assert len(calls) >= 2


def test_probes_leave_an_unreachable_node_out_and_ask_it_again_every_retry_interval(tmp_path):
    """A silent node holds a probe until its deadline: once it is named unreachable, the probes
    ask only the nodes that answer (so they end when those have), and every
    UNREACHABLE_RETRY_S seconds one asks it too; when it answers it is back in every probe."""
    asked, silent = [], {"hk3"}

    def probe(nodes, fold):
        asked.append(sorted(nodes))
        for n in nodes:
            if n not in silent:
                fold({"host": n, "answer": "summary", "summary": {}, "ranks": {}})
        return {n: "no answer within the probe's 10 s deadline" for n in nodes if n in silent}
    probe.streams = True

    local = tmp_path / "local"
    local.mkdir()
    src = slurm_sources.SlurmStackSource(str(local), slurm_probe.View(str(tmp_path / "view")),
                                         ["hk2", "hk3", "hk4"], probe=probe, idle_probe_s=0.0)
    retry = slurm_sources.UNREACHABLE_RETRY_S

    def poll(t):
        src.poll(t)
        assert src.background.wait(30)

    poll(0.0)
    assert asked == [["hk2", "hk3", "hk4"]]
    poll(1.0)  # takes the answer: hk3 is named; this poll's probe leaves it out
    assert set(src.unreachable) == {"hk3"} and asked[-1] == ["hk2", "hk4"]
    poll(2.0)
    poll(1.0 + retry - 0.5)
    assert asked[-2:] == [["hk2", "hk4"], ["hk2", "hk4"]]
    poll(1.0 + retry)  # the retry: everyone again
    assert asked[-1] == ["hk2", "hk3", "hk4"]
    silent.clear()
    poll(2.0 + retry)
    assert asked[-1] == ["hk2", "hk4"] and set(src.unreachable) == {"hk3"}  # (its answer is not in yet)
    poll(1.0 + 2 * retry)
    assert asked[-1] == ["hk2", "hk3", "hk4"]
    poll(2.0 + 2 * retry)  # it answered: no longer unreachable, in every probe
    assert not src.unreachable and asked[-1] == ["hk2", "hk3", "hk4"]


def test_a_suspect_on_an_unreachable_node_is_said_to_be_as_last_seen(tmp_path):
    """Rank 1 (the one elsewhere) is on the node that went silent: it stays the suspect (its
    last answer is the evidence there is), and the text and HTML reports say that its position
    is from before its node went silent; a node holding no suspect gets no such note."""
    import time
    from hpc_hangkit.report.html import render_html
    from hpc_hangkit.rollcall.unreachable import write_unreachable

    a = node_scratch(str(tmp_path / "a"), (0, 2))
    b = node_scratch(str(tmp_path / "b"), (1, 3))
    view = summary_view(str(tmp_path / "view"), a, b)
    write_unreachable(view.path, "hk2", time.time() - 30, [1, 3], "no answer within the probe's 10 s deadline")
    rep = report_from_dir(view.path)
    assert rep.verdict == "SPLIT" and rep.suspect_ranks == [1]
    line = next(ln for ln in render_text(rep).splitlines() if ln.startswith("  node hk2: "))
    assert line.endswith("deadline); suspect rank 1: position as last seen, before the node went silent"), line
    assert "ranks 1,3 as last seen; suspect rank 1: position as last seen, before the node went silent" in render_html(rep)

    view2 = summary_view(str(tmp_path / "view2"), node_scratch(str(tmp_path / "c"), (0, 1)),
                         node_scratch(str(tmp_path / "d"), (2, 3)))
    write_unreachable(view2.path, "hk2", time.time() - 30, [2, 3], "no answer within the probe's 10 s deadline")
    rep2 = report_from_dir(view2.path)
    assert rep2.suspect_ranks == [1] and "before the node went silent" not in render_text(rep2)
