"""Flight Recorder: dump every live rank on a hang, analyse the dumps, write torchfrtrace-ready copies.

Where the data comes from: each armed rank runs the trigger thread of
``hpc_hangkit/boot/_hangkit_fr.py`` once ``init_process_group`` returned; it
registers ``$HANGKIT_SCRATCH_DIR/flight_recorder/trigger/rank_<r>.pid<pid>`` and
writes ``flight_recorder/rank_<r>.json`` + ``.pickle`` when signalled.

- :func:`dump_ranks` (capture): signal every registered live rank, wait, copy
  the dumps into ``<hd_dir>/flight_recorder/``; a rank that cannot dump gets a
  ``rank_<i>.json`` holding only ``{"dump_error": "..."}``.
- :func:`analyse` (roll call): per process group, compare each rank's last
  entry: a rank ahead in sequence id (an extra collective), different
  collective types or call sites at one sequence id (SPLIT), the same call
  site with different sizes or dtypes (SAME_LINE_DIFFERENT_ARGS); always as
  groups of ranks.
- :func:`write_torchfrtrace` writes pickles PyTorch's own ``torchfrtrace``
  reads (gloo's ``pg_config`` keyed by ``''`` and without sub-groups is rebuilt).
"""
import gc
import glob
import json
import logging
import re
import os
import pickle
import signal
import sys
import time
from typing import Dict, List, Optional, Tuple

from hpc_hangkit import fsio, layout
from hpc_hangkit.capture.ranks import pid_alive
from hpc_hangkit.evidence.source import Source
from hpc_hangkit.parse.flightrec import (MAX_DUMP_BYTES, MAX_EXPANSION, FRDump, FREntry, FRParseError,
                                         dump_from_summary, parse_flightrec, rank_from_name, summarize_unscanned)
from hpc_hangkit.ranges import format_ranks, ranks_label

log = logging.getLogger("hpc_hangkit.evidence.flightrec")

DUMP_TIMEOUT_S = 20.0   # the first dump with stack traces took 1-4 s (FINDINGS)

def _registrations(scratch: str) -> List[dict]:
    """The trigger files under ``scratch`` (written by the ranks: hostile input). A pid/tid that is
    not a positive process id (pid 1 and negative pids included: kill(-1) is every process), a
    negative rank, or a signal that is not a catchable signal name is refused with a warning."""
    out = []
    trigger_dir = os.path.join(scratch, layout.FLIGHT_RECORDER_DIR, layout.FR_TRIGGER_DIR)
    for p in sorted(glob.glob(os.path.join(trigger_dir, "rank_*.pid*"))):
        try:
            kv = dict(x.split("=", 1) for x in fsio.read_regular(p, limit=4096).decode().split() if "=" in x)
            reg = {"pid": int(kv["pid"]), "tid": int(kv["tid"]), "signal": kv.get("signal", "SIGWINCH"),
                   "rank": None if kv.get("rank", "x") == "x" else int(kv["rank"]), "path": p}
            if not (1 < reg["pid"] < 1 << 22 and 0 < reg["tid"] < 1 << 22) or (reg["rank"] or 0) < 0:
                raise ValueError("pid %r tid %r rank %r out of range" % (reg["pid"], reg["tid"], reg["rank"]))
            if reg["signal"] not in signal.Signals.__members__ or reg["signal"] in ("SIGKILL", "SIGSTOP"):
                raise ValueError("signal %r is not a trigger signal" % (reg["signal"][:40],))
            out.append(reg)
        except (OSError, ValueError, KeyError) as e:
            log.warning("Flight Recorder trigger file %s unreadable: %s", p, e)
    return out


def _write_json(path: str, doc: dict) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fsio.write_atomic(path, json.dumps(doc))
    return path


#: start of the dump_error of a rank that registered no trigger (how a rank of a job without
#: torch.distributed, e.g. mpi4py only, looks to the Flight Recorder)
NO_TRIGGER = "no live Flight Recorder trigger for rank "
NOT_TORCH = "not a torch.distributed job"
_NOT_TORCH_WHY = ("registered no Flight Recorder trigger: torch.distributed not initialised in an armed "
                  "process, or TORCH_FR_BUFFER_SIZE=0")


def _generic(why: str) -> str:
    """An error text with its rank/pid/thread numbers blanked: one line per reason, not per rank."""
    return re.sub(r"\b(rank|pid|thread) \d+", r"\1 N", why)


