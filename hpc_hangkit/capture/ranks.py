"""The live rank processes of one node: who they are, whether they live, an on-demand dump.

Where the data comes from: the heartbeat records of the ranks
(``$HANGKIT_SCRATCH_DIR/heartbeats/``; pid, host, main thread), or the header
line of their watchdog logs (``watchdog/``) when a rank has no heartbeat record.
Only ranks on this host count (``hpc-hangkit run`` is one node; the Slurm
monitor captures once per node). The rank files are hostile input: a pid below
2 is never a rank.
"""
import os
import socket
import time
from dataclasses import dataclass
from typing import Dict, List, NamedTuple, Optional

from hpc_hangkit import fsio, layout


@dataclass(frozen=True)
class RankProc:
    """One live rank process: global ``rank``, ``pid``, ``host``, main thread id (or None)."""

    rank: int
    pid: int
    host: str
    main_tid: Optional[int] = None


def _header_pid_host(path: str):
    """(pid, host) from the header line of a watchdog log, or None."""
    from hpc_hangkit.parse.faulthandler import parse_header
    try:
        with open(path, "rb") as f:
            first = f.readline(4096).decode("utf-8", "replace")
    except OSError:
        return None
    hdr = parse_header(first)
    if not hdr or not hdr.get("pid"):
        return None
    return int(hdr["pid"]), hdr.get("host") or ""


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists (zombies count as gone).  A pid below 2
    (init, or the "every process" of ``kill(-1, 0)``) is never a rank: False."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid < 2:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True


#: seconds a process may seem to have started after its arming before its pid counts as
#: reused (the start time is in clock ticks, floored; a rank starts before it arms)
START_SLACK_S = 0.5

ALIVE, GONE, ENDED, UNKNOWN = "alive", "gone", "ended", "unknown"


class Liveness(NamedTuple):
    """What ``/proc`` says of an armed rank's pid: ``state`` :data:`ALIVE` (the process that
    armed lives), :data:`GONE` (no such process, a zombie, or a process started after the
    arming: the pid was reused), :data:`ENDED` (gone, with an exit record of its own: only
    from :func:`node_liveness`) or :data:`UNKNOWN` (``/proc`` unreadable); ``seen``: for GONE
    and ENDED one of ``no-process``, ``zombie``, ``pid-reused``, else ``""``."""

    state: str
    seen: str = ""


