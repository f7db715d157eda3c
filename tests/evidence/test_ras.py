"""NCCL RAS: parser, per-communicator rule (with H3's Detector, clock injected), client failures.

All RAS input is the real-format samples in tests/fixtures/nccl/ (see its README):
RAS needs GPUs, so the client is the stand-in tests/ncclras_standin/ncclras,
which replays those samples and prints the real client's stderr and exit codes.
"""
from testlib import TESTS
import dataclasses
import glob
import json
import os
import shutil
import time
from types import SimpleNamespace

import pytest

from hpc_hangkit.detect.detector import CONFIRMED, RECOVERED, SUSPECTED, Detector
from hpc_hangkit.parse.ncclras import (ABORT, DEAD, FINALIZE, INIT, NOCOMM, OPS, RUNNING, UNRESPONSIVE,
                                       RasParseError, parse_ncclras_json, parse_ncclras_text, repair_json)
from hpc_hangkit.evidence.ras import (RasClient, RasSource, RasUnavailable, assess, parse_ras_addr,
                             section_from_dir)

HERE = TESTS
NCCL = os.path.join(HERE, "fixtures", "nccl")
STANDIN = os.path.join(HERE, "ncclras_standin", "ncclras")
WORLD = "0x9a1c3f0e5b7d2468"


def load(name):
    with open(os.path.join(NCCL, name), "rb") as f:
        return parse_ncclras_json(f.read(), name)


def history():
    return [load("b_history/poll_%02d.json" % i) for i in range(1, 6)]


def settings(**kw):
    base = dict(ncclras_path=STANDIN, ncclras_address=None, ncclras_timeout_s=5,
                poll_interval_s=15, confirm_duration_s=30)
    base.update(kw)
    return SimpleNamespace(**base)


# --- parser ------------------------------------------------------------------

def test_every_json_sample_parses_with_ncclrank_statuses():
    for f in glob.glob(os.path.join(NCCL, "*.json")) + glob.glob(os.path.join(NCCL, "b_history", "*.json")):
        if f.endswith("schema.json"):
            continue
        with open(f, "rb") as fh:
            p = parse_ncclras_json(fh.read(), f)
        assert not p.repaired, f
    st = lambda name: {r.rank: r.status for c in load(name).comms.values() if c.key == WORLD
                       for r in c.ranks + c.missing}
    assert st("d1_rank_aborting.json")[3] == ABORT
    d2 = st("d2_teardown_finalize_nocomm.json")
    assert (d2[4], d2[5], d2[6], d2[7], d2[0]) == (FINALIZE, FINALIZE, NOCOMM, NOCOMM, RUNNING)
    d3 = load("d3_comm_init_in_progress.json")
    sub = [c for c in d3.comms.values() if c.size == 4][0]
    assert [r.status for r in sub.ranks] == [RUNNING, RUNNING, INIT] and sub.missing[0].status == NOCOMM
    assert st("e1_rank6_unresponsive.json")[6] == UNRESPONSIVE
    assert st("e2_rank6_dead.json")[6] == DEAD
    assert load("z_no_communicators.json").comms == {}


def test_2_28_missing_comma_is_repaired_and_equals_the_fixed_release():
    with open(os.path.join(NCCL, "e2_rank6_dead_nccl2.28.9.malformed-json.txt")) as f:
        raw = f.read()
    with pytest.raises(ValueError):
        json.loads(raw)
    fixed, changed = repair_json(raw)
    assert changed and json.loads(fixed)
    bad = parse_ncclras_json(raw, "2.28.9")
    good = load("e2_rank6_dead.json")
    assert bad.repaired and bad.nccl_version == "2.28.9"
    assert bad.comms[WORLD].missing == good.comms[WORLD].missing
    assert bad.comms[WORLD].ranks == good.comms[WORLD].ranks


@pytest.mark.parametrize("data", [b"", b"not json", b'{"nccl_version": "2.30.7", "communicators": [ {',
                                  b'{"a": 1}', b"[1, 2]"])
def test_malformed_json_raises_clear_error(data):
    with pytest.raises(RasParseError) as e:
        parse_ncclras_json(data, "poll.json")
    assert "poll.json" in str(e.value)


