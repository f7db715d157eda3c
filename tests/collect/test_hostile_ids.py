"""Hostile job ids, host names, user names and paths from the environment are refused
before they reach a path or a command (no traversal, no shell: argv lists only)."""
import os

import pytest

from hpc_hangkit import config, layout, storage
from hpc_hangkit.collect import copy
from hpc_hangkit import slurmjob as slurm

BAD_IDS = ["", " ", "..", "../1", "1/..", "1/2", "12;rm -rf /", "1 2", "$(id)", "`id`", "1\n2", "1\x00",
           "123_[1-3]", "123+0", "-1", "1.0", "0x10", "１２３", "1" * 11, "123_", "_1", "abc", "~root"]
BAD_NODES = ["", "-oProxyCommand=x", "../x", "a/b", "a b", "a;b", "$(id)", "a\nb", "." , "x" * 200]


@pytest.mark.parametrize("jid", BAD_IDS)
def test_validate_job_id_refuses(jid):
    with pytest.raises(ValueError):
        layout.validate_job_id(jid)


@pytest.mark.parametrize("jid", ["1", "1234", "1234_5", " 77 "])
def test_validate_job_id_accepts(jid):
    assert layout.validate_job_id(jid) == jid.strip()


@pytest.mark.parametrize("jid", BAD_IDS + ["123_4"])
def test_scratch_and_storage_paths_refuse_bad_ids(tmp_path, jid):
    with pytest.raises(ValueError):
        copy.job_scratch(str(tmp_path), jid, 0)
    with pytest.raises(ValueError):
        storage.attempt_url("file://" + str(tmp_path), jid, 0)
    with pytest.raises(ValueError):
        slurm.job_id_from_env({"SLURM_JOB_ID": jid})


def test_scratch_path_stays_below_scratch_dir(tmp_path):
    p = copy.job_scratch(str(tmp_path), "4242", 3)
    assert os.path.commonpath([str(tmp_path), p]) == str(tmp_path)
    assert p.endswith(os.path.join("job_4242", "attempt_3"))


@pytest.mark.parametrize("user", ["", "..", ".", "a/b", "../root", "a b", "$(id)", None, "a\n"])
def test_storage_url_user_is_validated(user):
    with pytest.raises(ValueError):
        storage.expand_storage_url("file:///shared/hk/{user}", user)
    with pytest.raises(ValueError):
        layout.validate_user(user)


@pytest.mark.parametrize("user", ["ann", "a.b", "a_b-c", "ann@example.org", "_svc"])
def test_plain_user_names_are_accepted(user):
    assert layout.validate_user(user) == user
    assert storage.expand_storage_url("file:///shared/hk/{user}/", user) == "file:///shared/hk/" + user


@pytest.mark.parametrize("node", BAD_NODES)
def test_srun_overlap_refuses_bad_node_names_before_running(node, monkeypatch):
    ran = []
    monkeypatch.setattr(slurm, "_run", lambda *a, **k: ran.append(a))
    with pytest.raises(ValueError):
        slurm.srun_overlap("4242", [node], ["true"])
    assert not ran


@pytest.mark.parametrize("jid", ["1;id", "../1", "$(id)"])
def test_slurm_commands_refuse_bad_ids_before_running(jid, monkeypatch):
    ran = []
    monkeypatch.setattr(slurm, "_run", lambda *a, **k: ran.append(a))
    for fn in (slurm.requeue, slurm.cancel, slurm.step_stats, slurm.job_info):
        with pytest.raises(ValueError):
            fn(jid)
    assert not ran


def test_slurm_run_uses_argv_not_a_shell(monkeypatch, tmp_path):
    """A job id that looks like shell syntax would be passed as ONE argv element."""
    seen = {}

    def fake_run(argv, **kw):
        seen["argv"], seen["shell"] = argv, kw.get("shell", False)

        class P:
            returncode, stdout, stderr = 0, b"", b""
        return P()
    monkeypatch.setattr(slurm.subprocess, "run", fake_run)
    monkeypatch.setattr(slurm.shutil, "which", lambda name, path=None: "/usr/bin/" + name)
    slurm.cancel("4242")
    assert isinstance(seen["argv"], list) and seen["shell"] is False
    assert seen["argv"][-1] == "4242"



