"""Slurm pieces that need no cluster: job ids, scontrol/sstat parsing, the
requeue rule, the framed probe answers, the view mirror, the prolog's
hostile-input handling (run for real as a subprocess against a temp root).

The real-cluster tests are in test_slurm_cluster.py.
"""
from testlib import REPO, wait_for
import io
import json
import os
import signal
import stat
import subprocess
import sys
import threading

import pytest

from fakeslurm import FakeCommands, Reply
from hpc_hangkit import gather, layout, wire
from hpc_hangkit.capture.whyfile import is_why_data
from hpc_hangkit.slurm import batch
from hpc_hangkit.slurm import requeue as slurm_requeue
from hpc_hangkit.slurm import probe as slurm_probe
from hpc_hangkit.slurm import sources as slurm_sources
from hpc_hangkit import slurmjob as slurm



@pytest.mark.parametrize("good", ["1", "123", "123_4", "4294967294_0"])
def test_job_id_accepts_plain_and_array_ids(good):
    assert layout.validate_job_id(good) == good


@pytest.mark.parametrize("bad", ["", "abc", "12.0", "123_[1-3]", "123+0", "-1", "1 2", "../1",
                                 "123_", "_4", "1;rm -rf /"])
def test_job_id_rejects_everything_else(bad):
    with pytest.raises(ValueError, match="invalid Slurm job id"):
        layout.validate_job_id(bad)


def test_attempt_from_env_prolog_job_and_unset():
    assert slurm.attempt_from_env({}) == 0
    assert slurm.attempt_from_env({"SLURM_RESTART_COUNT": "2"}) == 2
    assert slurm.attempt_from_env({"SLURM_JOB_RESTART_COUNT": "1"}) == 1
    assert slurm.attempt_from_env({"SLURM_RESTART_COUNT": "x"}) == 0


def test_parse_kv_line_keeps_values_with_spaces():
    line = ("JobId=57 JobName=my job UserId=hkuser(1001) JobState=RUNNING Requeue=1 Restarts=2 "
            "BatchFlag=1 NodeList=hk[1-2] WorkDir=/home/a b/c Comment=hpc-hangkit: x=1 y StdOut=/o")
    kv = slurm.parse_kv_line(line)
    assert kv["JobId"] == "57" and kv["JobName"] == "my job"
    assert kv["WorkDir"] == "/home/a b/c"
    assert kv["Requeue"] == "1" and kv["Restarts"] == "2" and kv["StdOut"] == "/o"


def test_parse_sstat_real_22_05_output():
    # captured on the testbed (Slurm 22.05.8): sstat -a -n -P --format=JobID,NTasks,AveCPU,AveDiskRead,AveDiskWrite
    text = "8.batch|1|00:00:00|62465|2488\n8.0|4|00:00:02|1697385|1708\n"
    st = slurm.parse_sstat(text)
    assert [s.step for s in st] == ["8.batch", "8.0"]
    assert st[1].ntasks == 4 and st[1].cpu_s == 8.0 and st[1].read_bytes == 1697385 * 4


def test_parse_sstat_skips_gather_none_garbage_and_bad_lines():
    text = "9.0|0|213503982334-14:25:51||\nnot|a|line\n9.1|2|1-00:00:01.500|1.5K|2M\n"
    st = slurm.parse_sstat(text)
    assert [s.step for s in st] == ["9.1"]
    assert st[0].cpu_s == 2 * (86400 + 1.5)
    assert st[0].read_bytes == 2 * 1536 and st[0].write_bytes == 2 * 2 * 1024 ** 2


def test_srun_overlap_refuses_bad_node_names_before_running_anything():
    with pytest.raises(ValueError, match="invalid node name"):
        slurm.srun_overlap("12", ["hk1", "hk2;reboot"], ["true"])
    with pytest.raises(ValueError, match="invalid Slurm job id"):
        slurm.srun_overlap("12 13", ["hk1"], ["true"])


SIG_A = {"verdict": "SPLIT", "suspect_ranks": [1], "where": ["train.py:54 main (in barrier)"]}
SIG_B = {"verdict": "SPLIT", "suspect_ranks": [3], "where": ["train.py:80 eval (in barrier)"]}


#: ``scontrol show step -o 5.0`` on the 22.05.8 test cluster
STEP_LINE_22_05 = ("StepId=5.0 UserId=1001 StartTime=2026-12-01T23:40:47 TimeLimit=UNLIMITED State=RUNNING "
                   "Partition=debug NodeList=hk[1-2] Nodes=2 CPUs=3 Tasks=3 Name=sleep Network=(null) "
                   "TRES=cpu=3,mem=0,node=2 ResvPorts=(null) CPUFreqReq=Default Dist=Block "
                   "SrunHost:Pid=vm:2178\n")


def test_parse_step_line_real_22_05_output():
    kv = slurm.parse_step_line(STEP_LINE_22_05)
    assert (kv["StepId"], kv["State"], kv["NodeList"], kv["Tasks"]) == ("5.0", "RUNNING", "hk[1-2]", "3")
    assert slurm.parse_step_line("Job step 5.7 not found\n") is None


