"""The srun framing: documents a node prints and the one that started the step reads.

``srun`` merges the output of every node of a step line by line and cuts long
lines, so a node's answer (``hpc-hangkit slurm-probe``, ``slurm-capture``) is
one JSON document written as short tagged lines (:func:`emit_doc`), read back
from the interleaved output by :func:`parse_docs`. File contents travel
base64-encoded (:func:`encode_files` / :func:`decode_files`).
"""
import base64
import json
import logging
import os
import socket
from typing import Dict, List, Mapping

log = logging.getLogger("hpc_hangkit.wire")

#: line prefix of a framed document (see :func:`emit_doc`)
DOC_TAG = "hpc-hangkit-doc"
#: characters of payload per framed line: srun splits longer output lines
DOC_CHUNK = 400


def encode_files(files: Dict[str, dict]) -> dict:
    """``{rel: {"size", "offset", "data" (bytes)}}`` (a node's files, ``data`` read from byte
    ``offset`` of a file of ``size`` bytes) as JSON-able ``{rel: {"size", "offset", "b64"}}``
    (data base64-encoded), for :func:`emit_doc`."""
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


def emit_doc(doc: dict, out) -> None:
    """Write ``doc`` to the text stream ``out`` as short framed lines
    ``hpc-hangkit-doc <id> <i>/<n> <chunk>`` (JSON, zlib, base64; at most
    :data:`DOC_CHUNK` payload characters a line), because ``srun`` cuts long
    output lines into pieces. Raises what writing to ``out`` raises."""
    import zlib
    data = base64.b64encode(zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)).decode()
    did = "%s.%d.%s" % (socket.gethostname(), os.getpid(), os.urandom(4).hex())
    n = max(1, (len(data) + DOC_CHUNK - 1) // DOC_CHUNK)
    for i in range(n):
        out.write("%s %s %d/%d %s\n" % (DOC_TAG, did, i + 1, n, data[i * DOC_CHUNK:(i + 1) * DOC_CHUNK]))
    out.flush()


class DocReader:
    """Reads framed documents (:func:`emit_doc`) from ``srun`` output one line at a time, so
    that each one is decoded as soon as its last line arrives (:meth:`feed`), however the
    nodes' lines interleave. :meth:`incomplete` names the documents begun and not finished."""

    def __init__(self):
        self._parts: Dict[str, Dict[int, str]] = {}
        self._total: Dict[str, int] = {}

    def feed(self, line: str):
        """One output line (with or without a ``-l`` label): the document it completes, or
        None (not a framed line, or the document is not complete yet). A corrupt document
        is skipped with a warning; never raises for bad input."""
        import zlib
        i = line.find(DOC_TAG + " ")
        if i < 0:
            return None
        f = line[i:].split()
        if len(f) != 4 or "/" not in f[2]:
            return None
        k, n = f[2].split("/", 1)
        if not (k.isdigit() and n.isdigit()) or not 1 <= int(k) <= int(n):
            return None
        got = self._parts.setdefault(f[1], {})
        got[int(k)] = f[3]
        self._total[f[1]] = n = int(n)
        if len(got) < n:
            return None
        del self._parts[f[1]], self._total[f[1]]
        try:
            raw = zlib.decompress(base64.b64decode("".join(got[j] for j in range(1, n + 1))))
            doc = json.loads(raw.decode("utf-8"))
        except (ValueError, KeyError, zlib.error) as e:
            log.warning("corrupt answer from %s: %s", f[1], e)
            return None
        return doc if isinstance(doc, dict) else None

    def incomplete(self) -> Dict[str, tuple]:
        """``{document id: (lines received, lines expected)}`` of the documents not finished."""
        return {did: (len(got), self._total[did]) for did, got in self._parts.items()}


def parse_docs(text: str) -> List[dict]:
    """The documents framed by :func:`emit_doc` in ``srun`` output ``text`` (with or without
    ``-l`` labels, lines of several nodes interleaved, other lines ignored), in the order
    they completed (:class:`DocReader`). Incomplete or corrupt documents are skipped with a
    warning; never raises for bad input."""
    rd = DocReader()
    docs = [d for d in map(rd.feed, text.splitlines()) if d is not None]
    for did, (got, n) in rd.incomplete().items():
        log.warning("incomplete answer from %s (%d of %d lines)", did, got, n)
    return docs
