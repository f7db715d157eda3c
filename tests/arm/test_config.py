"""Settings: every setting's default, TOML, env and error path; errors name their source."""
import os
import textwrap

import pytest

from hpc_hangkit import config, layout
from hpc_hangkit.config import ConfigError, Settings, load_settings

# setting, default, TOML line, value from TOML, env value, value from env, bad env value, error fragment
CASES = [
    ("mode", "observe", 'mode = "fail"', "fail", "off", "off", "loud", "must be one of off, observe, fail"),
    ("poll_interval_s", 15.0, "poll_interval_s = 5", 5.0, "2.5", 2.5, "fast", "expected a number"),
    ("confirm_duration_s", 600.0, "confirm_duration_s = 300", 300.0, "120", 120.0, "-1", "must be > 0 seconds"),
    ("together_confirm_s", None, "together_confirm_s = 1200", 1200.0, "900", 900.0, "-5", "must be > 0 seconds"),
    ("suspect_after_s", 60.0, "suspect_after_s = 30.5", 30.5, "10", 10.0, "0", "must be > 0 seconds"),
    ("report_every_s", 120.0, "report_every_s = 60", 60.0, "90", 90.0, "nan", "finite"),
    ("watchdog_period_s", 30.0, "watchdog_period_s = 10", 10.0, "0.5", 0.5, "", "expected a number"),
    ("watchdog_signal", "SIGURG", 'watchdog_signal = "SIGUSR1"', "SIGUSR1", "usr2", "SIGUSR2", "SIGKILL",
     "not allowed"),
    ("scratch_dir", "/tmp/hpc-hangkit", 'scratch_dir = "/scratch/hk/"', "/scratch/hk", "/local/hk", "/local/hk",
     "relative/dir", "absolute path"),
    ("storage_url", None, 'storage_url = "s3://bucket/hk"', "s3://bucket/hk", "/shared/hk", "/shared/hk",
     "nosuchproto://x", "unknown fsspec protocol 'nosuchproto'"),
    ("max_hang_requeues", 1, "max_hang_requeues = 3", 3, "0", 0, "1.5", "expected an integer"),
    ("epilog_budget_s", 60.0, "epilog_budget_s = 25", 25.0, "40", 40.0, "2", "must be between 5 and 3600 seconds"),
    ("flight_recorder_buffer", 2000, "flight_recorder_buffer = 0", 0, "5000", 5000, "-3", "must be >= 0"),
    ("ncclras_path", "ncclras", '[ncclras]\npath = "/opt/nccl/bin/ncclras"', "/opt/nccl/bin/ncclras",
     "/usr/bin/ncclras", "/usr/bin/ncclras", "  ", "must not be empty"),
    ("ncclras_address", None, '[ncclras]\naddress = "10.0.0.1:28028"', "10.0.0.1:28028", "localhost:28028",
     "localhost:28028", "localhost", "expected host:port"),
    ("ncclras_port_range", "28100-28999", '[ncclras]\nport_range = "30000-30099"', "30000-30099", "off", "off",
     "80-90", "1024 <= LO <= HI <= 65535"),
    ("ncclras_timeout_s", 10.0, "[ncclras]\ntimeout_s = 3", 3.0, "20", 20.0, "soon", "expected a number"),
    ("pyspy_path", "py-spy", '[pyspy]\npath = "/usr/local/bin/py-spy"', "/usr/local/bin/py-spy", "py-spy2",
     "py-spy2", "", "must not be empty"),
    ("native_stacks", "auto", '[pyspy]\nnative = "all"', "all", "NONE", "none", "some",
     "must be one of auto, all, none"),
    ("auto_checkin", True, "auto_checkin = false", False, "0", False, "maybe", "expected true or false"),
    ("stack_samples", 5, "stack_samples = 9", 9, "3", 3, "0", "must be >= 1"),
]


