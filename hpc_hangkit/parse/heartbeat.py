"""Reader of the per-process heartbeat records ranks write with ``checkpoint()``.

The record (1024 bytes, little-endian; layout in docs/internals.md "Heartbeat
record") is updated in place by the rank through a MAP_SHARED mmap, in two
slots written alternately, each under its own seqlock: a slot's sequence
number is odd while the rank is writing it and even when done.  A reader takes
seq, the slot, seq again, accepts a slot only on an even, unchanged seq, and
returns the newest whole slot: it never returns a torn record, and since the
rank writes one slot at a time it never has to wait for the rank (even one
preempted mid-write).  Version 1 records (512 bytes, one slot) are still read.  Pure reading: no signals,
no writes.  Files are opened with O_NOFOLLOW (this runs in root-run code).
"""
import dataclasses
import mmap
import os
import struct
import time
import warnings
from typing import List, Optional, Tuple

from hpc_hangkit import fsio, layout

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
    period.  armed_wall_s/armed_mono_s: when the watchdog was armed.  busy: how
    many of the watchdog thread's looks found the main thread running Python;
    busy_mono_s the last such look.  checked_mono_s / moved_mono_s: that
    thread's last look at the main thread's stack and the last look that found
    it moved (see :meth:`moved_since`).  These three are CLOCK_MONOTONIC seconds
    of that node, 0.0 when unknown (none yet, or a record of an older version).
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
    checked_mono_s: float = 0.0
    moved_mono_s: float = 0.0
    busy_mono_s: float = 0.0

    def moved_since(self, dumped_mono_s: float) -> Optional[float]:
        """When (CLOCK_MONOTONIC seconds, this node) the main thread's innermost frame last
        moved, as the watchdog thread saw it, if that thread has looked at the frame at or
        after ``dumped_mono_s`` (a dump's time, same clock): then the stack that dump shows
        was there by that moment, so a change it shows happened no later. None when the
        thread has not looked since (a main thread holding the GIL in C; a record of an
        older version: 0.0)."""
        if self.checked_mono_s <= 0.0 or self.moved_mono_s <= 0.0 or self.checked_mono_s < dumped_mono_s:
            return None
        return self.moved_mono_s

    def age_s(self, now_wall: Optional[float] = None) -> float:
        """Seconds since the last checkpoint (or arming), by the wall clock."""
        return (time.time() if now_wall is None else now_wall) - self.wall_s


def _decode(buf: bytes, slot: bytes, path: str, moved: Tuple[float, float, float] = (0.0, 0.0, 0.0)) -> Heartbeat:
    (magic, version, size, rank, world, local_rank, pid, main_tid, signum, period_s,
     armed_wall_s, armed_mono_s, host) = _fmt.HB_STATIC.unpack_from(buf, 0)
    seq, counter, mono_s, label = _fmt.HB_SLOT.unpack_from(slot, 0)
    (busy,) = struct.unpack_from("<Q", buf, _fmt.HB_BUSY_OFFSET)
    wall_s = armed_wall_s + (mono_s - armed_mono_s)
    return Heartbeat(
        rank=rank, world=world, local_rank=local_rank, pid=pid, main_tid=main_tid,
        host=host.rstrip(b"\0").decode("utf-8", "replace"), counter=counter,
        label=label.rstrip(b"\0").decode("utf-8", "replace"), wall_s=wall_s, mono_s=mono_s,
        armed_wall_s=armed_wall_s, armed_mono_s=armed_mono_s, period_s=period_s,
        signal=_fmt.signal_name(signum), signum=signum, seq=seq, path=path, busy=busy,
        checked_mono_s=moved[0], moved_mono_s=moved[1], busy_mono_s=moved[2])


def _moved_times(get, version: int) -> Tuple[float, float, float]:
    """(checked, moved, busy_at) of a version-2 record, read after its busy count and in that
    order: the writer stores moved before checked and busy_at before busy, so a count or
    a checked time read here is never newer than the time read after it."""
    if version < 2:
        return 0.0, 0.0, 0.0
    (checked,) = struct.unpack("<d", get(_fmt.HB_CHECKED_OFFSET, 8))
    (moved,) = struct.unpack("<d", get(_fmt.HB_MOVED_OFFSET, 8))
    (busy_at,) = struct.unpack("<d", get(_fmt.HB_BUSY_AT_OFFSET, 8))
    return checked, moved, busy_at


_TRUNCATED = object()