@pytest.mark.parametrize("var,val", [("HANGKIT_SCRATCH_DIR", "relative/dir"),
                                     ("HANGKIT_SCRATCH_DIR", "/tmp/a\nb"),
                                     ("HANGKIT_SCRATCH_DIR", "/tmp/a\x00b"),
                                     ("HANGKIT_STORAGE_URL", "/shared\nx"),
                                     ("HANGKIT_STORAGE_URL", "relative"),
                                     ("HANGKIT_PYSPY_PATH", "py-spy\nrm"),
                                     ("HANGKIT_NCCLRAS_ADDRESS", "host:99999"),
                                     ("HANGKIT_WATCHDOG_SIGNAL", "SIGKILL")])
def test_config_refuses_hostile_env(var, val):
    with pytest.raises(config.ConfigError):
        config.load_settings(env={var: val, "HPC_HANGKIT_CONFIG": ""}, path=None)


# --- layout: every name builder validates what it puts into a path ----------------

from hpc_hangkit import layout, ranges  # noqa: E402
from hpc_hangkit.evidence import nvsmi  # noqa: E402

BAD_HOSTS = BAD_NODES + ["a..b", "..", "a\x00b", "a\tb", "host/../../etc", "ａ", None, 7, "x" * 129]


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_nvidia_smi_name_refuses_bad_hosts(host):
    with pytest.raises(ValueError, match="invalid host name"):
        layout.nvidia_smi_name(host)
    with pytest.raises(ValueError):
        layout.validate_host(host)


@pytest.mark.parametrize("host", ["node01", "gpu-a100-3.cluster.local", "n_1", "x" * 128, "1"])
def test_nvidia_smi_name_accepts_node_names(host):
    assert layout.nvidia_smi_name(host) == "node_%s.log" % host


def test_nvsmi_capture_node_refuses_a_bad_host_before_running_anything(tmp_path):
    with pytest.raises(ValueError):
        nvsmi.capture_node(str(tmp_path), host="../../etc/cron.d/x", path="/nonexistent/nvidia-smi")
    assert list(tmp_path.iterdir()) == []


def test_nvsmi_capture_hook_names_the_file_by_this_node_for_a_hostile_rank_host(tmp_path):
    import socket

    class RP:
        host = "../../../etc/evil"

    class Ctx:
        hd_dir = str(tmp_path)
        ranks = {0: RP()}
        problems = []

        def problem(self, text):
            self.problems.append(text)

    ctx = Ctx()
    nvsmi.capture_hook(ctx)  # nvidia-smi is absent here: a why-file, named by this node
    written = sorted(os.listdir(str(tmp_path / layout.NVIDIA_SMI_DIR)))
    assert len(written) == 1 and socket.gethostname() in written[0], written
    assert any("invalid host name" in p for p in ctx.problems), ctx.problems
    assert not os.path.exists(str(tmp_path / "etc"))


@pytest.mark.parametrize("jid", BAD_IDS)
def test_layout_paths_refuse_bad_job_ids(jid, tmp_path):
    with pytest.raises(ValueError):
        layout.job_scratch_dir(str(tmp_path), jid, 0)
    with pytest.raises(ValueError):
        layout.storage_attempt_prefix(jid, 0)


def test_layout_paths_accept_real_ids():
    assert layout.job_scratch_dir("/s", "4242", 1) == os.path.join("/s", "job_4242", "attempt_1")
    assert layout.storage_attempt_prefix(4242, "2") == "4242/attempt_2"
    assert layout.job_scratch_dir("/s", "4242_7", 0).endswith("job_4242_7/attempt_0")


