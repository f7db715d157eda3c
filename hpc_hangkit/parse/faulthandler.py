"""Pure parser of faulthandler stack dumps (the watchdog logs ranks write).

Input is the bytes of one file; nothing here touches the file system or the
clock. The shapes CPython (3.8 .. 3.13) writes, all handled, also mixed in one
file:

1. ``dump_traceback_later`` (timeout): a ``Timeout (h:mm:ss)!`` line, then one
   ``Thread 0x... (most recent call first):`` block per thread, blocks
   separated by a blank line; the main thread is the LAST block (CPython lists
   the newest thread first). With ``all_threads=False``: ``Timeout`` then a
   ``Stack (most recent call first):`` block.
2. ``faulthandler.register(sig, all_threads=True)`` (signal): no header line;
   the thread that got the signal is marked ``Current thread 0x...``; blocks of
   one dump are separated by a blank line, and consecutive dumps have NO
   separator: a thread header right after a frame line starts a new dump.
3. ``faulthandler.register(sig, all_threads=False)``: one
   ``Stack (most recent call first):`` block per dump, no separator, no
   timestamp. This is what the hpc-hangkit watchdog writes.

Also understood: ``<no Python frame>`` threads, ``  ...`` (stack deeper than
faulthandler's 100-frame limit), ``File "???", line ???`` and fatal-error dumps
(``Fatal Python error: Segmentation fault`` ... ``Extension modules: ...``),
which become a :class:`Sample` with ``fatal`` set: the process died there.

Header lines: ``# hpc-hangkit rank=<r> world=<w|-> local_rank=<l|-> pid=<pid>
host=<host> t=<epoch s> signal=<SIG> period_s=<p> argv=<JSON list>`` (see
docs/internals.md) and the research probe's ``# hangkit-probe rank=.. pid=..
host=.. t=.. argv=..``. Other ``# `` lines are comments; a comment carrying
``t=<epoch s>`` stamps the next dump.

Bad input never raises: binary garbage, interleaved writers and a truncated
tail are skipped, each with a warning naming the file and the byte offset.
"""
import ast
import json
import re
from typing import Dict, List, Optional, Tuple

from hpc_hangkit.parse.model import Frame, LogKind, ParsedLog, Sample, Thread, frame

__all__ = ["parse_faulthandler", "parse_header", "looks_like_faulthandler"]

_FRAME_RE = re.compile(r'^  File "(.*)", line (\d+|\?\?\?) in (.*)$')
_THREAD_RE = re.compile(
    r"^(Current thread|Thread) (0x[0-9a-fA-F]+|\d+)(?: \[(.*?)\])? \(most recent call first\):$")
_TIMEOUT_RE = re.compile(r"^Timeout \((\d+):(\d\d):(\d\d(?:\.\d+)?)\)!$")
_STACK = "Stack (most recent call first):"
_HEADER_TAGS = ("# hpc-hangkit ", "# hangkit-probe ")
# lines of a fatal-error report that carry no frames
_FATAL_NOISE = ("Python runtime state:", "Extension modules:", "(total:", "Current thread's C stack",
                "  Binary file ", "  <tstate is freed>", "<Cannot show all threads",
                "Thread 0x0 ", "  <unknown>")
_SKIP_FRAME_LINES = ("  ...", "  <tstate is freed>", "  <invalid thread state>", "  <truncated",
                     "  <unknown>")

_INT_KEYS = ("rank", "world", "local_rank", "pid")
_ARGV_CACHE: Dict[str, tuple] = {}

#: raw frame line (bytes, exactly as written) -> Frame, shared by all files: at scale every
#: rank writes the same few lines, so most lines are one dict lookup (bounded)
_LINE_CACHE: Dict[bytes, Frame] = {}
#: interned chains (tuples of frames): equal stacks are one object across samples and files
_CHAINS: Dict[tuple, tuple] = {}


def _chain(frames: list) -> tuple:
    t = tuple(frames)
    c = _CHAINS.get(t)
    if c is None:
        if len(_CHAINS) > 200_000:
            _CHAINS.clear()
        c = _CHAINS[t] = t
    return c