def dump_ranks(scratch: str, hd_dir: str, ranks=None, timeout_s: float = DUMP_TIMEOUT_S) -> Dict[int, str]:
    """Dump the Flight Recorder of every live registered rank under ``scratch``.

    ``ranks``: global ranks expected on this node (e.g. from the heartbeats);
    each one without a registered live trigger gets a ``dump_error`` file.
    Waits at most ``timeout_s`` seconds in total. Returns ``{rank: path}`` of
    ``<hd_dir>/flight_recorder/rank_<i>.json`` written (dumps or error files).
    Never raises for a rank problem.
    """
    src_dir = os.path.join(scratch, layout.FLIGHT_RECORDER_DIR)
    dst_dir = os.path.join(hd_dir, layout.FLIGHT_RECORDER_DIR)
    os.makedirs(dst_dir, exist_ok=True)
    regs = {}
    for r in _registrations(scratch):
        if r["rank"] is not None and pid_alive(r["pid"]):
            regs[r["rank"]] = r  # a restarted rank re-registers: the live one wins
    t0 = time.time()
    pending = {}
    out: Dict[int, str] = {}
    from hpc_hangkit.arm.watchdog import tgkill   # loads the rank core: only when signalling
    for rank, r in sorted(regs.items()):
        try:
            tgkill(r["pid"], r["tid"], int(signal.Signals[r["signal"]]))
            pending[rank] = r
        except OSError as e:
            out[rank] = _write_json(os.path.join(dst_dir, "rank_%d.json" % rank),
                                    {"dump_error": "could not signal pid %d thread %d: %s" % (r["pid"], r["tid"], e)})
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        for rank in list(pending):
            src = os.path.join(src_dir, "rank_%d.json" % rank)
            try:
                st = os.lstat(src)
            except OSError:
                continue
            if st.st_mtime + 1 < t0:
                continue
            for ext in (".json", ".pickle"):
                s = os.path.join(src_dir, "rank_%d%s" % (rank, ext))
                d = os.path.join(dst_dir, "rank_%d%s" % (rank, ext))
                if os.path.abspath(s) == os.path.abspath(d):
                    continue
                try:
                    data = fsio.read_regular(s)
                except OSError:
                    continue
                fsio.write_atomic(d, data)
            out[rank] = os.path.join(dst_dir, "rank_%d.json" % rank)
            del pending[rank]
        if pending:
            time.sleep(0.1)
    for rank, r in pending.items():
        out[rank] = _write_json(os.path.join(dst_dir, "rank_%d.json" % rank), {
            "dump_error": "rank %d (pid %d) wrote no dump within %.0f s: its Python threads cannot run "
                          "(main thread blocked in C with the GIL held?)" % (rank, r["pid"], timeout_s)})
    for rank in sorted(set(ranks or ()) - set(out)):
        out[rank] = _write_json(os.path.join(dst_dir, "rank_%d.json" % rank), {
            "dump_error": NO_TRIGGER + "%d: torch.distributed was not initialised "
                          "in an armed process, TORCH_FR_BUFFER_SIZE=0, or the process is gone" % rank})
    return out


def capture_hook(ctx) -> None:
    """Capture step: dump the ranks of ``ctx`` (a :class:`hpc_hangkit.capture.orchestrator.CaptureContext`)
    into ``ctx.hd_dir/flight_recorder/``; one problem line per distinct reason a rank has no dump.
    Nothing when ``settings.flight_recorder_buffer`` is 0."""
    if int(getattr(ctx.settings, "flight_recorder_buffer", 2000) or 0) == 0:
        return
    res = dump_ranks(ctx.scratch, ctx.hd_dir, ranks=sorted(ctx.ranks))
    errors: Dict[str, list] = {}
    dumped = False
    for rank, path in sorted(res.items()):
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if "dump_error" in doc and "entries" not in doc:
            # one line per distinct reason, not per rank (an MPI-only job: every rank the same)
            why = str(doc["dump_error"])
            errors.setdefault(_generic(why), []).append((rank, why))
        else:
            dumped = True
    if not dumped and len(errors) == 1 and next(iter(errors)).startswith(NO_TRIGGER):
        (items,) = errors.values()
        ctx.problem("Flight Recorder: %s (%s %s)" % (NOT_TORCH, ranks_label([r for r, _ in items]), _NOT_TORCH_WHY))
        return
    for generic, items in errors.items():
        ctx.problem("Flight Recorder %s: %s" % (ranks_label([r for r, _ in items]),
                                                items[0][1] if len(items) == 1 else generic))


# --- reading and analysis ------------------------------------------------------

PRECHECK_MIN_FILES = 4
"""read_dumps forks a validator child for a batch of at least this many pickles (fewer: the opcode scan)."""
PRECHECK_BATCH_BYTES = 64 << 20
"""Bytes of dumps read (and held) at once by read_dumps."""
PRECHECK_AS_SLACK = 4 << 20
"""Address space a validated pickle may grow the child by beyond ``MAX_EXPANSION`` x its size + 64 KiB
(allocator granularity: 1 MiB arenas, heap top padding)."""


def _single_threaded() -> bool:
    th = sys.modules.get("threading")
    return th is None or th.active_count() <= 1


def _precheck_child(blobs: List[tuple], w: int) -> None:
    """In the forked child: per (name, pickle), limit the address space to what it has now + the budget,
    run :func:`summarize_unscanned` and write b"0" (refused, or over 0.1 s + 0.5 s/MiB of CPU), b"1"
    (passed) or b"S" + 4-byte length + the summary."""
    import resource

    gc.disable()  # a collection would touch (and copy) every object inherited from the parent
    fd = os.open(os.devnull, os.O_WRONLY)  # CPython may print about hostile bytes ("SystemError: ...")
    os.dup2(fd, 2)
    os.close(fd)
    page = os.sysconf("SC_PAGE_SIZE")
    _, as_hard = resource.getrlimit(resource.RLIMIT_AS)
    _, cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)
    cpu = 10 + 2 * sum(len(b) for _, b in blobs) // (1 << 20)  # seconds for the whole batch (SIGXCPU ends it)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu if cpu_hard == resource.RLIM_INFINITY else min(cpu, cpu_hard),
                                             cpu_hard))
    for name, data in blobs:
        with open("/proc/self/statm", "rb") as f:
            vm = int(f.read().split()[0]) * page
        lim = vm + MAX_EXPANSION * len(data) + (64 << 10) + PRECHECK_AS_SLACK
        resource.setrlimit(resource.RLIMIT_AS, (lim if as_hard == resource.RLIM_INFINITY else min(lim, as_hard),
                                                as_hard))
        t0 = time.process_time()
        try:
            summary = summarize_unscanned(data, name)
            out = b"1" if summary is None else b"S" + len(summary).to_bytes(4, "little") + summary
            if time.process_time() - t0 > 0.1 + 0.5 * len(data) / (1 << 20):
                out = b"0"
        except Exception:  # noqa: BLE001 -- hostile bytes: MemoryError, UnpicklingError, ...; the parent scans
            out = b"0"
        view = memoryview(out)
        while view:
            view = view[os.write(w, view):]