@pytest.mark.parametrize("bad", [-1, "-1", "1/2", "..", True, 1.5, "x", "1\x00"])
def test_rank_pid_and_attempt_must_be_non_negative_integers(bad):
    for fn in (layout.stack_trace_name, layout.flight_recorder_name,
               lambda v: layout.rank_file_name(v, 1, layout.WATCHDOG_SUFFIX),
               lambda v: layout.rank_file_name(0, v, layout.HEARTBEAT_SUFFIX),
               lambda v: layout.job_scratch_dir("/s", "1", v),
               lambda v: layout.storage_attempt_prefix("1", v)):
        with pytest.raises(ValueError):
            fn(bad)


def test_none_is_refused_except_as_the_unknown_rank():
    for fn in (layout.stack_trace_name, layout.flight_recorder_name,
               lambda v: layout.rank_file_name(0, v, layout.HEARTBEAT_SUFFIX),
               lambda v: layout.job_scratch_dir("/s", "1", v)):
        with pytest.raises(ValueError):
            fn(None)
    assert layout.rank_file_name(None, 5, layout.WATCHDOG_SUFFIX) == "rank_x.pid5.log"


def test_rank_file_name_refuses_other_suffixes_and_keeps_the_x_rank():
    assert layout.rank_file_name(None, 12, ".hb") == "rank_x.pid12.hb"
    assert layout.parse_rank_file_name(layout.watchdog_log_name(3, 99)) == (3, 99, "log")
    for suffix in ("/../x", ".log/..", "", ".py"):
        with pytest.raises(ValueError):
            layout.rank_file_name(0, 1, suffix)


@pytest.mark.parametrize("ts", ["", "..", "../x", "a/b", "a b", "-x", "2026\x00", "x" * 65])
def test_ncclras_json_name_refuses_bad_timestamps(ts):
    with pytest.raises(ValueError):
        layout.ncclras_json_name(ts)


def test_ncclras_json_name_accepts_timestamps():
    assert layout.ncclras_json_name("20260101T120000Z") == "ncclras_20260101T120000Z.json"
    assert layout.ncclras_json_name("2026-06-11T15:40:20.5") == "ncclras_2026-06-11T15:40:20.5.json"


# --- rank sets: a hostile summary cannot make parse_ranks allocate -------------------