@pytest.mark.parametrize("bad", ["5", "5.batch", "5.extern", "5_1.0", "5.0;rm", "-1.0", "5..0", ""])
def test_step_id_accepts_only_job_dot_number(bad):
    assert slurm.validate_step_id(" 12.3 ") == ("12", "3")
    with pytest.raises(ValueError):
        slurm.validate_step_id(bad)


def test_step_monitor_dir_is_per_job_and_step_under_home():
    assert layout.step_monitor_dir("/home/u", "12", "3") == "/home/u/.hpc-hangkit/jobs/12/step_3"
    for bad in ("x", "-1", "../1"):
        with pytest.raises(ValueError):
            layout.step_monitor_dir("/home/u", "12", bad)
    with pytest.raises(ValueError):
        layout.step_monitor_dir("/home/u", "../12", "3")


def test_decide_observe_never_requeues():
    d = slurm_requeue.decide("observe", True, True, slurm_requeue.RequeueState(), SIG_A, 0, 1)
    assert d.action == "keep"


def test_decide_fail_requeues_within_budget():
    d = slurm_requeue.decide("fail", True, True, slurm_requeue.RequeueState(), SIG_A, 0, 1)
    assert d.action == "requeue" and "1 of 1" in d.reason


def test_decide_no_requeue_flag_is_refused_with_reason():
    d = slurm_requeue.decide("fail", False, True, slurm_requeue.RequeueState(), SIG_A, 0, 1)
    assert d.action == "end" and "--no-requeue" in d.reason


def test_decide_repeat_beats_budget_and_names_it():
    state = slurm_requeue.RequeueState.from_json({"hang_requeues": 1, "hangs": [{"attempt": 0, "signature": SIG_A}]})
    d = slurm_requeue.decide("fail", True, True, state, SIG_A, 1, 1)
    assert d.action == "end" and "repeat" in d.reason and "attempt 0" in d.reason


def test_decide_different_hang_with_budget_left_requeues_again():
    state = slurm_requeue.RequeueState.from_json({"hang_requeues": 1, "hangs": [{"attempt": 0, "signature": SIG_A}]})
    assert slurm_requeue.decide("fail", True, True, state, SIG_B, 1, 2).action == "requeue"
    d = slurm_requeue.decide("fail", True, True, state, SIG_B, 1, 1)
    assert d.action == "end" and "budget is spent (1 of 1" in d.reason


def test_decide_budget_ignores_slurm_restart_count():
    # attempt 1 after an admin requeue / preemption: our own count is still 0
    assert slurm_requeue.decide("fail", True, True, slurm_requeue.RequeueState(), SIG_A, 1, 1).action == "requeue"


def test_signature_from_real_report_json():
    d = json.load(open(os.path.join(REPO, "tests", "fixtures", "slurm", "report_split_rank1.json")))
    sig = slurm_requeue.signature(d)
    assert sig["suspect_ranks"] == [1]
    assert sig["where"] == ["gloo_divergent.py:54 main (in barrier)"]


def test_framed_docs_survive_srun_line_splitting_and_interleaving():
    docs = []
    for host in ("hk1", "hk2"):
        buf = io.StringIO()
        wire.emit_doc({"host": host, "files": {"x": os.urandom(2500).hex()}}, buf)
        docs.append(buf.getvalue().splitlines())
    # srun -l labels every line and interleaves the nodes
    mixed = []
    for i in range(max(len(d) for d in docs)):
        for t, d in enumerate(docs):
            if i < len(d):
                mixed.append("%d: %s" % (t, d[i]))
    got = wire.parse_docs("srun: warning\n" + "\n".join(mixed) + "\n")
    assert sorted(d["host"] for d in got) == ["hk1", "hk2"]
    assert all(len(d["files"]["x"]) == 5000 for d in got)


def test_incomplete_framed_doc_is_skipped():
    buf = io.StringIO()
    wire.emit_doc({"host": "hk1", "data": os.urandom(3000).hex()}, buf)
    lines = buf.getvalue().splitlines()
    assert len(lines) > 1
    assert wire.parse_docs("\n".join(lines[:-1])) == []


def _rank_log(d, rank, pid, text):
    os.makedirs(os.path.join(d, layout.WATCHDOG_DIR), exist_ok=True)
    p = os.path.join(d, layout.WATCHDOG_DIR, layout.watchdog_log_name(rank, pid))
    with open(p, "ab") as f:
        f.write(text)
    return p