def test_text_report_mismatch_block():
    with open(os.path.join(NCCL, "b_allreduce_rank5_behind.txt")) as f:
        rep = parse_ncclras_text(f.read())
    assert rep.complete and rep.nccl_version == "2.30.7"
    (b,) = rep.blocks
    assert b["hash"] == WORLD and b["kinds"] == ["MISMATCH"]
    assert b["ops"]["AllReduce"] == [(7, 15234, None), (1, 15233, 5)]
    truncated = rep.text.split("Communicators...")[0] + "Communicators..."
    assert not parse_ncclras_text(truncated).complete


def test_parse_ras_addr():
    assert parse_ras_addr(None) == ("localhost", 28028)
    assert parse_ras_addr("10.0.0.5:29000") == ("10.0.0.5", 29000)
    assert parse_ras_addr("[::1]:29001") == ("::1", 29001)
    assert parse_ras_addr("node7") == ("node7", 28028)
    with pytest.raises(ValueError, match="NCCL_RAS_ADDR"):
        parse_ras_addr("node7:http")


# --- the per-communicator rule, clock injected ----------------------------------

def run_rule(polls, poll_s=15.0, confirm_s=30.0, suspect_s=15.0, report_s=30.0):
    """Feed polls (one every poll_s seconds) through assess + H3's Detector; return [(t, Event)]."""
    det = Detector(poll_s, confirm_s, suspect_s, report_s)
    prev, out = None, []
    for i, cur in enumerate(polls):
        t = i * poll_s
        for key, st in assess(prev, cur).items():
            for ev in det.update(t, key, st.stalled, st):
                out.append((t, ev))
        prev = cur
    return out, det


def test_b_history_confirms_the_world_communicator_with_rank5_behind():
    polls = history() + [history()[-1]] * 2     # the job stays frozen
    events, det = run_rule(polls)
    # polls 1-3 advance (3 = the moment of the hang), 4.. frozen: streak starts at poll 3 (t=30)
    confirmed = [(t, e) for t, e in events if e.kind == CONFIRMED]
    assert [(t, e.key) for t, e in confirmed] == [(60.0, WORLD)]
    st = confirmed[0][1].detail
    assert st.behind_ranks == [5] and st.ops == ["AllReduce"] and st.counts["AllReduce"] == {15233: [5],
                                                                                              15234: [0, 1, 2, 3, 4, 6, 7]}
    assert confirmed[0][1].stalled_for_s == 30.0
    # the transient skew of poll 2 (ranks 2 and 5 behind but advancing) never counted
    assert not assess(polls[0], polls[1])[WORLD].stalled and assess(polls[0], polls[1])[WORLD].disagree


def test_recovery_resets_the_streak():
    frozen = load("b_allreduce_rank5_behind.json")
    healthy = load("a_healthy_world8.json")           # rank 5 launched its AllReduce: progress
    events, det = run_rule([frozen, frozen, frozen, healthy, healthy], confirm_s=60)
    kinds = [e.kind for _, e in events]
    assert kinds == [SUSPECTED, RECOVERED]
    assert det.state(WORLD).stalled_polls == 0 and not det.confirmed_keys()


def _advance_world(poll, by):
    """The same poll with the world communicator's counts advanced (a healthy world that keeps moving)."""
    comms = dict(poll.comms)
    w = comms[WORLD]
    ranks = tuple(dataclasses.replace(r, counts=tuple(c + by for c in r.counts)) for r in w.ranks)
    comms[WORLD] = dataclasses.replace(w, ranks=ranks)
    return dataclasses.replace(poll, comms=comms)


def test_stuck_subcommunicator_confirmed_beside_a_healthy_world():
    base = load("c_tp_subcomm_hang_minimal.json")
    polls = [_advance_world(base, 10 * i) for i in range(5)]
    events, det = run_rule(polls)
    confirmed = [e for _, e in events if e.kind == CONFIRMED]
    assert len(confirmed) == 1
    st = confirmed[0].detail
    assert st.key != WORLD and st.size == 4 and st.behind_ranks == [2]
    assert det.state(WORLD).stalled_polls == 0           # the world kept moving
    assert not assess(polls[0], polls[1])[WORLD].stalled


