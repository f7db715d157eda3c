"""One NCCL RAS address per job: the prolog's port choice and reservation
(hpc_hangkit.slurm.rasport), the epilog giving the port back, and two jobs of two
users on one node whose monitors each reach only their own job's RAS.

RAS needs GPUs, so each job's NCCL processes are the stand-in
tests/ncclras_standin/listener (listening where the job's environment says, as NCCL
does) and the monitor's client is tests/ncclras_standin/ncclras in ``connect`` mode
(really connecting to ``-h``/``-p``); both carry real-format polls.
"""
from testlib import REPO, TESTS, wait_for
import os
import pwd
import subprocess
import sys
from types import SimpleNamespace

import pytest

from hpc_hangkit import layout
from hpc_hangkit.config import port_range
from hpc_hangkit.evidence.ras import maybe_source
from hpc_hangkit.slurm import rasport

STANDIN = os.path.join(TESTS, "ncclras_standin", "ncclras")
LISTENER = os.path.join(TESTS, "ncclras_standin", "listener")
NCCL = os.path.join(TESTS, "fixtures", "nccl")
#: below Linux's ephemeral ports (32768-60999): no test's random port lands here
RANGE = "29100-29109"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the prolog chowns scratch to the job's user: needs root")


def _root_fd(path):
    os.makedirs(str(path), exist_ok=True)
    return os.open(str(path), os.O_RDONLY | os.O_DIRECTORY)


def test_port_range_setting():
    assert port_range("28100-28999") == (28100, 28999) and port_range("off") is None
    assert port_range(None) is None and port_range(" 30000 - 30000 ") == (30000, 30000)
    for bad in ("80-90", "3000-2000", "28100", "a-b", "1000-70000"):
        with pytest.raises(ValueError):
            port_range(bad)


def test_first_choice_is_derived_from_the_job_id_and_the_walk_covers_the_range():
    assert rasport.first_port("1005", 29100, 29109) == 29105
    assert rasport.candidates("1008", 29100, 29109) == [29108, 29109] + list(range(29100, 29108))
    with pytest.raises(ValueError):
        rasport.first_port("12_3", 29100, 29109)


def test_reservations_keep_concurrent_jobs_apart_and_the_epilog_gives_them_back(tmp_path):
    fd = _root_fd(tmp_path / "scratch")
    try:
        free = lambda p: p != 29101  # 29101 is bound by something else on this node
        for j in ("1000", "1010", "1020"):
            os.mkdir(str(tmp_path / "scratch" / ("job_" + j)))
        # 1000, 1010 and 1020 all start at 29100
        assert rasport.take_port(fd, "1000", 29100, 29109, free) == (29100, "port 29100")
        p, note = rasport.take_port(fd, "1010", 29100, 29109, free)
        assert p == 29102 and "not 29100: 29100 reserved by job 1000; 29101 in use" in note
        assert rasport.take_port(fd, "1010", 29100, 29109, free)[0] == 29102  # a re-run prolog
        assert sorted(os.listdir(str(tmp_path / "scratch" / layout.RAS_PORTS_DIR))) == ["29100", "29102"]
        assert rasport.release_ports(fd, "1000") == [29100]
        assert rasport.take_port(fd, "1020", 29100, 29109, free)[0] == 29100
        # a reservation whose job left no scratch on the node (its epilog never ran) is reclaimed
        os.rmdir(str(tmp_path / "scratch" / "job_1010"))
        assert rasport.take_port(fd, "1030", 29102, 29102, free)[0] == 29102
        # every port taken: no address (the job's ranks use NCCL's default), nothing raised
        assert rasport.take_port(fd, "1040", 29100, 29100, free) == (
            None, "no free port in 29100-29100 (1 reserved or in use)")
        assert rasport.release_at(str(tmp_path / "scratch"), "1020") == [29100]
        assert rasport.release_at(str(tmp_path / "nothing"), "1020") == []
    finally:
        os.close(fd)


def test_a_planted_reservation_directory_is_never_used(tmp_path):
    fd = _root_fd(tmp_path / "scratch")
    try:
        os.symlink(str(tmp_path), str(tmp_path / "scratch" / layout.RAS_PORTS_DIR))
        with pytest.raises(OSError):
            rasport.take_port(fd, "1000", 29100, 29109, lambda p: True)
        assert rasport.release_ports(fd, "1000") == []
    finally:
        os.close(fd)


