"""Slurm pieces that need no cluster: job ids, scontrol/sstat parsing, the
requeue rule, the framed probe answers, the view mirror, the prolog's
hostile-input handling (run for real as a subprocess against a temp root).

The real-cluster tests are in test_slurm_cluster.py.
"""
import io
import json
import os
import stat
import subprocess
import sys

import pytest

from hpc_hangkit import batch, layout, slurm

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("good", ["1", "123", "123_4", "4294967294_0"])
def test_job_id_accepts_plain_and_array_ids(good):
    assert slurm.validate_job_id(good) == good


@pytest.mark.parametrize("bad", ["", "abc", "12.0", "123_[1-3]", "123+0", "-1", "1 2", "../1",
                                 "123_", "_4", "1;rm -rf /"])
def test_job_id_rejects_everything_else(bad):
    with pytest.raises(ValueError, match="invalid Slurm job id"):
        slurm.validate_job_id(bad)


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


def test_decide_observe_never_requeues():
    d = batch.decide("observe", True, True, {}, SIG_A, 0, 1)
    assert d.action == "keep"


def test_decide_fail_requeues_within_budget():
    d = batch.decide("fail", True, True, {}, SIG_A, 0, 1)
    assert d.action == "requeue" and "1 of 1" in d.reason


def test_decide_no_requeue_flag_is_refused_with_reason():
    d = batch.decide("fail", False, True, {}, SIG_A, 0, 1)
    assert d.action == "end" and "--no-requeue" in d.reason


def test_decide_repeat_beats_budget_and_names_it():
    state = {"hang_requeues": 1, "hangs": [{"attempt": 0, "signature": SIG_A}]}
    d = batch.decide("fail", True, True, state, SIG_A, 1, 1)
    assert d.action == "end" and "repeat" in d.reason and "attempt 0" in d.reason


def test_decide_different_hang_with_budget_left_requeues_again():
    state = {"hang_requeues": 1, "hangs": [{"attempt": 0, "signature": SIG_A}]}
    assert batch.decide("fail", True, True, state, SIG_B, 1, 2).action == "requeue"
    d = batch.decide("fail", True, True, state, SIG_B, 1, 1)
    assert d.action == "end" and "budget is spent (1 of 1" in d.reason


def test_decide_budget_ignores_slurm_restart_count():
    # attempt 1 after an admin requeue / preemption: our own count is still 0
    assert batch.decide("fail", True, True, {}, SIG_A, 1, 1).action == "requeue"


def test_signature_from_real_report_json():
    d = json.load(open(os.path.join(REPO, "tests", "fixtures", "slurm", "report_split_rank1.json")))
    sig = batch.signature(d)
    assert sig["suspect_ranks"] == [1]
    assert sig["where"] == ["gloo_divergent.py:54 main (in barrier)"]


def test_framed_docs_survive_srun_line_splitting_and_interleaving():
    docs = []
    for host in ("hk1", "hk2"):
        buf = io.StringIO()
        batch.emit_doc({"host": host, "files": {"x": os.urandom(2500).hex()}}, buf)
        docs.append(buf.getvalue().splitlines())
    # srun -l labels every line and interleaves the nodes
    mixed = []
    for i in range(max(len(d) for d in docs)):
        for t, d in enumerate(docs):
            if i < len(d):
                mixed.append("%d: %s" % (t, d[i]))
    got = batch.parse_docs("srun: warning\n" + "\n".join(mixed) + "\n")
    assert sorted(d["host"] for d in got) == ["hk1", "hk2"]
    assert all(len(d["files"]["x"]) == 5000 for d in got)


def test_incomplete_framed_doc_is_skipped():
    buf = io.StringIO()
    batch.emit_doc({"host": "hk1", "data": os.urandom(3000).hex()}, buf)
    lines = buf.getvalue().splitlines()
    assert len(lines) > 1
    assert batch.parse_docs("\n".join(lines[:-1])) == []


def _rank_log(d, rank, pid, text):
    os.makedirs(os.path.join(d, layout.WATCHDOG_DIR), exist_ok=True)
    p = os.path.join(d, layout.WATCHDOG_DIR, layout.watchdog_log_name(rank, pid))
    with open(p, "ab") as f:
        f.write(text)
    return p


