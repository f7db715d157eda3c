"""The node side of the Slurm monitor: ``hpc-hangkit slurm-probe`` (:func:`probe_main`: this
node's answer, framed for ``srun`` output) and the monitor's :class:`View`, the one private
directory every node's answers are mirrored into. Runs as the job's user.

A node answers in one of two shapes (``--answer``):

- ``raw``: its rank-file tails (:func:`rank_files`, up to :data:`PROBE_TAIL_BYTES` per
  watchdog log) and whether each heartbeat's process lives; the view mirrors the files.
- ``summary``: its node summary (:func:`node_summary`, a
  :func:`hpc_hangkit.rollcall.nodes.summarize_files` of its ``watchdog/``, ``heartbeats/``,
  ``exits/`` and ``vanished/``) and, per rank process, the few facts the monitor's
  progress rules need (:func:`rank_facts_of_node`: heartbeat counter and busy, a signature
  of the newest main-thread stack, ended, liveness). Its size grows with the distinct
  positions and the rank count, not with dump bytes; the view keeps it as
  ``nodes/<host>.summary.json``, which the roll call merges with the monitor node's own raw
  files (one roll call: :func:`hpc_hangkit.rollcall.nodes.summarize_dir` merges every
  ``*.summary.json`` it finds).
"""
import logging
import os
import socket
import sys
import time
from typing import Dict, List, Mapping, Optional

from hpc_hangkit import fsio, layout
from hpc_hangkit.capture.ranks import ALIVE, ENDED, GONE, UNKNOWN, Liveness, node_liveness
from hpc_hangkit.gather import read_tail
from hpc_hangkit.wire import decode_files, emit_doc, encode_files, parse_docs

#: the view's folder of the other nodes' summaries (``<host>.summary.json``)
NODES_DIR = "nodes"
#: the answer shapes of ``slurm-probe --answer``
ANSWERS = ("raw", "summary")

log = logging.getLogger("hpc_hangkit.slurm.probe")

#: bytes of each watchdog log a probe returns (the newest dumps)
PROBE_TAIL_BYTES = 64 * 1024



