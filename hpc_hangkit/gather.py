"""One capture over a job's nodes, and the node's answer to it.

The batch-step monitor (on a confirmed hang) and ``hpc-hangkit collect JOBID``
(on a running job) both capture the same way: one ``srun --overlap`` step
runs ``hpc-hangkit slurm-capture`` on the nodes (:func:`capture_main` is its
node side: on-demand dumps, py-spy, Flight Recorder, nvidia-smi, copies of
the rank files, all into that node's ``<scratch>/hang_detector/``, which the
epilog later stores), each node prints what it captured (srun framing,
:mod:`hpc_hangkit.wire`), and :func:`capture_job` merges every answer into one
local ``hang_detector`` tree. Two copies of one file meet under the one rule of
:func:`hpc_hangkit.capture.whyfile.choose` (real output beats a why-file, a
longer copy beats its prefix, really different output is kept under
:func:`~hpc_hangkit.capture.whyfile.alt_name`).
"""
import logging
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional

from hpc_hangkit import fsio, layout
from hpc_hangkit.capture.whyfile import KEEP, choose, is_why_data, merge_file
from hpc_hangkit.wire import decode_files, emit_doc, encode_files, parse_docs

log = logging.getLogger("hpc_hangkit.gather")

#: bytes of each captured file a node's answer holds (the end of a longer file)
CAPTURE_FILE_MAX = 4 * 1024 * 1024
#: seconds the srun step of a capture may take
CAPTURE_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------- node side

def read_tail(dir_fd: int, name: str, since: int, tail: int):
    """``(size, data, offset)`` of the regular file ``name`` under ``dir_fd``: ``data`` is the
    file from byte ``offset = max(since, size - tail, 0)`` (from the end at most ``tail``
    bytes; ``since`` past the end counts as 0). Never follows a symlink (O_NOFOLLOW) nor
    blocks on a fifo. Raises OSError, also for anything but a regular file."""
    fd, st = fsio.open_regular(dir_fd, name)
    try:
        size = st.st_size
        start = max(since if since <= size else 0, size - tail, 0)
        os.lseek(fd, start, 0)
        chunks, left = [], size - start
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return size, b"".join(chunks), start
    finally:
        os.close(fd)


def captured_files(hd_dir: str) -> Dict[str, dict]:
    """Every regular file under ``hd_dir`` (not following symlinks; the monitor's log,
    events and report left out) as ``{rel: {"size", "offset", "data" (bytes)}}``, at most
    :data:`CAPTURE_FILE_MAX` bytes of each (its end). Unreadable files are skipped."""
    out = {}
    skip = {layout.EVENTS_FILE, layout.REPORT_TXT, layout.REPORT_JSON, layout.MONITOR_LOG}
    for root, dirs, files in os.walk(hd_dir):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        for name in files:
            p = os.path.join(root, name)
            rel = os.path.relpath(p, hd_dir)
            if rel in skip:
                continue
            try:
                dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
                try:
                    size, data, off = read_tail(dfd, name, 0, CAPTURE_FILE_MAX)
                finally:
                    os.close(dfd)
            except OSError:
                continue
            out[rel] = {"size": size, "offset": off, "data": data}
    return out


def real_outputs(hd_dir: str) -> Dict[str, bytes]:
    """``{rel: bytes}`` of the captured files under ``hd_dir`` that hold real output (not
    why-files, not rank files, whole), taken before a capture so that
    :func:`restore_real_outputs` can apply the one rule to what the capture wrote."""
    rank_dirs = (layout.WATCHDOG_DIR + "/", layout.HEARTBEAT_DIR + "/", layout.EXITS_DIR + "/",
                 layout.VANISHED_DIR + "/")
    return {rel: f["data"] for rel, f in captured_files(hd_dir).items()
            if not rel.startswith(rank_dirs) and f["offset"] == 0 and not is_why_data(f["data"])}


