"""Helpers shared by tests/test_collect*.py and tests/test_storage_s3.py.

The collector drops to the job's user, so these tests run as root and use the
unprivileged ``nobody`` account as the job's user; the scratch and storage
trees live under a fresh 0755 directory in /tmp (pytest's tmp_path is 0700
root-only, which ``nobody`` could not traverse).
"""
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import types
import urllib.request

import pytest

from hpc_hangkit import layout
from testlib import wait_for

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EPILOG = os.path.join(REPO, "slurm", "epilog")


def need_root():
    if os.geteuid() != 0:
        pytest.skip("the collector's privilege drop (root -> job user) can only be exercised as"
                    " root; CI runs the suite as root")


def job_user():
    """(uid, gid, name) of the unprivileged account used as the job's user."""
    pw = pwd.getpwnam("nobody")
    return pw.pw_uid, pw.pw_gid, pw.pw_name


class Area:
    """A world-traversable base dir with scratch/ (root 0755) and storage/."""

    def __init__(self):
        self.base = tempfile.mkdtemp(prefix="hk-collect-", dir="/tmp")
        os.chmod(self.base, 0o755)
        self.scratch = os.path.join(self.base, "scratch")
        self.storage = os.path.join(self.base, "storage")
        os.mkdir(self.scratch, 0o755)
        os.mkdir(self.storage)
        os.chmod(self.storage, 0o1777)   # like a shared /scratch: users create their job dirs

    def settings(self, storage_url=None):
        return types.SimpleNamespace(scratch_dir=self.scratch,
                                     storage_url=storage_url or "file://" + self.storage)

    def attempt_dir(self, job_id, attempt=0):
        return layout.job_scratch_dir(self.scratch, job_id, attempt)

    def make_attempt(self, job_id, attempt, uid, gid, files):
        """Create the attempt scratch the way the prolog does (user-owned 0700)
        and write ``files`` {rel: bytes} into it as that user's files."""
        d = self.attempt_dir(job_id, attempt)
        os.makedirs(d, exist_ok=True)
        for rel, data in files.items():
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)
        for root, dirs, fnames in os.walk(d):
            for n in dirs + fnames:
                os.lchown(os.path.join(root, n), uid, gid)
        os.chown(d, uid, gid)
        os.chmod(d, 0o700)
        return d

    def cleanup(self):
        shutil.rmtree(self.base, ignore_errors=True)


def local_files(d):
    out = {}
    for root, _, fnames in os.walk(d):
        for n in fnames:
            p = os.path.join(root, n)
            out[os.path.relpath(p, d)] = p
    return out


def faulthandler_dump(tmpdir):
    """A real faulthandler dump of a real process (bytes)."""
    path = os.path.join(tmpdir, "fh.log")
    code = ("import faulthandler, sys\n"
            "f = open(sys.argv[1], 'w')\n"
            "def inner():\n    faulthandler.dump_traceback(f, all_threads=True)\n"
            "def outer():\n    inner()\n"
            "outer()\nf.close()\n")
    subprocess.run([sys.executable, "-c", code, path], check=True, timeout=60)
    with open(path, "rb") as f:
        return f.read()


def epilog_env(job_id, uid, gid, user, attempt=0, extra=None):
    """The environment slurmd gives an epilog (no PATH), plus test settings."""
    env = {
        "SLURM_JOB_ID": str(job_id), "SLURM_JOBID": str(job_id),
        "SLURM_JOB_UID": str(uid), "SLURM_JOB_GID": str(gid), "SLURM_JOB_USER": user,
        "SLURM_JOB_RESTART_COUNT": str(attempt), "SLURMD_NODENAME": "hk1",
        "SLURM_SCRIPT_CONTEXT": "epilog_slurmd", "SPANK_HANGKIT_MODE": "observe",
        # this tree's hpc_hangkit, not whichever one the interpreter has installed
        "PYTHONPATH": REPO,
    }
    env.update(extra or {})
    return env


def write_site_toml(area, storage_url, extra=""):
    path = os.path.join(area.base, "config.toml")
    with open(path, "w") as f:
        f.write('mode = "observe"\nscratch_dir = "%s"\nstorage_url = "%s"\n%s'
                % (area.scratch, storage_url, extra))
    return path


def start_moto(spawn, port):
    """A moto S3 server on 127.0.0.1:port (real HTTP, real S3 protocol)."""
    log = open(os.path.join(tempfile.gettempdir(), "hk-moto-%d.log" % port), "wb")
    p = spawn([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
              stdout=log, stderr=subprocess.STDOUT)
    url = "http://127.0.0.1:%d" % port

    def answers():
        try:
            urllib.request.urlopen(url + "/", timeout=1).read()
            return True
        except Exception:
            if p.poll() is not None:
                raise RuntimeError("moto server exited with %s" % p.returncode)
            return False

    wait_for(answers, 30, 0.2, what="the moto server to answer on %s" % url,
             detail=lambda: "log %s" % log.name)
    return p, url


@pytest.fixture
def area():
    """An :class:`Area` (root only: the collector drops to ``nobody``)."""
    need_root()
    a = Area()
    yield a
    a.cleanup()


S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
          "AWS_DEFAULT_REGION": "us-east-1"}


def two_users():
    """[(uid, gid, name), ...] of hkuser (the job's user) and hkuser2 (a neighbour),
    added the way slurm/testbed/up.sh adds them if this machine lacks them."""
    out = []
    for name in ("hkuser", "hkuser2"):
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "-m", "-s", "/bin/bash", name], check=True, timeout=60)
            pw = pwd.getpwnam(name)
        out.append((pw.pw_uid, pw.pw_gid, pw.pw_name))
    return out


def as_uid(uid, gid, fn):
    """Run ``fn()`` in a forked child as uid/gid (no supplementary groups); returns what it
    returned (pickled through a pipe), or the exception it raised as a string."""
    import pickle

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            try:
                out = ("ok", fn())
            except BaseException as e:  # noqa: BLE001 -- reported to the test
                out = ("error", "%s: %s" % (type(e).__name__, e))
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        data += b
    os.close(r)
    os.waitpid(pid, 0)
    kind, val = pickle.loads(data)
    return val if kind == "ok" else "ERROR " + val
