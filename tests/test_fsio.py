"""hpc_hangkit.fsio, the one rule for hostile files, and every writer that runs as root or
in the monitor: a symlink planted at the temporary name a write goes through is removed,
never written through."""
import hashlib
import json
import os
import stat
import subprocess
import sys
import types

import pytest

from hpc_hangkit import fsio, layout

VICTIM = b"the victim's own bytes\n"


# --- fsio itself --------------------------------------------------------------------------

def test_read_regular_refuses_a_symlink_a_fifo_and_a_directory(tmp_path):
    real = tmp_path / "real"
    real.write_bytes(b"x" * 100)
    os.symlink(real, tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")         # opened without a writer: must not block
    os.mkdir(tmp_path / "dir")
    assert fsio.read_regular(str(real)) == b"x" * 100
    with pytest.raises(OSError) as e:
        fsio.read_regular(str(tmp_path / "link"))
    assert not isinstance(e.value, fsio.NotRegular)     # ELOOP: the link is never followed
    for name, kind in (("fifo", "fifo"), ("dir", "directory")):
        with pytest.raises(fsio.NotRegular, match=kind):
            fsio.read_regular(str(tmp_path), name)


def test_read_regular_is_bounded_and_reads_through_a_directory_fd(tmp_path):
    (tmp_path / "big").write_bytes(bytes(range(256)) * 1000)
    dfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert fsio.read_regular(dfd, "big", 300) == (bytes(range(256)) * 2)[:300]
        assert len(fsio.read_regular(dfd, "big")) == 256000
        fd, st = fsio.open_regular(dfd, "big")
        try:
            os.lseek(fd, 17, 0)
            assert fsio.sha256_fd(fd) == (256000, hashlib.sha256(bytes(range(256)) * 1000).hexdigest())
            assert fsio.sha256_fd(fd, 10) == (10, hashlib.sha256(bytes(range(10))).hexdigest())
            assert os.lseek(fd, 0, 1) == 17     # pread: the offset is the caller's
        finally:
            os.close(fd)
    finally:
        os.close(dfd)


def test_write_atomic_gives_exactly_the_mode_and_replaces_a_symlink_at_the_target(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM)
    target = tmp_path / "target"
    os.symlink(victim, target)
    old = os.umask(0o077)
    try:
        fsio.write_atomic(str(target), "new", 0o644)
    finally:
        os.umask(old)
    assert not target.is_symlink() and target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert victim.read_bytes() == VICTIM
    assert set(os.listdir(tmp_path)) == {"target", "victim"}     # no temporary file left


# --- every writer that runs as root or in the monitor --------------------------------------

def _plant(tmp_path, tmp_name):
    """A symlink at ``tmp_name`` to a file of someone else's, and one to a name not there yet
    (a write through the link would create it). Returns the check to run after the write."""
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM)
    os.makedirs(os.path.dirname(tmp_name), exist_ok=True)
    os.symlink(victim, tmp_name)

    def check():
        assert victim.read_bytes() == VICTIM, "written through the planted symlink"
        assert not os.path.lexists(tmp_name), "the temporary name is left behind"
    return check


def _whyfile_write(tmp_path):
    from hpc_hangkit.capture.whyfile import write_why_file
    out = str(tmp_path / "hd" / "stack_traces" / "rank_0.log")
    return out, lambda: write_why_file(out, "py-spy", "not installed"), b"py-spy unavailable: not installed"


def _whyfile_merge(tmp_path):
    from hpc_hangkit.capture.whyfile import merge_file
    out = str(tmp_path / "hd" / "stack_traces" / "rank_1.log")
    return out, lambda: merge_file(out, b"Process 1: python\nThread 1 (idle)\n", "n1"), b"Process 1: python"


def _gather_restore(tmp_path):
    from hpc_hangkit.capture.whyfile import write_why_file
    from hpc_hangkit.gather import restore_real_outputs
    hd = tmp_path / "hd"
    rel = "stack_traces/rank_2.log"
    out = str(hd / rel)
    os.makedirs(os.path.dirname(out))
    real = b"Process 2: python\nThread 2 (idle)\n"

    def run():
        write_why_file(out, "py-spy", "timed out")   # this capture got only a why-file
        assert restore_real_outputs(str(hd), {rel: real}) == [rel]
    return out, run, real


def _view_heartbeat(tmp_path):
    from hpc_hangkit.slurm.probe import View
    view = View(str(tmp_path / "view"))
    name = layout.heartbeat_name(0, 4242)
    out = os.path.join(view.path, layout.HEARTBEAT_DIR, name)
    data = b"HB" * 40
    files = {"%s/%s" % (layout.HEARTBEAT_DIR, name): {"size": len(data), "offset": 0, "data": data}}
    return out, lambda: view.apply(files), data