_FLOAT_KEYS = ("t", "period_s")


def parse_header(text: str) -> Optional[Dict]:
    """Parse one ``# hpc-hangkit ...`` / ``# hangkit-probe ...`` line into a dict.

    Ints for rank/world/local_rank/pid (``-`` -> None), floats for t/period_s,
    ``argv`` as a list when it parses (JSON, else Python literal), else the raw
    text. Returns None if the line is not a header.
    """
    tag = None
    for t in _HEADER_TAGS:
        if text.startswith(t):
            tag = t
            break
    if tag is None:
        return None
    body = text[len(tag):]
    argv = None
    cut = body.find(" argv=")
    if body.startswith("argv="):
        cut = -1
        argv, body = body[5:], ""
    elif cut >= 0:
        argv, body = body[cut + 6:], body[:cut]
    out: Dict = {"format": tag[2:].strip()}
    for tok in body.split():
        k, sep, v = tok.partition("=")
        if not sep:
            continue
        if k in _INT_KEYS:
            try:
                out[k] = None if v in ("-", "") else int(v)
            except ValueError:
                out[k] = None
        elif k in _FLOAT_KEYS:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = None
        else:
            out[k] = v
    if argv is not None:
        val = _ARGV_CACHE.get(argv)
        if val is None:
            val = argv
            try:
                val = json.loads(argv)
            except (ValueError, RecursionError):
                try:
                    val = ast.literal_eval(argv)
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    pass
            if len(_ARGV_CACHE) < 1000 and isinstance(val, list):
                _ARGV_CACHE[argv] = tuple(val)
        out["argv"] = list(val) if isinstance(val, tuple) else val
    return out


_SNIFF_RE = re.compile(
    rb"^(?:(?:Current thread|Thread) (?:0x[0-9a-fA-F]+|\d+)(?: \[.*?\])? \(most recent call first\):"
    rb"|Stack \(most recent call first\):|Timeout \(\d+:\d\d:\d\d(?:\.\d+)?\)!|Fatal Python error: )",
    re.M)


def looks_like_faulthandler(data: bytes) -> bool:
    """True if the bytes start with our header or hold a faulthandler dump line
    (thread header, ``Stack``, ``Timeout``, ``Fatal Python error``) in the first 64 KiB."""
    if data.startswith(b"# hpc-hangkit ") or data.startswith(b"# hangkit-probe "):
        return True
    return _SNIFF_RE.search(data[:65536]) is not None