def rank_files(scratch: str, since: Optional[Mapping[str, int]] = None,
               tail: int = PROBE_TAIL_BYTES) -> Dict[str, dict]:
    """The rank files of one node scratch: ``{"watchdog/<name>": {"size", "offset", "data"}}``
    and the same for ``heartbeats/``. ``data`` (bytes) is the file from ``offset``:
    new bytes since ``since[rel]`` (at most ``tail``); heartbeats whole. Files
    that vanish or are not regular files are skipped."""
    since = since or {}
    out = {}
    for sub in (layout.WATCHDOG_DIR, layout.HEARTBEAT_DIR):
        try:
            dfd = os.open(os.path.join(scratch, sub), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            for name in (rf.name for rf in layout.list_rank_files(dfd)):
                rel = sub + "/" + name
                try:
                    if sub == layout.HEARTBEAT_DIR:
                        size, data, off = read_tail(dfd, name, 0, 1 << 16)
                    else:
                        old = since.get(rel, 0)
                        try:
                            if os.stat(name, dir_fd=dfd, follow_symlinks=False).st_size == old:
                                continue
                        except OSError:
                            continue
                        size, data, off = read_tail(dfd, name, old, tail)
                except OSError:
                    continue
                out[rel] = {"size": size, "offset": off, "data": data}
        finally:
            os.close(dfd)
    return out


def heartbeat_liveness(scratch: str, host: Optional[str] = None) -> Dict[str, List[str]]:
    """``{"heartbeats/<name>": [state, seen]}``: :func:`hpc_hangkit.capture.ranks.node_liveness`
    of the process of every heartbeat record of this node (``host``, default this host's
    name) in ``scratch``, for the batch monitor, which cannot read this node's ``/proc``."""
    from hpc_hangkit.parse.heartbeat import read_heartbeats

    short = (host or socket.gethostname()).split(".")[0]
    out = {}
    for hb in read_heartbeats(os.path.join(scratch, layout.HEARTBEAT_DIR)):
        if (hb.host or "").split(".")[0] != short:
            continue
        lv = node_liveness(scratch, int(hb.pid), float(hb.armed_mono_s))
        out[layout.HEARTBEAT_DIR + "/" + os.path.basename(hb.path)] = [lv.state, lv.seen]
    return out


def sample_quiet_ranks(scratch: str, sample_signal: str, quiet_s: float, wait_s: float = 1.0,
                       host: Optional[str] = None) -> Dict[int, str]:
    """Ask this node's armed ranks that have not checked in for ``quiet_s`` seconds (or never:
    one armed a moment ago is sampled too, so its first position is known with its time) for an
    on-demand watchdog dump (``sample_signal``, :func:`hpc_hangkit.arm.watchdog.request_dumps`),
    waiting up to ``wait_s`` s for them: what the batch monitor's own node does at every poll, so
    a remote node's ranks are sampled at the poll rate, not only every watchdog period (the
    roll call's modal position needs several samples at the new place). Returns
    ``{pid: outcome}``; ``{}`` when no rank is quiet. Raises ValueError for a signal name the
    watchdog does not accept."""
    from hpc_hangkit.arm.watchdog import request_dumps
    from hpc_hangkit.parse.heartbeat import read_heartbeats

    short = (host or socket.gethostname()).split(".")[0]
    wd = os.path.join(scratch, layout.WATCHDOG_DIR)
    logs: Dict[int, List[str]] = {}
    for rf in layout.list_rank_files(wd, ext="log"):
        logs.setdefault(rf.pid, []).append(os.path.join(wd, rf.name))
    now = time.time()
    targets = {int(hb.pid): logs.get(int(hb.pid), [])
               for hb in read_heartbeats(os.path.join(scratch, layout.HEARTBEAT_DIR))
               if (hb.host or "").split(".")[0] == short and (hb.counter == 0 or hb.age_s(now) >= quiet_s)}
    return request_dumps(targets, sample_signal, timeout_s=wait_s) if targets else {}


def stack_signature(sample) -> Optional[str]:
    """A short digest of the main thread's Python frames (file, line, function) of one
    parsed dump (the roll call's main-thread rule), or None when it has no main thread:
    two dumps with equal signatures show the rank at the same place."""
    import hashlib

    from hpc_hangkit.rollcall.frames import main_thread

    th = main_thread(sample)
    if th is None:
        return None
    frames = [(f.file, f.line, f.function) for f in th.frames if not f.native]
    if not frames:
        return None
    return hashlib.sha1(repr(frames).encode("utf-8", "replace")).hexdigest()[:16]


def rank_facts_of_node(scratch: str, host: Optional[str] = None,
                       tail: int = PROBE_TAIL_BYTES) -> Dict[str, dict]:
    """Per rank process of this node (``host``, default this host's name) with a heartbeat
    in ``scratch``: ``{"rank_<r>.pid<p>.hb": {"rank", "pid", "host", "counter", "busy",
    "label", "armed_mono_s", "stack", "ended", "liveness": [state, seen]}}``. ``stack``:
    :func:`stack_signature` of the newest dump with a main thread in the last ``tail`` bytes
    of its watchdog log (None without one); ``ended``: it left an exit record. When known,
    also ``checkpoint_at`` (epoch s, this node's clock: its last ``checkpoint()``),
    ``busy_at`` (the watchdog thread's last look that counted ``busy``) and
    ``moved_at`` (epoch s: when its watchdog thread last found the main thread's stack
    moved, given only when that thread has looked at it since that newest dump was
    written, :meth:`~hpc_hangkit.parse.heartbeat.Heartbeat.moved_since`): a change the
    monitor sees in ``stack``, ``counter`` or ``busy`` happened no later than these. What the monitor
    needs for progress and liveness without the dumps themselves."""
    from hpc_hangkit.parse.faulthandler import parse_faulthandler
    from hpc_hangkit.parse.heartbeat import read_heartbeats

    short = (host or socket.gethostname()).split(".")[0]
    live = heartbeat_liveness(scratch, host)
    sigs: Dict[tuple, Optional[str]] = {}
    dumped: Dict[tuple, float] = {}
    wd = os.path.join(scratch, layout.WATCHDOG_DIR)
    try:
        dfd = os.open(wd, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        dfd = None
    if dfd is not None:
        try:
            for rf in layout.list_rank_files(dfd, ext="log", known_rank=True):
                try:
                    _, data, _ = read_tail(dfd, rf.name, 0, tail)
                    # after the read: no dump read above is newer than this
                    written = os.stat(rf.name, dir_fd=dfd, follow_symlinks=False).st_mtime
                except OSError:
                    continue
                sig = None
                for smp in parse_faulthandler(data, rf.name).samples:
                    sig = stack_signature(smp) or sig
                sigs[(rf.rank, rf.pid)] = sig
                dumped[(rf.rank, rf.pid)] = written
        finally:
            os.close(dfd)
    wall, mono = time.time(), time.monotonic()  # this node's two clocks, read together
    out = {}
    for hb in read_heartbeats(os.path.join(scratch, layout.HEARTBEAT_DIR)):
        if (hb.host or "").split(".")[0] != short or hb.rank is None or hb.rank < 0:
            continue
        name = os.path.basename(hb.path)
        lv = live.get(layout.HEARTBEAT_DIR + "/" + name) or [UNKNOWN, ""]
        out[name] = {"rank": int(hb.rank), "pid": int(hb.pid), "host": hb.host, "counter": int(hb.counter),
                     "busy": int(getattr(hb, "busy", 0) or 0), "label": hb.label or "",
                     "armed_mono_s": float(hb.armed_mono_s), "stack": sigs.get((hb.rank, hb.pid)),
                     "ended": lv[0] == ENDED, "liveness": list(lv)}
        if hb.counter:
            out[name]["checkpoint_at"] = round(wall - (mono - hb.mono_s), 3)
        if getattr(hb, "busy", 0) and hb.busy_mono_s > 0.0:
            out[name]["busy_at"] = round(wall - (mono - hb.busy_mono_s), 3)
        w = dumped.get((hb.rank, hb.pid))
        moved = hb.moved_since(mono - (wall - w)) if w is not None else None
        if moved is not None:
            out[name]["moved_at"] = round(wall - (mono - moved), 3)
    return out


def node_summary(scratch: str, samples: int = 5) -> dict:
    """The node summary (:func:`hpc_hangkit.rollcall.nodes.summarize_files`) of this node's
    ``watchdog/``, ``heartbeats/``, ``exits/`` and ``vanished/`` in ``scratch`` (not its
    capture tree), ``samples`` = K of the monitor's roll call, with ``taken_at``: epoch
    seconds (this node's clock) just before its files were read, an optional field of the
    version-1 shape. The monitor's roll call measures the silence of these ranks up to it,
    not up to the newest write of its own node's ranks, which it reads at every poll
    (:func:`hpc_hangkit.rollcall.nodes.observed_times`)."""
    from hpc_hangkit.rollcall.nodes import summarize_files
    from hpc_hangkit.rollcall.read import list_files

    # before the reads: a rank that writes during them is newer than this, never judged older
    taken_at = round(time.time(), 3)
    subs = (layout.WATCHDOG_DIR, layout.HEARTBEAT_DIR, layout.EXITS_DIR, layout.VANISHED_DIR)
    files = []
    for sub in subs:
        d = os.path.join(scratch, sub)
        if os.path.isdir(d) and not os.path.islink(d):
            files.extend(list_files(d))
    out = summarize_files(scratch, files, samples=samples)
    out["taken_at"] = taken_at
    return out


def probe_main(scratch: str, out=None, sample_signal: Optional[str] = None, quiet_s: float = 1.0,
               answer: str = "raw", samples: int = 5) -> int:
    """``hpc-hangkit slurm-probe``: print (framed, :func:`hpc_hangkit.wire.emit_doc`) this node's
    answer for the batch-step monitor: with ``answer="raw"`` its rank files (tails) and the
    liveness of its ranks' processes (:func:`heartbeat_liveness`); with ``answer="summary"``
    ``{"host", "answer": "summary", "summary": node_summary(scratch, samples), "ranks":
    rank_facts_of_node(scratch)}`` (the summary stamped ``taken_at``). With ``sample_signal``,
    first a fresh dump of every rank quiet for ``quiet_s`` seconds (:func:`sample_quiet_ranks`),
    so the answer holds it. Runs inside the job as its user. Raises ValueError for an unknown ``answer``."""
    if answer not in ANSWERS:
        raise ValueError("unknown probe answer %r (one of %s)" % (answer, ", ".join(ANSWERS)))
    out = out or sys.stdout
    if sample_signal:
        try:
            sample_quiet_ranks(scratch, sample_signal, quiet_s)
        except (ValueError, OSError) as e:  # the files are still worth sending
            sys.stderr.write("hpc-hangkit slurm-probe: no on-demand sample (%s)\n" % e)
    if answer == "summary":
        emit_doc({"host": socket.gethostname(), "answer": "summary",
                  "summary": node_summary(scratch, samples), "ranks": rank_facts_of_node(scratch)}, out)
        return 0
    emit_doc({"host": socket.gethostname(), "files": encode_files(rank_files(scratch)),
              "liveness": heartbeat_liveness(scratch)}, out)
    return 0


def probe_cli(argv: List[str]) -> int:
    """``hpc-hangkit slurm-probe [--scratch DIR] [--sample-signal SIG] [--quiet-s S] [--answer
    raw|summary] [--samples K]``: the options of :func:`probe_main`, parsed here with argparse
    (``python -m hpc_hangkit slurm-probe`` reaches this without loading the CLI: the probe runs
    on every node at every poll, and its interpreter start is most of its cost). Returns
    probe_main's status; exits 2 (argparse) on a bad option."""
    import argparse

    def samples_k(text):
        k = int(text)
        if not 1 <= k <= 1000:
            raise argparse.ArgumentTypeError("%d is not in the range 1<=x<=1000" % k)
        return k

    ap = argparse.ArgumentParser(prog="hpc-hangkit slurm-probe",
                                 description="Internal (srun --overlap on each node): print this node's "
                                             "answer for the batch-step monitor (framed lines).")
    ap.add_argument("--scratch", required=True, help="the job attempt's node scratch")
    ap.add_argument("--sample-signal", default=None, help="first ask quiet ranks for a watchdog dump with this signal")
    ap.add_argument("--quiet-s", type=float, default=1.0, help="seconds without a check-in that make a rank quiet")
    ap.add_argument("--answer", choices=ANSWERS, default="raw",
                    help="raw: the rank files' tails; summary: the node summary and per-rank facts")
    ap.add_argument("--samples", type=samples_k, default=5, help="K of the node summary's modal position")
    a = ap.parse_args(argv)
    return probe_main(a.scratch, sample_signal=a.sample_signal, quiet_s=a.quiet_s, answer=a.answer,
                      samples=a.samples)


def doc_files(d: dict) -> Dict[str, dict]:
    """The rank files of one raw ``slurm-probe`` answer ``d``: ``{rel: {"size", "offset",
    "data"}}``; a heartbeat's entry also holds ``liveness`` (``[state, seen]``) when its node
    said it."""
    got = decode_files(d.get("files") if isinstance(d.get("files"), dict) else {})
    lv = d.get("liveness")
    for rel, pair in (lv.items() if isinstance(lv, dict) else ()):
        if rel in got and isinstance(pair, list) and len(pair) == 2:
            got[rel]["liveness"] = pair
    return got


def probe_files(text: str) -> Dict[str, dict]:
    """The rank files of the framed raw ``slurm-probe`` answers in ``text`` (srun output),
    merged (:func:`doc_files` of each)."""
    files: Dict[str, dict] = {}
    for d in parse_docs(text):
        files.update(doc_files(d))
    return files


# --------------------------------------------------------------------------- the view


class View:
    """A private directory mirroring every node's rank files (``watchdog/``,
    ``heartbeats/``), so that one StackSource and one roll call see all ranks.

    Watchdog logs are mirrored by appending the new bytes, so a mirrored log
    grows exactly as its original (a gap, when more than the probe tail was
    written between two probes, shows as one torn dump that the parser skips
    with a warning)."""

    def __init__(self, path: str):
        self.path = path
        self.sizes: Dict[str, int] = {}      # rel -> original size mirrored so far
        #: heartbeat file name -> the liveness of its process, as its node's probe said
        self.liveness: Dict[str, Liveness] = {}
        for sub in (layout.WATCHDOG_DIR, layout.HEARTBEAT_DIR):
            os.makedirs(os.path.join(path, sub), exist_ok=True)

    def apply(self, files: Mapping[str, dict]) -> int:
        """Mirror ``files`` (from :func:`rank_files`); returns how many changed."""
        n = 0
        for rel, f in files.items():
            sub, _, name = rel.partition("/")
            if sub not in (layout.WATCHDOG_DIR, layout.HEARTBEAT_DIR) or "/" in name \
                    or not layout.parse_rank_file_name(name):
                continue
            dst = os.path.join(self.path, sub, name)
            size, off, data = f["size"], f["offset"], f["data"]
            if sub == layout.HEARTBEAT_DIR:
                lv = f.get("liveness")
                if isinstance(lv, list) and len(lv) == 2 and lv[0] in (ALIVE, GONE, ENDED, UNKNOWN):
                    self.liveness[name] = Liveness(lv[0], str(lv[1]))
                fsio.write_atomic(dst, data)
                n += 1
                continue
            have = self.sizes.get(rel, 0)
            if size == have:
                continue
            if size < have or off > have:
                # rewritten, or a gap: keep what we have, append the newest bytes
                pass
            new = data[max(0, have - off):] if off <= have else data
            with open(dst, "ab") as fh:
                fh.write(new)
            self.sizes[rel] = size
            n += 1
        return n

    def apply_summary(self, host: str, summary: dict) -> str:
        """Keep ``summary`` (a node's summary answer) as ``nodes/<host>.summary.json``, replacing
        that node's previous one; the roll call over the view merges it. A summary without
        ``taken_at`` (from a node whose probe does not stamp it) is stamped now, when it
        enters the view, so that its age is still known at later polls. Returns the path.
        Raises ValueError for a host name unfit for a file name, OSError when it cannot write."""
        import json

        from hpc_hangkit.rollcall.facts import SUMMARY_SUFFIX
        if not layout.HOST_RE.match(host) or ".." in host:
            raise ValueError("invalid node name %r" % (host,))
        d = os.path.join(self.path, NODES_DIR)
        os.makedirs(d, exist_ok=True)
        out = os.path.join(d, host + SUMMARY_SUFFIX)
        if "taken_at" not in summary:
            summary = dict(summary, taken_at=round(time.time(), 3))
        fsio.write_atomic(out, json.dumps(summary, separators=(",", ":")).encode())
        return out
