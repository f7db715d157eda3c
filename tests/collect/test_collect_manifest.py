"""The local manifest never stops a copy: planted or oversized manifests are moved
aside, the per-run file cap defers (never drops) files, and a collector killed at
its deadline leaves ``timeout`` with a reason. The 100k-file case is marked slow.
"""
import contextlib
import json
import os
import signal
import threading
import time

import pytest

from hpc_hangkit.collect import copy
from hpc_hangkit.collect.attempt import collect_attempt

from collect_helpers import area, as_uid, job_user, local_files  # noqa: F401 (area: fixture)


def _collect(area, job_id, budget=20.0, url=None):
    uid, gid, user = job_user()
    return collect_attempt(area.scratch, job_id, 0, url or "file://" + area.storage,
                           uid=uid, gid=gid, user=user,
                           deadline=time.monotonic() + budget, host="hk1")


def _stored(area, job_id):
    return local_files(os.path.join(area.storage, job_id, "attempt_0", "hang_detector"))


FILES = {"watchdog/rank_%d.pid%d.log" % (r, r + 1): b"r%d\n" % r for r in range(4)}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["40 MB file", "fifo", "directory", "symlink", "garbage"])
def test_planted_manifest_does_not_stop_the_copy(area, kind, monkeypatch):
    uid, gid, _ = job_user()
    monkeypatch.setattr(copy, "_MAX_MANIFEST_BYTES", 32 << 20)   # the bound, made cheap
    job_id = "70%d" % ["40 MB file", "fifo", "directory", "symlink", "garbage"].index(kind)
    d = area.make_attempt(job_id, 0, uid, gid, FILES)
    m = os.path.join(d, copy.MANIFEST_NAME)
    if kind == "40 MB file":
        with open(m, "wb") as f:       # over the read bound: moved aside (never stored)
            f.truncate(40 << 20)
    elif kind == "fifo":
        os.mkfifo(m)
    elif kind == "directory":
        os.mkdir(m)
    elif kind == "symlink":
        os.symlink("/etc/shadow", m)
    else:
        with open(m, "wb") as f:
            f.write(b'{"schema": "hpc-hangkit/collect-manifest/1", "files": 7}')
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            os.lchown(os.path.join(root, n), uid, gid)
    res = _collect(area, job_id)
    assert res["status"] == "complete", res
    assert set(_stored(area, job_id)) == set(FILES), "every dump stored, and nothing else"
    assert local_files(d) == {}, "the set-aside manifest is deleted after a complete copy"
    whys = _aside_entries(area, job_id)
    assert len(whys) == 1 and ASIDE_WHY[kind] in whys[0], whys


#: what the stored record says of each planted manifest (in its entry's ``why``)
ASIDE_WHY = {"40 MB file": "the local manifest was larger than %d bytes" % (32 << 20),
             "fifo": "the local manifest was not a regular file",
             "directory": "the local manifest was not a regular file",
             "symlink": "the local manifest was not a regular file",
             "garbage": "the local manifest was not JSON of the collect-manifest schema"}


def _aside_entries(area, job_id):
    """The reasons the stored ``collect_hk1.json`` gives for set-aside manifests."""
    with open(os.path.join(area.storage, job_id, "attempt_0", "collect_hk1.json")) as f:
        man = json.load(f)
    out = [e for e in man["files"] if e["path"].startswith(copy.ASIDE_PREFIX)]
    assert all(e["state"] == "skipped" and "not a dump: not copied" in e["why"] for e in out), out
    return [e["why"] for e in out]


@pytest.mark.timeout(120)
def test_oversize_manifest_set_aside_stays_local_until_the_copy_is_complete(area, monkeypatch):
    """A 40 MB manifest (over a lowered bound) on a node whose storage refuses the job:
    it is set aside, kept in scratch (not copied, not deleted) and listed in the new
    manifest with the reason; the run that completes the copy (a later process, which
    reads the reason from the set-aside name) stores the dumps but not it, and deletes it."""
    uid, gid, _ = job_user()
    monkeypatch.setattr(copy, "_MAX_MANIFEST_BYTES", 32 << 20)
    d = area.make_attempt("706", 0, uid, gid, FILES)
    with open(os.path.join(d, copy.MANIFEST_NAME), "wb") as f:
        f.truncate(40 << 20)
    os.lchown(os.path.join(d, copy.MANIFEST_NAME), uid, gid)
    planted = os.path.join(area.storage, "706")
    with open(planted, "wb"):      # root's file at the job path: the store is refused
        pass
    res = _collect(area, "706")
    assert res["status"] == "incomplete" and "refused" in res["reason"], res
    aside = [n for n in os.listdir(d) if n.startswith(copy.ASIDE_PREFIX)]
    assert len(aside) == 1 and os.path.getsize(os.path.join(d, aside[0])) == 40 << 20, aside
    ent = {e["path"]: e for e in copy.read_manifest(d)["files"]}[aside[0]]
    assert ent["state"] == "skipped", ent
    assert "larger than %d bytes" % (32 << 20) in ent["why"] and "not copied" in ent["why"], ent
    os.unlink(planted)
    res = _collect(area, "706")
    assert res["status"] == "complete", res
    assert set(_stored(area, "706")) == set(FILES)
    whys = _aside_entries(area, "706")
    assert len(whys) == 1 and ASIDE_WHY["40 MB file"] in whys[0], whys
    assert local_files(d) == {}


