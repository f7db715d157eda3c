"""Pure parser of ``py-spy dump`` output: text or ``--json``, with or without ``--native``.

Input is the bytes py-spy printed for one process (``py-spy dump --pid P``,
0.3.x/0.4.x); nothing here runs py-spy. One dump is one :class:`Sample`.

Text shape::

    Process 7698: /venv/bin/python /jobs/hang_gloo.py
    Python v3.11.7 (/usr/bin/python3.11)

    Thread 7698 (idle): "MainThread"
        all_reduce (torch/distributed/distributed_c10d.py:3252)
        sync_grads (hang_gloo.py:61)
        <module> (hang_gloo.py:85)

Python frames are ``name (file:line)`` (file relative to its ``sys.path``
entry, function as a qualified name); ``--native`` adds C/C++ frames
``name (libfoo.so)`` or ``0x7f.. (libc.so.6)``, kept as ``Frame(native=True)``
so the Python position still groups. ``--locals`` lines are skipped.

JSON shape: a list of threads ``{pid, thread_id, thread_name, os_thread_id,
active, owns_gil, frames: [{name, filename, module, short_filename, line,
...}]}``, frames innermost first; a frame with a ``module`` (a shared object)
is native.

A capture writes its own lines before the dump (``hpc_hangkit.evidence.stacks.capture_header``)::

    # hpc-hangkit-capture tool=py-spy rank=3 pid=7698 host=n1 t=1764622000.123 took_s=0.210 native=no nonblocking=yes
    # hpc-hangkit: native stack not taken: rank 3 waits in all_reduce ... with rank 0, ...

They set the sample's ``t`` (epoch seconds: when the dump was taken), the log's
``host``, and ``header["capture"]`` (the key=value pairs, ``why`` the why-line).

A file that is not a dump (py-spy's ``Error: ...``, or capture's one-line
``hpc-hangkit: py-spy unavailable: <why>``) gives no samples and a warning
carrying that line. Never raises on bad input.
"""
import json
import re
from typing import Dict, List, Optional

from hpc_hangkit.parse.model import Frame, LogKind, ParsedLog, Sample, Thread, frame, no_dump_text

__all__ = ["parse_pyspy", "looks_like_pyspy"]

_PROCESS_RE = re.compile(r"^Process (\d+): ?(.*)$")
_THREAD_RE = re.compile(r'^Thread (0x[0-9a-fA-F]+|\d+) \(([^)]*)\)(?:: "(.*)")?\s*$')
_PYFRAME_RE = re.compile(r"^    (.+) \(([^()]*):(\d+)\)$")
_NATIVE_RE = re.compile(r"^    (.+) \(([^()]*)\)$")
_BARE_RE = re.compile(r"^    (\S.*)$")


_CAPTURE_TAG = b"# hpc-hangkit-capture "
_WHY_TAG = b"# hpc-hangkit: "


def _split_capture_lines(data: bytes):
    """``(fields, why, rest_offset)`` of the capture's lines at the top of ``data``
    (fields {} and why None when there are none)."""
    fields: Dict[str, str] = {}
    why = None
    off = 0
    while data.startswith(_CAPTURE_TAG, off) or (fields and data.startswith(_WHY_TAG, off)):
        nl = data.find(b"\n", off)
        end = len(data) if nl < 0 else nl + 1
        line = data[off:end].decode("utf-8", "replace").strip()
        if line.startswith(_WHY_TAG.decode()):
            why = line[len(_WHY_TAG):]
        else:
            for tok in line[len(_CAPTURE_TAG):].split():
                k, eq, v = tok.partition("=")
                if eq:
                    fields[k] = v
        off = end
    return fields, why, off


def looks_like_pyspy(data: bytes) -> bool:
    """True if the bytes look like py-spy dump output (text or JSON), capture lines allowed."""
    if data.startswith(_CAPTURE_TAG):
        data = data[_split_capture_lines(data[:8192])[2]:]
    head = data[:4096].lstrip()
    if head.startswith(b"Process ") and b"\nThread " in data[:65536]:
        return True
    return head.startswith(b"[") and b'"thread_id"' in head and b'"frames"' in head