def test_the_address_in_use_says_where_it_comes_from():
    ours = {"NCCL_RAS_ADDR": "localhost:29105"}
    use = rasport.address_in_use(ours, ours)
    assert (use.address, use.origin) == ("localhost:29105", rasport.RasOrigin.PROLOG)
    assert use.sentence() == "per-job address localhost:29105 (chosen by the prolog)"
    use = rasport.address_in_use({"NCCL_RAS_ADDR": "localhost:31000"}, ours)
    assert (use.address, use.origin) == ("localhost:31000", rasport.RasOrigin.JOB_OVERRIDES)
    assert "set by the job is used" in use.sentence() and "localhost:29105" in use.sentence()
    use = rasport.address_in_use({"NCCL_RAS_ADDR": "localhost:31000"}, {})
    assert use.origin is rasport.RasOrigin.JOB and "no per-job address" in use.sentence()
    use = rasport.address_in_use({}, {})
    assert use.address is None and use.origin is rasport.RasOrigin.DEFAULT


def _prolog(tmp_path, job_id, uid, gid):
    cfg = tmp_path / "config.toml"
    cfg.write_text('scratch_dir = "%s"\n[ncclras]\nport_range = "%s"\n' % (tmp_path / "scratch", RANGE))
    env = {"SLURM_JOB_ID": job_id, "SLURM_JOB_UID": str(uid), "SLURM_JOB_GID": str(gid),
           "SLURM_JOB_USER": "x", "SLURM_JOB_RESTART_COUNT": "0", "SPANK_HANGKIT_MODE": "observe",
           "HPC_HANGKIT_CONFIG": str(cfg), "PYTHONPATH": REPO}
    p = subprocess.run([sys.executable, os.path.join(REPO, "slurm", "prolog")], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert p.returncode == 0, p.stderr
    att = tmp_path / "scratch" / ("job_" + job_id) / "attempt_0"
    return rasport.read_job_env(str(att / layout.JOB_ENV_FILE)), p.stderr.decode()


def _users():
    """Two different users: hkuser/hkuser2 (the testbed's) when root and they exist."""
    try:
        return [pwd.getpwnam(u) for u in ("hkuser", "hkuser2")] if os.geteuid() == 0 else None
    except KeyError:
        return None


@needs_root
@pytest.mark.timeout(60)
def test_two_users_on_one_node_each_monitor_reaches_only_its_own_job(tmp_path, spawn, monkeypatch):
    users = _users()
    if users is None:
        pytest.skip("needs the users hkuser and hkuser2 (slurm/testbed/up.sh adds them)")
    # job ids chosen so that both start from the same port: the reservation separates them
    jobs = {"2000": (users[0], "a_healthy_world8.json"), "2010": (users[1], "c_tp_subcomm_hang_minimal.json")}
    addrs = {}
    for j, (u, _) in jobs.items():
        job_env, err = _prolog(tmp_path, j, u.pw_uid, u.pw_gid)
        addrs[j] = job_env["NCCL_RAS_ADDR"]
    ports = {j: int(a.rsplit(":", 1)[1]) for j, a in addrs.items()}
    assert ports["2000"] != ports["2010"] and all(29100 <= p <= 29109 for p in ports.values()), addrs
    # each job's "NCCL processes" listen where its environment says, as its own user
    for j, (u, poll) in jobs.items():
        spawn([sys.executable, "-I", LISTENER, os.path.join(NCCL, poll)], user=u.pw_uid, group=u.pw_gid,
              env={"NCCL_RAS_ADDR": addrs[j], "PATH": "/usr/bin:/bin"},
              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for j, port in ports.items():
        wait_for(lambda: not rasport.port_is_free(port), 20, what="job %s's RAS stand-in listening" % j)
    # each job's monitor builds its RAS source as the batch monitor does, from its job environment
    settings = SimpleNamespace(ncclras_path=STANDIN, ncclras_address=None, ncclras_timeout_s=5,
                               poll_interval_s=1, confirm_duration_s=3)
    monkeypatch.setenv("NCCLRAS_STANDIN_MODE", "connect")
    seen = {}
    for j in jobs:
        src = maybe_source(settings, out_dir=str(tmp_path / ("hd_" + j)), env={"NCCL_RAS_ADDR": addrs[j]})
        assert (src.client.host, src.client.port) == ("localhost", ports[j])
        seen[j] = sorted(src.poll(1.0))
    assert seen["2000"] == ["0x9a1c3f0e5b7d2468"]
    assert seen["2010"] == ["0x2d4f6a8c0e1b3d5f", "0x9a1c3f0e5b7d2468", "0xe7c9a1b3d5f70913"]
