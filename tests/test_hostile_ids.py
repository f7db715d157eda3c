"""Hostile job ids, host names, user names and paths from the environment are refused
before they reach a path or a command (no traversal, no shell: argv lists only)."""
import os

import pytest

from hpc_hangkit import collect, config, slurm

BAD_IDS = ["", " ", "..", "../1", "1/..", "1/2", "12;rm -rf /", "1 2", "$(id)", "`id`", "1\n2", "1\x00",
           "123_[1-3]", "123+0", "-1", "1.0", "0x10", "１２３", "1" * 11, "123_", "_1", "abc", "~root"]
BAD_NODES = ["", "-oProxyCommand=x", "../x", "a/b", "a b", "a;b", "$(id)", "a\nb", "." , "x" * 200]


@pytest.mark.parametrize("jid", BAD_IDS)
def test_validate_job_id_refuses(jid):
    with pytest.raises(ValueError):
        slurm.validate_job_id(jid)
    with pytest.raises(ValueError):
        collect.parse_job_id(jid)


@pytest.mark.parametrize("jid", ["1", "1234", "1234_5", " 77 "])
def test_validate_job_id_accepts(jid):
    assert slurm.validate_job_id(jid) == jid.strip()


@pytest.mark.parametrize("jid", BAD_IDS + ["123_4"])
def test_scratch_and_storage_paths_refuse_bad_ids(tmp_path, jid):
    with pytest.raises(ValueError):
        collect.job_scratch(str(tmp_path), jid, 0)
    with pytest.raises(ValueError):
        collect.attempt_url("file://" + str(tmp_path), jid, 0)
    with pytest.raises(ValueError):
        collect.job_id_from_env({"SLURM_JOB_ID": jid})


def test_scratch_path_stays_below_scratch_dir(tmp_path):
    p = collect.job_scratch(str(tmp_path), "4242", 3)
    assert os.path.commonpath([str(tmp_path), p]) == str(tmp_path)
    assert p.endswith(os.path.join("job_4242", "attempt_3"))


@pytest.mark.parametrize("user", ["", "..", ".", "a/b", "../root", "a b", "$(id)", None, "a\n"])
def test_storage_url_user_is_validated(user):
    with pytest.raises(ValueError):
        collect.expand_storage_url("file:///shared/hk/{user}", user)


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
