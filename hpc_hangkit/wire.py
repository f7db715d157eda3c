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


def parse_docs(text: str) -> List[dict]:
    """The documents framed by :func:`emit_doc` in ``srun`` output ``text`` (with or without
    ``-l`` labels, lines of several nodes interleaved, other lines ignored). Incomplete or
    corrupt documents are skipped with a warning; never raises for bad input."""
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
