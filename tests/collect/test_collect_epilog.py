"""The real slurm/epilog script, run the way slurmd runs it: as root, with
slurmd's environment (no PATH), the site config from HPC_HANGKIT_CONFIG.
It must always exit 0 inside its time bound (scenario 13) and leave either a
verified copy in storage or the local files plus a manifest.
"""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from hpc_hangkit import config, layout, storage
from hpc_hangkit.collect import copy, job

from testlib import validate_report, wait_for
from collect_helpers import (EPILOG, REPO, S3_ENV, area, epilog_env,  # noqa: F401 (area)
                             faulthandler_dump, job_user, local_files, start_moto,
                             write_site_toml)


def run_epilog(env, timeout=60):
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, EPILOG], env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, cwd="/")
    return p, time.monotonic() - t0


def test_epilog_copies_verified_and_cleans_scratch(area):
    uid, gid, user = job_user()
    dump = faulthandler_dump(area.base)
    d = area.make_attempt("301", 0, uid, gid, {"watchdog/rank_0.pid9.log": dump,
                                              "hang_detector/report.txt": b"r\n"})
    cfg = write_site_toml(area, "file://" + area.storage)
    env = epilog_env(301, uid, gid, user, extra={"HPC_HANGKIT_CONFIG": cfg})
    p, took = run_epilog(env)
    assert p.returncode == 0, p.stderr
    assert b"complete" in p.stderr, p.stderr
    stored = local_files(os.path.join(area.storage, "301", "attempt_0"))
    assert open(stored["hang_detector/watchdog/rank_0.pid9.log"], "rb").read() == dump
    assert "collect_hk1.json" in stored
    assert not os.path.exists(d), "verified copy: the attempt scratch is removed"
    assert not os.path.exists(os.path.dirname(d))


def test_epilog_array_task_writes_alias(area):
    uid, gid, user = job_user()
    area.make_attempt("302", 0, uid, gid, {"watchdog/rank_0.pid9.log": b"x\n"})
    cfg = write_site_toml(area, "file://" + area.storage)
    env = epilog_env(302, uid, gid, user, extra={"HPC_HANGKIT_CONFIG": cfg,
                                                 "SLURM_ARRAY_JOB_ID": "300",
                                                 "SLURM_ARRAY_TASK_ID": "2"})
    p, _ = run_epilog(env)
    assert p.returncode == 0, p.stderr
    assert open(os.path.join(area.storage, "300_2.jobid")).read().strip() == "302"
    assert storage.read_alias("file://" + area.storage, "300_2", None) == "302"


def test_epilog_bad_config_or_env_exits_0_and_keeps_files(area):
    uid, gid, user = job_user()
    d = area.make_attempt("303", 0, uid, gid, {"watchdog/rank_0.pid9.log": b"x\n"})
    bad = os.path.join(area.base, "bad.toml")
    with open(bad, "w") as f:
        f.write('storage_url = "s4://nope"\nbogus_key = 1\n')
    p, _ = run_epilog(epilog_env(303, uid, gid, user, extra={"HPC_HANGKIT_CONFIG": bad}))
    assert p.returncode == 0
    assert b"config error" in p.stderr and b"bogus_key" in p.stderr, p.stderr
    assert os.path.exists(os.path.join(d, "watchdog/rank_0.pid9.log"))
    # garbage from slurmd's side: still exit 0, nothing touched
    for extra in ({"SLURM_JOB_ID": "../../etc"}, {"SLURM_JOB_UID": "x"}, {"SLURM_JOB_ID": "", "SLURM_JOBID": ""}):
        env = epilog_env(303, uid, gid, user, extra=dict(extra, HPC_HANGKIT_CONFIG=bad))
        p, _ = run_epilog(env)
        assert p.returncode == 0, extra
        assert b"error" in p.stderr, (extra, p.stderr)
    assert os.path.exists(os.path.join(d, "watchdog/rank_0.pid9.log"))


def hanging_collector_hook(tmp_path, record=None):
    """A PYTHONPATH directory whose sitecustomize hangs the collector's interpreter
    (``python -m hpc_hangkit.collect``) before any hpc-hangkit code runs; with
    ``record``, it first writes "<its process group> <its argv>" there."""
    hook = tmp_path / "hook"
    hook.mkdir()
    rec = ("    open(%r, 'w').write('%%d ' %% os.getpgid(0)"
           " + ' '.join(open('/proc/self/cmdline').read().split('\\0')))\n" % str(record)) if record else ""
    (hook / "sitecustomize.py").write_text(
        "import os, time\n"
        "if b'hpc_hangkit.collect' in open('/proc/self/cmdline', 'rb').read():\n"
        + rec + "    time.sleep(600)\n")
    return hook


