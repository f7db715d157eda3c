"""Capture diagnostics from the live ranks of one node, on a confirmed hang.

Where the data comes from: the rank processes listed by their heartbeat
records (``$HANGKIT_SCRATCH_DIR/heartbeats/``; pid, host, main thread), or by
the header line of their watchdog logs when a rank has no heartbeat record.
Only ranks on this host are captured (``hpc-hangkit run`` is one node; the
Slurm monitor runs capture once per node).

Steps, in order, each bounded in time and each failing alone:

1. an on-demand watchdog dump of every rank
   (:func:`hpc_hangkit.watchdog.request_dumps`: through each rank's watchdog
   thread, then directly if its main thread holds the GIL), waited for up to
   ``2 * dump_wait_s`` seconds so the dump lands before the copy;
2. ``py-spy dump --native --pid <pid>`` of every rank, in parallel, into
   ``<hd_dir>/stack_traces/rank_<i>.log``; a missing or refused py-spy (no
   ptrace) writes a one-line why-file ``hpc-hangkit: py-spy unavailable: <why>``
   instead (if only ``--native`` is refused, the Python-only dump is kept);
3. the extra steps in :data:`HOOKS` and the ``capture_hook(ctx)`` functions of
   the modules in :data:`HOOK_MODULES` (Flight Recorder, nvidia-smi, ncclras:
   owner H5), each guarded;
4. a copy of ``watchdog/``, ``heartbeats/`` and ``unwatched/`` from scratch
   into ``<hd_dir>/`` (plain files only; symlinks are never followed).

Nothing here raises for a missing tool or a dead rank: problems are returned in
:attr:`CaptureResult.problems` (one line each) and logged once.
"""
import importlib
import logging
import os
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

from hpc_hangkit import layout

log = logging.getLogger("hpc_hangkit.capture")

#: extra capture steps: callables ``fn(ctx: CaptureContext) -> None`` run after py-spy
HOOKS: List[Callable] = []
#: modules whose ``capture_hook(ctx)`` (if the module imports and has one) runs after HOOKS
HOOK_MODULES = ("hpc_hangkit.flightrec", "hpc_hangkit.nvsmi", "hpc_hangkit.ras")

PYSPY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RankProc:
    """One live rank process: global ``rank``, ``pid``, ``host``, main thread id (or None)."""

    rank: int
    pid: int
    host: str
    main_tid: Optional[int] = None


@dataclass
class CaptureContext:
    """What a capture step gets.

    ``settings``: :class:`hpc_hangkit.config.Settings`; ``scratch``: the job's
    node scratch (``$HANGKIT_SCRATCH_DIR``); ``hd_dir``: the output
    ``hang_detector`` directory; ``ranks``: ``{rank: RankProc}`` on this host;
    ``problems``: append one line per problem (a hook reports here).
    """

    settings: object
    scratch: str
    hd_dir: str
    ranks: Dict[int, RankProc]
    problems: List[str] = field(default_factory=list)

    def problem(self, line: str) -> None:
        self.problems.append(line)
        log.warning("%s", line)


@dataclass
class CaptureResult:
    """``files``: paths written under hd_dir; ``problems``: one line per tool/rank problem; ``seconds``: wall time."""

    files: List[str]
    problems: List[str]
    seconds: float


def unavailable_line(tool: str, why: str) -> str:
    """The one line of a why-file: ``hpc-hangkit: <tool> unavailable: <why>``."""
    why = " ".join(str(why).split())  # one line, whatever the tool printed
    return "hpc-hangkit: %s unavailable: %s\n" % (tool, why)


#: how every why-file starts (:func:`unavailable_line`)
WHY_PREFIX = b"hpc-hangkit: "


def is_why_data(data: bytes) -> bool:
    """True if ``data`` is a one-line why-file (a tool could not produce its output),
    not real captured output."""
    return data.startswith(WHY_PREFIX) and b" unavailable: " in data[:200] \
        and data.rstrip(b"\n").count(b"\n") == 0


