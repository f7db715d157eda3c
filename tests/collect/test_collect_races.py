"""Collectors racing on one attempt: the per-attempt lock, and nothing lost.

Several collectors of the same attempt (epilogs, `hpc-hangkit collect`, a cron
collect) started together: one copies, the others wait for the lock and then
find nothing left, or report ``busy``. Every file ends stored exactly once
with its own content and sha256 in ``collect_<host>.json``; no local file is
gone without its stored copy. Runs as root with ``nobody`` as the job's user.
"""
import hashlib
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from hpc_hangkit.collect import copy
from hpc_hangkit.collect.attempt import collect_attempt

from collect_helpers import (EPILOG, REPO, area, as_uid, epilog_env, job_user,  # noqa: F401 (area)
                             local_files, write_site_toml)
from testlib import wait_for


def _files(trial):
    files = {"watchdog/rank_%d.pid%d.log" % (r, 100 + r): (b"rank %d trial %d\n" % (r, trial)) * 40
             for r in range(12)}
    files["hang_detector/flight_recorder/rank_9.json"] = os.urandom(2 << 20)
    files["heartbeats/rank_0.pid100.hb"] = os.urandom(512)
    return files


def _worker(args):
    scratch, job_id, url, barrier, q = args
    uid, gid, user = job_user()
    barrier.wait(timeout=60)
    res = collect_attempt(scratch, job_id, 0, url, uid=uid, gid=gid, user=user,
                          deadline=time.monotonic() + 30, host="hk1")
    q.put(res)


