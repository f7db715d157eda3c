"""NCCL RAS source: runs ``ncclras``, applies the per-communicator hang rule, keeps the history.

Where the data comes from: the ``ncclras`` client (NCCL >= 2.28.7 for
``-f json``) queries the RAS thread inside the NCCL processes of the job
through ``NCCL_RAS_ADDR`` (default ``localhost:28028``) on a node that hosts a
rank. One answer covers every rank reachable through the communicators.

Pieces, from the bottom up:

- :class:`RasClient` runs the client with explicit ``-h``/``-p`` (the client
  never reads ``NCCL_RAS_ADDR``; we parse it), under our own timeout (the client
  retries forever on a silent peer), and classifies failures: a missing binary,
  a client without ``-f`` (< 2.28.7) and a library < 2.28.7
  (``Unknown command SET FORMAT``) disable the source for the run with one
  warning; anything else (connection refused, timeout, bad JSON) is transient.
- :func:`assess` applies the Ray Train rule to two consecutive polls, one
  communicator at a time.
- :class:`RasSource` is the pluggable monitor source
  (``poll(now) -> {comm_key: (stalled, detail)}``) that also keeps the history
  files ``nccl_ras/ncclras_<timestamp>.json`` (confirm window + margin) and writes
  ``nccl_ras/ncclras_report.txt`` at confirmation.
- :func:`section_from_dir` is the roll-call section over a ``hang_detector``
  directory: which communicator and ranks fell behind, which collective type
  diverged first, drift or sudden stop, RAS ranks mapped to global ranks
  through (host, pid) from the heartbeats.
"""
import glob
import logging
import math
import os
import re
import shutil
import signal
import socket
import subprocess
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from hpc_hangkit import layout
from hpc_hangkit.capture.whyfile import unavailable_line
from hpc_hangkit.evidence.source import PollContext, Source
from hpc_hangkit.parse.ncclras import (OPS, RUNNING, RasParseError, RasPoll,
                                        parse_ncclras_json)
from hpc_hangkit.ranges import format_ranks

log = logging.getLogger("hpc_hangkit.evidence.ras")

DEFAULT_HOST = "localhost"
DEFAULT_PORT = 28028
HISTORY_MARGIN_POLLS = 10
_ACTIVE: list = []  # the newest RasSource of this process (for capture_hook)


class RasUnavailable(RuntimeError):
    """The RAS source cannot work in this run (missing client, old client, old library).

    Raised once by :meth:`RasClient.poll`; the client is disabled afterwards
    and the message is the one warning to log.
    """


class RasTransient(RuntimeError):
    """One poll failed (no listener, timeout, unparseable output); retry next poll."""


def parse_ras_addr(addr: Optional[str]) -> Tuple[str, int]:
    """Split ``NCCL_RAS_ADDR`` (``host:port``, ``[v6]:port``, or ``host``) into (host, port).

    ``None``/empty gives NCCL's default ``("localhost", 28028)``. Raises
    ``ValueError`` naming the value when the port is not an integer 1..65535.
    """
    if not addr:
        return DEFAULT_HOST, DEFAULT_PORT
    a = addr.strip()
    m = re.match(r"^\[([^\]]+)\](?::(\d*))?$", a)
    if m:
        host, port = m.group(1), m.group(2)
    elif a.count(":") == 1:
        host, port = a.split(":")
    elif ":" in a:  # bare IPv6 literal without a port
        host, port = a, None
    else:
        host, port = a, None
    if not port:
        return host or DEFAULT_HOST, DEFAULT_PORT
    try:
        p = int(port)
    except ValueError:
        p = -1
    if not 0 < p < 65536:
        raise ValueError("NCCL_RAS_ADDR=%r: port %r is not a number in 1..65535" % (addr, port))
    return host or DEFAULT_HOST, p


