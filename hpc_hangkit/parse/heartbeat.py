"""Reader of the per-process heartbeat records ranks write with ``checkpoint()``.

The record (512 bytes, little-endian; layout in docs/internals.md "Heartbeat
record") is updated in place by the rank through a MAP_SHARED mmap under a
seqlock: the sequence number is odd while the rank is writing and even when
done.  A reader takes seq, the record, seq again, and accepts only an even,
unchanged seq, so it never returns a torn record.  Pure reading: no signals,
no writes.  Files are opened with O_NOFOLLOW (this runs in root-run code).
"""
import dataclasses
import mmap
import os
import stat
import struct
import time
import warnings
from typing import List, Optional

from hpc_hangkit import layout

# the format is defined by the writer (the stdlib-only boot core)
from hpc_hangkit.boot import _hangkit_core as _fmt

__all__ = ["Heartbeat", "read_heartbeat", "read_heartbeats", "HeartbeatWarning"]


class HeartbeatWarning(UserWarning):
    """A heartbeat file that could not be read (torn, truncated, not ours)."""


@dataclasses.dataclass(frozen=True)
class Heartbeat:
    """One process's last checkpoint, as written by ``checkpoint(label)``.

    rank/world/local_rank: -1 when unknown.  counter: number of checkpoint()
    calls (0 = none yet; then wall_s/mono_s are the arming time).  wall_s:
    epoch seconds of the last checkpoint (comparable across nodes; derived
    as armed_wall_s + (mono_s - armed_mono_s), so a clock step after
    arming is not reflected).  mono_s:
    CLOCK_MONOTONIC seconds (comparable with ``time.monotonic()`` on the same
    node only).  signal: the watchdog signal name (``"SIGURG"``), for
    ``request_dump(pid, signal)``; signum its number.  period_s: watchdog
    period.  armed_wall_s/armed_mono_s: when the watchdog was armed.
    """

    rank: int
    world: int
    local_rank: int
    pid: int
    main_tid: int
    host: str
    counter: int
    label: str
    wall_s: float
    mono_s: float
    armed_wall_s: float
    armed_mono_s: float
    period_s: float
    signal: str
    signum: int
    seq: int
    path: str
    busy: int = 0

    def age_s(self, now_wall: Optional[float] = None) -> float:
        """Seconds since the last checkpoint (or arming), by the wall clock."""
        return (time.time() if now_wall is None else now_wall) - self.wall_s


def _decode(buf: bytes, path: str) -> Heartbeat:
    (magic, version, size, rank, world, local_rank, pid, main_tid, signum, period_s,
     armed_wall_s, armed_mono_s, host) = _fmt.HB_STATIC.unpack_from(buf, 0)
    (seq,) = _fmt.HB_SEQ.unpack_from(buf, _fmt.HB_SEQ_OFFSET)
    counter, mono_s, label = _fmt.HB_DYN.unpack_from(buf, _fmt.HB_DYN_OFFSET)
    (busy,) = struct.unpack_from("<Q", buf, _fmt.HB_BUSY_OFFSET)
    wall_s = armed_wall_s + (mono_s - armed_mono_s)
    return Heartbeat(
        rank=rank, world=world, local_rank=local_rank, pid=pid, main_tid=main_tid,
        host=host.rstrip(b"\0").decode("utf-8", "replace"), counter=counter,
        label=label.rstrip(b"\0").decode("utf-8", "replace"), wall_s=wall_s, mono_s=mono_s,
        armed_wall_s=armed_wall_s, armed_mono_s=armed_mono_s, period_s=period_s,
        signal=_fmt.signal_name(signum), signum=signum, seq=seq, path=path, busy=busy)


