"""`hpc-hangkit collect JOBID` by a user who may not read the job's stored files: one line
naming the owner's uid and who can collect it, exit status 4 (cli/collect.py)."""
import io
import os
import sys

import pytest

from collect_helpers import area, as_uid, job_user, need_root  # noqa: F401 (area: fixture)

#: a uid with no files anywhere: the caller who is not the job's owner
STRANGER = 54321


def _run(argv):
    """The real command (click's main) in this process -> (exit status, stderr text)."""
    import hpc_hangkit.cli

    err, saved = io.StringIO(), sys.stderr
    sys.stderr = err
    try:
        hpc_hangkit.cli.cli.main(args=argv, prog_name="hpc-hangkit")
        code = 0
    except SystemExit as e:
        code = e.code
    finally:
        sys.stderr = saved
    return code, err.getvalue()


def _as_stranger(argv):
    """:func:`_run` in a forked child that dropped to STRANGER (collect_helpers.as_uid). The
    interpreter's own files may be unreadable to that uid, so the caller runs the command
    once before (as root) and the child imports nothing new."""
    got = as_uid(STRANGER, STRANGER, lambda: _run(argv))
    return (99, "child failed: %s" % got) if isinstance(got, str) else got


@pytest.mark.timeout(60)
def test_collect_of_another_users_job_names_the_owner_and_exits_4(area, monkeypatch):
    need_root()
    uid, gid, user = job_user()
    job = os.path.join(area.storage, "4242")
    os.makedirs(os.path.join(job, "attempt_0", "hang_detector"))
    for root, dirs, _ in os.walk(job):
        for d in [root] + [os.path.join(root, x) for x in dirs]:
            os.chown(d, uid, gid)
    os.chmod(job, 0o700)          # the collector's job directory: its user's only
    cfg = os.path.join(area.base, "site.toml")
    with open(cfg, "w") as fh:
        fh.write('scratch_dir = "%s"\nstorage_url = "file://%s"\n' % (area.scratch, area.storage))
    os.chmod(cfg, 0o644)
    monkeypatch.setenv("HPC_HANGKIT_CONFIG", cfg)
    # root (an admin) reads the job's directory: here it is empty, so "no files" (exit 1)
    code, err = _run(["collect", "4242", "--stored"])
    assert code == 1 and "no files under" in err, err
    code, err = _as_stranger(["collect", "4242", "--stored"])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 4, err
    assert len(lines) == 1, err
    assert "job 4242 belongs to uid %d (%s)" % (uid, user) in lines[0], err
    assert "you (uid %d)" % STRANGER in lines[0] and "owner or an admin" in lines[0], err
    assert "Errno" not in lines[0], err
