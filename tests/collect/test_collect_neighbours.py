"""Hostile neighbours in a shared 1777 ``file://`` store.

hkuser runs the job; hkuser2, another ordinary user of the same store, plants
symlinks, pre-created files and directories, and default ACLs where the next
job's dumps will go. The collector (as hkuser, or as root for a root job) must
write nothing outside the job's own new directory, leave nothing hkuser2 can
read, and keep the dumps locally with the reason in the manifest.
"""
import os
import struct
import time

import pytest

from hpc_hangkit.collect import copy, job
from hpc_hangkit.collect.attempt import collect_attempt
from hpc_hangkit.slurm import epilog, requeue

from collect_helpers import area, as_uid, two_users  # noqa: F401 (area: fixture)

DUMP = b"Current thread 0x1 (most recent call first):\n  SECRET-DUMP-OF-HKUSER\n"
FILES = {"watchdog/rank_0.pid1.log": DUMP, "hang_detector/report.json": b'{"SECRET-DUMP": 1}\n'}


def _default_acl(path, uid):
    """A default ACL on ``path`` that grants ``uid`` rwx (what `setfacl -d -m u:uid:rwx`
    sets), as the raw system.posix_acl_default xattr."""
    und = 0xFFFFFFFF
    ents = [(0x01, 7, und), (0x02, 7, uid), (0x04, 5, und), (0x10, 7, und), (0x20, 5, und)]
    os.setxattr(path, "system.posix_acl_default",
                struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in ents))


def _tree(*tops):
    out = []
    for top in tops:
        for root, dirs, files in os.walk(top):
            for n in dirs + files:
                p = os.path.join(root, n)
                out.append((p, os.lstat(p).st_uid))
    return out


def _readable_secrets(uid, gid, top):
    """Every path under ``top`` whose content uid can read and that holds a dump."""
    def look():
        found = []
        for root, _, files in os.walk(top):
            for n in files:
                p = os.path.join(root, n)
                try:
                    with open(p, "rb") as f:
                        if b"SECRET-DUMP" in f.read():
                            found.append(p)
                except OSError:
                    pass
        return found
    return as_uid(uid, gid, look)


def _plant(area, other, how, job_id):
    """Plant ``how`` in the store as ``other``; returns the attacker's own directory."""
    ouid, ogid, _ = other
    evil = os.path.join(area.base, "evil")
    os.mkdir(evil)
    os.chown(evil, ouid, ogid)
    os.chmod(evil, 0o777)
    jd = os.path.join(area.storage, job_id)

    def plant():
        os.umask(0)
        if how == "symlinked job dir":
            os.symlink(evil, jd)
        elif how == "job path is a 0666 file":
            os.close(os.open(jd, os.O_CREAT | os.O_WRONLY, 0o666))
        else:
            wd = os.path.join(jd, "attempt_0", "hang_detector", "watchdog")
            os.makedirs(wd, 0o777)
            if how == "symlinked file":
                os.symlink(os.path.join(evil, "got.log"), os.path.join(wd, "rank_0.pid1.log"))
            elif how == "pre-created 0666 file":
                os.close(os.open(os.path.join(wd, "rank_0.pid1.log"), os.O_CREAT | os.O_WRONLY,
                                 0o666))
            elif how == "default ACL":
                _default_acl(jd, ouid)
        return True
    assert as_uid(ouid, ogid, plant) is True
    return evil