def rank_liveness(pid: int, armed_mono_s: float) -> Liveness:
    """Whether the process that armed as ``pid`` at ``armed_mono_s`` (CLOCK_MONOTONIC seconds of
    this node, the heartbeat's arming time) still lives, from ``/proc/<pid>/stat`` (state, and
    field 22, the start time in clock ticks since boot). A process that started more than
    :data:`START_SLACK_S` after the arming holds a reused pid: the rank is gone. The start time
    is taken to CLOCK_MONOTONIC by the current CLOCK_BOOTTIME - CLOCK_MONOTONIC offset (time
    suspended); a suspend between the rank's start and now makes it earlier, never later, so
    a live rank is never called gone. A pid below 2 is never a rank: GONE. Never raises."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid < 2:
        return Liveness(GONE, "no-process")
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        state, start_ticks = fields[0], int(fields[19])
        tick = float(os.sysconf("SC_CLK_TCK"))
    except FileNotFoundError:
        return Liveness(GONE, "no-process")
    except (OSError, IndexError, ValueError):
        return Liveness(UNKNOWN)
    if state in ("Z", "X"):
        return Liveness(GONE, "zombie")
    try:
        suspended = time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic()
    except (AttributeError, OSError):
        suspended = 0.0
    if start_ticks / tick - max(0.0, suspended) > armed_mono_s + START_SLACK_S:
        return Liveness(GONE, "pid-reused")
    return Liveness(ALIVE)


def node_liveness(scratch: str, pid: int, armed_mono_s: float) -> Liveness:
    """:func:`rank_liveness` of a rank process of this node, with GONE turned into ENDED when
    ``<scratch>/exits/`` (the node scratch the rank writes) holds an exit record of ``pid``
    (any rank name: a rank that learned its rank after arming wrote ``rank_x``). The record is
    looked for after the death was seen, and a rank writes its own before it dies."""
    lv = rank_liveness(pid, armed_mono_s)
    if lv.state == GONE and any(rf.pid == pid for rf in layout.list_rank_files(
            os.path.join(scratch, layout.EXITS_DIR), ext="txt")):
        return Liveness(ENDED, lv.seen)
    return lv


def write_vanished(scratch: str, rank: int, pid: int, host: str, seen: str,
                   t: Optional[float] = None) -> str:
    """Record that rank ``rank``'s process ``pid`` on ``host`` vanished: the monitor's
    ``<scratch>/vanished/rank_<r>.pid<p>.txt`` (docs/internals.md "Vanished record"), one line
    ``# hpc-hangkit vanished pid=<p> host=<h> t=<epoch s> seen=<how>``, by temp file + rename.
    ``seen``: :attr:`Liveness.seen`; ``t``: when it was seen gone (default now). Returns the path.
    Raises ValueError for a bad rank/pid or a host :func:`hpc_hangkit.layout.validate_host`
    refuses, OSError if it cannot be written."""
    host = layout.validate_host(host)
    path = os.path.join(scratch, layout.VANISHED_DIR, layout.vanished_name(rank, pid))
    os.makedirs(os.path.dirname(path), 0o700, exist_ok=True)
    fsio.write_atomic(path, "%spid=%d host=%s t=%.3f seen=%s\n" % (layout.VANISHED_PREFIX, pid, host,
                                                                  time.time() if t is None else t, seen))
    return path


def discover_ranks(scratch: str, host: Optional[str] = None, alive_only: bool = True) -> Dict[int, RankProc]:
    """``{rank: RankProc}`` of the ranks of this host, from heartbeat records then watchdog headers.

    When a rank has several processes (a restarted rank), the live one with the
    newest file wins. ``host`` defaults to this host's name; records from other
    hosts are ignored. Unreadable records are skipped with a warning (by the parser).
    """
    host = host or socket.gethostname()
    found: Dict[int, tuple] = {}  # rank -> (mtime, RankProc)

    def offer(rp: RankProc, path: str):
        if not isinstance(rp.pid, int) or rp.pid < 2 or rp.rank < 0:  # hostile record: never aim tools at init
            return
        if rp.host and rp.host != host and rp.host.split(".")[0] != host.split(".")[0]:
            return
        if alive_only and not pid_alive(rp.pid):
            return
        try:
            mt = os.lstat(path).st_mtime
        except OSError:
            mt = 0.0
        cur = found.get(rp.rank)
        if cur is None or mt > cur[0]:
            found[rp.rank] = (mt, rp)

    hb_dir = os.path.join(scratch, layout.HEARTBEAT_DIR)
    if os.path.isdir(hb_dir):
        from hpc_hangkit.parse.heartbeat import read_heartbeats
        for hb in read_heartbeats(hb_dir):
            if hb.rank is None or hb.rank < 0:
                continue
            offer(RankProc(int(hb.rank), int(hb.pid), hb.host or "", hb.main_tid or None), hb.path)
    wd_dir = os.path.join(scratch, layout.WATCHDOG_DIR)
    for rf in layout.list_rank_files(wd_dir, known_rank=True):
        if rf.rank in found:
            continue
        path = os.path.join(wd_dir, rf.name)
        hdr = _header_pid_host(path)
        pid, h = (hdr[0], hdr[1]) if hdr else (rf.pid, "")
        offer(RankProc(rf.rank, pid, h), path)
    return {r: v[1] for r, v in sorted(found.items())}


def _watchdog_logs(scratch: str, pid: int) -> List[str]:
    """Paths of the watchdog logs of process ``pid`` under ``scratch/watchdog/``."""
    d = os.path.join(scratch, layout.WATCHDOG_DIR)
    return [os.path.join(d, rf.name) for rf in layout.list_rank_files(d, ext="log") if rf.pid == pid]


def request_dumps(ctx, wait_s: float = 1.0) -> None:
    """Ask every rank's watchdog for a dump now (:func:`hpc_hangkit.arm.watchdog.request_dumps`:
    through its watchdog thread, then directly after ``wait_s`` s if the main thread holds
    the GIL); a rank with no dump after that is reported as a capture problem.

    ``ctx``: a :class:`hpc_hangkit.capture.orchestrator.CaptureContext` (``settings.watchdog_signal``,
    ``scratch``, ``ranks``; problems go to ``ctx.problem``). Raises ValueError for a signal name
    the watchdog does not accept."""
    from hpc_hangkit.arm.watchdog import request_dumps as ask
    sig = getattr(ctx.settings, "watchdog_signal", "SIGURG")
    targets = {}
    rank_of = {}
    for rp in ctx.ranks.values():
        targets[rp.pid] = _watchdog_logs(ctx.scratch, rp.pid)
        rank_of[rp.pid] = rp.rank
    for pid, how in sorted(ask(targets, sig, timeout_s=wait_s).items(), key=lambda kv: rank_of[kv[0]]):
        r = rank_of[pid]
        if how == "gone" or how.startswith("failed"):
            ctx.problem("rank %d (pid %d): on-demand watchdog dump failed: %s" % (r, pid, how))
        elif how == "no dump" and targets[pid]:
            ctx.problem("rank %d: no on-demand watchdog dump within %.1f s (rank blocked with signals masked?)"
                        % (r, 2 * wait_s))