def read_heartbeat(path: str, timeout_s: float = 1.0) -> Optional[Heartbeat]:
    """Read one heartbeat file; None (and a HeartbeatWarning naming the file) if
    it is missing, a symlink, not a regular file, truncated, not a heartbeat
    record (bad magic/version/size), or still torn after ``timeout_s`` seconds
    of retries (a rank rewrites the record in under a microsecond, but the
    scheduler can preempt it mid-write for a few milliseconds on a busy node).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
    except OSError as e:
        warnings.warn("heartbeat %s: cannot open: %s" % (path, e.strerror or e), HeartbeatWarning, stacklevel=2)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            warnings.warn("heartbeat %s: not a regular file" % path, HeartbeatWarning, stacklevel=2)
            return None
        size = _fmt.HB_SIZE
        if st.st_size < size:
            warnings.warn("heartbeat %s: truncated at byte offset %d (record is %d bytes)"
                          % (path, st.st_size, size), HeartbeatWarning, stacklevel=2)
            return None
        view = None
        if st.st_uid == os.geteuid():
            # our own user's file: read it through a shared mapping, so a
            # seqlock round (seq, record, seq) takes ~0.2 us, shorter than a
            # rank that checkpoints in a tight loop needs per checkpoint.
            # (Not for other users' files: a truncation under the mapping
            # would be a SIGBUS in this process.)
            try:
                view = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
            except (OSError, ValueError):
                view = None
        deadline = time.monotonic() + timeout_s
        tries, pause = 0, 0.00005
        seq_at = _fmt.HB_SEQ_OFFSET
        try:
            while True:
                tries += 1
                if view is not None:
                    s1 = view[seq_at:seq_at + 8]
                    buf = view[:size]
                    s2 = view[seq_at:seq_at + 8]
                else:
                    s1 = os.pread(fd, 8, seq_at)
                    buf = os.pread(fd, size, 0)
                    s2 = os.pread(fd, 8, seq_at)
                if len(buf) < size or len(s1) < 8:
                    warnings.warn("heartbeat %s: truncated at byte offset %d (record is %d bytes)"
                                  % (path, len(buf), size), HeartbeatWarning, stacklevel=2)
                    return None
                if buf[:8] != _fmt.HB_MAGIC:
                    warnings.warn("heartbeat %s: not a heartbeat record (bad magic at byte offset 0)" % path,
                                  HeartbeatWarning, stacklevel=2)
                    return None
                version, rec_size = struct.unpack_from("<II", buf, 8)
                if version != _fmt.HB_VERSION or rec_size != size:
                    warnings.warn("heartbeat %s: unsupported record version %d / size %d (byte offset 8)"
                                  % (path, version, rec_size), HeartbeatWarning, stacklevel=2)
                    return None
                (q1,) = _fmt.HB_SEQ.unpack(s1)
                (q2,) = _fmt.HB_SEQ.unpack(s2)
                (qb,) = _fmt.HB_SEQ.unpack_from(buf, seq_at)
                if q1 == q2 == qb and q1 % 2 == 0:
                    return _decode(buf, path)
                if time.monotonic() >= deadline:
                    break
                if tries > 1000:  # first a tight spin (the writer is sub-microsecond), then back off
                    time.sleep(pause)
                    pause = min(pause * 2, 0.005)
        finally:
            if view is not None:
                view.close()
        warnings.warn("heartbeat %s: record torn (sequence odd or changing at byte offset %d) after %d reads"
                      % (path, _fmt.HB_SEQ_OFFSET, tries), HeartbeatWarning, stacklevel=2)
        return None
    finally:
        os.close(fd)


def read_heartbeats(directory: str) -> List[Heartbeat]:
    """All readable heartbeat records ``rank_<r>.pid<pid>.hb`` in ``directory``,
    sorted by (rank, pid).  Unreadable ones are skipped with a HeartbeatWarning;
    a missing directory gives []."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        parsed = layout.parse_rank_file_name(name)
        if parsed is None or parsed[2] != "hb":
            continue
        hb = read_heartbeat(os.path.join(directory, name))
        if hb is not None:
            out.append(hb)
    out.sort(key=lambda h: (h.rank, h.pid))
    return out
