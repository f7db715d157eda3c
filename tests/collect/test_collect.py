"""The collector: verified copy to file:// storage, privilege drop, no-follow,
failure manifests, and finishing a partial copy later.

Runs as root (the epilog does) with ``nobody`` as the job's user.
"""
import json
import os
import stat
import time

import pytest

from hpc_hangkit import layout, storage
from hpc_hangkit.collect import copy, job
from hpc_hangkit.collect.attempt import collect_attempt
from hpc_hangkit.slurmjob import JobEnv

from collect_helpers import area, faulthandler_dump, job_user, local_files  # noqa: F401 (area: fixture)

SECRET = b"root-only secret: must never reach storage\n"


@pytest.fixture(scope="module")
def fh_dump(tmp_path_factory):
    return faulthandler_dump(str(tmp_path_factory.mktemp("fh")))


def _stored(area, job_id, attempt=0):
    base = os.path.join(area.storage, layout.storage_attempt_prefix(job_id, attempt))
    return base, local_files(base)


def _run(area, job_id, attempt=0, budget=20.0, storage_url=None):
    uid, gid, user = job_user()
    return collect_attempt(
        area.scratch, job_id, attempt, storage_url or "file://" + area.storage,
        uid=uid, gid=gid, user=user, deadline=time.monotonic() + budget, host="hk1")


@pytest.mark.timeout(60)
def test_verified_copy_deletes_local_and_records_manifest(area, fh_dump):
    uid, gid, _ = job_user()
    files = {
        "watchdog/rank_0.pid11.log": fh_dump,
        "heartbeats/rank_0.pid11.hb": os.urandom(256),
        "hang_detector/report.txt": b"roll call\n",
        "hang_detector/stack_traces/rank_0.log": fh_dump,
        "hang_detector/nvidia_smi/node_hk1.log": b"hpc-hangkit: nvidia-smi unavailable: none\n",
    }
    d = area.make_attempt("101", 0, uid, gid, files)
    res = _run(area, "101")
    assert res["status"] == "complete", res
    assert res["copied"] == len(files) and res["failed"] == 0
    base, stored = _stored(area, "101")
    for rel, data in files.items():
        dest = rel if rel.startswith("hang_detector/") else "hang_detector/" + rel
        with open(stored[dest], "rb") as f:
            assert f.read() == data, dest
        st = os.stat(stored[dest])
        assert st.st_uid == uid, "storage written as the job's user, not root"
        assert not st.st_mode & 0o077, "dumps in storage are private to the user"
    # local copies gone (only empty dirs may remain), no local manifest
    assert local_files(d) == {}
    man = json.load(open(stored["collect_hk1.json"]))
    assert man["status"] == "complete"
    assert {f["path"] for f in man["files"] if f["state"] == "copied"} == set(files)
    for f in man["files"]:
        assert len(f["sha256"]) == 64


@pytest.mark.timeout(60)
def test_rerun_is_idempotent_and_other_nodes_same_name_kept(area):
    uid, gid, _ = job_user()
    area.make_attempt("102", 0, uid, gid, {"hang_detector/events.jsonl": b'{"a": 1}\n'})
    assert _run(area, "102")["status"] == "complete"
    # a second node writes the same name with other content: both kept
    area.make_attempt("102", 0, uid, gid, {"hang_detector/events.jsonl": b'{"b": 2}\n'})
    uid, gid, user = job_user()
    res = collect_attempt(area.scratch, "102", 0, "file://" + area.storage, uid=uid,
                          gid=gid, user=user, deadline=time.monotonic() + 20, host="hk2")
    assert res["status"] == "complete", res
    _, stored = _stored(area, "102")
    assert open(stored["hang_detector/events.jsonl"], "rb").read() == b'{"a": 1}\n'
    assert open(stored["hang_detector/events.hk2.jsonl"], "rb").read() == b'{"b": 2}\n'