def restore_real_outputs(hd_dir: str, before: Mapping[str, bytes]) -> List[str]:
    """After a capture: put back every file of ``before`` (:func:`real_outputs`) that
    :func:`~hpc_hangkit.capture.whyfile.choose` keeps over what the capture wrote there (a
    rank whose py-spy worked at the first capture and fails at the next keeps its real
    dump). Returns the restored names (relative to ``hd_dir``)."""
    restored = []
    for rel, data in before.items():
        p = os.path.join(hd_dir, rel)
        try:
            now = fsio.read_regular(p)
        except OSError:
            continue
        if choose(data, now) != KEEP:
            continue
        fsio.write_atomic(p, data)
        restored.append(rel)
        log.info("kept the earlier real %s (this capture only got: %s)", rel,
                 now[:200].decode("utf-8", "replace").strip())
    return restored


#: the longest a capture waits for its ``at`` moment (seconds)
MAX_AT_WAIT_S = 30.0


def wait_until(at: Optional[float], clock: Callable[[], float] = time.time,
               sleep: Callable[[float], None] = time.sleep) -> float:
    """Sleep until the epoch time ``at`` (seconds; None or past: no wait), at most
    :data:`MAX_AT_WAIT_S`; returns the seconds waited. So that every node of a job takes its
    snapshot at one moment, whatever each srun took to start there."""
    if at is None:
        return 0.0
    left = min(at - clock(), MAX_AT_WAIT_S)
    if left > 0:
        sleep(left)
        return left
    return 0.0


def capture_here(settings, scratch: str, hd_dir: str, suspects=(), at: Optional[float] = None):
    """Capture this node's live ranks of the attempt scratch ``scratch`` into ``hd_dir``
    (:func:`hpc_hangkit.capture.orchestrator.capture`), never losing real output of an earlier capture
    (:func:`restore_real_outputs`). ``suspects``: the job's suspect ranks when known (they get
    ``py-spy --native``); ``at``: epoch seconds to start at (:func:`wait_until`, the moment
    every node of the job was given). Returns the
    :class:`hpc_hangkit.capture.orchestrator.CaptureResult`."""
    from hpc_hangkit.capture.orchestrator import CaptureContext, capture
    from hpc_hangkit.capture.ranks import discover_ranks

    ctx = CaptureContext(settings, scratch, hd_dir, discover_ranks(scratch),
                         suspects=sorted(int(r) for r in suspects or ()), roll_call=roll_call_under(settings))
    wait_until(at)
    before = real_outputs(hd_dir)
    res = capture(ctx)
    restore_real_outputs(hd_dir, before)
    return res


def roll_call_under(settings):
    """The roll call over a directory under ``settings`` (its ``stack_samples``), for the
    capture's sampling plan."""
    def roll_call(path):
        from hpc_hangkit.rollcall import report_from_dir
        return report_from_dir(path, settings)
    return roll_call


def capture_main(settings, scratch: str, out=None, suspects=(), at: Optional[float] = None) -> int:
    """``hpc-hangkit slurm-capture``: capture this node's live ranks into
    ``<scratch>/hang_detector/`` (the epilog collects it) and print (framed,
    :func:`hpc_hangkit.wire.emit_doc`, to ``out``, default stdout) ``{"host", "problems",
    "seconds", "files"}`` for :func:`capture_job`. ``suspects``/``at``: see
    :func:`capture_here`. Runs inside the job as its user. Returns 0."""
    out = out or sys.stdout
    hd = os.path.join(scratch, layout.HANG_DETECTOR_DIR)
    res = capture_here(settings, scratch, hd, suspects=suspects, at=at)
    emit_doc({"host": socket.gethostname(), "problems": res.problems,
              "seconds": round(res.seconds, 3), "files": encode_files(captured_files(hd))}, out)
    return 0


# --------------------------------------------------------------------------- the fan-out

@dataclass
class Gathered:
    """What :func:`capture_job` merged: ``files`` written under the tree, ``hosts`` that
    answered (short names, in answer order), ``notes`` (one line each: a node's capture
    problems, unsafe names, nodes that did not answer), ``missing`` (asked nodes without
    an answer), ``error`` (the :class:`hpc_hangkit.slurmjob.SlurmError` when the srun
    step itself failed, else None)."""
    files: int = 0
    hosts: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    error: Optional[Exception] = None