class _Builder:
    """Collects dumps line by line; keeps the byte offsets for warnings."""

    def __init__(self, name: str):
        self.name = name
        self.samples: List[Sample] = []
        self.warnings: List[str] = []
        self.cur: Optional[dict] = None  # open dump: {threads, source, offset, fatal, damaged, t}
        self.thread: Optional[dict] = None  # open thread block
        self.pending_t: Optional[float] = None
        self.blank_before = False
        self.has_header = False
        self.timeout_s = None

    def warn(self, offset: int, what: str):
        if len(self.warnings) < 50:
            self.warnings.append("%s: byte %d: %s" % (self.name, offset, what))
        elif len(self.warnings) == 50:
            self.warnings.append("%s: more problems; further warnings for this file suppressed" % self.name)

    def open_dump(self, source: str, offset: int, fatal: Optional[str] = None):
        self.close_dump()
        self.cur = {"threads": [], "source": source, "offset": offset, "fatal": fatal,
                    "damaged": None, "t": self.pending_t}
        self.pending_t = None

    def open_thread(self, tid: str, current: bool, name: Optional[str], offset: int):
        cur = self.cur
        if cur is None or (cur["threads"] and self.thread is not None and not self.blank_before) or (
                tid is not None and any(t["tid"] == tid for t in cur["threads"])):
            # a thread header with no "Timeout"/"Fatal" line before it starts a signal dump
            self.open_dump("signal", offset)
            cur = self.cur
        self.close_thread()
        self.thread = {"tid": tid, "current": current, "name": name, "frames": [], "no_python": False,
                       "offset": offset}
        cur["threads"].append(self.thread)

    def close_thread(self):
        self.thread = None

    def close_dump(self, truncated: bool = False):
        cur = self.cur
        self.cur = None
        self.thread = None
        if cur is None:
            return
        if cur["damaged"] is not None:
            self.warn(cur["damaged"], "dump starting at byte %d is damaged (interleaved or garbage "
                                      "lines); skipped" % cur["offset"])
            return
        threads = []
        for t in cur["threads"]:
            if not t["frames"] and not t["no_python"]:
                if cur["fatal"] and len(cur["threads"]) > 0:
                    continue  # a fatal report may list an empty thread; the rest still counts
                self.warn(t["offset"], "thread %s has no frames (dump cut short); dump skipped" % t["tid"])
                return
            threads.append(Thread(t["tid"] or "", _chain(t["frames"]), name=t["name"],
                                  current=t["current"], no_python=t["no_python"]))
        if not threads:
            if cur["fatal"]:
                threads = []
            else:
                self.warn(cur["offset"], "dump header with no thread block; skipped")
                return
        self.samples.append(Sample(threads, t=cur["t"], source=cur["source"], index=len(self.samples),
                                   offset=cur["offset"], fatal=cur["fatal"]))

    def add_frame(self, text: str, offset: int, raw: bytes = b"") -> bool:
        m = _FRAME_RE.match(text)
        if m is None:
            return False
        ln = m.group(2)
        f = frame(m.group(1), int(ln) if ln != "???" else 0, m.group(3))
        if raw:
            if len(_LINE_CACHE) > 500_000:
                _LINE_CACHE.clear()
            _LINE_CACHE[raw] = f
        return self.add_frame_obj(f, offset)

    def add_frame_obj(self, f: Frame, offset: int) -> bool:
        if self.thread is None:
            # a frame line with no thread header: the header was lost (truncation, interleaving)
            if self.cur is not None:
                if self.cur["damaged"] is None:
                    self.cur["damaged"] = offset
            else:
                self.warn(offset, "frame line outside any dump; skipped")
            return True
        self.thread["frames"].append(f)
        return True


def parse_faulthandler(data: bytes, name: str = "<bytes>") -> ParsedLog:
    """Parse one faulthandler log (any mix of the three shapes) into a :class:`ParsedLog`.

    ``data``: the file's bytes; ``name``: how warnings name the file. Rank, pid,
    host and world come from the header line when there is one (else None; the
    caller may derive the rank from the file name). Never raises on bad input:
    garbage, interleaved and truncated parts are skipped, each with a warning
    ``"<name>: byte <offset>: <what>"`` in ``.warnings``.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        data = str(data).encode("utf-8", "replace")
    data = bytes(data)
    log = _parse_blocks(data, name)
    if log is None:
        log = _parse_lines(data, name)
    _drop_interleaved(log)
    return log


def _drop_interleaved(log: ParsedLog) -> None:
    """Skip, with a warning, two neighbouring dumps that are one dump written into the
    middle of another: faulthandler's C dump writes a line at a time, the watchdog thread's
    Python dump in one write, so when the kernel timer and an on-demand request fire
    together (a loaded node) the log holds the first dump's head (its innermost frames ``A``),
    then the second dump whole (``X``), then the first one's tail (``Y``), parsed as two
    dumps ``A`` and ``X + Y`` with ``A + Y == X``: a cut stack and one that repeats its own
    outer frames, two false positions. Each dump is one thread; other shapes are left."""
    smp = log.samples
    i, bad = 0, []
    while i + 1 < len(smp):
        a, b = smp[i], smp[i + 1]
        if len(a.threads) == 1 and len(b.threads) == 1 and not a.fatal and not b.fatal:
            fa, fb = a.threads[0].frames, b.threads[0].frames
            n = len(fb) - len(fa)
            if fa and n > 0 and n % 2 == 0:
                y = fb[len(fb) - n // 2:]
                x = fb[:len(fb) - n // 2]
                if tuple(fa) + tuple(y) == tuple(x):
                    bad += [i, i + 1]
                    i += 2
                    continue
        i += 1
    if not bad:
        return
    for k in range(0, len(bad), 2):
        log.warnings.append("%s: byte %d: dumps at bytes %d and %d are one dump written into another "
                            "(interleaved writers); both skipped" % (log.name, smp[bad[k]].offset,
                                                                    smp[bad[k]].offset, smp[bad[k + 1]].offset))
    drop = set(bad)
    log.samples = [x for j, x in enumerate(smp) if j not in drop]
    for j, x in enumerate(log.samples):
        x.index = j


#: one dump's bytes (marker line included) -> the Sample it parses to (threads, source, fatal)
_BLOCK_CACHE: Dict[bytes, tuple] = {}
_STACK_SPLIT = b"\nStack (most recent call first):\n"
_TIMEOUT_SPLIT = b"\nTimeout ("


#: a clean log's body (all after its header line, or the whole file without one) -> its
#: samples as ``(threads, source, fatal, offset in the body)`` and the period: at scale most
#: ranks write byte-identical dumps under their own header line. Bucketed by (header
#: present, body length, last bytes), each candidate confirmed byte for byte, so that a hit
#: neither hashes nor copies the body; bounded in bytes.
_BODY_CACHE: Dict[tuple, list] = {}
_BODY_CACHE_MAX = 64 * 1024 * 1024
_body_cache_bytes = 0


def _body_start(data: bytes) -> int:
    """Where a log's body starts: after the first line when it is a ``# `` line, else 0;
    -1 for a ``# `` line with no end (no body)."""
    if not data.startswith(b"# "):
        return 0
    return data.find(b"\n") + 1 or -1