def _newest_slot(get, slots):
    """One pass over the slots: the bytes of the newest whole slot, None if
    none can be trusted on this pass, or _TRUNCATED.

    ``get(offset, n)`` reads n bytes of the record.  A slot is whole when its
    sequence is even and the same before and after reading it.  The chosen
    slot's sequence is read once more after the other slots: the slots are
    read one after another, and a reader preempted between them could
    otherwise return a slot the writer has since overwritten twice (an older
    record than the one current when the read began, so a counter that goes
    backwards between two reads).  With the recheck the record returned was
    the newest complete one at some instant during the pass.
    """
    slot_size = _fmt.HB_SLOT.size
    best = None
    for off in slots:
        s1 = get(off, 8)
        slot = get(off, slot_size)
        s2 = get(off, 8)
        if len(s1) < 8 or len(slot) < slot_size or len(s2) < 8:
            return _TRUNCATED
        if s1 == s2 == slot[:8]:
            (q,) = _fmt.HB_SEQ.unpack(s1)
            if q % 2 == 0 and (best is None or q > best[0]):
                best = (q, off, slot)
    if best is None or (len(slots) > 1 and get(best[1], 8) != best[2][:8]):
        return None
    return best[2]


#: record version -> (size in bytes, slot offsets)
_LAYOUTS = {1: (_fmt.HB_V1_SIZE, (_fmt.HB_SEQ_OFFSET,)), _fmt.HB_VERSION: (_fmt.HB_SIZE, _fmt.HB_SLOT_OFFSETS)}


def read_heartbeat(path: str, timeout_s: float = 1.0) -> Optional[Heartbeat]:
    """Read one heartbeat file; None (and a HeartbeatWarning naming the file) if
    it is missing, a symlink, not a regular file, truncated, not a heartbeat
    record (bad magic/version/size), or with no whole slot after ``timeout_s``
    seconds of retries (which takes the rank rewriting both slots during every
    read for that long: each read of a slot takes well under a microsecond
    through the mapping, and the rank writes one slot at a time).
    """
    try:
        fd, st = fsio.open_regular(path)
    except fsio.NotRegular:
        warnings.warn("heartbeat %s: not a regular file" % path, HeartbeatWarning, stacklevel=2)
        return None
    except OSError as e:
        warnings.warn("heartbeat %s: cannot open: %s" % (path, e.strerror or e), HeartbeatWarning, stacklevel=2)
        return None
    try:
        head = os.pread(fd, 16, 0)
        if len(head) < 16:
            warnings.warn("heartbeat %s: truncated at byte offset %d (record is at least %d bytes)"
                          % (path, len(head), _fmt.HB_V1_SIZE), HeartbeatWarning, stacklevel=2)
            return None
        if head[:8] != _fmt.HB_MAGIC:
            warnings.warn("heartbeat %s: not a heartbeat record (bad magic at byte offset 0)" % path,
                          HeartbeatWarning, stacklevel=2)
            return None
        if st.st_size < _fmt.HB_V1_SIZE:
            warnings.warn("heartbeat %s: truncated at byte offset %d (record is at least %d bytes)"
                          % (path, st.st_size, _fmt.HB_V1_SIZE), HeartbeatWarning, stacklevel=2)
            return None
        version, rec_size = struct.unpack_from("<II", head, 8)
        size, slots = _LAYOUTS.get(version, (None, ()))
        if rec_size != size:
            warnings.warn("heartbeat %s: unsupported record version %d / size %d (byte offset 8)"
                          % (path, version, rec_size), HeartbeatWarning, stacklevel=2)
            return None
        if st.st_size < size:
            warnings.warn("heartbeat %s: truncated at byte offset %d (record is %d bytes)"
                          % (path, st.st_size, size), HeartbeatWarning, stacklevel=2)
            return None
        view = None
        if st.st_uid == os.geteuid():
            # our own user's file: read it through a shared mapping, so a
            # seqlock round (seq, slot, seq) takes ~0.2 us.  (Not for other
            # users' files: a truncation under the mapping would be a SIGBUS in
            # this process.)
            try:
                view = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
            except (OSError, ValueError):
                view = None
        if view is not None:
            def get(off, n):
                return view[off:off + n]
        else:
            def get(off, n):
                return os.pread(fd, n, off)
        deadline = time.monotonic() + timeout_s
        tries, pause = 0, 0.00005
        try:
            while True:
                tries += 1
                best = _newest_slot(get, slots)
                if best is _TRUNCATED:
                    warnings.warn("heartbeat %s: truncated (record is %d bytes)" % (path, size),
                                  HeartbeatWarning, stacklevel=2)
                    return None
                if best is not None:
                    return _decode(get(0, _fmt.HB_BUSY_OFFSET + 8), best, path, _moved_times(get, version))
                if time.monotonic() >= deadline:
                    break
                if tries > 1000:  # first a tight spin (the writer is sub-microsecond), then back off
                    time.sleep(pause)
                    pause = min(pause * 2, 0.005)
        finally:
            if view is not None:
                view.close()
        warnings.warn("heartbeat %s: record torn (no slot with an even, unchanged sequence at byte offsets %s) "
                      "after %d reads" % (path, ", ".join(str(o) for o in slots), tries), HeartbeatWarning,
                      stacklevel=2)
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
