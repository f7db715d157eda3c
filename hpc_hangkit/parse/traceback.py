"""Pure parser of Python tracebacks in a rank's stdout/stderr text.

A rank that exits on an exception prints ``Traceback (most recent call
last):`` ... ``ExcType: message``. torch prefixes every line of an uncaught
exception with ``[rank<N>]:``, so one launcher log can hold the tracebacks of
many ranks; without a prefix the caller supplies the rank (from the file name).

:func:`parse_tracebacks` returns, per rank (None when no prefix), the LAST
traceback found: its frames (innermost first, as :class:`Frame`) and its text
lines. Never raises on bad input.
"""
import re
from typing import Dict, List, Optional, Tuple

from hpc_hangkit.parse.exits import Exit, ExitHow
from hpc_hangkit.parse.model import Frame, frame

__all__ = ["parse_tracebacks", "Traceback"]

_PREFIX_RE = re.compile(r"^\[rank(\d+)\]:\s?(.*)$")
_TB_FILE_RE = re.compile(r'^\s*File "(.*)", line (\d+), in (.*)$')
_EXC_RE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning|Fault)?(: .*)?$")


class Traceback:
    """How a rank ended, with the traceback it printed: ``frames`` innermost first,
    ``lines`` as printed, ``error`` (the exception's last line, "" when none), ``end``
    (:class:`~hpc_hangkit.parse.exits.Exit`; by default an uncaught exception with this
    ``error``; an exit record or a vanished record gives its own)."""

    __slots__ = ("frames", "lines", "error", "end")

    def __init__(self, frames: Tuple[Frame, ...], lines: List[str], error: str, end: Optional[Exit] = None):
        self.frames = frames
        self.lines = lines
        self.error = error
        self.end = end if end is not None else Exit(ExitHow.EXCEPTION, error=error or None)

    def __repr__(self):
        return "Traceback(%d frames, %r)" % (len(self.frames), self.error)


def parse_tracebacks(data: bytes, name: str = "<bytes>") -> Dict[Optional[int], Traceback]:
    """The last Python traceback per rank in one text file.

    ``data``: bytes of a stdout/stderr capture. Lines prefixed ``[rank<N>]:``
    belong to rank N; unprefixed lines to key None. Returns ``{rank|None:
    Traceback}`` (empty when there is none).
    """
    if not isinstance(data, (bytes, bytearray)):
        data = str(data).encode("utf-8", "replace")
    if b"Traceback (most recent call last):" not in data:
        return {}
    streams: Dict[Optional[int], List[str]] = {}
    for raw in bytes(data).split(b"\n"):
        text = raw.decode("utf-8", "replace").rstrip("\r")
        m = _PREFIX_RE.match(text)
        if m:
            streams.setdefault(int(m.group(1)), []).append(m.group(2))
        else:
            streams.setdefault(None, []).append(text)
    out: Dict[Optional[int], Traceback] = {}
    for rank, lines in streams.items():
        tb = _last_traceback(lines)
        if tb is not None:
            out[rank] = tb
    return out


def _last_traceback(lines: List[str]) -> Optional[Traceback]:
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip() == "Traceback (most recent call last):":
            start = i
            break
    if start is None:
        return None
    frames: List[Frame] = []
    body = [lines[start]]
    error = ""
    for text in lines[start + 1:]:
        m = _TB_FILE_RE.match(text)
        if m:
            frames.append(frame(m.group(1), int(m.group(2)), m.group(3)))
            body.append(text)
            continue
        if text.startswith(" ") or not text.strip():
            body.append(text)  # source line, carets
            continue
        if text.startswith("During handling") or text.startswith("The above exception"):
            body.append(text)
            continue
        if _EXC_RE.match(text.split(" ", 1)[0].rstrip(":")) or ":" in text:
            error = text.strip()
            body.append(text)
            break
        break
    if not frames:
        return None
    while body and not body[-1].strip():
        body.pop()
    return Traceback(tuple(reversed(frames)), body, error)