class RasClient:
    """Runs ``ncclras`` for the monitor.

    ``settings``: a :class:`hpc_hangkit.config.Settings` (uses ``ncclras_path``,
    ``ncclras_address``, ``ncclras_timeout_s``); ``env``: where ``NCCL_RAS_ADDR``
    is read when ``ncclras_address`` is unset (default ``os.environ``);
    ``prefix``: argv run in front of the client so it runs on a node that hosts
    a rank (e.g. ``["srun", "--overlap", "--jobid", J, "-w", NODE, "-N1", "-n1"]``
    from :mod:`hpc_hangkit.slurmjob`), empty to run locally.

    ``disabled`` is None or the reason the source was switched off.
    """

    def __init__(self, settings, env=None, prefix: Sequence[str] = ()):
        env = os.environ if env is None else env
        self.path = getattr(settings, "ncclras_path", None) or "ncclras"
        addr = getattr(settings, "ncclras_address", None) or env.get("NCCL_RAS_ADDR")
        self.host, self.port = parse_ras_addr(addr)
        self.timeout_s = float(getattr(settings, "ncclras_timeout_s", 10) or 10)
        self.prefix = list(prefix)
        self.disabled: Optional[str] = None
        self.last_error: Optional[str] = None

    def argv(self, fmt: str = "json") -> List[str]:
        """The command line: ``ncclras -f FMT -t T -h HOST -p PORT``.

        ``-t`` (how long the NCCL process waits for its peers) is kept below our
        own timeout so a healthy but slow mesh answers before we kill the client.
        """
        t = max(1, int(self.timeout_s * 0.5))
        return self.prefix + [self.path, "-f", fmt, "-t", str(t), "-h", self.host, "-p", str(self.port)]

    def _run(self, fmt: str) -> str:
        argv = self.argv(fmt)
        try:
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        except FileNotFoundError:
            raise RasUnavailable("ncclras not found (%r on PATH=%s); NCCL RAS source disabled for this run"
                                 % (argv[0], os.environ.get("PATH", ""))) from None
        except PermissionError as e:
            raise RasUnavailable("cannot run %r: %s; NCCL RAS source disabled for this run" % (argv[0], e)) from None
        try:
            out, err = p.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                p.kill()
            out, err = p.communicate()
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            raise RasTransient("ncclras gave no answer within %.0f s (killed; last stderr: %r): a RAS peer "
                               "may be wedged" % (self.timeout_s, tail[0])) from None
        errs = err.decode("utf-8", "replace")
        if "invalid option -- 'f'" in errs or "unrecognized option '--format" in errs:
            raise RasUnavailable("%s is older than NCCL 2.28.7 (no -f json); NCCL RAS source disabled for this "
                                 "run (install libnccl-dev >= 2.28.7)" % self.path)
        if "Unknown command SET FORMAT" in errs:
            raise RasUnavailable("the job's NCCL library is older than 2.28.7 (it answered 'Unknown command SET "
                                 "FORMAT'); NCCL RAS source disabled for this run")
        if p.returncode != 0:
            first = errs.strip().splitlines()
            raise RasTransient("ncclras exited %d: %s" % (p.returncode, " / ".join(first[:2]) or "(no stderr)"))
        return out.decode("utf-8", "replace")

    def poll(self, now: Optional[float] = None) -> Optional[RasPoll]:
        """One ``-f json`` query. Returns the parsed poll (``t`` = ``now``) or None.

        None means "no answer this time" (reason in ``last_error``) or "source
        disabled" (reason in ``disabled``). Raises :class:`RasUnavailable`
        exactly once, when the source gets disabled.
        """
        if self.disabled:
            return None
        try:
            text = self._run("json")
            poll = parse_ncclras_json(text, "ncclras -f json")
        except RasUnavailable as e:
            self.disabled = str(e)
            raise
        except (RasTransient, RasParseError) as e:
            self.last_error = str(e)
            return None
        poll.t = now
        self.last_error = None
        return poll

    def text_report(self) -> str:
        """The human-readable report (``-f text``), or a one-line ``hpc-hangkit: ...`` why-line."""
        if self.disabled:
            return unavailable_line("ncclras", self.disabled)
        try:
            return self._run("text")
        except (RasUnavailable, RasTransient) as e:
            return unavailable_line("ncclras", str(e))