def _precheck_verdicts(blobs: List[tuple]):
    """Yield, per (name, pickle) in ``blobs``: its summary (bytes, for
    :func:`~hpc_hangkit.parse.flightrec.dump_from_summary`) or True when it passed
    :func:`~hpc_hangkit.parse.flightrec.summarize_unscanned` in a forked
    child whose address space (RLIMIT_AS: + ``MAX_EXPANSION`` x the pickle + 64 KiB +
    :data:`PRECHECK_AS_SLACK`) and CPU time (RLIMIT_CPU) are limited; the caller then unpickles it
    without the opcode scan. False for a refused pickle, for all after the child died, and for every
    one when no child can be forked (fewer than :data:`PRECHECK_MIN_FILES`, no fork, no /proc, or
    other threads in this process: a forked child inherits their locks)."""
    if len(blobs) < PRECHECK_MIN_FILES or not hasattr(os, "fork") or not os.path.exists("/proc/self/statm") \
            or not _single_threaded():
        for _ in blobs:
            yield False
        return
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        for _ in blobs:
            yield False
        return
    if pid == 0:  # the child: never returns into the caller's code
        code = 1
        try:
            os.close(r)
            _precheck_child(blobs, w)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    try:
        buf, at, eof = bytearray(), 0, False

        def need(k):  # at least k bytes after `at` (False: the child died)
            nonlocal eof
            while len(buf) - at < k and not eof:
                chunk = os.read(r, 1 << 16)
                eof = not chunk
                buf.extend(chunk)
            return len(buf) - at >= k

        for _ in blobs:
            if not need(1):
                yield False
                continue
            kind = buf[at:at + 1]
            at += 1
            if kind == b"S":
                n = int.from_bytes(buf[at:at + 4], "little") if need(4) else 0
                if need(4 + n):
                    yield bytes(buf[at + 4:at + 4 + n])
                    at += 4 + n
                    continue
                eof, at = True, len(buf)
                yield False
                continue
            yield kind == b"1"
            if at > 1 << 20:
                del buf[:at]
                at = 0
    finally:
        os.close(r)
        try:
            os.kill(pid, signal.SIGKILL)  # still our unreaped child: the pid cannot have been reused
        except OSError:
            pass
        os.waitpid(pid, 0)