def write_why_file(path: str, tool: str, why: str) -> str:
    """Write the one-line why-file at ``path`` (parents created); returns ``path``.

    Real output already at ``path`` (an earlier capture where the tool worked) is
    kept: a later failure never replaces evidence with an excuse."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
        if head and not is_why_data(head):
            return path
    except OSError:
        pass
    with open(path, "w") as f:
        f.write(unavailable_line(tool, why))
    return path


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
    if os.path.isdir(wd_dir):
        for name in sorted(os.listdir(wd_dir)):
            parsed = layout.parse_rank_file_name(name)
            if not parsed or parsed[0] is None or parsed[0] in found:
                continue
            path = os.path.join(wd_dir, name)
            hdr = _header_pid_host(path)
            pid, h = (hdr[0], hdr[1]) if hdr else (parsed[1], "")
            offer(RankProc(parsed[0], pid, h), path)
    return {r: v[1] for r, v in sorted(found.items())}


def _watchdog_logs(scratch: str, pid: int) -> List[str]:
    d = os.path.join(scratch, layout.WATCHDOG_DIR)
    try:
        names = os.listdir(d)
    except OSError:
        return []
    out = []
    for n in names:
        p = layout.parse_rank_file_name(n)
        if p and p[1] == pid and p[2] == "log":
            out.append(os.path.join(d, n))
    return out


def request_dumps(ctx: CaptureContext, wait_s: float = 1.0) -> None:
    """Ask every rank's watchdog for a dump now (:func:`hpc_hangkit.watchdog.request_dumps`:
    through its watchdog thread, then directly after ``wait_s`` s if the main thread holds
    the GIL); a rank with no dump after that is reported as a capture problem."""
    from hpc_hangkit.watchdog import request_dumps as ask
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


def _run_pyspy(pyspy: str, pid: int, native: bool, timeout_s: float):
    argv = [pyspy, "dump", "--pid", str(pid)] + (["--native"] if native else [])
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=timeout_s)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace").strip()


def pyspy_rank(ctx: CaptureContext, rp: RankProc, timeout_s: float = PYSPY_TIMEOUT_S) -> str:
    """py-spy dump --native of one rank into ``stack_traces/rank_<i>.log``; a why-file on failure. Returns the path."""
    out = os.path.join(ctx.hd_dir, layout.STACK_TRACES_DIR, layout.stack_trace_name(rp.rank))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    pyspy = getattr(ctx.settings, "pyspy_path", None) or "py-spy"
    why = None
    try:
        rc, data, err = _run_pyspy(pyspy, rp.pid, True, timeout_s)
        if rc != 0:
            native_err = err.splitlines()[-1] if err else "exit status %d" % rc
            rc2, data2, err2 = _run_pyspy(pyspy, rp.pid, False, timeout_s)
            if rc2 == 0 and data2.strip():
                log.warning("rank %d: py-spy --native refused (%s); kept the Python-only dump",
                            rp.rank, native_err)
                rc, data = 0, data2
            else:
                why = "%s dump --native --pid %d failed: %s" % (pyspy, rp.pid, native_err)
    except FileNotFoundError:
        why = "executable %r not found (setting pyspy_path / HANGKIT_PYSPY_PATH)" % pyspy
    except PermissionError as e:
        why = "cannot execute %r: %s" % (pyspy, e)
    except subprocess.TimeoutExpired:
        why = "%s dump --pid %d timed out after %.0f s" % (pyspy, rp.pid, timeout_s)
    except OSError as e:
        why = "cannot run %r: %s" % (pyspy, e)
    if why is not None:
        ctx.problem("rank %d: %s" % (rp.rank, unavailable_line("py-spy", why).strip()))
        return write_why_file(out, "py-spy", why)
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, out)
    return out


def pyspy_all(ctx: CaptureContext, workers: int = 8) -> List[str]:
    """:func:`pyspy_rank` of every rank in parallel (threads; each py-spy is its own process)."""
    if not ctx.ranks:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(ctx.ranks)))) as ex:
        return list(ex.map(lambda rp: pyspy_rank(ctx, rp), ctx.ranks.values()))


def run_hooks(ctx: CaptureContext) -> None:
    """Run :data:`HOOKS`, then each importable ``<module>.capture_hook`` of :data:`HOOK_MODULES`; each guarded."""
    fns = list(HOOKS)
    for name in HOOK_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        fn = getattr(mod, "capture_hook", None)
        if callable(fn) and fn not in fns:
            fns.append(fn)
    for fn in fns:
        label = getattr(fn, "__module__", "?") + "." + getattr(fn, "__name__", "?")
        try:
            fn(ctx)
        except Exception as e:  # a capture step never stops the others
            ctx.problem("capture step %s failed: %s: %s" % (label, type(e).__name__, e))


def copy_rank_files(scratch: str, hd_dir: str) -> List[str]:
    """Copy ``watchdog/``, ``heartbeats/``, ``unwatched/`` (regular files only, no symlinks) into ``hd_dir``."""
    copied = []
    for sub in (layout.WATCHDOG_DIR, layout.HEARTBEAT_DIR, layout.UNWATCHED_DIR):
        src = os.path.join(scratch, sub)
        if not os.path.isdir(src) or os.path.islink(src):
            continue
        dst = os.path.join(hd_dir, sub)
        os.makedirs(dst, exist_ok=True)
        for name in sorted(os.listdir(src)):
            s = os.path.join(src, name)
            try:
                if os.path.islink(s) or not os.path.isfile(s):
                    continue
                shutil.copyfile(s, os.path.join(dst, name), follow_symlinks=False)
                copied.append(os.path.join(dst, name))
            except OSError as e:
                log.warning("could not copy %s: %s", s, e)
    return copied


def capture(ctx: CaptureContext, dump_wait_s: float = 1.0) -> CaptureResult:
    """All capture steps (see the module docstring) for ``ctx.ranks``; never raises for a tool/rank problem."""
    t0 = time.monotonic()
    os.makedirs(ctx.hd_dir, exist_ok=True)
    files: List[str] = []
    if not ctx.ranks:
        ctx.problem("no live rank found in %s (no heartbeat record or watchdog log)" % ctx.scratch)
    else:
        request_dumps(ctx, wait_s=dump_wait_s)
        t1 = time.monotonic()
        log.info("on-demand watchdog dumps: %.1f s", t1 - t0)
        files += pyspy_all(ctx)
        log.info("py-spy of %d rank(s): %.1f s", len(ctx.ranks), time.monotonic() - t1)
    t2 = time.monotonic()
    run_hooks(ctx)
    log.info("capture hooks: %.1f s", time.monotonic() - t2)
    files += copy_rank_files(ctx.scratch, ctx.hd_dir)
    return CaptureResult(files, list(ctx.problems), time.monotonic() - t0)