# --- the per-communicator rule ----------------------------------------------

@dataclass
class CommState:
    """The rule's inputs and answer for one communicator at one poll.

    ``stalled`` = ``eligible and disagree and not progressed`` (the Ray Train
    rule). ``eligible``: every rank reported and RUNNING (a rank that is
    ABORT/FINALIZE/INIT/missing means the communicator is skipped);
    ``disagree``: some op's launch count differs across ranks;
    ``progressed``: some rank's count changed since the previous poll, or no
    previous poll saw this communicator (no baseline); ``frozen_equal``: all
    counts equal and nothing moved (the symmetric case: not a rule hit);
    ``behind_ranks``: communicator ranks below the highest count of a
    differing op; ``ops``: the differing ops; ``counts``: op -> {count: [ranks]}
    for differing ops; ``not_running``: rank -> status for skipped ranks.
    """

    key: str
    size: int
    stalled: bool
    eligible: bool
    disagree: bool
    progressed: bool
    frozen_equal: bool = False
    behind_ranks: List[int] = field(default_factory=list)
    ops: List[str] = field(default_factory=list)
    counts: Dict[str, Dict[int, List[int]]] = field(default_factory=dict)
    not_running: Dict[int, str] = field(default_factory=dict)
    report_fn: Optional[Callable[[], str]] = field(default=None, repr=False, compare=False)

    @property
    def text(self) -> str:
        """The ``ncclras -f text`` report of this poll (fetched on first use), else :meth:`describe`."""
        if self.report_fn is not None:
            return self.report_fn()
        return self.describe()

    def __str__(self) -> str:
        return "RAS %s: %s" % (self.key, self.describe())

    def to_json(self) -> dict:
        """JSON form for events.jsonl (no report text)."""
        return {"key": self.key, "size": self.size, "stalled": self.stalled, "eligible": self.eligible,
                "disagree": self.disagree, "progressed": self.progressed, "frozen_equal": self.frozen_equal,
                "behind_ranks": self.behind_ranks, "ops": self.ops,
                "counts": {op: {str(c): rs for c, rs in by.items()} for op, by in self.counts.items()},
                "not_running": {str(r): st for r, st in self.not_running.items()}}

    def describe(self) -> str:
        """One line for logs: which ops differ, which ranks are behind, or why it is skipped."""
        if not self.eligible:
            return "skipped: ranks not RUNNING (%s)" % ", ".join(
                "%d=%s" % kv for kv in sorted(self.not_running.items()))
        if not self.disagree:
            return "counts equal" + (", nothing moved" if self.frozen_equal else "")
        parts = []
        for op in self.ops:
            parts.append("%s %s" % (op, "; ".join("ranks %s at %d" % (format_ranks(r), c)
                                                  for c, r in sorted(self.counts[op].items()))))
        return "%s; behind: comm ranks %s%s" % (" | ".join(parts), format_ranks(self.behind_ranks),
                                                "" if self.progressed else "; no progress since previous poll")


def assess(prev: Optional[RasPoll], cur: RasPoll) -> Dict[str, CommState]:
    """Apply the per-communicator rule to two consecutive polls.

    Returns ``{comm_key: CommState}`` for every communicator in ``cur``.
    ``prev`` may be None (first poll: nothing is stalled, there is no
    baseline). Progress is judged on the ranks present in both polls; a rank
    set that changed counts as progress.
    """
    out: Dict[str, CommState] = {}
    for key, comm in cur.comms.items():
        not_running = {r.rank: r.status for r in comm.ranks if r.status != RUNNING}
        not_running.update({r.rank: r.status for r in comm.missing})
        eligible = not not_running and len(comm.ranks) > 0
        counts: Dict[str, Dict[int, List[int]]] = {}
        ops = []
        behind = set()
        for i, op in enumerate(OPS):
            by: Dict[int, List[int]] = {}
            for r in comm.ranks:
                by.setdefault(r.counts[i] if r.counts else 0, []).append(r.rank)
            if len(by) > 1:
                ops.append(op)
                counts[op] = by
                top = max(by)
                for c, rs in by.items():
                    if c < top:
                        behind.update(rs)
        disagree = bool(ops)
        pc = prev.comms.get(key) if prev is not None else None
        if pc is None:
            progressed = True
        else:
            before = {r.rank: r.counts for r in pc.ranks}
            now_ = {r.rank: r.counts for r in comm.ranks}
            progressed = set(before) != set(now_) or any(before[r] != now_[r] for r in now_)
        out[key] = CommState(key=key, size=comm.size, stalled=eligible and disagree and not progressed,
                             eligible=eligible, disagree=disagree, progressed=progressed,
                             frozen_equal=(pc is not None and not disagree and not progressed),
                             behind_ranks=sorted(behind), ops=ops, counts=counts, not_running=not_running)
    return out