def _verdicts(blobs: List[tuple]):
    """:func:`_precheck_verdicts` of ``blobs``, from two children (alternate blobs) when this process
    may use 2 cores and there are enough blobs for both."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if cores < 2 or len(blobs) < 2 * PRECHECK_MIN_FILES:
        yield from _precheck_verdicts(blobs)
        return
    halves = [_precheck_verdicts(blobs[0::2]), _precheck_verdicts(blobs[1::2])]
    try:
        for i in range(len(blobs)):
            yield next(halves[i % 2])
    finally:
        for h in halves:
            h.close()


def _batches(paths: List[str]):
    """Consecutive runs of ``paths`` of at most :data:`PRECHECK_BATCH_BYTES` (by size on disk)."""
    cur, size = [], 0
    for p in paths:
        try:
            n = os.lstat(p).st_size
        except OSError:
            n = 0
        if cur and size + n > PRECHECK_BATCH_BYTES:
            yield cur
            cur, size = [], 0
        cur.append(p)
        size += n
    if cur:
        yield cur


def read_dumps(d: str) -> (List[FRDump], List[str]):
    """Parse every dump under ``d`` (``rank_<i>.pickle`` and ``rank_<i>.json``; other names with a
    trailing rank number too). Returns (dumps sorted by rank, warnings: one per file skipped, naming
    it and the byte offset).

    A file is not read when the same rank's dump already parsed without ``dump_error`` (the ranks
    write ``rank_<i>.json`` and ``.pickle`` of the same buffer). Of the two, the pickle is read first
    when the JSON is a whole dump (over :data:`JSON_FIRST_MAX` bytes: the pickle is 4.5x smaller and
    costs half the CPU), the JSON first when it is small (a ``dump_error`` note: the pickle beside it
    is stale); a broken first choice beside a good second one gives no warning. Files are parsed by forked children
    (:func:`_verdicts`; pickles without the opcode scan, under RLIMIT_AS/RLIMIT_CPU), which send a
    summary; ``raw`` and ``entries`` of those dumps are decoded on first use. A file a child refuses
    is parsed here, pickles with the scan, whose warning names the byte offset. Every pickle both
    accept gives the same dump; the children check the decoded objects (plain types, no shared
    list or dict, depth, reference count), so they also accept plain pickles the scan's opcode
    whitelist refuses (LONG4 integers, tuple dict keys, protocol 0/1 opcodes), within their
    memory and CPU bounds (docs/flight-recorder.md, "Reading dumps safely")."""
    files = [p for p in sorted(glob.glob(os.path.join(d, "*"))) if os.path.isfile(p) and not os.path.islink(p)]
    by_rank: Dict[int, FRDump] = {}
    warns: List[str] = []

    def have(name):
        r = rank_from_name(name)
        return r is not None and r in by_rank and by_rank[r].error is None

    gc_was = gc.isenabled()
    gc.disable()  # the decoded dumps are trees (no cycle to collect): collections cost 2x the parse
    try:
        return _read_batches(files, by_rank, warns, have)
    finally:
        if gc_was:
            if gc.get_freeze_count() == 0:
                # the parsed dumps (millions of lists and dicts) straight to the oldest generation: no
                # scan of them by the next young collections (~0.8 s for 1k ranks x 200 entries)
                gc.freeze()
                gc.unfreeze()
            gc.enable()


#: a ``rank_<i>.json`` up to this size is read before its ``.pickle`` (it may be a ``dump_error``
#: note that says why the pickle beside it is stale); a bigger one is a whole dump: its pickle
#: (the same buffer, 4.5x smaller, half the CPU to check and summarize) is read instead
JSON_FIRST_MAX = 4096


def _read_order(files: List[str]) -> Tuple[List[str], List[str]]:
    """``(first, fallbacks)``: each rank's first choice, and the files read only where it failed
    (read after every first choice, so a rank's second file is never parsed for nothing). A rank
    with a whole-dump ``rank_<i>.json`` and a ``.pickle``: the pickle first, the JSON as its
    fallback; otherwise JSON before pickle (a small JSON is a ``dump_error`` or a tiny dump)."""
    present = set(files)

    def size(p):
        try:
            return os.lstat(p).st_size
        except OSError:
            return 0

    def key(p):
        if p.endswith(".pickle"):
            j = p[:-len(".pickle")] + ".json"
            return (0 if j in present and size(j) > JSON_FIRST_MAX else 1, p)
        if p.endswith(".json") and p[:-len(".json")] + ".pickle" in present and size(p) > JSON_FIRST_MAX:
            return (1, p)
        return (0, p)
    keyed = sorted((key(p), p) for p in files)
    return [p for k, p in keyed if k[0] == 0], [p for k, p in keyed if k[0] == 1]


def _read_batches(files, by_rank, warns, have):
    # a rank's file that fails while another file of the rank is still to come: its warning
    # waits, and is dropped when that other file parses (the ranks write both of one buffer)
    left: Dict[int, int] = {}
    for p in files:
        r = rank_from_name(os.path.basename(p))
        if r is not None:
            left[r] = left.get(r, 0) + 1
    pending: Dict[int, List[str]] = {}
    try:
        _read_ordered(files, by_rank, warns, have, left, pending)
    finally:
        for r in sorted(pending):
            if r not in by_rank or by_rank[r].error is not None:
                warns += pending[r]
    return [by_rank[r] for r in sorted(by_rank)], warns


def _read_ordered(files, by_rank, warns, have, left, pending):
    first, fallbacks = _read_order(files)
    for batch in list(_batches(first)) + list(_batches(fallbacks)):
        items = []
        for p in batch:
            name = os.path.basename(p)
            if have(name):
                continue
            try:  # one byte over the parser's cap, so an oversized file is named as such, not as truncated
                data = fsio.read_regular(p, limit=MAX_DUMP_BYTES + 1)
            except OSError as e:
                warns.append("warning: %s" % e)
                continue
            items.append((name, data, 0 < len(data) <= MAX_DUMP_BYTES))  # to the children (JSON too)
        verdicts = _verdicts([(name, data) for name, data, offload in items if offload])
        try:
            for name, data, offload in items:
                ok = next(verdicts) if offload else False
                if have(name):
                    continue
                r = rank_from_name(name)
                if r is not None:
                    left[r] -= 1
                try:
                    dump = dump_from_summary(ok, data, name) if type(ok) is bytes else \
                        parse_flightrec(data, name, prechecked=ok)
                except FRParseError as e:
                    if r is not None and left.get(r, 0) > 0:
                        pending.setdefault(r, []).append("warning: %s" % e)
                    else:
                        warns.append("warning: %s" % e)
                    continue
                if dump.rank is None:
                    warns.append("warning: %s: no rank number in the file name; skipped" % name)
                    continue
                if dump.rank in by_rank and (by_rank[dump.rank].error is None or dump.error is not None):
                    continue
                by_rank[dump.rank] = dump
                warns += dump.warnings
        finally:
            verdicts.close()


def _where(e):
    f = e.user_frame()
    return (f[0], f[1]) if f else None


def analyse(dumps: List[FRDump]) -> dict:
    """Compare the ranks' last collectives per process group.

    Returns ``{"pgs": [finding...], "verdict", "suspect_ranks", "groups", "errors": {rank: text},
    "empty": [ranks]}``. A finding: ``{"pg", "desc", "kind", "groups": [{"ranks", "seq", "op",
    "sizes", "dtypes", "where", "pending"}]}`` with kind in ``args`` (same call site, different
    sizes/dtypes), ``type`` (different collectives at one sequence id), ``line`` (same collective from
    different call sites), ``seq`` (some ranks ahead), ``together`` (all at one entry).
    Verdict priority: SAME_LINE_DIFFERENT_ARGS > SPLIT (type/line) > MISSED (seq, strict minority)
    / SPLIT (seq, no minority) > TOGETHER.
    """
    errors = {d.rank: d.error for d in dumps if d.error}
    ok = [d for d in dumps if not d.error]
    empty = [d.rank for d in ok if not d.has_entries()]
    last: Dict[str, Dict[int, object]] = {}
    descs: Dict[str, str] = {}
    for d in ok:
        for pg, (e, desc) in d.last_per_pg().items():
            last.setdefault(pg, {})[d.rank] = e
            descs.setdefault(pg, desc)
    findings = []
    for pg, per_rank in sorted(last.items(), key=lambda kv: (kv[0].isdigit() and int(kv[0]) or 0, kv[0])):
        if all(e.retired for e in per_rank.values()) and len({e.seq for e in per_rank.values()}) == 1:
            continue  # nothing in flight in this group
        buckets: Dict[tuple, List[int]] = {}
        for r, e in per_rank.items():
            buckets.setdefault((e.seq, e.op, _where(e), e.input_sizes, e.input_dtypes), []).append(r)
        seqs = {k[0] for k in buckets}
        if len(seqs) > 1:
            kind = "seq"
        elif len(buckets) == 1:
            kind = "together"
        elif len({k[1] for k in buckets}) > 1:
            kind = "type"
        elif len({k[2] for k in buckets}) > 1:
            kind = "line"
        else:
            kind = "args"
        groups = []
        for k, rs in sorted(buckets.items(), key=lambda kv: (-kv[0][0], sorted(kv[1]))):
            e = per_rank[rs[0]]
            groups.append({"ranks": sorted(rs), "seq": k[0], "op": k[1], "sizes": [list(s) for s in k[3]],
                           "dtypes": list(k[4]), "where": e.where(), "pending": not e.retired})
        finding = {"pg": pg, "desc": descs.get(pg, ""), "kind": kind, "groups": groups}
        if kind == "seq":
            finding = _behind_args(finding, {d.rank: d for d in ok if d.rank in per_rank}) or finding
        findings.append(finding)
    verdict, suspects, chosen = None, [], None

    def minority(f):
        gs = sorted(f["groups"], key=lambda g: len(g["ranks"]))
        if len(gs) >= 2 and len(gs[0]["ranks"]) < len(gs[1]["ranks"]):
            return gs[0]["ranks"]
        return None

    for kinds, v in ((("args",), "SAME_LINE_DIFFERENT_ARGS"), (("type", "line"), "SPLIT")):
        fs = [f for f in findings if f["kind"] in kinds]
        if fs:
            chosen = min(fs, key=lambda f: sum(len(g["ranks"]) for g in f["groups"]))
            # SPLIT names groups, not culprits; a different-args minority is the suspect
            verdict, suspects = v, (minority(chosen) or []) if v != "SPLIT" else []
            break
    if verdict is None:
        fs = [f for f in findings if f["kind"] == "seq"]
        withmin = [f for f in fs if minority(f)]
        if withmin:
            chosen = min(withmin, key=lambda f: len(minority(f)))
            verdict, suspects = "MISSED", minority(chosen)
        elif fs:
            chosen = fs[0]
            verdict = "SPLIT"
        elif findings:
            chosen = findings[0]
            verdict = "TOGETHER"
    groups = []
    for f in findings:
        role_base = "pg %s%s" % (f["pg"], " (%s)" % f["desc"] if f["desc"] and f["desc"] != "undefined" else "")
        for g in f["groups"]:
            role = role_base if f is chosen else role_base + " (downstream)"
            groups.append({"ranks": g["ranks"], "role": role, "detail": "seq %d %s sizes %s dtypes %s at %s%s" % (
                g["seq"], g["op"], g["sizes"], ",".join(map(str, g["dtypes"])) or "-", g["where"],
                "" if g["pending"] else " (completed)")})
    return {"pgs": findings, "verdict": verdict, "suspect_ranks": sorted(suspects), "groups": groups,
            "errors": errors, "empty": empty, "chosen": chosen["pg"] if chosen else None}


def _behind_args(f: dict, dumps: Dict[int, FRDump]) -> Optional[dict]:
    """A ``seq`` finding whose groups stand at one call site of one collective, where the ranks
    ahead passed the collective at the sequence id the others still wait at with other sizes or
    dtypes than theirs (gloo lets some ranks of a mismatched all_reduce through): the ``args``
    finding at that sequence id, its groups by (sizes, dtypes) with each rank's entry there
    (``pending``: still waiting). None otherwise. Reads the ahead ranks' whole buffers."""
    gs = f["groups"]
    if len({(g["op"], g["where"]) for g in gs}) != 1:
        return None
    behind = min(g["seq"] for g in gs)
    at: Dict[int, object] = {}
    for r, d in dumps.items():
        hit = [e for e in d.entries if not e.is_p2p and e.pg == f["pg"] and e.seq == behind]
        if not hit:
            return None
        at[r] = hit[-1]
    if len({e.where() for e in at.values()}) != 1:
        return None
    buckets: Dict[tuple, List[int]] = {}
    for r, e in at.items():
        buckets.setdefault((e.input_sizes, e.input_dtypes), []).append(r)
    if len(buckets) < 2:
        return None
    groups = []
    for (sizes, dtypes), rs in sorted(buckets.items(), key=lambda kv: (-len(kv[1]), sorted(kv[1]))):
        e = at[min(rs)]
        groups.append({"ranks": sorted(rs), "seq": behind, "op": e.op, "sizes": [list(x) for x in sizes],
                       "dtypes": list(dtypes), "where": e.where(),
                       "pending": any(not at[r].retired for r in rs)})
    return dict(f, kind="args", groups=groups)


_KIND_TEXT = {"args": "same call site, different sizes/dtypes", "type": "different collectives at one sequence id",
              "line": "the same collective from different call sites", "seq": "ranks at different sequence ids",
              "together": "every rank at the same collective"}


def members(dumps: List[FRDump]) -> Dict[str, Tuple[List[int], str]]:
    """Each process group's members: ``{pg: (ranks, source)}``, from a dump's ``pg_config`` when
    it lists the group's ranks (NCCL; ``source`` ``pg_config``), else the ranks that have an entry
    on the group (gloo writes no sub-group into ``pg_config``; ``source`` ``entries``: a member
    that never called a collective on the group is not seen)."""
    out: Dict[str, Tuple[List[int], str]] = {}
    for d in dumps:
        for key, cfg in (d.pg_config or {}).items():
            ranks = cfg.get("ranks") if isinstance(cfg, dict) else None
            if isinstance(ranks, str):
                try:
                    ranks = json.loads(ranks)
                except ValueError:
                    ranks = None
            if isinstance(ranks, list) and ranks and all(isinstance(r, int) and 0 <= r < 1 << 20 for r in ranks) \
                    and str(key) not in out:
                out[str(key)] = (sorted(set(ranks)), "pg_config")
    seen: Dict[str, set] = {}
    for d in dumps:
        if d.rank is None:
            continue
        for e in d.entries:
            if not e.is_p2p:
                seen.setdefault(e.pg, set()).add(d.rank)
    for pg, rs in seen.items():
        out.setdefault(pg, (sorted(rs), "entries"))
    return out


def _pg_label(pg: str, desc: str, mem: Dict[str, Tuple[List[int], str]]) -> str:
    ranks = mem.get(pg, ([], ""))[0]
    what = ([desc] if desc not in ("", "undefined") else []) + ([ranks_label(ranks)] if ranks else [])
    return "process group %s%s" % (pg, " (%s)" % ", ".join(what) if what else "")


def membership(dumps: List[FRDump]) -> Optional[dict]:
    """Suspects from the process groups the ranks wait on, when ranks wait on different groups.

    Each rank's pending collective is its last entry not completed (group, sequence id, call
    site). Two rules, in order:

    - **group argument**: ranks wait at one call site on different groups, and a rank's own
      earlier entries at that site were on a group another rank there still waits on: it passed
      another group at this call (the suspect); without such history, the ranks on a group whose
      members are not all at the site, when another group's members all are.
    - **released through another group**: a rank waits at a site T with peers (same site, same
      count of entries there) that all made more calls at another site S than it did, and at S a
      rank waits on a group the rank is a member of: it skipped S (a call on a group it is not in
      returns at once), and that rank waits for it there.

    Counts need whole buffers: the second rule is off when a rank's buffer no longer holds its
    groups' first collectives. Returns ``{"suspects", "why" (one sentence), "sites": [[rank, file, line]]}`` (where each
    suspect should have passed the right group: the call the branch analysis reads) or None."""
    ok = [d for d in ok_dumps(dumps) if d.rank is not None]
    if len(ok) < 2:
        return None
    mem = members(ok)
    pend: Dict[int, FREntry] = {}
    for d in ok:
        live = [e for e in d.entries if not e.is_p2p and not e.retired]
        if live:
            pend[d.rank] = live[-1]
    if len({e.pg for e in pend.values()}) < 2:
        return None  # every waiting rank waits on one group: the sequence analysis says it all
    by_rank = {d.rank: d for d in ok}
    descs = {e.pg: e.pg_desc for e in pend.values()}

    def site(e):
        f = e.user_frame()
        return (f[0], f[1]) if f else None

    # rule 1: one call site, different groups
    at_site: Dict[tuple, Dict[str, List[int]]] = {}
    for r, e in pend.items():
        if site(e) is not None:
            at_site.setdefault(site(e), {}).setdefault(e.pg, []).append(r)
    for where, pgs in sorted(at_site.items(), key=lambda kv: str(kv[0])):
        if len(pgs) < 2:
            continue
        sus, history = [], {}
        for pg, rs in pgs.items():
            for r in rs:
                before = {e.pg for e in by_rank[r].entries[:-1] if not e.is_p2p and e.retired and site(e) == where}
                if before and pg not in before and before & set(pgs):
                    sus.append(r)
                    history[r] = sorted(before & set(pgs))
        if not sus:
            whole = [pg for pg in pgs if set(mem.get(pg, ([], ""))[0]) <= set(pgs[pg])]
            if whole and len(whole) < len(pgs):
                sus = [r for pg, rs in pgs.items() if pg not in whole for r in rs]
        if sus:
            sus = sorted(sus)
            right = sorted({p for p, rs in pgs.items() if not set(rs) & set(sus)})
            n_right = sum(len(pgs[p]) for p in right)
            why = "%s wait%s at %s:%d on %s, where %s wait%s on %s: %s another process group at this call" % (
                ranks_label(sus), "s" if len(sus) == 1 else "", os.path.basename(where[0]), where[1],
                ", ".join(sorted({_pg_label(pend[r].pg, descs[pend[r].pg], mem) for r in sus})),
                ranks_label([r for p in right for r in pgs[p]]), "s" if n_right == 1 else "",
                ", ".join(_pg_label(p, descs[p], mem) for p in right), "it passed" if len(sus) == 1 else "they passed")
            if history:
                why += " (%s)" % "; ".join("rank %d's earlier calls here were on process group %s" % (
                    r, ", ".join(h)) for r, h in sorted(history.items()))
            else:
                why += " (every member of %s is at this call)" % ", ".join(right)
            return {"suspects": sus, "why": why, "sites": [[r, where[0], where[1]] for r in sus]}
    # rule 2: a rank that skipped a call its peers made, where a rank waits for it
    if any(min((e.seq for e in d.entries if not e.is_p2p and e.pg == pg), default=1) > 1
           for d in ok for pg in {e.pg for e in d.entries}):
        return None  # a buffer wrapped: counts of calls are not comparable

    def counts(r):
        c: Dict[tuple, int] = {}
        for e in by_rank[r].entries:
            if not e.is_p2p and site(e) is not None:
                c[site(e)] = c.get(site(e), 0) + 1
        return c

    cnt = {r: counts(r) for r in by_rank}
    waiting_at: Dict[tuple, List[int]] = {}
    for r, e in pend.items():
        if site(e) is not None:
            waiting_at.setdefault(site(e), []).append(r)
    sus, sites, whys = [], {}, []
    for x, e in sorted(pend.items()):
        t = site(e)
        peers = [r for r in waiting_at.get(t, []) if r != x and cnt[r].get(t) == cnt[x].get(t)]
        if not peers:
            continue
        for s_, waiters in sorted(waiting_at.items(), key=lambda kv: str(kv[0])):
            if s_ == t:
                continue
            k = {cnt[r].get(s_, 0) for r in peers}
            if len(k) != 1 or cnt[x].get(s_, 0) >= min(k):
                continue
            victims = [w for w in waiters if x in mem.get(pend[w].pg, ([], ""))[0] and pend[w].pg != e.pg]
            if victims:
                sus.append(x)
                sites[x] = [x, s_[0], s_[1]]
                pg = pend[victims[0]].pg
                whys.append("%s wait%s at %s:%d on %s for rank %d, a member that made %d call%s there to its "
                            "peers' %d (%s) and waits at %s:%d on %s instead: rank %d was let through a call on "
                            "a group it is not in, or skipped it" % (
                                ranks_label(victims), "s" if len(victims) == 1 else "", os.path.basename(s_[0]),
                                s_[1], _pg_label(pg, descs.get(pg, ""), mem), x, cnt[x].get(s_, 0),
                                "" if cnt[x].get(s_, 0) == 1 else "s", min(k), ranks_label(peers),
                                os.path.basename(t[0]), t[1], _pg_label(e.pg, descs.get(e.pg, ""), mem), x))
                break
    if sus:
        return {"suspects": sorted(sus), "why": "; ".join(whys), "sites": [sites[r] for r in sorted(sites)]}
    return None


def ok_dumps(dumps: List[FRDump]) -> List[FRDump]:
    """The dumps that hold a buffer (not a ``dump_error``)."""
    return [d for d in dumps if not d.error]


def _kind_text(f: dict, mem: Dict[str, Tuple[List[int], str]]) -> str:
    """The finding's kind in words; for ``together``, counted against the group's members
    (``pg_config``): ranks with no entry are named, never counted in."""
    if f["kind"] != "together":
        return _KIND_TEXT[f["kind"]]
    at = sorted(r for g in f["groups"] for r in g["ranks"])
    ranks, source = mem.get(f["pg"], ([], ""))
    if source != "pg_config":
        return "%s at the same collective (no member list in the dumps: a member with no entry is not seen)" % (
            ranks_label(at))
    absent = [r for r in ranks if r not in at]
    if not absent:
        return "every member (%d) at the same collective" % len(ranks)
    return "%s of its %d members at the same collective; %s no entry" % (
        ranks_label(at), len(ranks), ranks_label(absent) + (" has" if len(absent) == 1 else " have"))


def section_from_dir(hd_dir: str) -> Optional[dict]:
    """Roll-call section from ``<hd_dir>/flight_recorder/`` (None if absent or empty).

    The section dict of docs/internals.md plus ``pgs`` (per-group findings of
    :func:`analyse`). Ranks whose file holds ``dump_error`` are listed with the
    reason; empty buffers are reported as armed too late (or buffer 0).
    """
    d = os.path.join(hd_dir, layout.FLIGHT_RECORDER_DIR)
    if not os.path.isdir(d):
        return None
    dumps, warns = read_dumps(d)
    if not dumps and not warns:
        return None
    a = analyse(dumps)
    text = ["Flight Recorder (%d rank dumps)" % len(dumps)]
    mem = members(ok_dumps(dumps))
    for f in a["pgs"]:
        mark = "  <==" if f["pg"] == a["chosen"] else ""
        text.append("pg %s%s: %s%s" % (f["pg"], " (%s)" % f["desc"] if f["desc"] not in ("", "undefined") else "",
                                      _kind_text(f, mem), mark))
        for g in f["groups"]:
            text.append("  %s: seq %d %s sizes %s dtypes %s at %s%s" % (
                ranks_label(g["ranks"]), g["seq"], g["op"], g["sizes"], ",".join(map(str, g["dtypes"])) or "-",
                g["where"], "" if g["pending"] else " (completed)"))
    if not ok_dumps(dumps) and a["errors"] and all(e.startswith(NO_TRIGGER) for e in a["errors"].values()):
        return {"summary": "Flight Recorder: " + NOT_TORCH, "verdict": None, "suspect_ranks": None,
                "groups": [], "text": ["Flight Recorder: %s (%s %s)" % (NOT_TORCH, ranks_label(a["errors"]),
                                                                           _NOT_TORCH_WHY)] + warns, "pgs": []}
    by_reason: Dict[str, list] = {}
    for r, err in sorted(a["errors"].items()):
        by_reason.setdefault(_generic(err), []).append((r, err))
    for generic, items in by_reason.items():
        text.append("%s: no dump: %s" % (ranks_label([r for r, _ in items]),
                                         items[0][1] if len(items) == 1 else generic))
    if a["empty"]:
        text.append("rank(s) %s: empty Flight Recorder buffer (armed after the process group was created, or "
                    "TORCH_FR_BUFFER_SIZE=0)" % format_ranks(a["empty"]))
    summary = "Flight Recorder: %s" % (a["verdict"] or "no collective in flight")
    if a["suspect_ranks"]:
        summary += " (ranks %s)" % format_ranks(a["suspect_ranks"])
    args = next((f for f in a["pgs"] if f["pg"] == a["chosen"] and f["kind"] == "args"), None)
    if a["verdict"] == "SAME_LINE_DIFFERENT_ARGS" and args is not None:
        g0 = args["groups"][0]
        summary += ": %s seq %d at %s with different sizes: %s" % (
            g0["op"], g0["seq"], g0["where"], "; ".join(
                "%s sizes %s%s" % (ranks_label(g["ranks"]), g["sizes"],
                                   "" if g["dtypes"] == g0["dtypes"] else " dtypes %s" % ",".join(map(str, g["dtypes"])))
                for g in args["groups"]))
    m = membership(dumps)
    if m is not None:
        text.append("by process-group membership: suspect %s: %s" % (ranks_label(m["suspects"]), m["why"]))
    sec = {"summary": summary, "verdict": a["verdict"],
           "suspect_ranks": a["suspect_ranks"] if a["verdict"] not in (None, "TOGETHER") else None,
           "groups": a["groups"], "text": text + warns, "pgs": a["pgs"]}
    if m is not None:
        sec["membership"] = m
    return sec


# --- torchfrtrace-compatible copies ---------------------------------------------

def fixed_for_torchfrtrace(dumps: List[FRDump]) -> Dict[int, dict]:
    """Dump dicts whose ``pg_config`` torchfrtrace accepts: one entry per process group, keyed by its
    name, with its ranks (default group: every dumped rank; sub-groups: the ranks that recorded
    entries in them). gloo keys its only entry by ``''`` and leaves sub-groups out."""
    members: Dict[str, set] = {}
    descs: Dict[str, str] = {}
    good = [d for d in dumps if not d.error and d.raw.get("entries") is not None]
    for d in good:
        for e in d.entries:
            members.setdefault(e.pg, set()).add(d.rank)
            descs.setdefault(e.pg, e.pg_desc)
    world = sorted(d.rank for d in good)
    out = {}
    for d in good:
        raw = dict(d.raw)
        cfg = {k: dict(v) for k, v in (raw.get("pg_config") or {}).items() if k != ""}
        for pg, rs in members.items():
            ranks = world if descs.get(pg) == "default_pg" else sorted(rs)
            if pg not in cfg or not cfg[pg].get("ranks") or cfg[pg].get("ranks") == "[]":
                cfg[pg] = {"name": pg, "desc": descs.get(pg) or pg, "ranks": str(ranks)}
        raw["pg_config"] = cfg
        ents = []
        for e in raw.get("entries") or []:
            e = dict(e)
            if isinstance(e.get("process_group"), list):
                e["process_group"] = tuple(e["process_group"])
            e.setdefault("frames", [])
            for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
                if e.get(k) == 0:
                    e[k] = None
            ents.append(e)
        raw["entries"] = ents
        out[d.rank] = raw
    return out


def write_torchfrtrace(dumps: List[FRDump], out_dir: str, prefix: str = "rank_") -> List[str]:
    """Write ``<out_dir>/<prefix><rank>`` pickles for ``torchfrtrace <out_dir> -p <prefix>``; return paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for rank, raw in sorted(fixed_for_torchfrtrace(dumps).items()):
        p = os.path.join(out_dir, "%s%d" % (prefix, rank))
        with open(p, "wb") as f:
            pickle.dump(raw, f)
        paths.append(p)
    return paths


SOURCE = Source("flight_recorder", section_dir=layout.FLIGHT_RECORDER_DIR, capture=capture_hook,
                section=section_from_dir)