def _stacks_pyspy(tmp_path):
    from hpc_hangkit.capture.native import Sampling
    from hpc_hangkit.capture.ranks import RankProc
    from hpc_hangkit.evidence.stacks import pyspy_rank
    hd = tmp_path / "hd"
    out = str(hd / layout.STACK_TRACES_DIR / layout.stack_trace_name(3))
    problems = []
    ctx = types.SimpleNamespace(settings=types.SimpleNamespace(pyspy_path="py-spy"), hd_dir=str(hd),
                                host="n1", problem=problems.append)

    def run():
        # a real process; with py-spy its dump is written, without it a why-file: either way
        # the write goes through the temporary name
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdin=subprocess.DEVNULL)
        try:
            pyspy_rank(ctx, RankProc(3, p.pid, "n1"), timeout_s=20,
                       sampling=Sampling(native=False, nonblocking=False, why="test"))
        finally:
            p.kill()
            p.wait()
    return out, run, b"rank=3" if _has_pyspy() else b"py-spy unavailable"


def _has_pyspy():
    import shutil
    return shutil.which("py-spy") is not None


def _flightrec_error(tmp_path):
    from hpc_hangkit.evidence.flightrec import dump_ranks
    scratch, hd = tmp_path / "scratch", tmp_path / "hd"
    os.makedirs(scratch)
    out = str(hd / layout.FLIGHT_RECORDER_DIR / "rank_0.json")
    return out, lambda: dump_ranks(str(scratch), str(hd), ranks=[0], timeout_s=0.1), b"dump_error"


def _vanished(tmp_path):
    from hpc_hangkit.capture.ranks import write_vanished
    scratch = tmp_path / "scratch"
    out = str(scratch / layout.VANISHED_DIR / layout.vanished_name(5, 999))
    return out, lambda: write_vanished(str(scratch), 5, 999, "n1", "gone", t=1.0), b"pid=999 host=n1"


def _admin(tmp_path):
    from hpc_hangkit.slurm.admin import _write
    out = str(tmp_path / "etc" / "plugstack.conf.d" / "hpc-hangkit.conf")
    return out, lambda: _write(out, "optional /x.so\n", 0o644, [], False), b"optional /x.so"


def _collect_manifest(tmp_path):
    from hpc_hangkit.collect.copy import Tree
    root = tmp_path / "attempt"
    os.makedirs(root)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    out = str(root / "collect-manifest.json")

    def run():
        try:
            Tree(fd).write_atomic("collect-manifest.json", json.dumps({"files": []}).encode())
        finally:
            os.close(fd)
    return out, run, b'{"files": []}'


WRITERS = [_whyfile_write, _whyfile_merge, _gather_restore, _view_heartbeat, _stacks_pyspy, _flightrec_error,
           _vanished, _admin, _collect_manifest]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("writer", WRITERS, ids=[w.__name__.lstrip("_") for w in WRITERS])
def test_a_symlink_planted_at_the_temporary_name_is_never_written_through(tmp_path, writer):
    out, run, expect = writer(tmp_path)
    check = _plant(tmp_path, fsio.tmp_name(out))
    run()
    check()
    assert not os.path.islink(out) and expect in open(out, "rb").read()


@pytest.mark.timeout(60)
def test_storage_put_never_writes_through_a_symlink_at_its_temporary_name(tmp_path):
    from hpc_hangkit.storage import LocalStore
    store = LocalStore(str(tmp_path / "store"), "job/attempt_0", "n1")
    store.prepare()
    os.makedirs(tmp_path / "store" / "job" / "attempt_0" / "hang_detector")
    tmp = tmp_path / "store" / "job" / "attempt_0" / "hang_detector" / ".report.txt.n1.hk.tmp"
    check = _plant(tmp_path, str(tmp))
    src = tmp_path / "src"
    src.write_bytes(b"the report\n")
    fd = os.open(src, os.O_RDONLY)
    try:
        assert store.put("hang_detector/report.txt", fd)[0] == len(b"the report\n")
    finally:
        os.close(fd)
        store.close()
    check()
    assert (tmp_path / "store" / "job" / "attempt_0" / "hang_detector" / "report.txt").read_bytes() == b"the report\n"


@pytest.mark.timeout(60)
def test_the_requeue_state_is_never_written_through_a_symlink_at_its_temporary_name(tmp_path):
    """The monitor's requeue state (:class:`hpc_hangkit.slurm.requeue.RequeueState`) goes
    through the store's one writer: a link planted at its temporary name is replaced."""
    import socket
    import re
    from hpc_hangkit.slurm.requeue import RequeueState
    job_dir = tmp_path / "store" / "77"
    os.makedirs(job_dir, 0o700)
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64]
    check = _plant(tmp_path, str(job_dir / (".%s.%s.hk.tmp" % (layout.REQUEUE_STATE_FILE, tag))))
    url = "file://%s/%s" % (job_dir, layout.REQUEUE_STATE_FILE)
    RequeueState(hang_requeues=1).save(url)
    check()
    assert RequeueState.load(url).hang_requeues == 1