@pytest.mark.parametrize("name,rank,status", [("d1_rank_aborting.json", 3, ABORT),
                                              ("d2_teardown_finalize_nocomm.json", 6, NOCOMM),
                                              ("e2_rank6_dead.json", 6, DEAD)])
def test_a_non_running_rank_skips_the_communicator(name, rank, status):
    p = load(name)
    st = assess(p, p)[WORLD]
    assert not st.eligible and not st.stalled and st.not_running[rank] == status
    assert "skipped" in st.describe()
    events, _ = run_rule([p] * 6)
    assert events == []


def test_idle_skewed_communicator_is_a_documented_false_positive():
    """A DP pair communicator idling with a 1-op skew (it waits on a hung TP peer, or a slow pipeline
    stage) looks exactly like a hang: the rule confirms it. That is why the default mode is observe
    (log + capture, never fail the job); see docs/ras.md "False positives"."""
    p = load("c_tp_subcomm_hang_with_dp.json")
    events, _ = run_rule([p] * 4)
    confirmed = {e.key: e.detail for _, e in events if e.kind == CONFIRMED}
    pairs = [k for k, st in confirmed.items() if st.size == 2]
    assert pairs, "the idle skewed pair communicators are confirmed too"
    assert all(st.ops == ["AllReduce"] for st in confirmed.values())


