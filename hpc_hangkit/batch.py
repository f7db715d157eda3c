"""The Slurm batch-step monitor (``hpc-hangkit slurm-monitor``), and its node-side helpers.

Started once per job by the SPANK plugin, in the batch step, as the job's user,
as a child of the batch script (it gets SIGTERM when the batch script ends, and
also stops when its parent is gone). It runs the same
:class:`hpc_hangkit.monitor.Monitor` and :class:`hpc_hangkit.detector.Detector`
as ``hpc-hangkit run``, with Slurm sources:

- **stacks** (:class:`SlurmStackSource`): the heartbeats and watchdog dumps of
  the ranks. Every poll reads this node's scratch (``$HANGKIT_SCRATCH_DIR``);
  when nothing progressed here, it also probes the job's other nodes with one
  ``srun --overlap --jobid J`` step (``hpc-hangkit slurm-probe`` on each node,
  which prints the tails of that node's rank files) - on suspicion, never on a
  poll where this node already shows progress. Everything is mirrored into one
  private view directory, and :class:`hpc_hangkit.monitor.StackSource` decides
  (progress anywhere -> not stalled; ranks disagree -> stalled).
- **sstat** step counters (CPU seconds, disk bytes per step, via
  :func:`hpc_hangkit.slurm.step_stats`) ride along in the detail of every
  stalled poll as evidence, and tell whether any step is running at all. They
  never reset the detector on their own: a rank blocked in a busy-waiting
  collective burns CPU, and a rank's own stall dumps are disk writes.
- **RAS** (:class:`hpc_hangkit.ras.RasSource`) when ``ncclras`` is configured
  and present.

On a confirmed hang: capture on every node at once (in-process here,
``srun --overlap`` running ``hpc-hangkit slurm-capture`` on the other nodes,
which returns what it captured), the roll call over the combined tree
(``<scratch>/hang_detector/report.txt`` / ``report.json``), then by mode:

- ``observe``: log the report path; the job keeps running.
- ``fail``: requeue (``scontrol requeue``) if allowed: a batch job with
  Requeue=1, this hang is not a *repeat* (the same suspect ranks at the same
  place as the previous attempt), and fewer than ``max_hang_requeues`` hang
  requeues were made. hpc-hangkit's own count lives in
  ``<storage_url>/<job_id>/hangkit_requeue.json`` (or
  ``~/.hpc-hangkit/jobs/<job_id>/`` without storage), not in
  SLURM_RESTART_COUNT, which also counts preemption and node failure. When a
  requeue is not allowed, the job is ended (``scancel``) with the reason and the
  report path in its output, and its Comment set to
  ``hpc-hangkit: hang confirmed, not requeued: <reason>; report: <path>`` (how a
  script tells this apart from any other cancel; a monitor failure never ends a job).

Every attempt's ``report.txt``/``report.json`` is also copied to
``<storage_url>/<job_id>/attempt_<n>/hang_detector/`` right after capture, so the
next attempt and the user see it before any epilog runs.

Log: ``<scratch>/hang_detector/monitor.log`` (INFO and up) and the job's stderr
(WARNING and up). The monitor writes with umask 077.
"""
import base64
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from hpc_hangkit import layout
from hpc_hangkit import slurm
from hpc_hangkit.capture import is_why_data

log = logging.getLogger("hpc_hangkit.batch")

#: name prefix of the monitor's private view directory in the job scratch (the
#: epilog skips it: it only holds copies of other nodes' rank files)
MONITOR_VIEW_PREFIX = ".monitor_view."
#: bytes of each watchdog log a probe returns (the newest dumps)
PROBE_TAIL_BYTES = 64 * 1024
#: bytes of each captured file a remote capture returns
CAPTURE_FILE_MAX = 4 * 1024 * 1024
PROBE_TIMEOUT_S = 60.0
CAPTURE_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------- node side