@pytest.mark.timeout(60)
def test_epilog_hard_timeout_when_python_itself_hangs(area, tmp_path):
    """The collector's interpreter hangs before any of our code runs (a stuck
    import): the supervisor's hard timeout still ends the epilog with 0."""
    uid, gid, user = job_user()
    d = area.make_attempt("304", 0, uid, gid, {"watchdog/rank_0.pid9.log": b"x\n"})
    hook = hanging_collector_hook(tmp_path)
    cfg = write_site_toml(area, "file://" + area.storage)
    env = epilog_env(304, uid, gid, user, extra={
        "HPC_HANGKIT_CONFIG": cfg, "HANGKIT_EPILOG_HARD_TIMEOUT_S": "5",
        "PYTHONPATH": str(hook)})
    p, took = run_epilog(env, timeout=30)
    assert p.returncode == 0
    print("hung interpreter: epilog took %.2f s (hard 5 s)" % took)
    assert took < 9, "hard timeout 5 s (+2 s kill grace) overrun: %.1f s" % took
    assert os.path.exists(os.path.join(d, "watchdog/rank_0.pid9.log"))


@pytest.mark.timeout(90)
@pytest.mark.parametrize("value, bound", [("6", 6), ("2", 60), ('"soon"', 60)])
def test_epilog_bound_is_the_site_epilog_budget_s(area, tmp_path, value, bound):
    """slurm/epilog takes its time bound from the site setting epilog_budget_s (no
    hard-coded budget); an invalid value is named in the log and the default
    (60 s) is used. The collector's interpreter hangs (a stuck import), so only
    the bound ends the epilog."""
    uid, gid, user = job_user()
    d = area.make_attempt("306", 0, uid, gid, {"watchdog/rank_0.pid9.log": b"x\n"})
    hook = hanging_collector_hook(tmp_path, record=tmp_path / "argv")
    cfg = write_site_toml(area, "file://" + area.storage, "epilog_budget_s = %s\n" % value)
    env = epilog_env(306, uid, gid, user, extra={"HPC_HANGKIT_CONFIG": cfg, "PYTHONPATH": str(hook)})
    env.pop("HANGKIT_EPILOG_HARD_TIMEOUT_S", None)
    if bound == 6:
        p, took = run_epilog(env, timeout=30)
        assert p.returncode == 0
        assert took < bound + 3, "epilog_budget_s %d s (+2 s kill grace) overrun: %.1f s" % (bound, took)
    else:
        # the default bound would take 60 s to show: check what the collector was given
        p = subprocess.Popen([sys.executable, EPILOG], env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/",
                             start_new_session=True)
        try:
            wait_for(lambda: (tmp_path / "argv").exists(), 30, interval_s=0.2,
                     what="the collector to record its argv")
        finally:
            os.killpg(p.pid, signal.SIGKILL)
            if (tmp_path / "argv").exists():       # the collector's own process group
                os.killpg(int((tmp_path / "argv").read_text().split()[0]), signal.SIGKILL)
            err = p.communicate(timeout=20)[1]
        assert b"epilog_budget_s" in err and b"using 60 s" in err, err
    assert "--hard-timeout-s %d" % bound in (tmp_path / "argv").read_text()
    assert os.path.exists(os.path.join(d, "watchdog/rank_0.pid9.log"))