def toml(tmp_path, text, name="config.toml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


def test_every_setting_has_a_case():
    assert sorted(c[0] for c in CASES) == sorted(s.name for s in config.SETTINGS)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_default_file_env_and_error(tmp_path, case):
    name, default, toml_line, from_toml, env_val, from_env, bad, fragment = case
    s = load_settings(env={}, path=os.devnull)
    assert getattr(s, name) == default and s.sources[name] == "default"
    assert getattr(Settings.defaults(), name) == default

    path = toml(tmp_path, "# site config\n\n" + toml_line + "\n")
    s = load_settings(env={}, path=path)
    assert getattr(s, name) == from_toml
    assert s.sources[name] == "%s line %d" % (path, toml_line.count("\n") + 3)

    var = config.env_name(name)
    assert var == ("HANGKIT_SCRATCH_ROOT" if name == "scratch_dir" else "HANGKIT_" + name.upper())
    s = load_settings(env={var: env_val}, path=path)  # env beats the file
    assert getattr(s, name) == from_env and s.sources[name] == "env " + var

    s = load_settings(env={var: env_val}, path=path, overrides={name: from_toml})  # overrides beat env
    assert getattr(s, name) == from_toml and s.sources[name] == "command line"

    with pytest.raises(ConfigError) as e:
        load_settings(env={var: bad}, path=os.devnull)
    msg = str(e.value)
    assert msg.startswith("env %s: %s = %r is invalid: " % (var, name, bad)) and fragment in msg, msg
    assert (e.value.setting, e.value.value, e.value.source) == (name, bad, "env " + var)


@pytest.mark.parametrize("line,fragment", [
    ('mode = "loud"', "mode = 'loud' is invalid: must be one of off, observe, fail"),
    ("poll_interval_s = true", "poll_interval_s = True is invalid: expected a number, got a boolean"),
    ('poll_interval_s = "15"', "expected a number"),
    ("max_hang_requeues = 1.0", "expected an integer"),
    ('watchdog_signal = "SIGSEGV"', "not allowed"),
    ("scratch_dir = 3", "expected a string"),
    ('[ncclras]\naddress = "host:99999"', "port must be 1-65535"),
    ('auto_checkin = "perhaps"', "expected true or false"),
])
def test_toml_errors_name_file_and_line(tmp_path, line, fragment):
    path = toml(tmp_path, "stack_samples = 4\n# comment\n\n" + line + "\n")
    with pytest.raises(ConfigError) as e:
        load_settings(env={}, path=path)
    assert str(e.value).startswith("%s line %d: " % (path, 4 + line.count("\n"))), str(e.value)
    assert fragment in str(e.value)


def test_unknown_keys_rejected_with_did_you_mean(tmp_path):
    path = toml(tmp_path, "poll_interval_s = 5\npoll_intervall_s = 5\n")
    with pytest.raises(ConfigError, match=r"line 2: unknown setting 'poll_intervall_s' \(did you mean 'poll_interval_s'\?\)"):
        load_settings(env={}, path=path)
    path = toml(tmp_path, "[ncclras]\npath = 'x'\ntimeout = 3\n", "b.toml")
    with pytest.raises(ConfigError, match=r"b.toml line 3: unknown key 'timeout' in \[ncclras\] \(did you mean 'timeout_s'\?\)"):
        load_settings(env={}, path=path)
    path = toml(tmp_path, "[pyspi]\npath = 'x'\n", "c.toml")
    with pytest.raises(ConfigError, match=r"unknown table \[pyspi\] \(did you mean 'pyspy'\?\)"):
        load_settings(env={}, path=path)
    path = toml(tmp_path, "ncclras_path = 'a'\n[ncclras]\npath = 'b'\n", "d.toml")
    with pytest.raises(ConfigError, match=r"d.toml line 3: ncclras_path is set twice"):
        load_settings(env={}, path=path)
    with pytest.raises(ConfigError, match=r"env HANGKIT_POLL_INTERVAL='5': unknown setting \(did you mean HANGKIT_POLL_INTERVAL_S\?\)"):
        load_settings(env={"HANGKIT_POLL_INTERVAL": "5"}, path=os.devnull)
    with pytest.raises(ConfigError, match=r"command line: unknown setting 'mod' \(did you mean 'mode'\?\)"):
        load_settings(env={}, path=os.devnull, overrides={"mod": "fail"})
    # other components' variables and internal ones are not settings: ignored
    s = load_settings(env={"HANGKIT_ARMED_PID": "12", "HANGKIT_FR_DUMP_DIR": "/x"}, path=os.devnull)
    assert s == Settings.defaults()


def test_toml_syntax_error_and_missing_files(tmp_path):
    path = toml(tmp_path, "mode = \n")
    with pytest.raises(ConfigError, match=r"config.toml is not valid TOML: .*line 1"):
        load_settings(env={}, path=path)
    with pytest.raises(ConfigError, match=r"HPC_HANGKIT_CONFIG\) does not exist"):
        load_settings(env={"HPC_HANGKIT_CONFIG": str(tmp_path / "nope.toml")})
    with pytest.raises(ConfigError, match=r"cannot read config file"):
        load_settings(env={}, path=str(tmp_path / "nope.toml"))
    ok = toml(tmp_path, "poll_interval_s = 7\n", "site.toml")
    s = load_settings(env={"HPC_HANGKIT_CONFIG": ok})
    assert s.poll_interval_s == 7 and s.sources["poll_interval_s"] == ok + " line 1" and s.config_path == ok


def test_confirm_must_exceed_poll_and_rounds_up_to_whole_polls(tmp_path):
    path = toml(tmp_path, "poll_interval_s = 15\nconfirm_duration_s = 10\n")
    with pytest.raises(ConfigError) as e:
        load_settings(env={}, path=path)
    assert str(e.value).startswith(path + " line 2: confirm_duration_s (10.0, from %s line 2) must be > "
                                   "poll_interval_s (15.0, from %s line 1)" % (path, path))
    with pytest.raises(ConfigError, match=r"^env HANGKIT_POLL_INTERVAL_S: confirm_duration_s"):
        load_settings(env={"HANGKIT_POLL_INTERVAL_S": "600"}, path=os.devnull)
    s = load_settings(env={"HANGKIT_POLL_INTERVAL_S": "15", "HANGKIT_CONFIRM_DURATION_S": "601"}, path=os.devnull)
    assert (s.confirm_polls, s.effective_confirm_s) == (41, 615.0)
    s = load_settings(env={}, path=os.devnull)
    assert (s.confirm_polls, s.effective_confirm_s) == (40, 600.0)
    s = load_settings(env={"HANGKIT_POLL_INTERVAL_S": "1.5", "HANGKIT_CONFIRM_DURATION_S": "6"}, path=os.devnull)
    assert s.confirm_polls == 4


def test_to_env_is_the_job_environment():
    s = load_settings(env={"HANGKIT_STORAGE_URL": "s3://b/p", "HANGKIT_FLIGHT_RECORDER_BUFFER": "0"}, path=os.devnull)
    boot = config.boot_dir()
    base = {"PATH": "/usr/bin", "PYTHONPATH": "/home/u/lib" + os.pathsep + boot, "HANGKIT_ARMED_PID": "77",
            "HANGKIT_NCCLRAS_ADDRESS": "stale:1"}
    env = s.to_env("/tmp/hk/job_5/attempt_1", base_env=base)
    assert base["HANGKIT_ARMED_PID"] == "77"  # the argument is not modified
    assert env["PATH"] == "/usr/bin" and "HANGKIT_ARMED_PID" not in env
    assert env["PYTHONPATH"] == boot + os.pathsep + "/home/u/lib"
    assert env["HANGKIT_MODE"] == "observe" and env["HANGKIT_SCRATCH_DIR"] == "/tmp/hk/job_5/attempt_1"
    assert env["HANGKIT_STORAGE_URL"] == "s3://b/p" and "HANGKIT_NCCLRAS_ADDRESS" not in env
    assert env["TORCH_FR_BUFFER_SIZE"] == "0" and env["HANGKIT_AUTO_CHECKIN"] == "1"
    # the job environment reads back to the same settings; HANGKIT_SCRATCH_DIR (the
    # job's own directory) is not the scratch_dir setting (the node root)
    assert env["HANGKIT_SCRATCH_ROOT"] == "/tmp/hpc-hangkit"
    back = load_settings(env=env, path=os.devnull)
    assert back.as_dict() == s.as_dict() and back.scratch_dir == "/tmp/hpc-hangkit"
    assert load_settings(env={"HANGKIT_SCRATCH_DIR": "/j/job_1/attempt_0"}, path=os.devnull).scratch_dir == \
        "/tmp/hpc-hangkit"
    assert os.path.isfile(os.path.join(env["PYTHONPATH"].split(os.pathsep)[0], "sitecustomize.py"))

    off = load_settings(env={"HANGKIT_MODE": "off"}, path=os.devnull).to_env("/tmp/x", base_env=dict(env))
    assert off["HANGKIT_MODE"] == "off" and off["PYTHONPATH"] == "/home/u/lib"
    assert not [k for k in off if k.startswith("HANGKIT_") and k != "HANGKIT_MODE"]
    assert "TORCH_FR_BUFFER_SIZE" in off  # a user's own value is theirs; off adds nothing
    with pytest.raises(ConfigError, match="absolute path"):
        s.to_env("relative")
    assert "PATH" in s.to_env("/tmp/y")  # base_env defaults to os.environ


def test_settings_are_frozen():
    s = Settings.defaults()
    with pytest.raises(Exception):
        s.mode = "fail"
    assert layout.SITE_CONFIG_PATH == "/etc/hpc-hangkit/config.toml"


def test_together_confirm_defaults_to_twice_the_confirm_window_and_is_checked(tmp_path):
    s = load_settings(env={"HANGKIT_CONFIRM_DURATION_S": "120"}, path=os.devnull)
    assert s.together_confirm_s is None and s.effective_together_confirm_s == 240.0
    s = load_settings(env={"HANGKIT_TOGETHER_CONFIRM_S": "90"}, path=os.devnull)
    assert s.effective_together_confirm_s == 90.0
    with pytest.raises(ConfigError, match=r"env HANGKIT_TOGETHER_CONFIRM_S: together_confirm_s \(5.0\) must be > "
                                          r"poll_interval_s \(15.0, from default\)"):
        load_settings(env={"HANGKIT_TOGETHER_CONFIRM_S": "5"}, path=os.devnull)


@pytest.mark.parametrize("site, job_env, hooked", [
    ("", None, True),                        # the default: on
    ("auto_checkin = false\n", None, False),  # off per site (the job environment says 0)
    ("", "0", False),                         # off per job, over the site's default
    ("auto_checkin = false\n", "1", True),    # on per job, over the site
])
def test_auto_checkin_on_by_default_off_per_site_and_per_job(tmp_path, site, job_env, hooked):
    """A real interpreter armed through the job environment (sitecustomize on PYTHONPATH) installs
    the torch.distributed check-in hook exactly when the settings say so; an environment without
    HANGKIT_AUTO_CHECKIN at all (a job not prepared by Settings.to_env) gets the default, on."""
    import subprocess
    import sys

    cfg = toml(tmp_path, site or "# defaults\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_")}
    if job_env is not None:
        env["HANGKIT_AUTO_CHECKIN"] = job_env
    st = load_settings(env=env, path=cfg, overrides={"mode": "observe"})
    assert st.auto_checkin is hooked
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    job = st.to_env(str(scratch), base_env={k: v for k, v in env.items() if k != "PYTHONPATH"})
    job.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")  # a rank: the boot arms only ranks
    assert job["HANGKIT_AUTO_CHECKIN"] == ("1" if hooked else "0")
    # armed at all (the heartbeat's core loaded), and whether the check-in hook waits for torch
    probe = ("import sys; assert '_hangkit_core' in sys.modules, 'not armed'; "
             "m = sys.modules.get('_hangkit_autocheckin'); print(m is not None and m._finder is not None)")
    out = subprocess.run([sys.executable, "-c", probe], env=job, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == str(hooked), out.stderr[-2000:]
    if job_env is None and site == "":
        del job["HANGKIT_AUTO_CHECKIN"]  # not written at all: the boot default is on
        out = subprocess.run([sys.executable, "-c", probe], env=job, capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == "True", out.stderr[-2000:]