def test_view_mirrors_growing_logs_byte_for_byte(tmp_path):
    src, view = str(tmp_path / "src"), batch.View(str(tmp_path / "view"))
    p = _rank_log(src, 0, 11, b"# hpc-hangkit rank=0\nfirst dump\n")
    view.apply(batch.rank_files(src, since=view.sizes))
    _rank_log(src, 0, 11, b"second dump\n")
    assert view.apply(batch.rank_files(src, since=view.sizes)) == 1
    assert view.apply(batch.rank_files(src, since=view.sizes)) == 0   # nothing new
    with open(os.path.join(view.path, "watchdog", os.path.basename(p)), "rb") as f:
        assert f.read() == open(p, "rb").read()


def test_rank_files_never_follows_symlinks(tmp_path):
    src = str(tmp_path / "src")
    _rank_log(src, 0, 11, b"# hpc-hangkit rank=0\n")
    secret = tmp_path / "secret"
    secret.write_text("root only")
    os.symlink(str(secret), os.path.join(src, "watchdog", "rank_1.pid12.log"))
    files = batch.rank_files(src)
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

_FAKE_SCONTROL = r"""#!/bin/bash
state=%(state)s
case "$1" in
  requeue)
    echo "$*" >> %(calls)s
    if [ "%(requeue)s" = took ]; then echo 1 > $state; kill -TERM $$; fi
    if [ "%(requeue)s" = refused ]; then echo "scontrol: error: Requested operation is presently disabled" >&2; exit 1; fi
    exit 0;;
  show)
    r=$(cat $state 2>/dev/null || echo 0)
    if [ "$r" = 1 ]; then st=PENDING; else st=RUNNING; fi
    echo "JobId=$4 JobName=j UserId=u(1001) JobState=$st Requeue=1 Restarts=$((r + %(attempt)d)) BatchFlag=1 NodeList=hk1"
    ;;
  update) echo "$*" >> %(calls)s;;
esac
"""