@pytest.mark.timeout(180)
def test_scenario13_stalled_s3_epilog_in_budget_then_collect_finishes(area, spawn, port,
                                                                      monkeypatch):
    """Scenario 13: storage stalls while dumps are large. The epilog exits 0
    inside its budget, leaves a local manifest naming the dumps and why they
    were not copied; a later `hpc-hangkit collect` on the node finishes the
    copy and prints the roll call."""
    proc, url = start_moto(spawn, port)
    env_s3 = dict(S3_ENV, FSSPEC_S3_ENDPOINT_URL=url)
    for k, v in S3_ENV.items():
        monkeypatch.setenv(k, v)
    import fsspec.config
    import s3fs

    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": url})

    s3fs.S3FileSystem(endpoint_url=url, skip_instance_cache=True).mkdir("hk13")
    uid, gid, user = job_user()
    big = os.urandom(8 << 20)
    dump = faulthandler_dump(area.base)
    files = {"watchdog/rank_0.pid51.log": dump, "watchdog/rank_1.pid52.log": dump,
             "hang_detector/flight_recorder/rank_0.json": big}
    d = area.make_attempt("305", 0, uid, gid, files)
    storage_url = "s3://hk13/dumps"
    cfg = write_site_toml(area, storage_url)
    env = epilog_env(305, uid, gid, user, extra=dict(env_s3, HPC_HANGKIT_CONFIG=cfg,
                                                     HANGKIT_EPILOG_HARD_TIMEOUT_S="9"))
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        p, took = run_epilog(env, timeout=60)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert p.returncode == 0, p.stderr
    budget = 9 - 3
    print("scenario 13: epilog took %.2f s (soft budget %d s)" % (took, budget))
    assert took < budget + 1.5, "epilog overran its %d s budget: %.1f s" % (budget, took)
    man = copy.read_manifest(d)
    assert man["status"] == "timeout", man
    assert "did not finish within the budget" in man["reason"]
    assert {f["path"] for f in man["files"] if f["state"] != "copied"} == set(files)
    assert local_files(d).keys() >= set(files)

    # later, on the node: `hpc-hangkit collect 305` finishes the copy, reads storage
    cenv = dict(os.environ, HPC_HANGKIT_CONFIG=cfg, **env_s3)
    c = subprocess.run([sys.executable, "-m", "hpc_hangkit", "collect", "305", "--stored",
                        "--json"], env=cenv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=120, cwd=REPO)
    assert b"local scratch attempt_0: complete" in c.stderr, c.stderr
    assert not os.path.exists(d)
    got, n = job.fetch_from_storage(storage_url, "305", 0, os.path.join(area.base, "got"))
    assert open(os.path.join(got, "flight_recorder", "rank_0.json"), "rb").read() == big
    assert c.returncode == 0, c.stderr
    rep = validate_report(c.stdout, "collect 305 --stored --json")
    assert "verdict" in rep


def test_epilog_of_an_unarmed_job_does_nothing(area):
    """Mode off (or no SPANK plugin): the prolog made no scratch, so the epilog
    returns at once without importing hpc_hangkit."""
    uid, gid, user = job_user()
    d = area.make_attempt("306", 0, uid, gid, {"watchdog/rank_0.pid9.log": b"x\n"})
    cfg = write_site_toml(area, "file://" + area.storage)
    for mode in ("off", None):
        env = epilog_env(306, uid, gid, user, extra={"HPC_HANGKIT_CONFIG": cfg})
        if mode is None:
            del env["SPANK_HANGKIT_MODE"]
        else:
            env["SPANK_HANGKIT_MODE"] = mode
        p, _ = run_epilog(env)
        assert p.returncode == 0 and p.stderr == b""
    assert os.path.exists(os.path.join(d, "watchdog/rank_0.pid9.log"))
    assert os.listdir(area.storage) == []