@pytest.mark.timeout(120)
def test_file_cap_defers_files_to_the_next_run(area, monkeypatch):
    """Above the per-run cap, files are neither skipped nor forgotten: the run is
    ``incomplete`` (so the scratch stays), and the next run copies them."""
    uid, gid, _ = job_user()
    monkeypatch.setattr(copy, "_MAX_FILES", 5)
    files = {"unwatched/f%02d" % i: b"%d" % i for i in range(12)}
    d = area.make_attempt("710", 0, uid, gid, files)
    runs = []
    for _ in range(4):
        res = _collect(area, "710")
        runs.append((res["status"], res["copied"]))
        if res["status"] == "complete":
            break
    assert runs == [("incomplete", 5), ("incomplete", 10), ("complete", 12)], runs
    assert len(_stored(area, "710")) == 12
    assert local_files(d) == {}


@pytest.mark.timeout(120)
def test_deadline_states_are_recorded_with_a_reason(area):
    """A budget spent before all files are started: every file not copied is
    ``pending`` with a reason, the manifest ``incomplete`` or ``timeout`` with one."""
    uid, gid, _ = job_user()
    files = {"unwatched/f%05d" % i: b"x" * 100 for i in range(2000)}
    d = area.make_attempt("720", 0, uid, gid, files)
    dest = os.path.join(area.storage, "720")
    # the copy is stopped once it has stored a file: the budget always ends part-way
    with _copy_stopped_when(lambda: any(n.startswith("f") for _, _, ns in os.walk(dest) for n in ns)) as stopped:
        res = _collect(area, "720", budget=3.0)
    assert stopped, "the copy finished before a stored file was seen"
    man = copy.read_manifest(d)
    assert res["status"] in ("incomplete", "timeout"), res
    assert man is not None and man["status"] == res["status"], (res, man and man["status"])
    assert man["reason"], man["status"]
    left = [f for f in man["files"] if f["state"] != "copied"]
    assert left and all(f["state"] == "pending" and f["why"] for f in left)
    assert {f["path"] for f in left} == set(local_files(d)) - {
        copy.MANIFEST_NAME, copy.LOCK_NAME, copy.JOURNAL_NAME}


def _children():
    """Process ids of this process's children (every thread's)."""
    out = []
    for t in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/children" % t) as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


@contextlib.contextmanager
def _copy_stopped_when(seen):
    """Stop (SIGSTOP) the collector's copying child as soon as ``seen()`` is true, so the
    budget runs out with the copy part-way however fast this machine copies; yields the
    list of the stopped pids (empty if the copy ended first)."""
    stopped = []
    done = threading.Event()
    before = set(_children())

    def watch():
        while not done.is_set():
            kids = [pid for pid in _children() if pid not in before]
            if kids and seen():
                for pid in kids:
                    os.kill(pid, signal.SIGSTOP)
                stopped.extend(kids)
                return
            time.sleep(0.001)
    t = threading.Thread(target=watch)
    t.start()
    try:
        yield stopped
    finally:
        done.set()
        t.join()