@pytest.mark.timeout(60)
def test_planted_symlinks_fifo_and_root_only_file_are_not_copied(area, fh_dump):
    uid, gid, _ = job_user()
    secret_dir = os.path.join(area.base, "rootonly")
    os.mkdir(secret_dir, 0o755)
    secret = os.path.join(secret_dir, "shadow")
    with open(secret, "wb") as f:
        f.write(SECRET)
    os.chmod(secret, 0o600)
    d = area.make_attempt("103", 0, uid, gid, {"watchdog/rank_0.pid5.log": fh_dump})
    # the user plants: a symlink to a root-only file, a symlinked directory,
    # a fifo (would block a naive open), and root leaves a 0600 root file
    os.symlink(secret, os.path.join(d, "watchdog", "rank_1.pid6.log"))
    os.symlink(secret_dir, os.path.join(d, "heartbeats"))
    os.mkfifo(os.path.join(d, "watchdog", "rank_2.pid7.log"))
    with open(os.path.join(d, "rootfile.txt"), "wb") as f:
        f.write(SECRET)
    os.chmod(os.path.join(d, "rootfile.txt"), 0o600)
    for p in ("watchdog/rank_1.pid6.log", "heartbeats", "watchdog/rank_2.pid7.log"):
        os.lchown(os.path.join(d, p), uid, gid)

    res = _run(area, "103")
    base, stored = _stored(area, "103")
    for path in stored.values():
        with open(path, "rb") as f:
            assert SECRET not in f.read(), path
    assert "hang_detector/watchdog/rank_0.pid5.log" in stored
    assert res["copied"] == 1
    skipped = set(res["skipped_paths"])
    assert {"watchdog/rank_1.pid6.log", "heartbeats", "watchdog/rank_2.pid7.log",
            "rootfile.txt"} <= skipped
    man = json.load(open(stored["collect_hk1.json"]))
    why = {f["path"]: f["why"] for f in man["files"] if f["state"] == "skipped"}
    assert "symlink" in why["watchdog/rank_1.pid6.log"]
    assert "fifo" in why["watchdog/rank_2.pid7.log"]
    assert "Permission denied" in why["rootfile.txt"], "read as the user, not root"
    # the secret is untouched; the planted links and the fifo are gone from
    # scratch (unlinked, not followed); the unreadable root file stays
    assert open(secret, "rb").read() == SECRET
    assert os.listdir(secret_dir) == ["shadow"]
    assert not os.path.lexists(os.path.join(d, "watchdog", "rank_1.pid6.log"))
    assert not os.path.lexists(os.path.join(d, "heartbeats"))
    assert not os.path.lexists(os.path.join(d, "watchdog", "rank_2.pid7.log"))
    assert open(os.path.join(d, "rootfile.txt"), "rb").read() == SECRET


@pytest.mark.timeout(60)
def test_attempt_dir_that_is_a_symlink_or_foreign_is_refused(area, fh_dump):
    uid, gid, user = job_user()
    # another user's (root's) directory where the job's scratch should be
    d = area.make_attempt("104", 0, 0, 0, {"watchdog/rank_0.pid1.log": fh_dump})
    os.chmod(d, 0o755)      # readable, so only the ownership check can refuse it
    res = _run(area, "104")
    assert res["status"] in ("error", "timeout", "incomplete"), res
    assert "owned by uid 0" in json.dumps(res)
    assert os.path.exists(os.path.join(d, "watchdog/rank_0.pid1.log"))
    assert not os.path.exists(os.path.join(area.storage, "104"))
    # the attempt dir replaced by a symlink to a root directory
    jdir = os.path.dirname(area.attempt_dir("105", 0))
    os.makedirs(jdir)
    os.symlink(os.path.dirname(d), os.path.join(jdir, "attempt_0"))
    res = _run(area, "105")
    assert res["status"] != "complete"
    assert not os.path.exists(os.path.join(area.storage, "105"))


@pytest.mark.timeout(60)
def test_unwritable_storage_keeps_local_with_manifest_then_finish_local_copies(area, fh_dump):
    uid, gid, _ = job_user()
    files = {"watchdog/rank_0.pid21.log": fh_dump, "heartbeats/rank_0.pid21.hb": b"x" * 128}
    d = area.make_attempt("106", 1, uid, gid, files)
    os.chmod(area.storage, 0o755)       # root-owned, not writable by the job's user
    t0 = time.monotonic()
    res = _run(area, "106", attempt=1, budget=10)
    assert time.monotonic() - t0 < 10
    assert res["status"] == "incomplete", res
    assert res["failed"] == 2
    # local files kept, manifest says what and why
    for rel in files:
        assert os.path.exists(os.path.join(d, rel))
    man = copy.read_manifest(d)
    assert man["status"] == "incomplete"
    assert all(f["state"] == "failed" and "Permission" in f["why"] for f in man["files"])
    assert os.stat(os.path.join(d, copy.MANIFEST_NAME)).st_uid == uid

    # storage fixed; `collect` on the node finishes the copy (as root -> owner)
    os.chmod(area.storage, 0o1777)
    out = job.finish_local("106", settings=area.settings())
    assert [r["status"] for r in out] == ["complete"], out
    _, stored = _stored(area, "106", 1)
    assert open(stored["hang_detector/watchdog/rank_0.pid21.log"], "rb").read() == fh_dump
    assert not os.path.exists(d), "verified copy: local attempt dir removed"
    (name,) = [k for k in stored if k.startswith("collect_")]   # this host's record
    man = json.load(open(stored[name]))
    assert man["previous"]["status"] == "incomplete"