def _parse_blocks(data: bytes, name: str) -> Optional[ParsedLog]:
    """Fast path for the common case at scale: a clean log of ``Stack`` or ``Timeout`` dumps
    (each dump starts with its marker line), where a stuck rank repeats the same dump.
    A body seen before (:data:`_BODY_CACHE`) is not looked at again; else each distinct
    dump is parsed once (by the line parser) and reused. Anything unusual (a warning, a
    comment, a truncated tail, a dump that splits in two) returns None and the caller
    parses the whole file line by line."""
    global _body_cache_bytes
    start = _body_start(data)
    if start < 0:
        return None
    key = (start > 0, len(data) - start, data[-128:])
    # the body's result does not depend on the header line (which holds no dump marker)
    got = next(((protos, period) for body, protos, period in _BODY_CACHE.get(key, ())
                if data.startswith(body, start)), None)  # of the key's length: the same body
    if got is None:
        parsed = _parse_body_blocks(data, name)
        if parsed is None:
            return None
        got = (tuple((tuple(s.threads), s.source, s.fatal, s.offset - start) for s in parsed[0]), parsed[1])
        if len(_BODY_CACHE.get(key, ())) < 8 and _body_cache_bytes + len(data) - start <= _BODY_CACHE_MAX:
            _BODY_CACHE.setdefault(key, []).append((data[start:],) + got)
            _body_cache_bytes += len(data) - start
    protos, period = got
    samples = [Sample(th, source=src, index=i, offset=start + rel, fatal=fat)
               for i, (th, src, fat, rel) in enumerate(protos)]
    header = parse_header(data[:start - 1].decode("utf-8", "replace").rstrip("\r")) if start else None
    return _finish(ParsedLog(name, header=header, samples=samples, kind=LogKind.FAULTHANDLER), period, None)