def test_view_mirrors_growing_logs_byte_for_byte(tmp_path):
    src, view = str(tmp_path / "src"), slurm_probe.View(str(tmp_path / "view"))
    p = _rank_log(src, 0, 11, b"# hpc-hangkit rank=0\nfirst dump\n")
    view.apply(slurm_probe.rank_files(src, since=view.sizes))
    _rank_log(src, 0, 11, b"second dump\n")
    assert view.apply(slurm_probe.rank_files(src, since=view.sizes)) == 1
    assert view.apply(slurm_probe.rank_files(src, since=view.sizes)) == 0   # nothing new
    with open(os.path.join(view.path, "watchdog", os.path.basename(p)), "rb") as f:
        assert f.read() == open(p, "rb").read()


def test_rank_files_never_follows_symlinks(tmp_path):
    src = str(tmp_path / "src")
    _rank_log(src, 0, 11, b"# hpc-hangkit rank=0\n")
    secret = tmp_path / "secret"
    secret.write_text("root only")
    os.symlink(str(secret), os.path.join(src, "watchdog", "rank_1.pid12.log"))
    files = slurm_probe.rank_files(src)
    assert list(files) == ["watchdog/rank_0.pid11.log"]


# --- the prolog, run for real (as root: it chowns) against a temporary scratch root

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the prolog chowns scratch to the job's user: needs root")