@pytest.mark.timeout(60)
def test_no_storage_url_leaves_manifest(area):
    uid, gid, user = job_user()
    d = area.make_attempt("107", 0, uid, gid, {"watchdog/rank_0.pid1.log": b"x\n"})
    res = collect_attempt(area.scratch, "107", 0, None, uid=uid, gid=gid, user=user,
                          deadline=time.monotonic() + 10, host="hk1")
    assert res["status"] == "incomplete" and "storage_url" in res["reason"]
    man = copy.read_manifest(d)
    assert man["files"][0]["state"] == "pending"


@pytest.mark.timeout(60)
def test_budget_spent_leaves_pending_files_in_manifest(area):
    uid, gid, user = job_user()
    files = {"watchdog/rank_%d.pid%d.log" % (r, r + 100): b"y" * 64 for r in range(3)}
    d = area.make_attempt("108", 0, uid, gid, files)
    # a budget too short to start any copy: nothing copied, but the outcome is recorded
    res = collect_attempt(area.scratch, "108", 0, "file://" + area.storage, uid=uid,
                          gid=gid, user=user, deadline=time.monotonic() + 0.3, host="hk1")
    assert res["status"] in ("incomplete", "timeout"), res
    man = copy.read_manifest(d)
    assert man["status"] in ("incomplete", "timeout")
    assert any(f["state"] == "pending" and f["why"] for f in man["files"])
    for rel in files:
        assert os.path.exists(os.path.join(d, rel))