# --- the monitor source --------------------------------------------------------

def _safe_ts(ts: str) -> str:
    return re.sub(r"[^0-9A-Za-z_.]+", "-", ts.strip()) or "unknown"


class RasSource:
    """Pluggable monitor source: ``poll(now) -> {comm_key: (stalled, detail)}``.

    ``settings``: :class:`~hpc_hangkit.config.Settings` (client settings, and
    ``confirm_polls`` for the history length: ``confirm_polls +
    HISTORY_MARGIN_POLLS`` polls are kept); ``out_dir``: the ``hang_detector``
    directory; when given, every poll's raw JSON is written there as
    ``nccl_ras/ncclras_<timestamp>.json`` and files older than the kept history
    are removed (without it the history stays in memory until
    :meth:`write_report` / the capture hook writes it). ``env``/``prefix``: see
    :class:`RasClient`; ``client``: a ready :class:`RasClient` (tests).

    ``detail`` is the :class:`CommState`; its ``text`` is the ``-f text``
    report (fetched at most once per poll, only when someone reads it: the
    monitor's still-suspected log). A failed poll returns ``{}`` (no answer: the
    detector neither advances nor resets); a disabled source returns ``{}``
    forever and logs its one warning. The newest source of the process is the
    one :func:`capture_hook` writes out.
    """

    name = "nccl_ras"

    def __init__(self, settings, out_dir: Optional[str] = None, env=None, prefix: Sequence[str] = (),
                 client: Optional[RasClient] = None):
        polls = getattr(settings, "confirm_polls", None) or int(
            math.ceil(float(settings.confirm_duration_s) / float(settings.poll_interval_s)))
        self.client = client or RasClient(settings, env=env, prefix=prefix)
        self.keep = max(1, int(polls)) + HISTORY_MARGIN_POLLS
        self.history: deque = deque(maxlen=self.keep)
        self.files: deque = deque()
        self.out_dir = out_dir
        self.prev: Optional[RasPoll] = None
        self.last: Dict[str, CommState] = {}
        self._text_cache: Optional[Tuple[int, str]] = None
        _ACTIVE[:] = [self]

    @property
    def disabled(self) -> Optional[str]:
        return self.client.disabled

    def poll(self, now: float) -> Dict[str, Tuple[bool, CommState]]:
        """Query once; return ``{comm_key: (stalled, CommState)}`` (``{}`` if no answer)."""
        try:
            cur = self.client.poll(now)
        except RasUnavailable as e:
            log.warning("%s", e)
            return {}
        if cur is None:
            if self.client.last_error:
                log.info("ncclras: %s", self.client.last_error)
            return {}
        self.history.append(cur)
        self._write(cur)
        states = assess(self.prev, cur)
        self.prev = cur
        self.last = states
        n = len(self.history) + id(cur)
        for st in states.values():
            st.report_fn = lambda n=n: self._text(n)
        return {k: (s.stalled, s) for k, s in states.items()}

    def _text(self, n: int) -> str:
        if self._text_cache is None or self._text_cache[0] != n:
            self._text_cache = (n, self.client.text_report())
        return self._text_cache[1]

    def _write(self, cur: RasPoll) -> None:
        if not self.out_dir:
            return
        d = os.path.join(self.out_dir, layout.NCCL_RAS_DIR)
        try:
            os.makedirs(d, exist_ok=True)
            base = os.path.join(d, "ncclras_%s" % _safe_ts(cur.timestamp))
            path, n = base + ".json", 1
            while os.path.exists(path):  # two polls in one second: same RAS timestamp
                n += 1
                path = "%s_%03d.json" % (base, n)
            with open(path, "w") as f:
                f.write(cur.raw)
            self.files.append(path)
            while len(self.files) > self.keep:
                old = self.files.popleft()
                try:
                    os.unlink(old)
                except OSError:
                    pass
        except OSError as e:
            log.warning("cannot write ncclras history under %s: %s", d, e)

    def write_report(self, out_dir: Optional[str] = None) -> Optional[str]:
        """Fetch the ``-f text`` report and write ``nccl_ras/ncclras_report.txt``; return its path.

        Called at confirmation. When ``out_dir`` differs from the source's own,
        the kept history is written there too.
        """
        out_dir = out_dir or self.out_dir
        if not out_dir:
            return None
        d = os.path.join(out_dir, layout.NCCL_RAS_DIR)
        os.makedirs(d, exist_ok=True)
        if out_dir != self.out_dir:
            for i, p in enumerate(self.history):
                with open(os.path.join(d, "ncclras_%s_h%03d.json" % (_safe_ts(p.timestamp), i)), "w") as f:
                    f.write(p.raw)
        path = os.path.join(d, layout.NCCLRAS_REPORT_TXT)
        with open(path, "w") as f:
            f.write(self.client.text_report())
        return path