def _run_prolog(tmp_path, mode="observe", uid=None, extra_env=None):
    cfg = tmp_path / "config.toml"
    cfg.write_text('scratch_dir = "%s"\npoll_interval_s = 1\nconfirm_duration_s = 3\n' % (tmp_path / "scratch"))
    uid = os.getuid() if uid is None else uid
    env = {"SLURM_JOB_ID": "77", "SLURM_JOB_UID": str(uid), "SLURM_JOB_GID": str(uid),
           "SLURM_JOB_USER": "x", "SLURM_JOB_RESTART_COUNT": "1", "SPANK_HANGKIT_MODE": mode,
           "HPC_HANGKIT_CONFIG": str(cfg), "PYTHONPATH": REPO}
    env.update(extra_env or {})
    p = subprocess.run([sys.executable, os.path.join(REPO, "slurm", "prolog")], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    return p, tmp_path / "scratch" / "job_77" / "attempt_1"


@needs_root
def test_prolog_creates_user_owned_0700_attempt_scratch_and_job_env(tmp_path):
    p, att = _run_prolog(tmp_path, uid=4321)
    assert p.returncode == 0, p.stderr
    st = os.lstat(att)
    assert st.st_uid == 4321 and stat.S_IMODE(st.st_mode) == 0o700
    for sub in ("watchdog", "heartbeats", "unwatched", "hang_detector"):
        assert os.lstat(att / sub).st_uid == 4321
    env = dict(line.split("=", 1) for line in (att / "hangkit.env").read_text().splitlines()
               if line and not line.startswith("#"))
    assert env["HANGKIT_MODE"] == "observe"
    assert env["HANGKIT_SCRATCH_DIR"] == str(att)
    assert env["PYTHONPATH"].endswith(os.path.join("hpc_hangkit", "boot"))
    assert env["HANGKIT_CONFIRM_DURATION_S"] == "3.0"
    root_st = os.lstat(tmp_path / "scratch")
    assert root_st.st_uid == 0 and not root_st.st_mode & 0o022


@needs_root
def test_prolog_off_mode_does_nothing(tmp_path):
    p, att = _run_prolog(tmp_path, mode="off")
    assert p.returncode == 0 and not (tmp_path / "scratch").exists()


@needs_root
def test_prolog_moves_a_planted_symlink_aside_and_never_follows_it(tmp_path):
    target = tmp_path / "victim"
    target.mkdir()
    os.symlink(str(target), str(tmp_path / "scratch"))
    p, att = _run_prolog(tmp_path, uid=4321)
    assert p.returncode == 0
    assert list(target.iterdir()) == []                     # nothing written through the link
    assert not os.path.islink(tmp_path / "scratch")          # replaced by a real root-owned dir
    assert os.lstat(att).st_uid == 4321
    assert any(n.startswith("scratch.moved-aside.") for n in os.listdir(tmp_path))
    assert b"moved scratch aside" in p.stderr


@needs_root
def test_prolog_exits_0_on_a_broken_site_config(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("confirm_duration_s = 'soon'\n")
    p, _ = _run_prolog(tmp_path, extra_env={"HPC_HANGKIT_CONFIG": str(cfg)})
    assert p.returncode == 0
    assert b"cannot load the site settings" in p.stderr


# --------------------------------------------------------------------------- requeue vs. its own kill
#
# Found on the testbed (Slurm 22.05, job 142 of a CI run): `scontrol requeue`, run by the
# monitor inside the batch step, was killed by the requeue's own SIGTERM before its
# answer arrived ("failed (exit -15)") although the job WAS requeued; the monitor took
# that for a refusal and scancel'ed the requeued job (attempt 2 ended CANCELLED).
# That race cannot be forced on the real cluster, so these stand-in Slurm commands
# replay exactly what the real ones did: scontrol requeue records the requeue, then
# dies by SIGTERM; scontrol show job -o then prints the incremented Restarts.

def _fake_scontrol(fake, requeue, attempt):
    """scontrol requeue: ``took`` records the requeue, then dies by SIGTERM; ``refused``
    answers Slurm's refusal. scontrol show job -o then prints the incremented Restarts;
    show hostnames expands the one-node list."""
    took = [Reply(["requeue"], set_state="requeued", signal=signal.SIGTERM)] if requeue == "took" else []
    refused = [Reply(["requeue"], rc=1, stderr="scontrol: error: Requested operation is presently disabled\n")] \
        if requeue == "refused" else []
    show = "JobId={argv[3]} JobName=j UserId=u(1001) JobState=%s Requeue=1 Restarts=%d BatchFlag=1 NodeList=hk1\n"
    fake.add("scontrol", *(took + refused + [
        Reply(["show", "job"], when_state="requeued", stdout=show % ("PENDING", 1 + attempt), format=True),
        Reply(["show", "job"], stdout=show % ("RUNNING", attempt), format=True),
        Reply(["show", "hostnames"], stdout="hk1\n")]))


def _monitor_with_fake_slurm(tmp_path, monkeypatch, requeue):
    from hpc_hangkit.config import load_settings
    fake = FakeCommands(tmp_path / "bin")
    _fake_scontrol(fake, requeue, attempt=1)
    fake.add("scancel")
    # the user's own Comment, with what scontrol's key=value line would split
    fake.add("squeue", Reply(["-h", "-t", "all", "-j", "77", "-o", "%k"], stdout="mine a=b  c\n"))
    monkeypatch.setenv("PATH", fake.path())
    settings = load_settings(env={}, path=None, overrides={
        "mode": "fail", "storage_url": "file://%s" % (tmp_path / "storage"), "max_hang_requeues": 1})
    scratch = tmp_path / "scratch" / "job_77" / "attempt_1"
    scratch.mkdir(parents=True)
    env = {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "1", "HANGKIT_SCRATCH_DIR": str(scratch),
           "SLURM_JOB_NODELIST": "hk1", "HOME": str(tmp_path)}
    bm = batch.BatchMonitor(settings, env, [sys.executable, "-m", "hpc_hangkit"])
    rep = {"verdict": "SPLIT", "suspect_ranks": [1], "groups": []}
    return bm, rep, fake


@pytest.mark.timeout(60)
@pytest.mark.parametrize("requeue", ["took", "refused"])
def test_requeue_killed_by_its_own_sigterm_is_not_taken_for_a_refusal(tmp_path, monkeypatch, requeue):
    """took: scontrol requeue dies by SIGTERM after Slurm requeued the job -> the job
    must live on (no Comment, no scancel). refused: a real refusal still ends the
    job with the reason."""
    bm, rep, fake = _monitor_with_fake_slurm(tmp_path, monkeypatch, requeue)
    bm.act(rep, "report.txt")
    done = fake.transcript()
    assert "requeue 77" in done
    if requeue == "took":
        assert "scancel" not in done and "Comment=" not in done, done
        st = json.load(open(str(tmp_path / "storage" / "77" / "hangkit_requeue.json")))
        assert st["hang_requeues"] == 1 and st["hangs"][0]["attempt"] == 1
    else:
        assert "Comment=hpc-hangkit: hang confirmed, not requeued: scontrol requeue refused" in done
        assert "; report: report.txt | mine a=b  c\n" in done, done
        assert "scancel 77" in done, done


@pytest.mark.timeout(60)
def test_requeue_state_that_cannot_be_saved_ends_the_job_instead_of_requeueing(tmp_path,
                                                                                monkeypatch):
    """The requeue state's job directory in storage is a planted symlink: the save is
    refused (not followed), and a requeue that cannot be counted is not made (it could
    repeat without end): the job is ended with the reason, nothing lands at the target."""
    bm, rep, fake = _monitor_with_fake_slurm(tmp_path, monkeypatch, "took")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "storage").mkdir()
    os.symlink(str(elsewhere), str(tmp_path / "storage" / "77"))
    bm.act(rep, "report.txt")
    done = fake.transcript()
    assert "requeue 77" not in done, done
    assert ("Comment=hpc-hangkit: hang confirmed, not requeued: cannot record the hang-requeue"
            " count at file://%s/storage/77/hangkit_requeue.json" % tmp_path) in done, done
    assert "is a symlink: refused" in done, done
    assert "scancel 77" in done, done
    assert os.listdir(str(elsewhere)) == []


def test_merged_comment_puts_ours_first_and_keeps_the_users_whole():
    assert slurm.merged_comment("hpc-hangkit: hang confirmed, x", "") == "hpc-hangkit: hang confirmed, x"
    assert slurm.merged_comment("a\n  b", "mine") == "a b | mine"
    # too long together: ours is shortened, theirs (UTF-8, counted in bytes) kept
    theirs = "é" * 400  # 800 bytes
    m = slurm.merged_comment(slurm.COMMENT_MARK + ", " + "r" * 600, theirs)
    assert len(m.encode()) <= slurm.COMMENT_MAX and m.endswith(" | " + theirs)
    assert m.startswith(slurm.COMMENT_MARK + ", rrr") and "... | " in m
    # a user Comment at the limit keeps all but the room for our mark
    m = slurm.merged_comment(slurm.COMMENT_MARK + ", x", "u" * 1024)
    assert m.startswith(slurm.COMMENT_MARK + " | uuu") and len(m) == slurm.COMMENT_MAX
    assert slurm.merged_comment("o" * 2000, "").count("o") == slurm.COMMENT_MAX


def test_an_unreadable_comment_is_never_overwritten(tmp_path, monkeypatch):
    fake = FakeCommands(tmp_path / "bin")
    fake.add("squeue", default=Reply(rc=1, stderr="slurm_load_jobs error\n"))
    fake.add("scontrol")
    monkeypatch.setenv("PATH", fake.path())
    with pytest.raises(slurm.SlurmError, match="squeue"):
        slurm.prepend_comment("77", "hpc-hangkit: hang confirmed")
    assert fake.calls("scontrol") == []
    fake.add("squeue", Reply(["-h"], stdout="(null)\n"))
    assert slurm.prepend_comment("77", "ours") == "ours"
    assert fake.calls("scontrol") == [["update", "JobId=77", "Comment=ours"]]


# --------------------------------------------------------------------------- why-files never win

PYSPY_FIXTURE = os.path.join(REPO, "tests", "fixtures", "torch_samples", "gloo_divergent_barrier",
                             "pyspy", "dump_native_rank1.txt")


def _why(tool="py-spy", why="py-spy dump --pid 7 failed: No such process"):
    from hpc_hangkit.capture.whyfile import unavailable_line
    return unavailable_line(tool, why).encode()


def test_why_data_is_told_apart_from_real_output():
    real = open(PYSPY_FIXTURE, "rb").read()
    assert is_why_data(_why()) and is_why_data(_why("nvidia-smi", "not found"))
    assert not is_why_data(real) and not is_why_data(b"")
    assert not is_why_data(_why() + real)            # a real dump that mentions us


def _answer(host, files):
    """One node's framed slurm-capture answer holding ``files`` {rel: bytes}."""
    buf = io.StringIO()
    wire.emit_doc({"host": host, "files": wire.encode_files(
        {k: {"size": len(v), "offset": 0, "data": v} for k, v in files.items()})}, buf)
    return buf.getvalue()


def test_remote_capture_merge_follows_the_one_rule(tmp_path):
    """The batch monitor merges other nodes' answers into its own capture by the one rule
    (capture/whyfile.choose): real output stays over a why-file, a why-file is replaced by
    real output, a longer copy replaces its prefix, a really different copy is kept beside
    it under the sender's name, and nothing is written through a symlink."""
    real = open(PYSPY_FIXTURE, "rb").read()
    other = b"Thread 0x9 (idle)\n" + real            # another dump, not a copy of this one
    hd = tmp_path / "hd"
    st = hd / "stack_traces"
    st.mkdir(parents=True)
    (st / "rank_1.log").write_bytes(real)            # this node's capture: real
    (st / "rank_2.log").write_bytes(_why())          # this node's capture: only why
    (st / "rank_4.log").write_bytes(real[:100])      # a prefix of the real dump
    (st / "rank_5.log").write_bytes(real)
    os.symlink(str(st / "rank_1.log"), str(st / "rank_3.log"))
    g = gather.merge_answers(_answer("hk2", {
        "stack_traces/rank_1.log": _why(), "stack_traces/rank_2.log": real,
        "stack_traces/rank_3.log": real, "stack_traces/rank_4.log": real,
        "stack_traces/rank_5.log": other, "stack_traces/rank_6.log": real}), str(hd))
    assert g.hosts == ["hk2"] and g.files == 4
    assert (st / "rank_1.log").read_bytes() == real  # real output stays
    assert (st / "rank_2.log").read_bytes() == real  # why-file replaced
    assert os.path.islink(str(st / "rank_3.log")) and (st / "rank_1.log").read_bytes() == real
    assert (st / "rank_4.log").read_bytes() == real  # the longer copy wins
    assert (st / "rank_5.log").read_bytes() == real and (st / "rank_5.hk2.log").read_bytes() == other
    assert (st / "rank_6.log").read_bytes() == real  # nothing there: written


def test_a_later_capture_cannot_turn_a_real_dump_into_a_why_file(tmp_path):
    hd = tmp_path / "hang_detector"
    (hd / "stack_traces").mkdir(parents=True)
    real = open(PYSPY_FIXTURE, "rb").read()
    (hd / "stack_traces" / "rank_1.log").write_bytes(real)
    (hd / "stack_traces" / "rank_2.log").write_bytes(_why())
    before = gather.real_outputs(str(hd))
    assert list(before) == ["stack_traces/rank_1.log"]
    # the second capture: py-spy fails for both ranks now (the processes are gone)
    (hd / "stack_traces" / "rank_1.log").write_bytes(_why())
    assert gather.restore_real_outputs(str(hd), before) == ["stack_traces/rank_1.log"]
    assert (hd / "stack_traces" / "rank_1.log").read_bytes() == real
    assert is_why_data((hd / "stack_traces" / "rank_2.log").read_bytes())
    # the one rule again: a capture that only got a prefix of the earlier dump, or a
    # really different one, is judged by whyfile.choose (the longer copy is put back,
    # the newer different dump stays)
    (hd / "stack_traces" / "rank_1.log").write_bytes(real[:64])
    (hd / "stack_traces" / "rank_3.log").write_bytes(real)
    before = gather.real_outputs(str(hd))
    (hd / "stack_traces" / "rank_3.log").write_bytes(b"Thread 0x9 (idle)\n")
    (hd / "stack_traces" / "rank_1.log").write_bytes(real[:64])
    assert gather.restore_real_outputs(str(hd), {**before, "stack_traces/rank_1.log": real}) == \
        ["stack_traces/rank_1.log"]
    assert (hd / "stack_traces" / "rank_1.log").read_bytes() == real
    assert (hd / "stack_traces" / "rank_3.log").read_bytes() == b"Thread 0x9 (idle)\n"


def test_collect_live_answers_prefer_real_output_over_why_files(tmp_path):
    real = open(PYSPY_FIXTURE, "rb").read()
    # hk1 (batch node) holds the monitor's real copy of rank 2, hk2 can only say why now;
    # for rank 3 it is the other way round
    text = (_answer("hk1", {"stack_traces/rank_2.log": real, "stack_traces/rank_3.log": _why()})
            + _answer("hk2", {"stack_traces/rank_2.log": _why(), "stack_traces/rank_3.log": real}))
    hd = tmp_path / "hd"
    gather.merge_answers(text, str(hd))
    assert sorted(os.listdir(hd / "stack_traces")) == ["rank_2.log", "rank_3.log"]
    assert (hd / "stack_traces" / "rank_2.log").read_bytes() == real
    assert (hd / "stack_traces" / "rank_3.log").read_bytes() == real


# --------------------------------------------------------------------------- RAS where a rank is

@pytest.mark.timeout(60)
def test_ras_runs_through_the_prefix_until_this_node_holds_a_rank(tmp_path, monkeypatch):
    """RAS needs GPUs: the ncclras stand-in replays real-format polls. While the
    scratch holds no rank, the query goes through the remote prefix (here a real
    launcher that logs and execs, standing for srun --overlap); once a rank's
    heartbeat is here, ncclras runs locally."""
    import shutil
    from hpc_hangkit.config import load_settings
    from hpc_hangkit.evidence.ras import RasSource
    standin = os.path.join(REPO, "tests", "ncclras_standin")
    polls = tmp_path / "polls"
    shutil.copytree(os.path.join(REPO, "tests", "fixtures", "nccl", "b_history"), str(polls))
    monkeypatch.setenv("PATH", standin + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("NCCLRAS_STANDIN_DIR", str(polls))
    monkeypatch.setenv("NCCLRAS_STANDIN_STATE", str(tmp_path / "state"))
    launched = tmp_path / "launched"
    launcher = [sys.executable, "-c", "import os, sys; open(%r, 'a').write('remote\\n'); "
                "os.execvp(sys.argv[1], sys.argv[1:])" % str(launched)]
    settings = load_settings(env={}, path=None, overrides={"mode": "observe"})
    scratch = tmp_path / "scratch"
    (scratch / layout.HEARTBEAT_DIR).mkdir(parents=True)
    hd = scratch / layout.HANG_DETECTOR_DIR
    src = slurm_sources.RasOnRankNode(RasSource(settings, out_dir=str(hd)), str(scratch), launcher)
    first = src.poll(1.0)
    assert first and launched.read_text() == "remote\n"            # no rank here: remote
    (scratch / layout.HEARTBEAT_DIR / "rank_0.pid42.hb").write_bytes(b"\0" * 512)
    second = src.poll(2.0)
    assert second and launched.read_text() == "remote\n"           # a rank here: local
    assert src.inner.client.prefix == [] and src.name == "nccl_ras"
    assert list((hd / "nccl_ras").glob("ncclras_*.json"))           # out_dir got the history


# --------------------------------------------------------------------------- squeue --json

def test_squeue_json_state_26_05_real_output():
    """Real ``squeue --json -j 2`` of Slurm 26.05.5 (Debian unstable, the test cluster in
    its Debian root): numbers as {set, infinite, number}, job_state a list, as in 24.11."""
    text = open(os.path.join(REPO, "tests", "fixtures", "slurm", "squeue_json_26.05.5.json")).read()
    assert slurm.parse_squeue_state(text, "2") == "RUNNING"
    assert slurm.parse_squeue_state(text, "3") is None


def test_squeue_json_state_picks_the_asked_job_22_05():
    # real `squeue --json -j 182` on the testbed (22.05.8): the filter is ignored and
    # every job is listed, finished ones first
    text = open(os.path.join(REPO, "tests", "fixtures", "slurm", "squeue_json_22.05.8.json")).read()
    assert slurm.parse_squeue_state(text, "182") == "RUNNING"
    assert slurm.parse_squeue_state(text, "179") == "COMPLETED"
    assert slurm.parse_squeue_state(text, "999") is None


def test_squeue_json_state_24_11_shape():
    # data_parser v0.0.42 (24.11): job_state a list, numbers as {"set", "infinite", "number"}
    doc = {"jobs": [
        {"job_id": 57, "job_state": ["COMPLETED"],
         "array_job_id": {"set": True, "infinite": False, "number": 0},
         "array_task_id": {"set": False, "infinite": False, "number": 0}},
        {"job_id": 58, "job_state": ["RUNNING", "REQUEUED"],
         "array_job_id": {"set": True, "infinite": False, "number": 56},
         "array_task_id": {"set": True, "infinite": False, "number": 2}}]}
    text = json.dumps(doc)
    assert slurm.parse_squeue_state(text, "58") == "RUNNING"
    assert slurm.parse_squeue_state(text, "56_2") == "RUNNING"
    assert slurm.parse_squeue_state(text, "57") == "COMPLETED"
    with pytest.raises(slurm.SlurmError):
        slurm.parse_squeue_state("[]", "57")



@pytest.mark.timeout(30)
def test_monitor_stop_handler_is_reentrant():
    """Slurm ends a job with a burst of SIGTERMs. A Python signal handler runs between any
    two bytecodes, even inside Event.set, whose lock is not reentrant: a handler that called
    Event.set on every signal deadlocked a monitor (it outlived its job by an hour). Here a
    second signal is delivered "inside" Event.set (its lock held): it must return at once."""
    import signal
    import threading

    from hpc_hangkit.slurm.batch import stop_handler

    done = threading.Event()
    h = stop_handler(done)
    h(signal.SIGTERM, None)
    assert done.is_set()
    # a later signal, landing while Event.set's lock is held, returns at once
    with done._cond:
        t2 = threading.Thread(target=h, args=(signal.SIGTERM, None), daemon=True)
        t2.start()
        t2.join(5)
        assert not t2.is_alive(), "a second SIGTERM blocked on Event.set's lock (deadlock)"


def test_capture_job_runs_local_and_remote_capture_and_merges_by_the_one_rule(tmp_path, monkeypatch):
    """gather.capture_job (the batch monitor's and collect's one fan-out): one srun step
    on the other nodes while this node captures; answers merged over the local capture;
    nodes without an answer and a failed step are notes, never raised."""
    import types

    real = open(PYSPY_FIXTURE, "rb").read()
    hd = tmp_path / "hd"
    calls = []

    def fake_srun(job_id, nodes, argv, timeout):
        calls.append((job_id, list(nodes), list(argv)))
        out = _answer("hk2.cluster", {"stack_traces/rank_1.log": _why(),
                                      "stack_traces/rank_2.log": real})
        return types.SimpleNamespace(stdout=out.encode(), stderr=b"srun: hk3 down\n", returncode=1)

    def local():
        (hd / "stack_traces").mkdir(parents=True)
        (hd / "stack_traces" / "rank_1.log").write_bytes(real)

    monkeypatch.setattr(slurm, "srun_overlap", fake_srun)
    g = gather.capture_job("77", ["hk2", "hk3"], "/s/job_77/attempt_0", ["hk"], str(hd), local=local)
    assert calls == [("77", ["hk2", "hk3"], ["hk", "slurm-capture", "--scratch", "/s/job_77/attempt_0"])]
    assert g.hosts == ["hk2"] and g.missing == ["hk3"] and g.files == 1 and g.error is None
    assert any("hk3" in n and "srun exit 1" in n and "hk3 down" in n for n in g.notes), g.notes
    assert (hd / "stack_traces" / "rank_1.log").read_bytes() == real      # not the why-file
    assert (hd / "stack_traces" / "rank_2.log").read_bytes() == real

    def failing_srun(job_id, nodes, argv, timeout):
        raise slurm.SlurmError("srun: no such job")

    monkeypatch.setattr(slurm, "srun_overlap", failing_srun)
    g = gather.capture_job("77", ["hk2"], "/s", ["hk"], str(tmp_path / "hd2"))
    assert isinstance(g.error, slurm.SlurmError) and g.files == 0 and g.missing == ["hk2"]
    assert any("no such job" in n for n in g.notes)


def test_rank_files_of_a_silent_node_are_kept_from_the_view(tmp_path):
    """A node that did not answer the capture (its job ended under it) keeps its ranks in the
    final roll call: the monitor's view copies fill only what the capture did not bring."""
    from types import SimpleNamespace

    view, hd = tmp_path / "view", tmp_path / "hd"
    for sub in ("watchdog", "heartbeats"):
        (view / sub).mkdir(parents=True)
    (view / "watchdog" / "rank_2.pid20.log").write_bytes(b"remote rank 2 dump\n")
    (view / "heartbeats" / "rank_2.pid20.hb").write_bytes(b"hb2")
    (view / "watchdog" / "rank_0.pid10.log").write_bytes(b"stale view copy\n")
    (view / "watchdog" / "notes.txt").write_bytes(b"not a rank file")
    (hd / "watchdog").mkdir(parents=True)
    (hd / "watchdog" / "rank_0.pid10.log").write_bytes(b"captured\n")
    mon = SimpleNamespace(view_dir=str(view), hd_dir=str(hd), host="hk1")
    assert batch.BatchMonitor.keep_view_copies(mon) == 2
    assert (hd / "watchdog" / "rank_2.pid20.log").read_bytes() == b"remote rank 2 dump\n"
    assert (hd / "heartbeats" / "rank_2.pid20.hb").read_bytes() == b"hb2"
    assert (hd / "watchdog" / "rank_0.pid10.log").read_bytes() == b"captured\n"   # never replaced
    assert not (hd / "watchdog" / "notes.txt").exists()
    assert batch.BatchMonitor.keep_view_copies(mon) == 0                             # idempotent


def test_slow_probe_runs_beside_the_polls_and_joins_the_next_one(tmp_path, caplog):
    """The srun probe of the other nodes blocks (as a 4 s srun does); polls go on without
    it, one probe runs at a time, and its files enter the view at the first poll after it
    finished (logged once as slow)."""
    remote = str(tmp_path / "remote")
    p = _rank_log(remote, 1, 22, b"# hpc-hangkit rank=1\nremote dump\n")
    release, started = threading.Event(), []

    def probe(nodes):
        started.append(list(nodes))
        assert release.wait(60), "the test never released the probe"
        return slurm_probe.rank_files(remote)

    scratch = str(tmp_path / "scratch")
    os.makedirs(scratch)
    src = slurm_sources.SlurmStackSource(scratch, slurm_probe.View(str(tmp_path / "view")), ["hk2"], probe=probe,
                                         idle_probe_s=0.0, poll_interval_s=1.0)
    ticks = iter(range(0, 1000, 4))
    src.background.clock = lambda: float(next(ticks))   # each probe takes 4 s, 4x the interval
    src.poll(0.0)                      # returns although the probe it started is still blocked
    wait_for(lambda: started, 30, what="the probe to start")
    src.poll(1.0)
    src.poll(2.0)
    assert started == [["hk2"]] and src.probes == 1     # one probe at a time
    view_log = os.path.join(src.view.path, "watchdog", os.path.basename(p))
    assert not os.path.exists(view_log)
    release.set()
    assert src.background.wait(30)
    with caplog.at_level("WARNING", logger="hpc_hangkit.slurm.batch"):
        src.poll(3.0)
        src.poll(4.0)
    assert open(view_log, "rb").read() == open(p, "rb").read()
    slow = [r.getMessage() for r in caplog.records if "probing the other node(s) took" in r.getMessage()]
    assert len(slow) == 1 and "took 4.0 s (poll interval 1.0 s)" in slow[0]


def test_every_node_snapshots_at_the_given_moment_with_the_suspects(tmp_path, monkeypatch):
    """The batch monitor gives every node one moment (so the samples are taken together)
    and the job's suspects (so a remote suspect gets py-spy --native)."""
    import types
    calls = []

    def fake_srun(job_id, nodes, argv, timeout):
        calls.append(list(argv))
        return types.SimpleNamespace(stdout=b"", stderr=b"", returncode=0)

    monkeypatch.setattr(slurm, "srun_overlap", fake_srun)
    gather.capture_job("77", ["hk2"], "/s", ["hk"], str(tmp_path / "hd"), suspects=[5, 1],
                       at=1764622000.25)
    assert calls == [["hk", "slurm-capture", "--scratch", "/s", "--suspects", "1,5", "--at", "1764622000.250"]]
    slept = []
    now = [100.0]
    assert gather.wait_until(103.5, clock=lambda: now[0], sleep=slept.append) == 3.5 and slept == [3.5]
    assert gather.wait_until(99.0, clock=lambda: now[0], sleep=slept.append) == 0.0 and slept == [3.5]
    assert gather.wait_until(None) == 0.0
    assert gather.wait_until(1e9, clock=lambda: now[0], sleep=slept.append) == gather.MAX_AT_WAIT_S


def test_slurm_capture_refuses_a_bad_suspect_list():
    p = subprocess.run([sys.executable, "-m", "hpc_hangkit", "slurm-capture", "--scratch", "/nonexistent",
                        "--suspects", "1,x"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=dict(os.environ, PYTHONPATH=REPO), timeout=60)
    assert p.returncode == 2 and b"--suspects" in p.stderr, p.stderr