def _check_stored(area, job_id, files):
    base = os.path.join(area.storage, job_id, "attempt_0")
    stored = local_files(base)
    want = {("hang_detector/" + r if not r.startswith("hang_detector/") else r): d
            for r, d in files.items()}
    assert set(stored) == set(want) | {"collect_hk1.json"}, sorted(set(stored) ^ set(want))
    for rel, data in want.items():
        with open(stored[rel], "rb") as f:
            assert f.read() == data, rel
    man = json.load(open(stored["collect_hk1.json"]))
    sha = {os.path.join(*e["path"].split("/")): e["sha256"] for e in man["files"]}
    assert sha == {r: hashlib.sha256(d).hexdigest() for r, d in files.items()}, man
    assert all(e["state"] == "copied" for e in man["files"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [2, 3])
def test_collectors_started_together_store_every_file_once(area, n):
    uid, gid, _ = job_user()
    ctx = multiprocessing.get_context("fork")
    url = "file://" + area.storage
    outcomes = {}
    for trial in range(20):
        job_id = str(5000 + 100 * n + trial)
        files = _files(trial)
        d = area.make_attempt(job_id, 0, uid, gid, files)
        barrier, q = ctx.Barrier(n), ctx.Queue()
        procs = [ctx.Process(target=_worker, args=((area.scratch, job_id, url, barrier, q),))
                 for _ in range(n)]
        for p in procs:
            p.start()
        results = [q.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        st = sorted(r["status"] for r in results)
        assert st.count("complete") == 1, results
        assert set(st) <= {"complete", "no_files", "busy"}, results
        for s in st:
            outcomes[s] = outcomes.get(s, 0) + 1
        assert local_files(d) == {}, "every local file gone, each after its verified copy"
        _check_stored(area, job_id, files)
    print("%d collectors x 20 trials: %s" % (n, outcomes))


def test_second_collector_reports_who_holds_the_lock(area):
    uid, gid, _ = job_user()
    d = area.make_attempt("5301", 0, uid, gid, {"watchdog/rank_0.pid1.log": b"x"})
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        lock = copy.lock_attempt(copy.Tree(fd), 0, "hk9")
        try:
            man = copy.copy_tree(fd, "file://%s/5301/attempt_0" % area.storage, job_id="5301",
                                 attempt=0, host="hk1", lock_wait_s=0.3)
        finally:
            os.close(lock)
        assert man["status"] == "busy", man
        assert "pid %d on hk9" % os.getpid() in man["reason"]
        assert os.path.exists(os.path.join(d, "watchdog/rank_0.pid1.log"))
        # the holder died (its fd closed): the lock is free again
        man = copy.copy_tree(fd, "file://%s/5301/attempt_0" % area.storage, job_id="5301",
                             attempt=0, host="hk1", lock_wait_s=0.3)
        assert man["status"] == "complete", man
    finally:
        os.close(fd)


@pytest.mark.timeout(300)
def test_epilog_and_collect_at_once(area):
    """The real slurm/epilog and `hpc-hangkit collect JOBID` on the same node, at once,
    on an attempt an earlier epilog could not finish (a manifest is there)."""
    uid, gid, user = job_user()
    cfg = write_site_toml(area, "file://" + area.storage)
    seen = {}
    for trial in range(5):
        job_id = str(5400 + trial)
        files = _files(trial)
        d = area.make_attempt(job_id, 0, uid, gid, files)
        # an earlier epilog ran out of budget before the first copy
        def spent(d=d, job_id=job_id):
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            return copy.summary(copy.copy_tree(
                fd, "file://%s/%s/attempt_0" % (area.storage, job_id), job_id=job_id, attempt=0,
                host="hk1", deadline=time.monotonic()))

        res = as_uid(uid, gid, spent)
        assert res["status"] == "incomplete" and os.path.exists(
            os.path.join(d, copy.MANIFEST_NAME)), res
        env = epilog_env(job_id, uid, gid, user, extra={"HPC_HANGKIT_CONFIG": cfg,
                                                         "PYTHONPATH": REPO})
        cenv = dict(os.environ, HPC_HANGKIT_CONFIG=cfg, SLURMD_NODENAME="hk1",
                    PYTHONPATH=REPO, PATH="/nonexistent:" + os.environ.get("PATH", ""))
        ep = subprocess.Popen([sys.executable, EPILOG], env=env, stderr=subprocess.PIPE,
                              start_new_session=True)
        co = subprocess.Popen([sys.executable, "-m", "hpc_hangkit", "collect", job_id, "--stored",
                               "--json"], env=cenv, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True)
        try:
            ep_err = ep.communicate(timeout=120)[1]
            co_out, co_err = co.communicate(timeout=120)
        finally:
            for p in (ep, co):
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
        assert ep.returncode == 0, ep_err
        _check_stored(area, job_id, files)
        assert not os.path.exists(os.path.join(d, copy.MANIFEST_NAME))
        m = re.search(r"local scratch attempt_0: (\w+)", co_err.decode())
        key = m.group(1) if m else "not run (the epilog had finished)"
        seen[key] = seen.get(key, 0) + 1
    print("epilog + collect: collect's local outcome %s" % seen)


def test_sigkill_then_rerun_lists_every_file_in_the_stored_record(area):
    uid, gid, _ = job_user()
    files = {"unwatched/f%04d.txt" % i: b"%d\n" % i for i in range(3000)}
    d = area.make_attempt("5501", 0, uid, gid, files)
    url = "file://%s/5501/attempt_0" % area.storage
    journal = os.path.join(d, copy.JOURNAL_NAME)

    pid = os.fork()
    if pid == 0:
        try:
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            copy.copy_tree(fd, url, job_id="5501", attempt=0, host="hk1")
        finally:
            os._exit(0)
    try:
        wait_for(lambda: os.path.exists(journal) and os.path.getsize(journal) > 20000,
                 timeout_s=60, what="the first collector's journal")
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    left = len(local_files(d)) - 3     # manifest, journal, lock
    assert 0 < left < len(files), left
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        man = copy.copy_tree(fd, url, job_id="5501", attempt=0, host="hk1")
    finally:
        os.close(fd)
    assert man["status"] == "complete", copy.summary(man)
    assert man["previous"]["status"] == "in_progress"
    rec = json.load(open(os.path.join(area.storage, "5501/attempt_0/collect_hk1.json")))
    assert {e["path"] for e in rec["files"] if e["state"] == "copied"} == set(files)
    print("killed after %d of %d files; the rerun's record lists all %d"
          % (len(files) - left, len(files), len(rec["files"])))