def merge_answers(text: str, hd_root: str, into: Optional[Gathered] = None) -> Gathered:
    """Merge the files of the framed ``slurm-capture`` answers in ``text`` (srun output)
    into the local tree ``hd_root`` (what is there already, e.g. this node's own capture,
    takes part), one file at a time by :func:`~hpc_hangkit.capture.whyfile.merge_file`.
    Names are checked first (:func:`hpc_hangkit.layout.split_rel`; a leading
    ``hang_detector/`` is dropped): an unsafe one is noted and ignored. Returns ``into``
    (or a new :class:`Gathered`) with ``files``, ``hosts`` and ``notes`` added. Raises
    OSError if ``hd_root`` cannot be written."""
    g = into if into is not None else Gathered()
    for doc in parse_docs(text):
        host = str(doc.get("host") or "unknown").split(".")[0]
        g.hosts.append(host)
        for pr in doc.get("problems") or []:
            g.notes.append("node %s: %s" % (host, pr))
        for rel, f in sorted(decode_files(doc.get("files") or {}).items()):
            try:
                parts = layout.split_rel(rel)
            except ValueError:
                g.notes.append("node %s sent an unsafe name %r; ignored" % (host, rel))
                continue
            if parts[0] == layout.HANG_DETECTOR_DIR:
                parts = parts[1:]
            if parts and merge_file(os.path.join(hd_root, *parts), f["data"], host):
                g.files += 1
    return g


def capture_job(job_id: str, nodes: List[str], scratch: str, bin_argv: List[str], hd_root: str,
                *, timeout_s: float = CAPTURE_TIMEOUT_S,
                local: Optional[Callable[[], object]] = None, suspects=(),
                at: Optional[float] = None) -> Gathered:
    """Capture on the job's ``nodes`` at once and merge every answer under ``hd_root``.

    One ``srun --overlap`` step (:func:`hpc_hangkit.slurmjob.srun_overlap`, bounded
    by ``timeout_s`` seconds) runs ``bin_argv + ["slurm-capture", "--scratch", scratch]``
    on ``nodes`` (the attempt scratch path is the same on every node); ``local``, if given,
    runs meanwhile in this thread (this node's own capture into ``hd_root``). The answers
    are merged after both (:func:`merge_answers`). ``suspects`` (the job's suspect ranks) and
    ``at`` (epoch seconds: when every node starts its snapshot, so the samples are taken
    together) go to each node's ``slurm-capture``. Returns :class:`Gathered`; a failed srun
    step is in ``error`` (and a note), never raised.
    """
    from hpc_hangkit import slurmjob as slurm

    got: Dict[str, object] = {}
    argv = ["slurm-capture", "--scratch", scratch]
    if suspects:
        argv += ["--suspects", ",".join(str(int(r)) for r in sorted(suspects))]
    if at is not None:
        argv += ["--at", "%.3f" % at]

    def _remote():
        try:
            got["proc"] = slurm.srun_overlap(job_id, nodes, list(bin_argv) + argv, timeout=timeout_s)
        except slurm.SlurmError as e:
            got["error"] = e

    t = None
    if nodes:
        if local is None:
            _remote()
        else:
            t = threading.Thread(target=_remote, daemon=True)
            t.start()
    if local is not None:
        local()
    if t is not None:
        t.join(timeout_s + 10)
    g = Gathered(error=got.get("error"))
    os.makedirs(hd_root, exist_ok=True)
    p = got.get("proc")
    if g.error is not None:
        g.notes.append("capture on %s failed: %s" % (",".join(nodes), g.error))
    if p is not None:
        merge_answers(p.stdout.decode("utf-8", "replace"), hd_root, g)
    g.missing = [h for h in nodes if h.split(".")[0] not in g.hosts]
    if g.missing and p is not None:
        err = p.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        g.notes.append("no answer from node(s) %s (srun exit %d%s)" % (
            ",".join(g.missing), p.returncode, (": " + " | ".join(err)) if err else ""))
    return g