def test_copy_tree_skips_device_files_without_opening(area):
    uid, gid, _ = job_user()
    d = area.make_attempt("109", 0, uid, gid, {"a.txt": b"a"})
    os.mknod(os.path.join(d, "null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        man = copy.copy_tree(fd, "file://" + area.storage + "/109/attempt_0", job_id="109",
                                attempt=0, host="hk1")
    finally:
        os.close(fd)
    why = {f["path"]: f["why"] for f in man["files"]}
    assert "character device" in why["null"]
    assert man["status"] == "complete"


@pytest.mark.parametrize("good,canon", [("123", "123"), (" 123_4 ", "123_4"), ("9", "9")])
def test_job_ids_accepted(good, canon):
    assert layout.validate_job_id(good) == canon


@pytest.mark.parametrize("bad", ["", "../1", "1/2", "123_[1-3]", "123+0", "-1", "1 2", "12.0",
                                 "abc", "123_", "_4", "1\n2", "0x1f"])
def test_malformed_job_ids_rejected(bad):
    with pytest.raises(ValueError):
        layout.validate_job_id(bad)


def test_scratch_and_storage_paths_use_the_numeric_id():
    assert copy.job_scratch("/s", "42", 1) == "/s/job_42/attempt_1"
    assert storage.attempt_url("s3://b/p/", "42", 0) == "s3://b/p/42/attempt_0"
    assert storage.attempt_url("file:///st/{user}", "42", 2, user="ann") == \
        "file:///st/ann/42/attempt_2"
    with pytest.raises(ValueError):
        copy.job_scratch("/s", "42_1", 0)      # array form must be resolved first
    with pytest.raises(ValueError):
        storage.attempt_url("file:///st/{user}", "42", 0, user="../root")


def test_cli_rejects_malformed_id_with_exit_2(tmp_path):
    import subprocess
    import sys

    for bad in ("../../etc", "12;rm"):
        p = subprocess.run([sys.executable, "-m", "hpc_hangkit", "collect", bad],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                           env=dict(os.environ, HPC_HANGKIT_CONFIG=os.devnull))
        assert p.returncode == 2, p.stderr
        assert b"invalid Slurm job id" in p.stderr


def test_cli_finished_job_with_nothing_stored_says_so(tmp_path):
    import subprocess
    import sys

    cfg = tmp_path / "c.toml"
    cfg.write_text('scratch_dir = "%s"\nstorage_url = "file://%s"\n' % (tmp_path, tmp_path / "st"))
    p = subprocess.run([sys.executable, "-m", "hpc_hangkit", "collect", "999", "--stored"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                       env=dict(os.environ, HPC_HANGKIT_CONFIG=str(cfg)))
    assert p.returncode == 1
    assert b"nothing stored for job 999" in p.stderr


def test_collect_never_moves_a_possibly_running_attempts_scratch(area, fh_dump):
    """`collect` copies-then-deletes local scratch only where an epilog left a
    manifest or Slurm says the attempt is over: a live rank's files stay put."""
    uid, gid, _ = job_user()
    d = area.make_attempt("110", 0, uid, gid, {"watchdog/rank_0.pid1.log": fh_dump})
    with pytest.raises(FileNotFoundError):
        job.collect_job("110", settings=area.settings(), live=False)
    assert os.path.exists(os.path.join(d, "watchdog/rank_0.pid1.log"))
    sel = job._finish_selector
    running = {"state": "RUNNING", "attempt": 1}
    assert sel(running)(0, False) and not sel(running)(1, False) and not sel(running)(1, True)
    assert not sel({"state": "COMPLETING", "attempt": 0})(0, True)
    assert sel({"state": "COMPLETED", "attempt": 0})(0, False)
    assert sel(None)(0, True) and not sel(None)(0, False)


@pytest.mark.timeout(60)
def test_full_storage_keeps_local_then_finishes_when_space_returns(area):
    """Scenario 13 with a full store: a 1 MiB file system and 3 MiB of dumps."""
    import subprocess

    uid, gid, _ = job_user()
    small, big = b"s" * 1000, os.urandom(3 << 20)
    d = area.make_attempt("111", 0, uid, gid, {"watchdog/rank_0.pid1.log": small,
                                              "hang_detector/flight_recorder/rank_0.json": big})
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=1777", "tmpfs", area.storage],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if m.returncode != 0:
        pytest.skip("a full store is simulated with a 1 MiB tmpfs, and mounting one needs"
                    " CAP_SYS_ADMIN: %s" % m.stdout.decode().strip())
    try:
        res = _run(area, "111")
        assert res["status"] == "incomplete" and res["failed"] == 1, res
        man = copy.read_manifest(d)
        failed = [f for f in man["files"] if f["state"] == "failed"]
        assert [f["path"] for f in failed] == ["hang_detector/flight_recorder/rank_0.json"]
        assert "No space left" in failed[0]["why"]
        assert open(os.path.join(d, failed[0]["path"]), "rb").read() == big
        _, stored = _stored(area, "111")
        assert "hang_detector/flight_recorder/rank_0.json" not in stored, "partial removed"
        assert not os.path.exists(os.path.join(d, "watchdog/rank_0.pid1.log")), \
            "the file that fit was copied, verified and deleted locally"
        subprocess.run(["mount", "-o", "remount,size=16m", area.storage], check=True)
        out = job.finish_local("111", settings=area.settings())
        assert [r["status"] for r in out] == ["complete"], out
        _, stored = _stored(area, "111")
        assert open(stored["hang_detector/flight_recorder/rank_0.json"], "rb").read() == big
        assert open(stored["hang_detector/watchdog/rank_0.pid1.log"], "rb").read() == small
    finally:
        subprocess.run(["umount", "-l", area.storage])


@pytest.mark.timeout(60)
def test_same_log_from_owner_and_monitor_copy_is_stored_once(area, fh_dump):
    """The batch node's scratch holds the monitor's/capture's copies of rank
    files (prefixes of the owner's growing logs): storage keeps one file, the
    longest, whatever the copy order; a truly different file is kept as well."""
    uid, gid, user = job_user()
    log_full = fh_dump * 3
    # node hk1: the capture copy (older, a prefix) in hang_detector/watchdog/
    # and its own raw file; node hk2: the owner's full log
    area.make_attempt("112", 0, uid, gid, {
        "hang_detector/watchdog/rank_2.pid7.log": fh_dump,
        "watchdog/rank_0.pid5.log": fh_dump,
        "hang_detector/watchdog/rank_0.pid5.log": fh_dump[:40]})
    assert _run(area, "112")["status"] == "complete"
    area.make_attempt("112", 0, uid, gid, {"watchdog/rank_2.pid7.log": log_full,
                                          "heartbeats/rank_2.pid7.hb": b"A" * 64})
    res = collect_attempt(area.scratch, "112", 0, "file://" + area.storage, uid=uid,
                          gid=gid, user=user, deadline=time.monotonic() + 20, host="hk2")
    assert res["status"] == "complete", res
    _, stored = _stored(area, "112")
    wd = sorted(k for k in stored if "/watchdog/" in k)
    assert wd == ["hang_detector/watchdog/rank_0.pid5.log", "hang_detector/watchdog/rank_2.pid7.log"]
    assert open(stored["hang_detector/watchdog/rank_2.pid7.log"], "rb").read() == log_full
    assert open(stored["hang_detector/watchdog/rank_0.pid5.log"], "rb").read() == fh_dump
    # a really different file of the same name (a rewritten heartbeat) is kept too
    area.make_attempt("112", 0, uid, gid, {"heartbeats/rank_2.pid7.hb": b"B" * 64})
    res = collect_attempt(area.scratch, "112", 0, "file://" + area.storage, uid=uid,
                          gid=gid, user=user, deadline=time.monotonic() + 20, host="hk1")
    _, stored = _stored(area, "112")
    assert open(stored["hang_detector/heartbeats/rank_2.pid7.hb"], "rb").read() == b"A" * 64
    assert open(stored["hang_detector/heartbeats/rank_2.pid7.hk1.hb"], "rb").read() == b"B" * 64


def test_fetch_from_shared_storage_skips_planted_links(tmp_path):
    """Reading a 1777 shared store (maybe as root): links planted there by
    another user are not followed into the gathered tree."""
    base = tmp_path / "st" / "113" / "attempt_0" / "hang_detector"
    (base / "watchdog").mkdir(parents=True)
    (base / "watchdog" / "rank_0.pid1.log").write_bytes(b"ok\n")
    os.symlink("/etc/passwd", str(base / "watchdog" / "rank_1.pid2.log"))
    os.symlink("/etc", str(base / "heartbeats"))
    out, n = job.fetch_from_storage("file://%s" % (tmp_path / "st"), "113", 0,
                                    str(tmp_path / "got"))
    assert n == 1
    assert local_files(out) == {"watchdog/rank_0.pid1.log": os.path.join(
        out, "watchdog", "rank_0.pid1.log")}


def test_record_array_alias_from_the_job_environment(tmp_path):
    url = "file://%s" % tmp_path
    env = {"SLURM_JOB_ID": "124", "SLURM_ARRAY_JOB_ID": "123", "SLURM_ARRAY_TASK_ID": "4"}
    assert storage.record_array_alias(url, JobEnv.from_env(env)) == "123_4"
    assert (tmp_path / "123_4.jobid").read_text() == "124\n"
    assert storage.read_alias(url, "123_4", None) == "124"
    assert storage.record_array_alias(url, JobEnv.from_env({"SLURM_JOB_ID": "5"})) is None
    assert storage.record_array_alias(None, JobEnv.from_env(env)) is None
    (tmp_path / "9_9.jobid").write_text("../../x\n")      # a forged alias is ignored
    assert storage.read_alias(url, "9_9", None) is None


@pytest.mark.timeout(60)
def test_monitor_view_is_not_collected_and_is_removed_after_a_complete_copy(area, fh_dump):
    """The batch-step monitor's ``.monitor_view.*`` (its copies of other nodes' rank
    files; left behind when the monitor was killed) is neither copied (each node
    stores its own files) nor left in scratch after a complete copy."""
    uid, gid, _ = job_user()
    files = {"watchdog/rank_0.pid11.log": fh_dump,
             ".monitor_view.k2j4/watchdog/rank_2.pid31.log": fh_dump,
             ".monitor_view.k2j4/heartbeats/rank_2.pid31.hb": os.urandom(512)}
    d = area.make_attempt("109", 0, uid, gid, files)
    res = _run(area, "109")
    assert res["status"] == "complete", res
    assert res["copied"] == 1, res
    _, stored = _stored(area, "109")
    assert "hang_detector/watchdog/rank_0.pid11.log" in stored
    assert not [k for k in stored if "monitor_view" in k or "rank_2" in k], stored
    assert local_files(d) == {}
    assert not os.path.isdir(d) or not [n for n in os.listdir(d) if n.startswith(".monitor_view.")]