def maybe_source(settings, out_dir: Optional[str] = None, env=None, prefix: Sequence[str] = ()):
    """A :class:`RasSource` when RAS can be used here, else None (logged once at INFO).

    Used when ``ncclras_address`` is set, or ``ncclras_path`` resolves on PATH
    (or through ``prefix``, which runs it elsewhere). Without it the run goes on
    with the other sources: RAS needs NCCL >= 2.28.7 and GPUs.
    """
    path = getattr(settings, "ncclras_path", None) or "ncclras"
    if not (getattr(settings, "ncclras_address", None) or prefix or shutil.which(path)):
        log.info("NCCL RAS source not used: %r not found on PATH", path)
        return None
    return RasSource(settings, out_dir=out_dir, env=env, prefix=prefix)


def capture_hook(ctx) -> None:
    """Capture step: write the RAS history and the text report of
    this process's :class:`RasSource` into ``ctx.hd_dir/nccl_ras/``. No source in this process (a
    per-node capture helper): nothing to do, the monitor process writes them."""
    if not _ACTIVE:
        return
    src = _ACTIVE[0]
    if src.disabled:
        ctx.problem("ncclras unavailable: %s" % src.disabled)
    path = src.write_report(ctx.hd_dir)
    if path is None:
        ctx.problem("ncclras: no output directory for the RAS report")


# --- roll-call section ----------------------------------------------------------

def _history_files(d: str) -> List[str]:
    return sorted(glob.glob(os.path.join(d, "ncclras_*.json")))


def _global_rank_map(hd_dir: str, polls: List[RasPoll]) -> Dict[Tuple[str, int], int]:
    """(ras host, pid) -> global rank, from the ranks' heartbeat records under ``hd_dir``."""
    hbdir = os.path.join(hd_dir, layout.HEARTBEAT_DIR)
    if not os.path.isdir(hbdir):
        return {}
    try:
        from hpc_hangkit.parse.heartbeat import read_heartbeats
    except ImportError:
        return {}
    try:
        hbs = [h for h in read_heartbeats(hbdir) if h is not None]
    except Exception as e:  # a reader bug must not cost the report
        log.warning("heartbeats under %s unreadable: %s", hbdir, e)
        return {}
    by_pid: Dict[int, list] = {}
    for h in hbs:
        by_pid.setdefault(int(h.pid), []).append(h)
    addr_cache: Dict[str, str] = {}

    def addr(name):
        if name not in addr_cache:
            try:
                addr_cache[name] = socket.gethostbyname(name)
            except OSError:
                addr_cache[name] = ""
        return addr_cache[name]

    out = {}
    for p in polls:
        for c in p.comms.values():
            for r in c.ranks + c.missing:
                cands = by_pid.get(r.pid, [])
                if len(cands) > 1:
                    cands = [h for h in cands if h.host == r.host or addr(h.host) == r.host]
                if len(cands) == 1 and cands[0].rank is not None and cands[0].rank >= 0:
                    out[(r.host, r.pid)] = int(cands[0].rank)
    return out