@pytest.mark.timeout(120)
def test_user_finishes_own_partial_copy_but_not_anothers(area):
    """`hpc-hangkit collect` run by the job's user (not root) on the node
    finishes the copy its failed epilog left; another user's scratch is refused."""
    uid, gid, user = job_user()
    d = area.make_attempt("307", 0, uid, gid, {"watchdog/rank_0.pid9.log": b"mine\n"})
    other = area.make_attempt("308", 0, 0, 0, {"watchdog/rank_0.pid9.log": b"root's\n",
                                               copy.MANIFEST_NAME: b"{}"})
    os.chmod(other, 0o755)
    cfg = write_site_toml(area, "file://" + area.storage)
    os.chmod(area.storage, 0o755)              # the epilog cannot write
    p, _ = run_epilog(epilog_env(307, uid, gid, user, extra={"HPC_HANGKIT_CONFIG": cfg}))
    assert p.returncode == 0 and os.path.exists(os.path.join(d, copy.MANIFEST_NAME))
    os.chmod(area.storage, 0o1777)             # storage fixed
    os.chmod(cfg, 0o644)
    env = {"PATH": "/usr/bin:/bin", "HPC_HANGKIT_CONFIG": cfg, "HOME": "/", "PYTHONPATH": REPO}
    for job, ok in (("307", True), ("308", False)):
        c = subprocess.run([shutil.which("runuser"), "-u", user, "--", sys.executable, "-m", "hpc_hangkit",
                            "collect", job, "--stored", "--json"], env=env, cwd="/",
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        if ok:
            assert b"local scratch attempt_0: complete" in c.stderr, c.stderr
            validate_report(c.stdout, "collect %s --stored --json" % job)
        else:
            assert b"belongs to uid 0" in c.stderr, c.stderr
    stored = local_files(os.path.join(area.storage, "307", "attempt_0"))
    assert open(stored["hang_detector/watchdog/rank_0.pid9.log"], "rb").read() == b"mine\n"
    assert local_files(d) == {}    # the empty dir stays: its parent job_<id>/ is root's
    assert os.path.exists(os.path.join(other, "watchdog/rank_0.pid9.log"))


def test_epilog_at_requeue_collects_the_attempt_that_just_ended(area):
    """At a requeue slurmd's epilog already sees the next restart count (measured on
    22.05): with SLURM_JOB_RESTART_COUNT=1 and only attempt_0 on the node, attempt_0
    must still reach storage; a later attempt directory is never touched."""
    uid, gid, user = job_user()
    d0 = area.make_attempt("310", 0, uid, gid, {"watchdog/rank_1.pid7.log": b"attempt zero\n"})
    d5 = area.make_attempt("310", 5, uid, gid, {"watchdog/rank_1.pid8.log": b"future\n"})
    cfg = write_site_toml(area, "file://" + area.storage)
    p, _ = run_epilog(epilog_env(310, uid, gid, user, attempt=1, extra={"HPC_HANGKIT_CONFIG": cfg}))
    assert p.returncode == 0, p.stderr
    assert b"attempt 0: complete" in p.stderr, p.stderr
    stored = local_files(os.path.join(area.storage, "310", "attempt_0"))
    assert any(open(f, "rb").read() == b"attempt zero\n" for f in stored.values()), sorted(stored)
    assert not os.path.exists(d0)
    assert os.path.exists(os.path.join(d5, "watchdog", "rank_1.pid8.log"))
    assert not os.path.exists(os.path.join(area.storage, "310", "attempt_5"))


def test_epilog_script_budget_literals_are_the_setting():
    """slurm/epilog must not import hpc_hangkit (it outlives a hung import), so it keeps
    the default and range of epilog_budget_s and the site config path as literals:
    they must be config's and layout's."""
    import runpy

    ns = runpy.run_path(EPILOG, run_name="hpc_hangkit_epilog_script")
    assert ns["DEFAULT_BUDGET_S"] == config.EPILOG_BUDGET_DEFAULT_S
    assert tuple(ns["BUDGET_RANGE_S"]) == config.EPILOG_BUDGET_RANGE_S
    assert ns["SITE_CONFIG"] == layout.SITE_CONFIG_PATH


@pytest.mark.timeout(180)
def test_collector_stops_when_slurmd_kills_the_epilog(area, spawn):
    """slurmd SIGKILLs the epilog's process group at its timeout; the collector runs in
    a session of its own (so the hard timeout can kill it as a group), and must stop
    with the epilog anyway: it watches a pipe from slurm/epilog and records why."""
    uid, gid, user = job_user()
    d = area.make_attempt("320", 0, uid, gid, {"watchdog/rank_0.pid9.log": b"dump\n"})
    big = os.path.join(d, "flight_recorder", "rank_0.json")
    os.makedirs(big.rsplit("/", 1)[0])
    with open(big, "wb") as f:
        f.truncate(2 << 30)            # sparse: many seconds to copy and verify
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            os.lchown(os.path.join(root, n), uid, gid)
    cfg = write_site_toml(area, "file://" + area.storage)
    env = epilog_env(320, uid, gid, user, extra={"HPC_HANGKIT_CONFIG": cfg,
                                                  "HANGKIT_EPILOG_HARD_TIMEOUT_S": "120"})
    p = spawn([sys.executable, EPILOG], env=env, stdin=subprocess.DEVNULL,
              stderr=subprocess.PIPE, cwd="/")
    tmp = os.path.join(area.storage, "320/attempt_0/hang_detector/flight_recorder",
                       ".rank_0.json.hk1.hk.tmp")
    wait_for(lambda: os.path.exists(tmp), timeout_s=60, what="the big copy to start")
    os.kill(p.pid, signal.SIGKILL)      # what slurmd does at PrologEpilogTimeout
    t0 = time.monotonic()
    man_path = os.path.join(d, copy.MANIFEST_NAME)

    def stopped():
        man = copy.read_manifest(d) if os.path.exists(man_path) else None
        if man is None:
            return None
        return man if "epilog was killed" in (man.get("reason") or "") else None
    man = wait_for(stopped, timeout_s=30, what="the collector to record that it stopped")
    took = time.monotonic() - t0
    print("collector stopped %.1f s after the epilog was killed" % took)
    assert man["status"] == "timeout"
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.close(copy.lock_attempt(copy.Tree(fd), 10.0))   # nobody holds the attempt
    finally:
        os.close(fd)
    assert os.path.getsize(big) == 2 << 30