def _parse_body_blocks(data: bytes, name: str) -> Optional[Tuple[List[Sample], Optional[float]]]:
    """:func:`_parse_blocks` without the body cache: ``(samples, period from the Timeout
    line)``, or None off the fast path. Splits at the dump markers; each distinct dump is
    parsed once by the line parser (:data:`_BLOCK_CACHE`)."""
    if not data.endswith(b"\n") or b"\n# " in data:
        return None
    if _TIMEOUT_SPLIT in data:
        sep = _TIMEOUT_SPLIT
    elif _STACK_SPLIT in data:
        sep = _STACK_SPLIT
    else:
        return None
    parts = data.split(sep)
    head = parts[0]
    if head.startswith(b"# "):
        if b"\n" in head:
            return None  # the first dump follows the header without our separator shape
        hline = head
    elif head in (b"Stack (most recent call first):", b"") or head.startswith(b"Timeout ("):
        hline = None
    else:
        return None
    marker = sep[1:]
    offset = len(head) + 1
    samples: List[Sample] = []
    if hline is None:
        # the file starts with a dump: re-attach its marker
        first = head + b"\n"
        blocks = [first] + [marker + p + b"\n" for p in parts[1:-1]] + (
            [marker + parts[-1]] if len(parts) > 1 else [])
        offset = 0
        if len(parts) == 1:
            blocks = [data]
    else:
        blocks = [marker + p + b"\n" for p in parts[1:-1]] + [marker + parts[-1]]
    cache = _BLOCK_CACHE
    for blk in blocks:
        hit = cache.get(blk)
        if hit is None:
            sub = _parse_lines(blk, name)
            if sub.warnings or len(sub.samples) != 1 or sub.header is not None:
                return None
            s0 = sub.samples[0]
            hit = (tuple(s0.threads), s0.source, s0.fatal, sub.period_s)
            if len(cache) > 50_000:
                cache.clear()
            cache[blk] = hit
        samples.append(Sample(hit[0], source=hit[1], index=len(samples), offset=offset, fatal=hit[2]))
        offset += len(blk)
    return samples, (cache.get(blocks[0]) or (None,) * 4)[3]


def _finish(log: ParsedLog, period_s: Optional[float], truncated_at: Optional[int]) -> ParsedLog:
    """Identity from the header, the period, and how the process ended (fatal dump, cut tail)."""
    header = log.header
    if header:
        log.rank = header.get("rank")
        log.pid = header.get("pid")
        log.host = header.get("host")
        log.world = header.get("world")
        log.period_s = header.get("period_s")
    if log.period_s is None and period_s:
        log.period_s = float(period_s)
    fatal = [x for x in log.samples if x.fatal]
    if fatal:
        log.exit_note = "Fatal Python error: %s" % fatal[-1].fatal
    elif truncated_at is not None:
        log.exit_note = ("log ends mid-dump at byte %d: the process likely died while writing it"
                         % truncated_at)
    return log