def parse_pyspy(data: bytes, name: str = "<bytes>") -> ParsedLog:
    """Parse one ``py-spy dump`` output (text or ``--json``) into a :class:`ParsedLog`.

    ``data``: bytes as printed; ``name``: how warnings name the file. The
    result has one sample (the dump), ``pid`` set from the output, ``rank``
    None (the caller derives it from the file name or the pid). Never raises:
    problems become warnings ``"<name>: byte <offset>: <what>"``.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        data = str(data).encode("utf-8", "replace")
    data = bytes(data)
    fields, why, base = _split_capture_lines(data) if data.startswith(_CAPTURE_TAG) else ({}, None, 0)
    body = data[base:] if base else data
    stripped = body.lstrip()
    if stripped.startswith(b"[") or stripped.startswith(b"{"):
        log = _parse_json(body, name)
    else:
        log = _parse_text(body, name, base)
    if fields:
        _apply_capture(log, fields, why)
    return log


def _apply_capture(log: ParsedLog, fields: Dict[str, str], why: Optional[str]) -> None:
    cap = dict(fields)
    if why:
        cap["why"] = why
    try:
        t = float(fields.get("t", ""))
    except ValueError:
        t = None
    if t is not None and not (t == t and 0 < t < 1e11):  # NaN, or not an epoch time
        t = None
    for smp in log.samples:
        smp.t = t
    if fields.get("host") and not log.host:
        log.host = fields["host"][:255]
    hdr = dict(log.header or {})
    hdr["capture"] = cap
    log.header = hdr


def _warn(log: ParsedLog, offset: int, what: str):
    if len(log.warnings) < 50:
        log.warnings.append("%s: byte %d: %s" % (log.name, offset, what))


def _no_dump(log: ParsedLog, data: bytes):
    first = data.strip().split(b"\n", 1)[0].decode("utf-8", "replace")[:200]
    log.kind = LogKind.UNAVAILABLE
    log.no_dump = first
    log.exit_note = None
    log.warnings.append("%s: %s" % (log.name, no_dump_text(first)))


def _parse_json(data: bytes, name: str) -> ParsedLog:
    log = ParsedLog(name, kind=LogKind.PYSPY)
    try:
        doc = json.loads(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError) as e:
        pos = getattr(e, "pos", 0) or 0
        _warn(log, pos, "py-spy JSON does not parse (%s); file skipped" % (e.__class__.__name__,))
        return log
    if isinstance(doc, dict):
        doc = doc.get("threads") or [doc]
    if not isinstance(doc, list):
        _warn(log, 0, "py-spy JSON is not a list of threads; file skipped")
        return log
    threads = []
    for i, t in enumerate(doc):
        if not isinstance(t, dict) or not isinstance(t.get("frames"), list):
            _warn(log, 0, "thread entry %d has no frame list; skipped" % i)
            continue
        if log.pid is None and isinstance(t.get("pid"), int):
            log.pid = t["pid"]
        frames = []
        for fr in t["frames"]:
            if not isinstance(fr, dict):
                continue
            module = fr.get("module")
            fname = str(fr.get("name") or "?")
            if module:
                frames.append(frame(str(fr.get("short_filename") or module), 0, fname, True))
            else:
                ln = fr.get("line")
                frames.append(frame(str(fr.get("filename") or fr.get("short_filename") or "?"),
                                    ln if isinstance(ln, int) and ln >= 0 else 0, fname))
        tid = t.get("os_thread_id") or t.get("thread_id")
        is_main = (t.get("thread_name") == "MainThread"
                   or (log.pid is not None and t.get("os_thread_id") == log.pid))
        threads.append(Thread(str(tid), tuple(frames), name=t.get("thread_name"), current=is_main,
                              owns_gil=t.get("owns_gil"), active=t.get("active")))
    if threads:
        log.samples.append(Sample(threads, source="pyspy-json", index=0, offset=0))
    else:
        _no_dump(log, data)
    return log


def _parse_text(data: bytes, name: str, base: int = 0) -> ParsedLog:
    log = ParsedLog(name, kind=LogKind.PYSPY)
    truncated = bool(data) and not data.endswith(b"\n")
    lines = data.split(b"\n")
    offset = base
    threads: List[Thread] = []
    cur: Optional[dict] = None
    seen_process = False
    other_pid_at = None
    cache: Dict[str, Frame] = {}
    damaged_at = None

    def close():
        nonlocal cur
        if cur is not None:
            threads.append(Thread(cur["tid"], tuple(cur["frames"]), name=cur["name"],
                                  current=cur["main"], active=cur["active"], owns_gil=cur["gil"]))
        cur = None

    for i, raw in enumerate(lines):
        off = offset
        offset += len(raw) + 1
        if truncated and i == len(lines) - 1:
            _warn(log, off, "file ends mid-line (truncated); the incomplete last thread is skipped")
            cur = None
            break
        if b"\x00" in raw:
            damaged_at = off if damaged_at is None else damaged_at
            continue
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if not text.strip():
            continue
        if text.startswith("    "):
            if cur is None:
                continue
            if text.startswith("        "):
                continue  # --locals: "Arguments:", "Locals:", "name: value"
            f = cache.get(text)
            if f is None:
                m = _PYFRAME_RE.match(text)
                if m is not None:
                    f = frame(m.group(2), int(m.group(3)), m.group(1))
                else:
                    m = _NATIVE_RE.match(text)
                    if m is not None:
                        f = frame(m.group(2), 0, m.group(1), True)
                    else:
                        m = _BARE_RE.match(text)
                        f = frame("?", 0, m.group(1).strip(), True) if m else None
                if f is None:
                    _warn(log, off, "unrecognised frame line skipped: %r" % text[:80])
                    continue
                cache[text] = f
            cur["frames"].append(f)
            continue
        m = _THREAD_RE.match(text)
        if m is not None:
            if other_pid_at is not None:
                continue
            close()
            status = m.group(2)
            tid = m.group(1)
            tname = m.group(3)
            cur = {"tid": tid, "name": tname, "frames": [], "active": "active" in status,
                   "gil": "gil" in status,
                   "main": tname == "MainThread" or (log.pid is not None and tid == str(log.pid))}
            continue
        m = _PROCESS_RE.match(text)
        if m is not None:
            if not seen_process:
                seen_process = True
                log.pid = int(m.group(1))
                log.header = {"format": "py-spy", "pid": log.pid, "cmdline": m.group(2)}
            elif int(m.group(1)) != log.pid and other_pid_at is None:
                close()
                other_pid_at = off
                _warn(log, off, "dump of another process (pid %s) in the same file; only the first "
                                "process is used" % m.group(1))
            continue
        if text.startswith("Python v") or text.startswith("Idle thread") or text.startswith("Native "):
            continue
        if not seen_process and not threads and cur is None:
            break  # not a dump at all (py-spy error text, capture's "unavailable" line)
        _warn(log, off, "unrecognised line skipped: %r" % text[:80])
    close()
    if damaged_at is not None:
        _warn(log, damaged_at, "binary garbage lines skipped")
    if threads:
        log.samples.append(Sample(threads, source="pyspy-text", index=0, offset=0))
    else:
        _no_dump(log, data)
    return log