def _skew(comm) -> int:
    tot = 0
    for i in range(len(OPS)):
        vals = [r.counts[i] for r in comm.ranks if r.counts]
        if vals:
            tot += max(vals) - min(vals)
    return tot


def section_from_dir(hd_dir: str) -> Optional[dict]:
    """Roll-call section from ``<hd_dir>/nccl_ras/ncclras_*.json`` (the poll history).

    Returns None when there is no history, else the section dict of
    docs/internals.md (``summary``, ``verdict``, ``suspect_ranks``, ``groups``,
    ``text``) plus ``communicators``: per stuck communicator its key, size,
    behind ranks (communicator ranks and, where the heartbeats map them,
    global ranks), the op that diverged first and ``pattern`` (``sudden`` or
    ``drift``). Verdicts: ``MISSED`` (a minority of ranks behind), ``SPLIT``
    (half or more behind), ``TOGETHER`` (equal counts, nothing moving: below
    the API; names no rank), None (nothing stuck). Unreadable files are
    skipped with a warning line in ``text``.
    """
    d = os.path.join(hd_dir, layout.NCCL_RAS_DIR)
    files = _history_files(d)
    if not files:
        return None
    polls: List[RasPoll] = []
    notes: List[str] = []
    for f in files:
        try:
            with open(f, "rb") as fh:
                polls.append(parse_ncclras_json(fh.read(), os.path.basename(f)))
        except (OSError, RasParseError) as e:
            notes.append("warning: %s" % e)
    if not polls:
        return {"summary": "NCCL RAS history unreadable", "verdict": None, "suspect_ranks": None,
                "groups": [], "text": notes}
    gmap = _global_rank_map(hd_dir, polls)
    states = [assess(polls[i - 1] if i else None, polls[i]) for i in range(len(polls))]
    last, last_states = polls[-1], states[-1]
    text = ["NCCL RAS (%d polls, %s .. %s, NCCL %s)" % (len(polls), polls[0].timestamp, last.timestamp,
                                                         last.nccl_version)]
    comms_out = []
    groups = []
    suspects: List[int] = []
    verdict = None
    world = max((c.size for c in last.comms.values()), default=0)
    for key, st in sorted(last_states.items(), key=lambda kv: -kv[1].size):
        comm = last.comms[key]
        if not st.disagree or not st.eligible:
            continue
        # the final streak of disagreement; frozen polls at its end
        start = len(polls) - 1
        while start > 0 and key in states[start - 1] and states[start - 1][key].disagree:
            start -= 1
        frozen = 0
        i = len(polls) - 1
        while i > 0 and key in states[i] and not states[i][key].progressed:
            frozen += 1
            i -= 1
        first_ops = states[start][key].ops
        moving_skews = [_skew(polls[j].comms[key]) for j in range(start, len(polls) - frozen)]
        drift = len(moving_skews) >= 2 and moving_skews[-1] > moving_skews[0]
        pattern = "drift" if drift else "sudden"

        def g(r):
            gr = gmap.get((next((x.host for x in comm.ranks if x.rank == r), ""),
                           next((x.pid for x in comm.ranks if x.rank == r), -1)))
            if gr is None and comm.size == world and not gmap:
                return r  # world communicator: comm rank == global rank
            return gr

        behind_g = [g(r) for r in st.behind_ranks]
        mapped = [x for x in behind_g if x is not None]
        ahead = sorted(set(r.rank for r in comm.ranks) - set(st.behind_ranks))
        label = "world communicator" if comm.size == world and len(last.comms) > 1 else "communicator"
        if len(last.comms) == 1:
            label = "communicator"
        desc = []
        for op in st.ops:
            desc.append("%s: %s" % (op, ", ".join("%d at %d" % (len(rs), c)
                                                   for c, rs in sorted(st.counts[op].items()))))
        frozen_s = ""
        if polls[-1].t is not None and polls[-1 - frozen].t is not None:
            frozen_s = " (%.0f s)" % (polls[-1].t - polls[-1 - frozen].t)

        def both(rs, gs):
            if all(a == b for a, b in zip(rs, gs)):
                return format_ranks(rs)
            return "%s (global %s)" % (format_ranks(rs), ", ".join("?" if x is None else str(x) for x in gs))

        text.append("%s %s (size %d): %s; %s" % (label, comm.short, comm.size, "; ".join(desc),
                                               "frozen for %d poll(s)%s" % (frozen, frozen_s) if frozen
                                               else "still moving"))
        text.append("  ranks behind: %s; ahead: %s" % (both(st.behind_ranks, behind_g),
                                                       both(ahead, [g(r) for r in ahead])))
        text.append("  diverged first in %s (disagreeing since %s%s); %s" % (
            "/".join(first_ops), polls[start].timestamp,
            ", frozen since %s" % polls[-1 - frozen].timestamp if frozen else "",
            "sudden stop (points at a divergent code path)" if pattern == "sudden"
            else "slow drift before stopping (points at a straggler)"))
        comms_out.append({"key": key, "hash": comm.hash, "size": comm.size, "ops": st.ops,
                          "behind_comm_ranks": st.behind_ranks, "behind_global_ranks": behind_g,
                          "first_ops": first_ops, "first_seen": polls[start].timestamp,
                          "frozen_since": polls[-1 - frozen].timestamp if frozen else None,
                          "frozen_polls": frozen, "pattern": pattern, "stalled": st.stalled})
        if st.stalled:
            groups.append({"ranks": sorted(mapped) if mapped else st.behind_ranks, "role": "behind",
                           "detail": "%s %s: %s" % (label, comm.short, "; ".join(desc))})
            groups.append({"ranks": sorted(x for x in (g(r) for r in ahead) if x is not None) or ahead,
                           "role": "ahead (waiting)", "detail": "%s %s" % (label, comm.short)})
            if verdict is None:
                verdict = "MISSED" if len(st.behind_ranks) * 2 < len(comm.ranks) else "SPLIT"
                suspects = sorted(mapped)
    if not comms_out:
        frozen_all = [s for s in last_states.values() if s.frozen_equal and s.eligible]
        if frozen_all and len(frozen_all) == len(last_states):
            verdict = "TOGETHER"
            text.append("all %d communicator(s) have equal launch counts and made no progress: every rank "
                        "launched the same collective and none completed (below the API: suspect the "
                        "network, a GPU or NCCL; see nvidia_smi/ and NCCL logs). No rank is singled out."
                        % len(frozen_all))
        else:
            skipped = [s for s in last_states.values() if not s.eligible]
            for s in skipped:
                text.append("communicator %s %s" % (last.comms[s.key].short, s.describe()))
            if not skipped:
                text.append("no communicator disagrees")
    summary = text[1] if len(text) > 1 else text[0]
    return {"summary": summary, "verdict": verdict,
            "suspect_ranks": None if verdict in (None, "TOGETHER") else suspects,
            "groups": groups, "text": text + notes, "communicators": comms_out}


def poll_source(ctx: PollContext):
    """The monitor's NCCL RAS source for ``ctx`` (history under ``ctx.hd_dir``), or None
    (:func:`maybe_source`: no ``ncclras`` here)."""
    return maybe_source(ctx.settings, out_dir=ctx.hd_dir)


SOURCE = Source("nccl_ras", section_dir=layout.NCCL_RAS_DIR, poll=poll_source, capture=capture_hook,
                section=section_from_dir, together_names_suspects=False)