def _monitor_with_fake_slurm(tmp_path, monkeypatch, requeue):
    from hpc_hangkit.config import load_settings
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    calls.write_text("")
    (bindir / "scontrol").write_text(_FAKE_SCONTROL % {
        "state": tmp_path / "requeued", "calls": calls, "requeue": requeue, "attempt": 1})
    (bindir / "scancel").write_text("#!/bin/bash\necho \"scancel $*\" >> %s\n" % calls)
    for f in ("scontrol", "scancel"):
        os.chmod(str(bindir / f), 0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    settings = load_settings(env={}, path=None, overrides={
        "mode": "fail", "storage_url": "file://%s" % (tmp_path / "storage"), "max_hang_requeues": 1})
    scratch = tmp_path / "scratch" / "job_77" / "attempt_1"
    scratch.mkdir(parents=True)
    env = {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "1", "HANGKIT_SCRATCH_DIR": str(scratch),
           "SLURM_JOB_NODELIST": "hk1", "HOME": str(tmp_path)}
    bm = batch.BatchMonitor(settings, env, [sys.executable, "-m", "hpc_hangkit"])
    rep = {"verdict": "SPLIT", "suspect_ranks": [1], "groups": []}
    return bm, rep, calls


@pytest.mark.timeout(60)
@pytest.mark.parametrize("requeue", ["took", "refused"])
def test_requeue_killed_by_its_own_sigterm_is_not_taken_for_a_refusal(tmp_path, monkeypatch, requeue):
    """took: scontrol requeue dies by SIGTERM after Slurm requeued the job -> the job
    must live on (no Comment, no scancel). refused: a real refusal still ends the
    job with the reason."""
    bm, rep, calls = _monitor_with_fake_slurm(tmp_path, monkeypatch, requeue)
    bm.act(rep, "report.txt")
    done = calls.read_text()
    assert "requeue 77" in done
    if requeue == "took":
        assert "scancel" not in done and "Comment=" not in done, done
        st = json.load(open(str(tmp_path / "storage" / "77" / "hangkit_requeue.json")))
        assert st["hang_requeues"] == 1 and st["hangs"][0]["attempt"] == 1
    else:
        assert "Comment=hpc-hangkit: hang confirmed, not requeued: scontrol requeue refused" in done
        assert "scancel 77" in done, done


# --------------------------------------------------------------------------- why-files never win

PYSPY_FIXTURE = os.path.join(REPO, "tests", "fixtures", "torch_samples", "gloo_divergent_barrier",
                             "pyspy", "dump_native_rank1.txt")


def _why(tool="py-spy", why="py-spy dump --pid 7 failed: No such process"):
    from hpc_hangkit.capture import unavailable_line
    return unavailable_line(tool, why).encode()


def test_why_data_is_told_apart_from_real_output():
    real = open(PYSPY_FIXTURE, "rb").read()
    assert batch.is_why_data(_why()) and batch.is_why_data(_why("nvidia-smi", "not found"))
    assert not batch.is_why_data(real) and not batch.is_why_data(b"")
    assert not batch.is_why_data(_why() + real)            # a real dump that mentions us


def test_remote_capture_merge_keeps_real_output_and_replaces_why_files(tmp_path):
    real = open(PYSPY_FIXTURE, "rb").read()
    a, b, c = (str(tmp_path / "stack_traces" / ("rank_%d.log" % i)) for i in (1, 2, 3))
    assert batch.merge_captured(a, real)                    # nothing there: written
    assert not batch.merge_captured(a, _why())              # real output stays
    assert open(a, "rb").read() == real
    assert batch.merge_captured(b, _why()) and batch.merge_captured(b, real)   # why-file replaced
    assert open(b, "rb").read() == real
    os.symlink(a, c)
    assert not batch.merge_captured(c, real)                # never written through a link


def test_a_later_capture_cannot_turn_a_real_dump_into_a_why_file(tmp_path):
    hd = tmp_path / "hang_detector"
    (hd / "stack_traces").mkdir(parents=True)
    real = open(PYSPY_FIXTURE, "rb").read()
    (hd / "stack_traces" / "rank_1.log").write_bytes(real)
    (hd / "stack_traces" / "rank_2.log").write_bytes(_why())
    before = batch._real_outputs(str(hd))
    assert list(before) == ["stack_traces/rank_1.log"]
    # the second capture: py-spy fails for both ranks now (the processes are gone)
    (hd / "stack_traces" / "rank_1.log").write_bytes(_why())
    assert batch._restore_real_outputs(str(hd), before) == ["stack_traces/rank_1.log"]
    assert (hd / "stack_traces" / "rank_1.log").read_bytes() == real
    assert batch.is_why_data((hd / "stack_traces" / "rank_2.log").read_bytes())


def test_collect_live_answers_prefer_real_output_over_why_files(tmp_path):
    from hpc_hangkit import collect
    real = open(PYSPY_FIXTURE, "rb").read()

    def doc(host, files):
        buf = io.StringIO()
        batch.emit_doc({"host": host, "files": batch.encode_files(
            {k: {"size": len(v), "offset": 0, "data": v} for k, v in files.items()})}, buf)
        return buf.getvalue()
    # hk1 (batch node) holds the monitor's real copy of rank 2, hk2 can only say why now;
    # for rank 3 it is the other way round
    text = (doc("hk1", {"stack_traces/rank_2.log": real, "stack_traces/rank_3.log": _why()})
            + doc("hk2", {"stack_traces/rank_2.log": _why(), "stack_traces/rank_3.log": real}))
    hd = tmp_path / "hd"
    collect._write_docs(text, str(hd))
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
    from hpc_hangkit.ras import RasSource
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
    src = batch.RasOnRankNode(RasSource(settings, out_dir=str(hd)), str(scratch), launcher)
    first = src.poll(1.0)
    assert first and launched.read_text() == "remote\n"            # no rank here: remote
    (scratch / layout.HEARTBEAT_DIR / "rank_0.pid42.hb").write_bytes(b"\0" * 512)
    second = src.poll(2.0)
    assert second and launched.read_text() == "remote\n"           # a rank here: local
    assert src.inner.client.prefix == [] and src.name == "nccl_ras"
    assert list((hd / "nccl_ras").glob("ncclras_*.json"))           # out_dir got the history


# --------------------------------------------------------------------------- squeue --json

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

    from hpc_hangkit.batch import stop_handler

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