@pytest.mark.timeout(20)
@pytest.mark.parametrize("text", ["0-999999999999", "0-%d" % ranges.MAX_RANKS,
                                  ",".join(["0-%d" % (ranges.MAX_RANKS // 2)] * 3),
                                  "5," + "0-" + "9" * 4000])
def test_parse_ranks_refuses_more_than_max_ranks_without_expanding(text):
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as ei:
            ranges.parse_ranks(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "bad rank set" in str(ei.value) and text[:20] in str(ei.value)
    assert len(str(ei.value)) < 700  # a long text is clipped in the message
    assert peak < 64 * len(text) + (1 << 20), peak


def test_parse_ranks_max_is_generous_and_exact():
    assert ranges.MAX_RANKS == 1 << 24
    assert ranges.parse_ranks("0-2,%d" % (10 ** 12)) == [0, 1, 2, 10 ** 12]  # one huge rank: one int
    assert len(ranges.parse_ranks("0-%d" % (ranges.MAX_RANKS - 1))) == ranges.MAX_RANKS


# --- no shell anywhere in the package -------------------------------------------------

def test_no_command_is_built_through_a_shell():
    import re

    root = os.path.dirname(os.path.abspath(layout.__file__))
    bad = re.compile(r"shell\s*=\s*True|os\.system\(|os\.popen\(|commands\.getoutput|subprocess\.getoutput"
                     r"|subprocess\.getstatusoutput")
    hits = []
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith(".py"):
                with open(os.path.join(d, n), encoding="utf-8") as f:
                    for i, line in enumerate(f, 1):
                        if bad.search(line):
                            hits.append("%s:%d: %s" % (os.path.relpath(os.path.join(d, n), root), i, line.strip()))
    assert not hits, hits


# --- Flight Recorder trigger files (written by the ranks) name the processes to signal -----

@pytest.mark.parametrize("text", ["pid=1 tid=1 signal=SIGWINCH rank=0",          # init
                                  "pid=-1 tid=5 signal=SIGWINCH rank=0",         # kill(-1): every process
                                  "pid=0 tid=5 signal=SIGWINCH rank=0",          # the process group
                                  "pid=99999999 tid=5 signal=SIGWINCH rank=0",
                                  "pid=%d tid=0 signal=SIGWINCH rank=0" % os.getpid(),
                                  "pid=%d tid=1 signal=SIGKILL rank=0" % os.getpid(),
                                  "pid=%d tid=1 signal=SIGSTOP rank=0" % os.getpid(),
                                  "pid=%d tid=1 signal=default_int_handler rank=0" % os.getpid(),
                                  "pid=%d tid=1 signal=Signals rank=0" % os.getpid(),
                                  "pid=%d tid=1 signal=SIGWINCH rank=-3" % os.getpid(),
                                  "pid=%d tid=1 signal=SIGWINCH rank=../1" % os.getpid(),
                                  "pid=$(id) tid=1 signal=SIGWINCH rank=0"])
def test_flight_recorder_trigger_files_cannot_aim_the_signal(tmp_path, text, caplog):
    from hpc_hangkit.evidence import flightrec

    d = tmp_path / "flight_recorder" / "trigger"
    d.mkdir(parents=True)
    (d / "rank_0.pid1").write_text(text + "\n")
    assert flightrec._registrations(str(tmp_path)) == []
    out = flightrec.dump_ranks(str(tmp_path), str(tmp_path / "hd"), ranks=[0], timeout_s=0.1)
    assert list(out) == [0]  # a dump_error file for the rank, nothing signalled
    assert "dump_error" in (tmp_path / "hd" / "flight_recorder" / "rank_0.json").read_text()


def test_flight_recorder_trigger_file_of_a_real_thread_is_accepted(tmp_path):
    import threading

    from hpc_hangkit.evidence import flightrec

    d = tmp_path / "flight_recorder" / "trigger"
    d.mkdir(parents=True)
    (d / ("rank_2.pid%d" % os.getpid())).write_text("pid=%d tid=%d signal=SIGWINCH rank=2\n"
                                                  % (os.getpid(), threading.get_native_id()))
    (reg,) = flightrec._registrations(str(tmp_path))
    assert (reg["rank"], reg["signal"]) == (2, "SIGWINCH")


def test_capture_never_targets_init_or_every_process():
    from hpc_hangkit.capture.ranks import pid_alive

    assert not pid_alive(-1) and not pid_alive(0) and not pid_alive(1)
    assert pid_alive(os.getpid())


def test_job_env_is_read_once_and_refuses_what_it_cannot_trust():
    env = {"SLURM_JOB_ID": "124", "SLURM_ARRAY_JOB_ID": "123", "SLURM_ARRAY_TASK_ID": "4",
           "SLURM_JOB_RESTART_COUNT": "2", "SLURM_STEP_ID": "1", "SLURM_JOB_UID": "1000",
           "SLURM_JOB_GID": "100", "SLURM_JOB_USER": "alice", "SLURMD_NODENAME": "n7",
           "HANGKIT_SCRATCH_DIR": "/tmp/hpc-hangkit/job_124/attempt_2"}
    job = slurm.JobEnv.from_env(env)
    assert job == slurm.JobEnv("124", 2, "123", "4", 1, 1000, 100, "alice", "n7",
                               "/tmp/hpc-hangkit/job_124/attempt_2")
    assert job.alias == "123_4"
    # an array id that is not a number is no alias; a batch step has no step number
    job = slurm.JobEnv.from_env(dict(env, SLURM_ARRAY_TASK_ID="4;x", SLURM_STEP_ID="batch"))
    assert (job.alias, job.step) == (None, None)
    for bad in ({"SLURM_JOB_ID": "../../etc"}, {"SLURM_JOB_ID": "123_4"}, {"SLURM_JOB_UID": "x"}):
        with pytest.raises(ValueError):
            slurm.JobEnv.from_env(dict(env, **bad))