HOW = ["symlinked job dir", "symlinked file", "pre-created 0666 file", "job path is a 0666 file",
       "default ACL"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("root_job", [False, True], ids=["user-job", "root-job"])
def test_planted_paths_are_refused_and_dumps_stay_local(area, how, root_job):
    me, other = two_users()
    uid, gid, user = (0, 0, "root") if root_job else me
    job_id = "6%d%02d" % (root_job, HOW.index(how))
    d = area.make_attempt(job_id, 0, uid, gid, FILES)
    evil = _plant(area, other, how, job_id)
    before = set(_tree(area.storage, evil))
    res = collect_attempt(area.scratch, job_id, 0, "file://" + area.storage, uid=uid,
                          gid=gid, user=user, deadline=time.monotonic() + 20, host="hk1")
    assert res["status"] == "incomplete", res
    assert "refused" in res["reason"], res
    for rel, data in FILES.items():
        with open(os.path.join(d, rel), "rb") as f:
            assert f.read() == data, "the dumps stay local"
    man = copy.read_manifest(d)
    assert "refused" in man["reason"] and all(
        f["state"] == "failed" and "refused" in f["why"] for f in man["files"]), man
    assert set(_tree(area.storage, evil)) == before, "nothing written into the store"
    assert _readable_secrets(other[0], other[1], area.base) == []


@pytest.mark.timeout(120)
def test_root_job_refuses_a_planted_user_prefix(area):
    """storage_url ``file://<store>/{user}``: for a root job the neighbour plants
    ``<store>/root`` as a symlink to a directory of theirs."""
    _, other = two_users()
    d = area.make_attempt("6200", 0, 0, 0, FILES)
    evil = os.path.join(area.base, "evil")
    os.mkdir(evil)
    os.chown(evil, other[0], other[1])
    as_uid(other[0], other[1], lambda: os.symlink(evil, os.path.join(area.storage, "root")))
    res = collect_attempt(area.scratch, "6200", 0, "file://%s/{user}" % area.storage,
                          uid=0, gid=0, user="root", deadline=time.monotonic() + 20,
                          host="hk1")
    assert res["status"] == "incomplete" and "symlink of uid %d" % other[0] in res["reason"], res
    assert os.listdir(evil) == []
    assert set(os.listdir(d)) >= {"watchdog", "hang_detector", copy.MANIFEST_NAME}


@pytest.mark.timeout(120)
def test_stored_dumps_private_even_under_a_default_acl_on_the_store(area):
    """A job of hkuser in the shared store, whose root carries a default ACL granting
    hkuser2 rwx: the job directory the collector made (0700, ACL masked) keeps hkuser2
    out of every stored file, and hkuser2's `collect` of the job reads nothing."""
    me, other = two_users()
    uid, gid, user = me
    _default_acl(area.storage, other[0])
    area.make_attempt("6300", 0, uid, gid, FILES)
    # the job's own monitor made the job directory earlier, with a loose umask
    as_uid(uid, gid, lambda: (os.umask(0), os.makedirs(os.path.join(area.storage, "6300"))))
    res = collect_attempt(area.scratch, "6300", 0, "file://" + area.storage, uid=uid,
                          gid=gid, user=user, deadline=time.monotonic() + 20, host="hk1")
    assert res["status"] == "complete", res
    jd = os.path.join(area.storage, "6300")
    assert os.stat(jd).st_mode & 0o777 == 0o700 and os.stat(jd).st_uid == uid
    assert _readable_secrets(other[0], other[1], area.storage) == []
    got = as_uid(other[0], other[1], lambda: job.fetch_from_storage(
        "file://" + area.storage, "6300", 0, "/tmp/hk-neighbour-%d" % os.getpid()))
    assert str(got).startswith("ERROR"), got
    assert _readable_secrets(uid, gid, area.storage) != [], "the owner reads them"


@pytest.mark.timeout(120)
def test_job_user_name_comes_from_the_uid(area):
    """SLURM_JOB_USER naming another account than SLURM_JOB_UID: ``{user}`` is filled
    from the uid's passwd entry (the account the copy runs as), and the epilog says so."""
    from collect_helpers import epilog_env, write_site_toml

    (uid, gid, user), other = two_users()
    area.make_attempt("6400", 0, uid, gid, FILES)
    cfg = write_site_toml(area, "file://%s/{user}" % area.storage)
    lines = []
    env = epilog_env(6400, uid, gid, other[2], extra={"HPC_HANGKIT_CONFIG": cfg})
    assert epilog.epilog(env=env, budget_s=20, log=lines.append) == 0
    assert any("is not uid %d's account %r" % (uid, user) in ln for ln in lines), lines
    assert any("complete" in ln for ln in lines), lines
    assert os.path.isdir(os.path.join(area.storage, user, "6400", "attempt_0"))
    assert not os.path.exists(os.path.join(area.storage, other[2]))


@pytest.mark.timeout(120)
def test_monitor_report_publish_obeys_the_same_rules(area, tmp_path):
    """The batch-step monitor stores report.txt/json (and report.html) early (storage.publish_report, as the
    job's user): it refuses a planted job directory like the collector, and the job
    directory it makes itself is one the collector accepts later."""
    from hpc_hangkit import storage

    (uid, gid, user), other = two_users()
    hd = os.path.join(area.base, "hd")
    os.mkdir(hd)
    for name, data in (("report.txt", b"roll call\n"), ("report.json", b"{}\n")):
        with open(os.path.join(hd, name), "wb") as f:
            f.write(data)
    os.chmod(hd, 0o755)
    for n in os.listdir(hd):
        os.chmod(os.path.join(hd, n), 0o644)
    url = "file://" + area.storage
    evil = _plant(area, other, "symlinked job dir", "6500")
    got = as_uid(uid, gid, lambda: storage.publish_report(url, "6500", 0, hd, user))
    assert got.startswith("ERROR StoreRefused"), got
    assert os.listdir(evil) == []
    got = as_uid(uid, gid, lambda: storage.publish_report(url, "6501", 0, hd, user))
    assert got.endswith("6501/attempt_0/hang_detector/report.txt"), got
    stored = os.path.join(area.storage, "6501", "attempt_0", "hang_detector")
    assert sorted(os.listdir(stored)) == ["report.json", "report.txt"]  # no page written: none stored
    with open(os.path.join(hd, "report.html"), "wb") as f:
        f.write(b"<!DOCTYPE html><title>roll call</title>\n")
    os.chmod(os.path.join(hd, "report.html"), 0o644)
    got = as_uid(uid, gid, lambda: storage.publish_report(url, "6502", 0, hd, user))
    with open(os.path.join(area.storage, "6502", "attempt_0", "hang_detector", "report.html"), "rb") as f:
        assert f.read().startswith(b"<!DOCTYPE html>"), got
    area.make_attempt("6501", 0, uid, gid, FILES)
    res = collect_attempt(area.scratch, "6501", 0, url, uid=uid, gid=gid, user=user,
                          deadline=time.monotonic() + 20, host="hk1")
    assert res["status"] == "complete", res


# the requeue state and the array alias: records the job's user writes into the store

#: what the job's user has outside the store, where a planted link points (a requeue
#: state a followed read would take for the job's)
VICTIM = b'{"hang_requeues": 0, "victim": "hkuser\'s own file"}\n'


def _victim_dir(area, uid, gid, existing):
    """hkuser's own directory outside the store, with the file a planted symlink names
    (``existing``) or without it: hkuser may write there, so a followed link would."""
    v = os.path.join(area.base, "victim")
    os.mkdir(v, 0o700)
    os.chown(v, uid, gid)
    target = os.path.join(v, "hangkit_requeue.json")
    if existing:
        with open(target, "wb") as f:
            f.write(VICTIM)
        os.chown(target, uid, gid)
    return v, target


def _victim_untouched(victim, target, existing):
    if existing:
        with open(target, "rb") as f:
            assert f.read() == VICTIM, "the link's target was written through"
        assert os.listdir(victim) == [os.path.basename(target)]
    else:
        assert os.listdir(victim) == [], "a file was created through the link"


STATE_HOW = ["symlinked job dir", "symlink in a foreign job dir",
             "symlink in the user's loose job dir"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("existing", [True, False], ids=["target-exists", "target-missing"])
@pytest.mark.parametrize("how", STATE_HOW)
def test_requeue_state_never_follows_a_planted_symlink(area, how, existing):
    """hkuser2 plants a symlink where hkuser's job keeps its requeue state
    (``<store>/<job_id>/hangkit_requeue.json``), pointing at a file of hkuser outside the
    store. The monitor (as hkuser) neither reads nor writes through it: in a job
    directory that is not hkuser's own the save is refused (the monitor then ends the
    job instead of requeueing: tests/slurm/test_slurm_unit.py); in hkuser's own (loose)
    job directory the link is replaced by hkuser's private file."""
    from hpc_hangkit import layout

    (uid, gid, user), other = two_users()
    job_id = "66%d%d" % (STATE_HOW.index(how), existing)
    victim, target = _victim_dir(area, uid, gid, existing)
    jd = os.path.join(area.storage, job_id)
    state_file = os.path.join(jd, layout.REQUEUE_STATE_FILE)
    if how == "symlink in the user's loose job dir":
        # made by the job with a loose umask before anything tightened it
        as_uid(uid, gid, lambda: (os.umask(0), os.mkdir(jd, 0o777)))

    def plant():
        if how == "symlinked job dir":
            os.symlink(victim, jd)
        else:
            if how == "symlink in a foreign job dir":
                os.umask(0)
                os.mkdir(jd, 0o777)
            os.symlink(target, state_file)
        return True
    assert as_uid(other[0], other[1], plant) is True
    before = set(_tree(area.storage))
    url = requeue.state_url(area.settings(), job_id, {"USER": user})
    assert url == "file://" + state_file
    loaded = as_uid(uid, gid, lambda: requeue.RequeueState.load(url).to_json())
    assert loaded == {"hang_requeues": 0, "hangs": []}, "the state was read through the link: %r" % (loaded,)
    saved = as_uid(uid, gid, lambda: requeue.RequeueState(hang_requeues=1).save(url))
    _victim_untouched(victim, target, existing)
    if how == "symlink in the user's loose job dir":
        assert saved is None, saved
        st = os.lstat(state_file)
        assert (st.st_uid, oct(st.st_mode)) == (uid, oct(0o100600)), "hkuser's own file"
        assert os.stat(jd).st_mode & 0o777 == 0o700
        assert as_uid(uid, gid, lambda: requeue.RequeueState.load(url).to_json()) == {"hang_requeues": 1, "hangs": []}
    else:
        assert str(saved).startswith("ERROR StoreRefused") and "refused" in saved, saved
        assert set(_tree(area.storage)) == before, "nothing written into the store"


ALIAS_HOW = ["symlink, target exists", "symlink, target missing", "another user's file"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ALIAS_HOW)
def test_array_alias_never_follows_or_replaces_a_planted_name(area, how):
    """hkuser2 plants ``<store>/<A>_<T>.jobid`` (a symlink to a file of hkuser outside the
    store, or a file of their own naming another job) before hkuser's array task stores
    its alias: the write is refused with the reason, nothing is followed or replaced.
    hkuser's own earlier alias is kept (the first writer wins)."""
    from hpc_hangkit import storage

    (uid, gid, user), other = two_users()
    victim, target = _victim_dir(area, uid, gid, how == "symlink, target exists")
    alias = "67%d_3" % ALIAS_HOW.index(how)
    path = os.path.join(area.storage, alias + storage.ALIAS_SUFFIX)

    def plant():
        if how.startswith("symlink"):
            os.symlink(target, path)
        else:
            os.umask(0)
            with open(path, "wb") as f:
                f.write(b"999\n")
        return True
    assert as_uid(other[0], other[1], plant) is True
    before = set(_tree(area.storage))
    url = "file://" + area.storage
    got = as_uid(uid, gid, lambda: storage.write_alias(url, alias, "6701", user))
    assert str(got).startswith("ERROR StoreRefused") and "refused" in got, got
    assert ("a symlink" if how.startswith("symlink") else "a file of uid %d" % other[0]) in got
    _victim_untouched(victim, target, how == "symlink, target exists")
    assert set(_tree(area.storage)) == before
    if not how.startswith("symlink"):
        with open(path, "rb") as f:
            assert f.read() == b"999\n"
    # hkuser's own alias: written once, then kept
    mine = alias.replace("_3", "_4")
    assert as_uid(uid, gid, lambda: storage.write_alias(url, mine, "6702", user)) is None
    assert as_uid(uid, gid, lambda: storage.write_alias(url, mine, "6703", user)) is None
    assert storage.read_alias(url, mine) == "6702"
    assert os.lstat(os.path.join(area.storage, mine + storage.ALIAS_SUFFIX)).st_uid == uid