@pytest.mark.parametrize("confirm_s,expect_t", [(30, 60.0), (31, 75.0), (45, 75.0), (46, 90.0)])
def test_confirm_time_rounds_up_to_whole_polls(confirm_s, expect_t):
    frozen = load("b_allreduce_rank5_behind.json")
    events, det = run_rule([load("a_healthy_world8.json")] * 0 + history() + [frozen] * 6, confirm_s=confirm_s,
                           suspect_s=10)
    assert det.confirm_polls == -(-confirm_s // 15)
    assert [t for t, e in events if e.kind == CONFIRMED] == [expect_t]


def test_equal_frozen_counts_are_not_a_rule_hit_and_section_says_together(tmp_path):
    """Scenario 8: every rank launched the same collective and none completed."""
    a = load("a_healthy_world8.json")
    st = assess(a, a)[WORLD]
    assert st.frozen_equal and not st.stalled and not st.disagree
    d = tmp_path / "nccl_ras"
    d.mkdir()
    src = os.path.join(NCCL, "a_healthy_world8.json")
    shutil.copy(src, d / "ncclras_2026-06-11-14-02-47.json")
    shutil.copy(src, d / "ncclras_2026-06-11-14-02-47_002.json")
    sec = section_from_dir(str(tmp_path))
    assert sec["verdict"] == "TOGETHER" and sec["suspect_ranks"] is None and sec["groups"] == []
    assert "network" in " ".join(sec["text"])


# --- history and the roll-call section --------------------------------------------

def test_section_from_b_history(tmp_path):
    src = RasSource(settings(), out_dir=str(tmp_path))
    for p in history():
        src._write(p)
    sec = section_from_dir(str(tmp_path))
    assert sec["verdict"] == "MISSED" and sec["suspect_ranks"] == [5]
    (c,) = sec["communicators"]
    assert c["behind_comm_ranks"] == [5] and c["first_ops"] == ["AllReduce"] and c["pattern"] == "sudden"
    assert c["frozen_polls"] == 2 and c["frozen_since"] == "2026-06-11 14:02:32"
    txt = "\n".join(sec["text"])
    assert "9a1c3f0e5b7d2468" in txt and "AllReduce" in txt and "ranks behind: 5" in txt


def test_section_skips_truncated_history_file_with_warning(tmp_path):
    d = tmp_path / "nccl_ras"
    d.mkdir()
    for i, p in enumerate(sorted(glob.glob(os.path.join(NCCL, "b_history", "*.json")))):
        shutil.copy(p, d / ("ncclras_%02d.json" % i))
    data = (d / "ncclras_04.json").read_bytes()
    (d / "ncclras_04.json").write_bytes(data[:1000])
    sec = section_from_dir(str(tmp_path))
    assert any("ncclras_04.json" in line and "warning" in line for line in sec["text"])
    assert sec["communicators"][0]["behind_comm_ranks"] == [5]


def test_subcomm_section_names_the_sub_communicator(tmp_path):
    d = tmp_path / "nccl_ras"
    d.mkdir()
    for n in ("01", "02"):
        shutil.copy(os.path.join(NCCL, "c_tp_subcomm_hang_minimal.json"), d / ("ncclras_%s.json" % n))
    sec = section_from_dir(str(tmp_path))
    (c,) = sec["communicators"]
    assert c["size"] == 4 and c["behind_comm_ranks"] == [2]
    assert "e7c9a1b3d5f70913" in "\n".join(sec["text"])


# --- the client against the stand-in ---------------------------------------------

@pytest.fixture
def standin(tmp_path, monkeypatch):
    d = tmp_path / "polls"
    shutil.copytree(os.path.join(NCCL, "b_history"), d)
    monkeypatch.setenv("NCCLRAS_STANDIN_DIR", str(d))
    monkeypatch.setenv("NCCLRAS_STANDIN_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("NCCLRAS_STANDIN_LOG", str(tmp_path / "argv.log"))
    monkeypatch.delenv("NCCLRAS_STANDIN_MODE", raising=False)
    monkeypatch.delenv("NCCL_RAS_ADDR", raising=False)
    return tmp_path


@pytest.mark.timeout(60)
def test_source_replays_history_writes_files_and_report(standin, monkeypatch):
    monkeypatch.setenv("NCCLRAS_STANDIN_TEXT", os.path.join(NCCL, "b_allreduce_rank5_behind.txt"))
    out = standin / "hd"
    src = RasSource(settings(confirm_duration_s=15), out_dir=str(out), env={"NCCL_RAS_ADDR": "127.0.0.1:28999"})
    det = Detector(15, 15, 15, 30)
    confirmed = []
    for i in range(14):
        for key, (stalled, st) in src.poll(i * 15.0).items():
            confirmed += [e for e in det.update(i * 15.0, key, stalled, st) if e.kind == CONFIRMED]
    assert [e.key for e in confirmed] == [WORLD]
    files = sorted(os.listdir(out / "nccl_ras"))
    assert len(files) == 1 + 10  # confirm window (1 poll) + margin
    path = src.write_report()
    assert "Rank 5 has launched up to operation 15233" in open(path).read()
    # the still-suspected log reads the detail's text: the -f text report, fetched once per poll
    assert "Rank 5 has launched" in confirmed[0].detail.text
    ev = json.loads(json.dumps(confirmed[0].detail.to_json()))
    assert ev["behind_ranks"] == [5] and ev["counts"]["AllReduce"]["15233"] == [5]
    # capture into another directory copies the kept history and the report
    other = standin / "captured"
    from hpc_hangkit.evidence.ras import capture_hook
    ctx = SimpleNamespace(hd_dir=str(other), problem=lambda line: None)
    capture_hook(ctx)
    sec = section_from_dir(str(other))
    assert sec["verdict"] == "MISSED" and sec["suspect_ranks"] == [5]
    argv = json.loads(open(standin / "argv.log").readline())
    assert argv[argv.index("-h") + 1] == "127.0.0.1" and argv[argv.index("-p") + 1] == "28999"
    assert argv[argv.index("-f") + 1] == "json"


def test_missing_binary_disables_source_with_one_warning(standin, caplog):
    src = RasSource(settings(ncclras_path=str(standin / "no" / "ncclras")))
    with caplog.at_level("WARNING", logger="hpc_hangkit.evidence.ras"):
        assert src.poll(0) == {} and src.poll(15) == {} and src.poll(30) == {}
    warns = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warns) == 1 and "not found" in warns[0].getMessage()
    assert src.disabled and "disabled" in src.disabled
    assert "unavailable" in src.client.text_report()


@pytest.mark.parametrize("mode,needle", [("old_client", "older than NCCL 2.28.7"),
                                         ("old_library", "library is older than 2.28.7")])
def test_old_client_or_library_disables_source(standin, monkeypatch, mode, needle):
    monkeypatch.setenv("NCCLRAS_STANDIN_MODE", mode)
    c = RasClient(settings())
    with pytest.raises(RasUnavailable, match=needle):
        c.poll(0)
    assert c.poll(15) is None and needle in c.disabled
    assert sum(1 for _ in open(standin / "argv.log")) == 1  # never run again


@pytest.mark.parametrize("mode,needle", [("garbage", "not valid ncclras JSON"),
                                         ("no_listener", "Connection refused"),
                                         ("closed", "unexpectedly closed")])
def test_transient_failures_retry_next_poll(standin, monkeypatch, mode, needle):
    monkeypatch.setenv("NCCLRAS_STANDIN_MODE", mode)
    c = RasClient(settings())
    assert c.poll(0) is None and needle in c.last_error and not c.disabled
    monkeypatch.setenv("NCCLRAS_STANDIN_MODE", "replay")
    assert c.poll(15) is not None and c.last_error is None


@pytest.mark.timeout(30)
def test_silent_peer_is_killed_at_our_timeout(standin, monkeypatch):
    monkeypatch.setenv("NCCLRAS_STANDIN_MODE", "silent")
    c = RasClient(settings(ncclras_timeout_s=2))
    t0 = time.monotonic()
    assert c.poll(0) is None
    took = time.monotonic() - t0
    assert 1.9 <= took < 5, took
    assert "no answer within 2 s" in c.last_error and "retrying" in c.last_error
    assert not c.disabled


def _heartbeat(d, rank, pid, host):
    """A heartbeat record in the watchdog core's own format (what an armed rank writes)."""
    from hpc_hangkit.boot import _hangkit_core as core
    path = os.path.join(str(d), core.rank_file_name(rank, pid, core.HEARTBEAT_SUFFIX))
    m = core._create_heartbeat(path, (core.HB_MAGIC, core.HB_VERSION, core.HB_SIZE, rank, 8, rank % 4, pid, pid,
                                      23, 30.0, time.time(), time.monotonic(), host.encode()))
    m.close()


def test_subcomm_ranks_mapped_to_global_ranks_through_heartbeats(tmp_path):
    """TP communicator {4-7}: its comm rank 2 is global rank 6 (host 192.0.2.12, pid 20117)."""
    d = tmp_path / "nccl_ras"
    d.mkdir()
    for n in ("01", "02"):
        shutil.copy(os.path.join(NCCL, "c_tp_subcomm_hang_minimal.json"), d / ("ncclras_%s.json" % n))
    hb = tmp_path / "heartbeats"
    hb.mkdir()
    poll = load("c_tp_subcomm_hang_minimal.json")
    for r in poll.comms[WORLD].ranks:  # the world communicator: comm rank == global rank
        _heartbeat(hb, r.rank, r.pid, "node-%s" % r.host.rsplit(".", 1)[-1])
    sec = section_from_dir(str(tmp_path))
    (c,) = sec["communicators"]
    assert c["behind_comm_ranks"] == [2] and c["behind_global_ranks"] == [6]
    assert sec["suspect_ranks"] == [6]
    assert "ranks behind: 2 (global 6)" in "\n".join(sec["text"])


def test_slow_drift_is_told_apart_from_a_sudden_stop(tmp_path):
    """Rank 5 falls 1, 2, 3 AllReduce behind while everyone still advances, then all stop: a straggler."""
    with open(os.path.join(NCCL, "b_history", "poll_01.json")) as f:
        base = json.load(f)
    d = tmp_path / "nccl_ras"
    d.mkdir()
    for i, (adv, lag) in enumerate([(0, 0), (10, 1), (20, 2), (30, 3), (30, 3), (30, 3)]):
        doc = json.loads(json.dumps(base))
        doc["timestamp"] = "2026-06-11 14:%02d:00" % i
        for r in doc["communicators"][0]["ranks"]:
            r["collective_counts"]["AllReduce"] += adv - (lag if r["rank"] == 5 else 0)
        (d / ("ncclras_%02d.json" % i)).write_text(json.dumps(doc, indent=2))
    sec = section_from_dir(str(tmp_path))
    (c,) = sec["communicators"]
    assert c["pattern"] == "drift" and c["behind_comm_ranks"] == [5] and c["frozen_polls"] == 2
    assert "straggler" in "\n".join(sec["text"])