def _parse_lines(data: bytes, name: str) -> ParsedLog:
    """The line-by-line parser (every shape, every kind of damage)."""
    b = _Builder(name)
    header = None
    truncated_at = None
    if data and not data.endswith(b"\n"):
        truncated_at = data.rfind(b"\n") + 1
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    offset = 0
    b.blank_before = False
    garbage_start = None
    garbage_n = 0
    lcache = _LINE_CACHE
    for raw in lines:
        off = offset
        offset += len(raw) + 1
        f = lcache.get(raw)
        if f is not None and (truncated_at is None or off < truncated_at):
            # hot path: a frame line seen before (in any file) is known clean and parsed
            if garbage_start is not None:
                b.warn(garbage_start, "%d line(s) of binary garbage skipped" % garbage_n)
                garbage_start, garbage_n = None, 0
            th = b.thread
            if th is not None:
                th["frames"].append(f)
            else:
                b.add_frame_obj(f, off)
            b.blank_before = False
            continue
        if truncated_at is not None and off >= truncated_at:
            # the last line is incomplete: the whole dump it belongs to is unreliable
            if b"\x00" in raw or not _decodes(raw):
                if garbage_start is None:
                    garbage_start = off
                garbage_n += 1
            b.warn(off, "file ends mid-line (truncated: the writer died or the copy was cut); "
                        "the incomplete last dump is skipped")
            if b.cur is not None:
                b.cur["damaged"] = None
                b.cur = None
                b.thread = None
            break
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        bad = b"\x00" in raw
        text = None
        if not bad:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                bad = True
        if bad:
            if garbage_start is None:
                garbage_start = off
            garbage_n += 1
            if b.cur is not None and b.cur["damaged"] is None:
                b.cur["damaged"] = off
            b.blank_before = False
            continue
        if garbage_start is not None:
            b.warn(garbage_start, "%d line(s) of binary garbage skipped" % garbage_n)
            garbage_start, garbage_n = None, 0
        # frame lines first: by far the most common
        if text.startswith("  File "):
            if not b.add_frame(text, off, raw):
                _unknown(b, off, text)
            b.blank_before = False
            continue
        if not text:
            b.blank_before = True
            b.thread = None if b.cur is None or not b.cur["fatal"] else b.thread
            continue
        prev_blank = b.blank_before
        b.blank_before = False
        if text.startswith("Thread ") or text.startswith("Current thread "):
            m = _THREAD_RE.match(text)
            if m is None:
                if b.cur is not None and b.cur["fatal"]:
                    continue
                _unknown(b, off, text)
                continue
            b.blank_before = prev_blank
            b.open_thread(m.group(2), m.group(1) == "Current thread", m.group(3), off)
            b.blank_before = False
            continue
        if text == _STACK:
            if b.cur is not None and b.cur["source"] in ("timeout", "fatal") and not b.cur["threads"]:
                pass  # "Timeout ...!" or a fatal report followed by a single-thread stack
            else:
                b.open_dump("stack", off)
            b.thread = {"tid": None, "current": True, "name": None, "frames": [], "no_python": False,
                        "offset": off}
            b.cur["threads"].append(b.thread)
            continue
        if text.startswith("Timeout ("):
            m = _TIMEOUT_RE.match(text)
            if m and len(m.group(1)) < 300:  # float() of a 300-digit hour count overflows
                b.timeout_s = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
                b.open_dump("timeout", off)
                continue
        if text.startswith("Fatal Python error: "):
            b.open_dump("fatal", off, fatal=text[len("Fatal Python error: "):].strip() or "fatal error")
            continue
        if text == "  <no Python frame>":
            if b.thread is not None:
                b.thread["no_python"] = True
            continue
        if text.startswith(_SKIP_FRAME_LINES):
            continue
        if text.startswith("# "):
            h = parse_header(text)
            if h is not None:
                b.has_header = True
                if header is None:
                    header = h
                elif h.get("pid") != header.get("pid"):
                    b.warn(off, "second header line for another process (pid %s); its dumps are "
                                "attributed to the first header's rank" % h.get("pid"))
            else:
                for tok in text[2:].split():
                    k, sep, v = tok.partition("=")
                    if sep and k == "t":
                        try:
                            b.pending_t = float(v)
                        except ValueError:
                            pass
            continue
        if b.cur is not None and b.cur["fatal"] and (text.startswith(_FATAL_NOISE) or prev_blank
                                                    or not text.startswith(" ")):
            continue  # tail of a fatal-error report (extension modules list, C stack, ...)
        _unknown(b, off, text)
    if garbage_start is not None:
        b.warn(garbage_start, "%d line(s) of binary garbage skipped" % garbage_n)
    if b.cur is not None:
        b.close_dump()
    log = ParsedLog(name, header=header, samples=b.samples, warnings=b.warnings, kind=LogKind.FAULTHANDLER)
    return _finish(log, b.timeout_s, truncated_at)


def _decodes(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _unknown(b: _Builder, off: int, text: str):
    """A line that fits no shape: inside a dump it damages that dump; outside a dump it
    is skipped (with a warning only in a watchdog log: other files, e.g. a rank's
    stderr holding a fatal-error dump, have plenty of other text)."""
    if b.cur is not None and not text.startswith(" ") and b.thread is not None and b.thread["frames"]:
        b.close_dump()  # other output right after a complete dump (e.g. in a rank's stderr)
    if b.cur is not None:
        if b.cur["damaged"] is None:
            b.cur["damaged"] = off
        b.thread = None
    elif b.has_header:
        b.warn(off, "unrecognised line skipped: %r" % text[:80])