@pytest.mark.timeout(180)
def test_killed_collector_leaves_timeout_with_reason(area):
    """The copy child killed at the budget in the middle of one big file: the manifest
    says ``timeout`` with the reason, the file stays local, and the next run stores it
    and leaves no temp file of the killed run in storage. The child is stopped (SIGSTOP)
    as soon as its temporary file is in storage, so it is mid-file at the deadline
    however fast this machine copies."""
    uid, gid, _ = job_user()
    d = area.make_attempt("730", 0, uid, gid, {"unwatched/a": b"a"})
    big = os.path.join(d, "flight_recorder", "rank_0.json")
    os.makedirs(os.path.dirname(big))
    with open(big, "wb") as f:
        f.truncate(400 << 20)           # sparse: cheap here, 400 MiB to copy and verify
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            os.lchown(os.path.join(root, n), uid, gid)
    with _copy_stopped_when(lambda: [n for _, _, ns in os.walk(os.path.join(area.storage, "730"))
                                     for n in ns if n.startswith(".rank_0.json.")]) as stopped:
        res = _collect(area, "730", budget=5.0)
    assert stopped, "the copy finished before its temporary file was seen"
    assert res["status"] == "timeout", res
    man = copy.read_manifest(d)
    assert man["status"] == "timeout" and "did not finish within the budget" in man["reason"]
    ent = {f["path"]: f for f in man["files"]}["flight_recorder/rank_0.json"]
    assert ent["state"] == "pending" and ent["why"], ent
    assert os.path.getsize(big) == 400 << 20
    res = _collect(area, "730", budget=120)
    assert res["status"] == "complete", res
    left = [n for _, _, ns in os.walk(os.path.join(area.storage, "730")) for n in ns
            if n.endswith(".tmp")]
    assert left == []


@pytest.mark.timeout(120)
def test_a_collector_stopped_after_it_finished_reports_complete(area, monkeypatch):
    """The copy child finishes (every file stored, the stored record written, the scratch
    emptied) and is then held past the deadline before it reports, as a slow storage
    flush would: the run is ``complete``, not ``no_files`` (what the record of the stopped
    run found left) and not ``timeout``."""
    import hpc_hangkit.collect.attempt as attempt_mod

    real = attempt_mod.copy_tree

    def finish_then_hang(*a, **kw):
        man = real(*a, **kw)
        time.sleep(60)      # in the forked child only; killed at the deadline
        return man
    monkeypatch.setattr(attempt_mod, "copy_tree", finish_then_hang)
    uid, gid, _ = job_user()
    d = area.make_attempt("745", 0, uid, gid, FILES)
    t0 = time.monotonic()
    res = _collect(area, "745", budget=4.0)
    assert time.monotonic() - t0 < 6.0
    assert res["status"] == "complete" and "stopped" in res["reason"], res
    assert sorted(_stored(area, "745")) == sorted(FILES)
    assert os.path.isfile(os.path.join(area.storage, "745", "attempt_0", "collect_hk1.json"))
    assert local_files(d) == {}


def test_temp_files_of_a_killed_manifest_write_are_removed(area):
    """A collector killed inside a manifest write leaves ``<manifest>.<pid>.tmp``; the next
    run (holding the lock) removes it, so a complete copy leaves the scratch empty."""
    uid, gid, _ = job_user()
    d = area.make_attempt("740", 0, uid, gid, dict(FILES, **{
        copy.MANIFEST_NAME + ".4242.tmp": b'{"half": ', copy.JOURNAL_NAME + ".4243.tmp": b""}))
    res = _collect(area, "740")
    assert res["status"] == "complete", res
    assert local_files(d) == {}


@pytest.mark.timeout(60)
def test_rerun_after_every_file_was_copied_writes_the_storage_record(area):
    """A collector killed after its last copy (before its final manifest): the rerun finds
    no file left, only the manifest; it completes and stores ``collect_hk1.json`` listing
    the files the killed run copied."""
    uid, gid, _ = job_user()
    d = area.make_attempt("750", 0, uid, gid, {})
    man = {"schema": copy.MANIFEST_SCHEMA, "job": "750", "attempt": 0, "host": "hk1",
           "dest": "file://%s/750/attempt_0" % area.storage, "status": "in_progress",
           "reason": None, "run": "1-1", "started": 1.0, "updated": 1.0,
           "files": [{"path": "watchdog/rank_0.pid1.log", "size": 3, "sha256": None,
                      "state": "pending", "why": None, "dest": None}]}
    p = os.path.join(d, copy.MANIFEST_NAME)
    with open(p, "w") as f:
        json.dump(man, f)
    os.lchown(p, uid, gid)
    res = _collect(area, "750")
    assert res["status"] == "complete" and not res["reason"], res
    with open(os.path.join(area.storage, "750", "attempt_0", "collect_hk1.json")) as f:
        stored = json.load(f)
    assert [(e["path"], e["state"]) for e in stored["files"]] == [
        ("watchdog/rank_0.pid1.log", "copied")], stored
