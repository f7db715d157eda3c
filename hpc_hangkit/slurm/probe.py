"""The node side of the Slurm monitor: ``hpc-hangkit slurm-probe`` (:func:`probe_main`: this
node's rank-file tails and whether each heartbeat's process lives, framed for ``srun``
output) and the monitor's :class:`View`, the one private directory every node's answers are
mirrored into. Runs as the job's user.
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
    """Ask this node's armed ranks that have not checked in for ``quiet_s`` seconds for an
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
               if (hb.host or "").split(".")[0] == short and hb.age_s(now) >= quiet_s}
    return request_dumps(targets, sample_signal, timeout_s=wait_s) if targets else {}


def probe_main(scratch: str, out=None, sample_signal: Optional[str] = None, quiet_s: float = 1.0) -> int:
    """``hpc-hangkit slurm-probe``: print (framed, :func:`hpc_hangkit.wire.emit_doc`) this node's rank files
    (tails) and the liveness of its ranks' processes (:func:`heartbeat_liveness`), for the
    batch-step monitor. With ``sample_signal``, first a fresh dump of every rank quiet for
    ``quiet_s`` seconds (:func:`sample_quiet_ranks`), so the answer holds it. Runs inside the
    job as its user."""
    out = out or sys.stdout
    if sample_signal:
        try:
            sample_quiet_ranks(scratch, sample_signal, quiet_s)
        except (ValueError, OSError) as e:  # the files are still worth sending
            sys.stderr.write("hpc-hangkit slurm-probe: no on-demand sample (%s)\n" % e)
    emit_doc({"host": socket.gethostname(), "files": encode_files(rank_files(scratch)),
              "liveness": heartbeat_liveness(scratch)}, out)
    return 0


def probe_files(text: str) -> Dict[str, dict]:
    """The rank files of the framed ``slurm-probe`` answers in ``text`` (srun output), merged:
    ``{rel: {"size", "offset", "data"}}``; a heartbeat's entry also holds ``liveness``
    (``[state, seen]``) when its node said it."""
    files: Dict[str, dict] = {}
    for d in parse_docs(text):
        got = decode_files(d.get("files", {}))
        lv = d.get("liveness")
        for rel, pair in (lv.items() if isinstance(lv, dict) else ()):
            if rel in got and isinstance(pair, list) and len(pair) == 2:
                got[rel]["liveness"] = pair
        files.update(got)
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