def _read_tail(dir_fd: int, name: str, since: int, tail: int) -> Tuple[int, bytes, int]:
    """(size, bytes from max(since, size - tail), offset of those bytes); never follows a symlink."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not (st.st_mode & 0o170000 == 0o100000):
            raise OSError("not a regular file")
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
            for name in sorted(os.listdir(dfd)):
                if not layout.parse_rank_file_name(name):
                    continue
                rel = sub + "/" + name
                try:
                    if sub == layout.HEARTBEAT_DIR:
                        size, data, off = _read_tail(dfd, name, 0, 1 << 16)
                    else:
                        old = since.get(rel, 0)
                        try:
                            if os.stat(name, dir_fd=dfd, follow_symlinks=False).st_size == old:
                                continue
                        except OSError:
                            continue
                        size, data, off = _read_tail(dfd, name, old, tail)
                except OSError:
                    continue
                out[rel] = {"size": size, "offset": off, "data": data}
        finally:
            os.close(dfd)
    return out


def encode_files(files: Dict[str, dict]) -> dict:
    """``{rel: {"size", "offset", "data" (bytes)}}`` (from :func:`rank_files`) as JSON-able
    ``{rel: {"size", "offset", "b64"}}`` (data base64-encoded), for :func:`emit_doc`."""
    return {rel: {"size": f["size"], "offset": f["offset"],
                  "b64": base64.b64encode(f["data"]).decode("ascii")} for rel, f in files.items()}


def decode_files(files: Mapping[str, dict]) -> Dict[str, dict]:
    """The inverse of :func:`encode_files`: ``{rel: {"size", "offset", "data" (bytes)}}``.
    Entries with a missing or malformed field (a node's answer is untrusted) are
    skipped; never raises for bad entries."""
    out = {}
    for rel, f in files.items():
        try:
            out[rel] = {"size": int(f["size"]), "offset": int(f["offset"]),
                        "data": base64.b64decode(f["b64"])}
        except (KeyError, TypeError, ValueError):
            continue
    return out


def probe_main(scratch: str, out=None) -> int:
    """``hpc-hangkit slurm-probe``: print (framed, :func:`emit_doc`) this node's rank files
    (tails), for the batch-step monitor. Runs inside the job as its user."""
    out = out or sys.stdout
    emit_doc({"host": socket.gethostname(), "files": encode_files(rank_files(scratch))}, out)
    return 0


def _captured_files(hd_dir: str) -> Dict[str, dict]:
    """Every regular file under ``hd_dir`` (not following symlinks), at most CAPTURE_FILE_MAX bytes each."""
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
                    size, data, off = _read_tail(dfd, name, 0, CAPTURE_FILE_MAX)
                finally:
                    os.close(dfd)
            except OSError:
                continue
            out[rel] = {"size": size, "offset": off, "data": data}
    return out


def _real_outputs(hd_dir: str) -> Dict[str, bytes]:
    """``{rel: bytes}`` of the captured files under ``hd_dir`` that hold real output
    (not why-files), to be kept if a later capture can only write a why-file."""
    rank_dirs = (layout.WATCHDOG_DIR + "/", layout.HEARTBEAT_DIR + "/")
    return {rel: f["data"] for rel, f in _captured_files(hd_dir).items()
            if not rel.startswith(rank_dirs) and f["offset"] == 0 and not is_why_data(f["data"])}


def _restore_real_outputs(hd_dir: str, before: Mapping[str, bytes]) -> List[str]:
    """Put back every file of ``before`` that a capture replaced by a why-file (a rank
    whose py-spy worked at the first capture and fails at the next keeps its real
    dump). Returns the restored names."""
    restored = []
    for rel, data in before.items():
        p = os.path.join(hd_dir, rel)
        try:
            with open(p, "rb") as f:
                now = f.read(4096)
        except OSError:
            continue
        if is_why_data(now):
            tmp = p + ".tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, p)
            restored.append(rel)
            log.info("kept the earlier real %s (this capture only got: %s)", rel,
                     now.decode("utf-8", "replace").strip())
    return restored


def merge_captured(dst: str, data: bytes) -> bool:
    """Write a captured file another node sent at ``dst`` unless a file is there already;
    a why-file there is replaced by real output, real output is never replaced by
    a why-file (nor by another node's copy). Returns True if written."""
    if os.path.lexists(dst):
        try:
            with open(dst, "rb") as f:
                have = f.read(4096)
        except OSError:
            return False
        if not (is_why_data(have) and not is_why_data(data)) or os.path.islink(dst):
            return False
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, dst)
    return True


def capture_main(settings, scratch: str, out=None) -> int:
    """``hpc-hangkit slurm-capture``: capture this node's live ranks into
    ``<scratch>/hang_detector/`` (the epilog collects it) and print (framed) the captured files, for the batch-step monitor's roll call."""
    from hpc_hangkit.capture import CaptureContext, capture, discover_ranks
    out = out or sys.stdout
    hd = os.path.join(scratch, layout.HANG_DETECTOR_DIR)
    ctx = CaptureContext(settings, scratch, hd, discover_ranks(scratch))
    before = _real_outputs(hd)
    res = capture(ctx)
    _restore_real_outputs(hd, before)
    emit_doc({"host": socket.gethostname(), "problems": res.problems,
              "seconds": round(res.seconds, 3), "files": encode_files(_captured_files(hd))}, out)
    return 0


#: line prefix of a framed document (see :func:`emit_doc`)
DOC_TAG = "hpc-hangkit-doc"
#: characters of payload per framed line: srun splits longer output lines
DOC_CHUNK = 400


def emit_doc(doc: dict, out) -> None:
    """Write ``doc`` as short framed lines ``hpc-hangkit-doc <id> <i>/<n> <chunk>``
    (JSON, zlib, base64), because ``srun`` cuts long output lines into pieces."""
    import zlib
    data = base64.b64encode(zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)).decode()
    did = "%s.%d.%s" % (socket.gethostname(), os.getpid(), os.urandom(4).hex())
    n = max(1, (len(data) + DOC_CHUNK - 1) // DOC_CHUNK)
    for i in range(n):
        out.write("%s %s %d/%d %s\n" % (DOC_TAG, did, i + 1, n, data[i * DOC_CHUNK:(i + 1) * DOC_CHUNK]))
    out.flush()


def parse_docs(text: str) -> List[dict]:
    """The documents framed by :func:`emit_doc` in ``srun`` output (with or without
    ``-l`` labels, lines of several nodes interleaved). Incomplete or corrupt
    documents are skipped with a warning."""
    import zlib
    parts: Dict[str, Dict[int, str]] = {}
    total: Dict[str, int] = {}
    for line in text.splitlines():
        i = line.find(DOC_TAG + " ")
        if i < 0:
            continue
        f = line[i:].split()
        if len(f) != 4 or "/" not in f[2]:
            continue
        k, n = f[2].split("/", 1)
        if not (k.isdigit() and n.isdigit()):
            continue
        parts.setdefault(f[1], {})[int(k)] = f[3]
        total[f[1]] = int(n)
    docs = []
    for did, got in parts.items():
        n = total[did]
        if len(got) != n:
            log.warning("incomplete answer from %s (%d of %d lines)", did, len(got), n)
            continue
        try:
            raw = zlib.decompress(base64.b64decode("".join(got[i] for i in range(1, n + 1))))
            docs.append(json.loads(raw.decode("utf-8")))
        except (ValueError, KeyError, zlib.error) as e:
            log.warning("corrupt answer from %s: %s", did, e)
    return docs


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
                tmp = dst + ".tmp"
                with open(tmp, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, dst)
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


# --------------------------------------------------------------------------- sources

class SlurmStackSource:
    """Key ``"stacks"``: StackSource over the :class:`View` of every node's rank files.

    ``probe(nodes) -> {rel: file}`` fetches the other nodes' rank files (default:
    one ``srun --overlap`` step); ``stats() -> [StepStat]`` gives sstat counters.
    """

    name = "stacks"
    key = "stacks"

    def __init__(self, scratch: str, view: View, other_nodes: List[str], probe=None,
                 stats=None, samples: int = 5, world_size: Optional[int] = None,
                 idle_probe_s: float = 30.0):
        from hpc_hangkit.monitor import StackSource
        self.scratch = scratch
        self.view = view
        self.other_nodes = list(other_nodes)
        self.probe = probe
        self.stats = stats
        self.inner = StackSource(view.path, samples=samples, world_size=world_size)
        self.probes = 0
        #: seconds between probes; the monitor raises it after a confirmation
        self.min_probe_interval_s = 0.0
        #: seconds between probes while this node has no rank data at all
        self.idle_probe_interval_s = idle_probe_s
        self._last_probe = None
        self._last_stats: Dict[str, object] = {}

    def rollcall(self, det=None):
        return self.inner.rollcall(det)

    def _step_evidence(self) -> Optional[dict]:
        if self.stats is None:
            return None
        try:
            cur = {s.step: s for s in self.stats()}
        except Exception as e:  # sstat trouble is evidence lost, not a monitor failure
            return {"error": str(e)}
        ev = {}
        for step, s in sorted(cur.items()):
            p = self._last_stats.get(step)
            ev[step] = {"ntasks": s.ntasks, "cpu_s": round(s.cpu_s, 2),
                        "cpu_delta_s": round(s.cpu_s - p.cpu_s, 2) if p else None,
                        "read_delta_bytes": (s.read_bytes - p.read_bytes) if p else None,
                        "write_delta_bytes": (s.write_bytes - p.write_bytes) if p else None}
        self._last_stats = cur
        return ev

    def poll(self, now: float):
        self.view.apply(rank_files(self.scratch, since=self.view.sizes))
        ans = self.inner.poll(now)
        local = ans.get(self.key)
        # probe on suspicion: nothing moved here; with no rank data here at all
        # (no armed rank on this node), only every idle_probe_interval_s
        interval = self.min_probe_interval_s if local is not None else max(
            self.min_probe_interval_s, self.idle_probe_interval_s)
        quiet = local is None or local[0] or not local[1].progressed
        due = self._last_probe is None or now - self._last_probe >= interval
        if self.other_nodes and self.probe is not None and quiet and due:
            files = self.probe(self.other_nodes)
            self.probes += 1
            self._last_probe = now
            if files:
                self.view.apply(files)
                ans = self.inner.poll(now)   # remote progress, or the roll call over all ranks
        got = ans.get(self.key)
        if got is not None and got[0]:
            steps = self._step_evidence()
            if steps is not None:
                got[1].steps = steps
                if not any(k.split(".")[-1] not in ("batch", "extern") for k in steps
                           if k != "error") and "error" not in steps:
                    # no user step is running: nothing to be hung
                    log.info("no job step is running (sstat): not a hang")
                    return {self.key: (False, got[1])}
        return ans


class RasOnRankNode:
    """The NCCL RAS source (:class:`hpc_hangkit.ras.RasSource`, writing its JSON history
    under the ``hang_detector`` directory) run where a rank is: ``ncclras`` talks to the
    RAS service of an NCCL process on its own node, so while this (batch) node holds
    no rank of the job (no heartbeat file in its scratch), each query goes through
    ``remote_prefix`` (``srun --overlap`` on another node of the job); as soon as a
    rank is here, it runs locally (no job step per poll). Everything else is the
    wrapped source's."""

    def __init__(self, inner, scratch: str, remote_prefix: List[str]):
        self.inner = inner
        self.scratch = scratch
        self.remote_prefix = list(remote_prefix)
        self.local_ranks = False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def poll(self, now: float):
        if not self.local_ranks:
            try:
                self.local_ranks = any(layout.parse_rank_file_name(n) for n in
                                       os.listdir(os.path.join(self.scratch, layout.HEARTBEAT_DIR)))
            except OSError:
                pass
            self.inner.client.prefix = [] if self.local_ranks else list(self.remote_prefix)
        return self.inner.poll(now)


def srun_probe(job_id: str, scratch: str, bin_argv: List[str]):
    """A probe function for :class:`SlurmStackSource`: one ``srun --overlap`` step running
    ``hpc-hangkit slurm-probe`` on the given nodes; returns the merged rank files."""
    def _probe(nodes: List[str]) -> Dict[str, dict]:
        try:
            p = slurm.srun_overlap(job_id, nodes, bin_argv + ["slurm-probe", "--scratch", scratch],
                                   timeout=PROBE_TIMEOUT_S)
        except slurm.SlurmError as e:
            log.info("probe of %s failed: %s", ",".join(nodes), e)
            return {}
        files: Dict[str, dict] = {}
        docs = parse_docs(p.stdout.decode("utf-8", "replace"))
        for d in docs:
            files.update(decode_files(d.get("files", {})))
        if len(docs) < len(nodes):
            log.info("probe: %d of %d node(s) answered (%s)", len(docs), len(nodes),
                        p.stderr.decode("utf-8", "replace").strip()[-300:])
        return files
    return _probe


# --------------------------------------------------------------------------- requeue policy

def signature(report) -> dict:
    """Where a hang is: ``{"verdict", "suspect_ranks", "where"}`` from a roll-call Report.

    ``where``: sorted ``file:line function (in collective)`` of the user frame
    (roll-call group ``frame``) of every group that holds a suspect rank: the
    place the suspects stand. File names are base names, so a job that moved
    its checkout still repeats.
    """
    d = report.to_dict() if hasattr(report, "to_dict") else dict(report or {})
    sus = sorted(int(r) for r in (d.get("suspect_ranks") or []))
    where = []
    for g in d.get("groups") or []:
        ranks = g.get("ranks") or []
        if isinstance(ranks, str):
            from hpc_hangkit.ranges import parse_ranks
            ranks = parse_ranks(ranks)
        if not set(int(r) for r in ranks) & set(sus):
            continue
        fr = g.get("frame") or g.get("position") or {}
        if isinstance(fr, dict):
            pos = "%s:%s %s" % (os.path.basename(str(fr.get("file", "?"))), fr.get("line", "?"),
                                fr.get("function", ""))
        else:
            pos = str(fr)
        if g.get("collective"):
            pos += " (in %s)" % g["collective"]
        where.append(str(pos))
    return {"verdict": d.get("verdict"), "suspect_ranks": sus, "where": sorted(where)}


@dataclass(frozen=True)
class Decision:
    """``action``: ``keep`` (observe: the job runs on), ``requeue`` or ``end``; ``reason``: one sentence."""
    action: str
    reason: str


def decide(mode: str, requeue_flag: bool, batch: bool, state: dict, sig: dict, attempt: int,
           max_hang_requeues: int) -> Decision:
    """The requeue rule, pure. ``state``: the requeue state (``hang_requeues`` int,
    ``hangs`` list of ``{"attempt", "signature"}``) before this hang."""
    if mode != "fail":
        return Decision("keep", "observe mode: hang reported, the job keeps running")
    if not batch:
        return Decision("end", "not requeued: only batch jobs are requeued")
    if not requeue_flag:
        return Decision("end", "not requeued: the job does not allow requeue "
                               "(submitted with --no-requeue, or JobRequeue=0 on this cluster)")
    prev = [h for h in state.get("hangs", []) if int(h.get("attempt", -1)) < attempt]
    if prev:
        p = prev[-1]
        ps = p.get("signature") or {}
        if ps.get("suspect_ranks") == sig.get("suspect_ranks") and ps.get("where") == sig.get("where"):
            return Decision("end", "not requeued: repeat - rank(s) %s hang at the same place as in "
                                   "attempt %s (%s)" % (_ranks(sig), p.get("attempt"),
                                                        "; ".join(sig.get("where") or []) or "?"))
    used = int(state.get("hang_requeues", 0))
    if used >= max_hang_requeues:
        return Decision("end", "not requeued: the hang-requeue budget is spent (%d of %d used)"
                        % (used, max_hang_requeues))
    return Decision("requeue", "requeueing: hang requeue %d of %d" % (used + 1, max_hang_requeues))


def _ranks(sig: dict) -> str:
    from hpc_hangkit.ranges import format_ranks
    return format_ranks(sig.get("suspect_ranks") or []) or "?"


def state_url(settings, job_id: str, env: Mapping[str, str]) -> str:
    """Where the hang-requeue count lives: ``<storage_url>/<job_id>/hangkit_requeue.json``,
    or ``~/.hpc-hangkit/jobs/<job_id>/hangkit_requeue.json`` without storage."""
    base = getattr(settings, "storage_url", None)
    if base:
        try:
            from hpc_hangkit.collect import expand_storage_url
            base = expand_storage_url(base, env.get("SLURM_JOB_USER") or env.get("USER"))
        except ImportError:
            pass
        return "%s/%s/%s" % (base.rstrip("/"), job_id, layout.REQUEUE_STATE_FILE)
    home = env.get("HOME") or os.path.expanduser("~")
    return "file://%s/.hpc-hangkit/jobs/%s/%s" % (home, job_id, layout.REQUEUE_STATE_FILE)


def load_state(url: str) -> dict:
    """The requeue state at ``url`` (fsspec); ``{}`` if there is none. A corrupt file is
    reported and treated as empty."""
    import fsspec
    fs, path = fsspec.core.url_to_fs(url)
    try:
        with fs.open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (ValueError, OSError) as e:
        log.warning("cannot read the requeue state %s (%s); starting from zero", url, e)
        return {}


def save_state(url: str, state: dict) -> None:
    """Write the requeue state (fsspec); raises OSError if storage refuses."""
    import fsspec
    fs, path = fsspec.core.url_to_fs(url)
    parent = path.rsplit("/", 1)[0]
    try:
        fs.makedirs(parent, exist_ok=True)
    except Exception:
        pass
    with fs.open(path, "wb") as f:
        f.write(json.dumps(state, indent=1, sort_keys=True).encode("utf-8"))


# --------------------------------------------------------------------------- the monitor

class BatchMonitor:
    """One job's monitor: sources, detector, capture fan-out, report, requeue.

    ``env``: the batch step's environment (SLURM_JOB_ID, HANGKIT_SCRATCH_DIR, ...);
    ``bin_argv``: how to run ``hpc-hangkit`` on the other nodes.
    """

    def __init__(self, settings, env: Mapping[str, str], bin_argv: List[str]):
        self.settings = settings
        self.env = env
        self.bin_argv = bin_argv
        self.job_id = slurm.validate_job_id(env["SLURM_JOB_ID"])
        self.attempt = slurm.attempt_from_env(env)
        self.scratch = env.get(layout.ENV_SCRATCH_DIR) or layout.job_scratch_dir(
            settings.scratch_dir, self.job_id, self.attempt)
        if not self.scratch.rstrip("/").endswith("/attempt_%d" % self.attempt):
            log.warning("HANGKIT_SCRATCH_DIR=%s does not belong to attempt %d", self.scratch,
                        self.attempt)
        self.hd_dir = os.path.join(self.scratch, layout.HANG_DETECTOR_DIR)
        self.host = socket.gethostname()
        nodes = env.get("SLURM_JOB_NODELIST", "")
        self.nodes = slurm.expand_hostlist(nodes) if nodes else [self.host]
        self.others = [n for n in self.nodes if n != self.host]
        ws = env.get("SLURM_NTASKS", "")
        self.world_size = int(ws) if ws.isdigit() else None
        self.done = threading.Event()
        self.view_dir = None
        self.srcs: List[object] = []

    def capture_all(self):
        """Capture on every node at once; the roll call over the combined tree."""
        from hpc_hangkit.capture import CaptureContext, capture, discover_ranks
        remote: Dict[str, dict] = {}

        def _remote():
            try:
                p = slurm.srun_overlap(self.job_id, self.others,
                                       self.bin_argv + ["slurm-capture", "--scratch", self.scratch],
                                       timeout=CAPTURE_TIMEOUT_S)
            except slurm.SlurmError as e:
                log.warning("capture on %s failed: %s", ",".join(self.others), e)
                return
            docs = parse_docs(p.stdout.decode("utf-8", "replace"))
            for d in docs:
                remote.update(decode_files(d.get("files", {})))
                for pr in d.get("problems", []):
                    log.warning("capture on %s: %s", d.get("host"), pr)
            log.info("captured on %d of %d other node(s)", len(docs), len(self.others))

        t = None
        if self.others:
            t = threading.Thread(target=_remote, daemon=True)
            t.start()
        ctx = CaptureContext(self.settings, self.scratch, self.hd_dir, discover_ranks(self.scratch))
        before = _real_outputs(self.hd_dir)
        res = capture(ctx)
        _restore_real_outputs(self.hd_dir, before)
        log.info("captured on %s in %.1f s (%d file(s), %d problem(s))", self.host, res.seconds,
                 len(res.files), len(res.problems))
        if t is not None:
            t.join(CAPTURE_TIMEOUT_S + 10)
        for rel, f in remote.items():
            dst = os.path.normpath(os.path.join(self.hd_dir, rel))
            if not dst.startswith(self.hd_dir + os.sep):
                continue
            merge_captured(dst, f["data"])
        from hpc_hangkit.monitor import write_report
        return write_report(self.hd_dir, self.settings, self.world_size)

    def on_confirmed(self, ev, monitor=None):
        for src in self.srcs:
            if isinstance(src, SlurmStackSource):   # watch for recovery, but probe less often
                src.min_probe_interval_s = float(self.settings.report_every_s)
        rep, text = self.capture_all()
        local = os.path.join(self.hd_dir, layout.REPORT_TXT)
        where = "%s on node %s" % (local, self.host)
        sp = self.publish_report()
        if sp:
            where += " and %s (or run: hpc-hangkit collect %s)" % (sp, self.job_id)
        log.error("HANG CONFIRMED in job %s attempt %d: %s\n%s\nreport: %s", self.job_id,
                  self.attempt, getattr(rep, "verdict", "?"), text.rstrip(), where)
        self.act(rep, where)

    def publish_report(self) -> Optional[str]:
        """Copy report.txt/report.json to ``<storage_url>/<job_id>/attempt_<n>/hang_detector/``
        right away (as the job's user), so the next attempt and the user see this
        attempt's report even before the epilog runs. Returns the URL or None."""
        base = getattr(self.settings, "storage_url", None)
        if not base:
            return None
        try:
            import fsspec
            base = state_url(self.settings, self.job_id, self.env).rsplit("/", 2)[0]
            url = "%s/%s/%s" % (base, layout.storage_attempt_prefix(self.job_id, self.attempt),
                                layout.HANG_DETECTOR_DIR)
            fs, path = fsspec.core.url_to_fs(url)
            fs.makedirs(path, exist_ok=True)
            for name in (layout.REPORT_TXT, layout.REPORT_JSON):
                with open(os.path.join(self.hd_dir, name), "rb") as src, fs.open(path + "/" + name, "wb") as dst:
                    dst.write(src.read())
            return url + "/" + layout.REPORT_TXT
        except Exception as e:  # the epilog copies it later anyway
            log.warning("could not copy the report to storage now (%s); the epilog will", e)
            return None

    def act(self, rep, where: str):
        mode = self.settings.mode
        sig = signature(rep)
        info = None
        if mode == "fail":
            try:
                info = slurm.job_info(self.job_id)
            except (slurm.SlurmError, ValueError) as e:
                log.error("cannot look the job up (%s): not requeued", e)
        url = state_url(self.settings, self.job_id, self.env)
        state = load_state(url) if mode == "fail" else {}
        d = decide(mode, bool(info and info.requeue), bool(info and info.batch) if info else False,
                   state, sig, self.attempt, int(self.settings.max_hang_requeues))
        if d.action == "keep":
            log.warning("hpc-hangkit: %s; report: %s", d.reason, where)
            return
        state.setdefault("hangs", []).append({"attempt": self.attempt, "signature": sig,
                                              "t": round(time.time(), 3), "action": d.action,
                                              "reason": d.reason})
        if d.action == "requeue":
            state["hang_requeues"] = int(state.get("hang_requeues", 0)) + 1
        try:
            save_state(url, state)
        except Exception as e:
            if d.action == "requeue":
                d = Decision("end", "not requeued: cannot record the hang-requeue count at %s (%s)"
                             % (url, e))
        if d.action == "requeue":
            log.error("hpc-hangkit: %s; report of this attempt: %s", d.reason, where)
            self._flush()
            try:
                slurm.requeue(self.job_id)
                return
            except slurm.SlurmError as e:
                # The requeue kills this attempt's processes, scontrol (our child,
                # in the batch step) included, sometimes before its answer
                # arrives: "failed (exit -15)" while the job WAS requeued. Ask
                # Slurm what happened before treating it as refused.
                moved = self._moved_on()
                if moved:
                    log.warning("hpc-hangkit: scontrol requeue ended abnormally (%s) but the job "
                                "was requeued (%s)", e, moved)
                    self._flush()
                    return
                d = Decision("end", "not requeued: scontrol requeue refused: %s" % e)
        moved = self._moved_on()
        if moved:
            # never end a later attempt: this one is already over
            log.error("hpc-hangkit: hang confirmed, %s; not ending the job: %s. Report: %s",
                      d.reason, moved, where)
            self._flush()
            return
        log.error("hpc-hangkit: hang confirmed, %s. Ending the job. Report: %s", d.reason, where)
        self._flush()
        try:
            # the mark that tells "hang confirmed, not requeued" apart from any
            # other cancel (a monitor failure never ends a job)
            slurm.set_comment(self.job_id, "hpc-hangkit: hang confirmed, %s; report: %s"
                              % (d.reason, where))
        except slurm.SlurmError as e:
            log.warning("could not set the job comment: %s", e)
        try:
            slurm.cancel(self.job_id)
        except slurm.SlurmError as e:
            log.error("hpc-hangkit: could not end the job: %s", e)

    def _moved_on(self, tries: int = 5, pause_s: float = 1.0) -> Optional[str]:
        """Why this attempt is over already (the job was requeued, or it is ending),
        or None when it still runs as attempt ``self.attempt``.

        Asks ``scontrol show job`` (up to ``tries`` times, ``pause_s`` apart, while
        the answer is missing or the job is still RUNNING as this attempt: a
        requeue that just happened is visible at once as a higher restart count
        or a PENDING/REQUEUE state). Without an answer, the monitor's own SIGTERM
        (the batch step is being ended by Slurm) counts as "over".
        """
        for i in range(max(1, tries)):
            try:
                info = slurm.job_info(self.job_id)
            except (slurm.SlurmError, ValueError) as e:
                info, err = None, e
            if info is not None:
                state = (info.state or "").split()[0].upper() if info.state else ""
                if info.restarts > self.attempt:
                    return "Slurm restart count is %d, this is attempt %d" % (info.restarts,
                                                                               self.attempt)
                if state.startswith("REQUEUE") or state in ("PENDING", "COMPLETED", "CANCELLED",
                                                            "FAILED", "TIMEOUT", "NODE_FAIL",
                                                            "PREEMPTED", "BOOT_FAIL", "DEADLINE",
                                                            "OUT_OF_MEMORY"):
                    return "job state %s" % state
                if state not in ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING"):
                    return None         # unknown state: act as if it still ran
                if state == "RUNNING" and not self.done.is_set():
                    return None
            if i + 1 < tries:
                time.sleep(pause_s)
        if self.done.is_set():
            return "Slurm is ending this attempt (the monitor got SIGTERM)"
        if info is None:
            log.warning("cannot look the job up (%s)", err)
        return None

    @staticmethod
    def _flush():
        for h in logging.getLogger("hpc_hangkit").handlers:
            try:
                h.flush()
            except Exception:
                pass

    def record_array_alias(self) -> Optional[str]:
        """For an array task, store ``<storage_url>/<A>_<T>.jobid`` (naming SLURM_JOB_ID) so
        ``hpc-hangkit collect A_T`` finds the task in storage after Slurm forgot it:
        only the job environment has SLURM_ARRAY_JOB_ID/TASK_ID (slurmd's epilog
        environment does not). Returns the alias, or None (not an array task, no
        storage, or storage refused: logged, the monitor goes on)."""
        url = getattr(self.settings, "storage_url", None)
        if not url or not self.env.get("SLURM_ARRAY_TASK_ID"):
            return None
        try:
            from hpc_hangkit.collect import record_array_alias
            alias = record_array_alias(url, self.env,
                                       self.env.get("SLURM_JOB_USER") or self.env.get("USER"))
            if alias:
                log.info("array task %s is job %s (alias stored)", alias, self.job_id)
            return alias
        except Exception as e:  # the alias is a convenience; the data is keyed by the job id
            log.warning("could not store the array-task alias: %s", e)
            return None

    def sources(self):
        self.view_dir = tempfile.mkdtemp(prefix=MONITOR_VIEW_PREFIX, dir=self.scratch)
        src = [SlurmStackSource(self.scratch, View(self.view_dir), self.others,
                                probe=srun_probe(self.job_id, self.scratch, self.bin_argv),
                                stats=lambda: slurm.step_stats(self.job_id),
                                idle_probe_s=max(30.0, float(self.settings.report_every_s)),
                                samples=getattr(self.settings, "stack_samples", 5),
                                world_size=self.world_size)]
        try:
            from hpc_hangkit.ras import maybe_source
            ras = maybe_source(self.settings, out_dir=self.hd_dir)
            if ras is not None:
                prefix = slurm.overlap_prefix(self.job_id, self.others[:1]) if self.others else []
                src.append(RasOnRankNode(ras, self.scratch, prefix))
        except Exception as e:  # RAS is optional evidence
            log.info("NCCL RAS source not used: %s", e)
        return src

    def run(self) -> int:
        from hpc_hangkit.detector import Detector
        from hpc_hangkit.monitor import Monitor
        s = self.settings
        det = Detector(s.poll_interval_s, s.confirm_duration_s, s.suspect_after_s, s.report_every_s)
        parent = os.getppid()
        self.record_array_alias()
        try:
            self.srcs = self.sources()
            mon = Monitor(det, self.srcs, hd_dir=self.hd_dir,
                          on_confirmed=lambda ev: self.on_confirmed(ev))
            log.info("hpc-hangkit monitor for job %s attempt %d on %s (nodes %s), mode %s, poll "
                     "%.0f s, confirm after %.0f s", self.job_id, self.attempt, self.host,
                     ",".join(self.nodes), s.mode, s.poll_interval_s, det.effective_confirm_s)
            mon.run(alive=lambda: not self.done.is_set() and os.getppid() == parent,
                    wait=lambda t: self.done.wait(t))
        finally:
            if self.view_dir:
                shutil.rmtree(self.view_dir, ignore_errors=True)
        return 0


def _setup_logging(hd_dir: str) -> None:
    lg = logging.getLogger("hpc_hangkit")
    lg.setLevel(logging.INFO)
    fmt = logging.Formatter("%(asctime)s hpc-hangkit[monitor] %(levelname)s %(message)s",
                            "%Y-%m-%dT%H:%M:%S")
    try:
        os.makedirs(hd_dir, exist_ok=True)
        fh = logging.FileHandler(os.path.join(hd_dir, layout.MONITOR_LOG))
        fh.setFormatter(fmt)
        lg.addHandler(fh)
    except OSError as e:
        sys.stderr.write("hpc-hangkit: cannot write the monitor log in %s: %s\n" % (hd_dir, e))
    sh = logging.StreamHandler(sys.stderr)
    sh.setFormatter(fmt)
    sh.setLevel(logging.WARNING)
    lg.addHandler(sh)


def stop_handler(done):
    """A SIGTERM/SIGINT handler that sets the ``threading.Event`` ``done`` once.

    ``Event.set`` takes a non-reentrant lock, and a Python signal handler runs in the
    main thread between any two bytecodes, even inside ``Event.set`` itself: Slurm's
    burst of SIGTERMs at the end of a job deadlocked a monitor that way (it outlived its
    job by an hour). So only the first signal sets the event; later ones return at once.
    """
    seen = []

    def _term(signum, frame):
        if seen:
            return
        seen.append(signum)
        done.set()
    return _term


def monitor_main(env: Optional[Mapping[str, str]] = None, bin_argv: Optional[List[str]] = None) -> int:
    """``hpc-hangkit slurm-monitor``: the batch-step monitor (see the module docstring).

    Reads settings from the job environment (site TOML < HANGKIT_*). Returns 0;
    a monitor problem is logged and never fails the job.
    """
    env = dict(os.environ if env is None else env)
    if env.get(layout.ENV_MODE, "off") == "off":
        return 0
    os.umask(0o077)   # reports and state it writes (also to file:// storage) are the user's alone
    from hpc_hangkit.config import ConfigError, load_settings
    try:
        settings = load_settings(env=env)
    except ConfigError as e:
        sys.stderr.write("hpc-hangkit: hang monitor not started for this job: %s\n" % e)
        return 0
    bin_argv = bin_argv or [sys.executable, "-m", "hpc_hangkit"]
    bm = BatchMonitor(settings, env, bin_argv)
    _setup_logging(bm.hd_dir)

    _term = stop_handler(bm.done)
    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
    try:
        return bm.run()
    except Exception as e:
        log.exception("monitor stopped by an error: %s (the job is not affected)", e)
        return 0
