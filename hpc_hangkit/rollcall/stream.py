"""Node summary files merged as a stream: each ``*.summary.json`` read, folded into a
:class:`hpc_hangkit.rollcall.nodes.StreamMerge` and dropped, so that a million ranks (125k
nodes x 8) are merged with one summary in memory at a time besides the merge itself (ranks
as runs per position; see :func:`hpc_hangkit.rollcall.nodes.merge`).

:func:`merge_files` streams ``*.summary.json`` files through it; :func:`write_merged`
writes the merge of a group of node summaries (summaries of summaries, e.g. per 1,000
nodes) as one summary file, which the roll call reads like any node summary, so that the
process that builds the report reads 125 files instead of 125,000.
"""
import json
from typing import Iterable, List

from hpc_hangkit import fsio
from hpc_hangkit.rollcall.facts import SUMMARY_VERSION
from hpc_hangkit.rollcall.nodes import StreamMerge, no_cyclic_gc

__all__ = ["MAX_SUMMARY_BYTES", "merge_files", "write_merged"]

#: a summary file larger than this is not read (a whole 1M-rank job's summary is ~100 MB)
MAX_SUMMARY_BYTES = 1 << 30


def _read_summaries(paths: Iterable[str], warnings: List[str]):
    for p in paths:
        try:
            data = fsio.read_regular(p, limit=MAX_SUMMARY_BYTES + 1)
            if len(data) > MAX_SUMMARY_BYTES:
                raise ValueError("larger than %d bytes" % MAX_SUMMARY_BYTES)
            doc = json.loads(data.decode("utf-8"))
            del data
            if not isinstance(doc, dict) or doc.get("hangkit_summary") != SUMMARY_VERSION:
                raise ValueError("not a version-%d node summary" % SUMMARY_VERSION)
        except OSError as e:
            warnings.append("%s: cannot read (%s); skipped" % (p, e.strerror or e))
            continue
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            warnings.append("%s: node summary unreadable (%s); skipped" % (p, e))
            continue
        yield doc


def merge_files(paths: Iterable[str]) -> dict:
    """The merge of the ``*.summary.json`` files ``paths``, each read (no symlink followed,
    regular files only, at most :data:`MAX_SUMMARY_BYTES`), folded in and dropped: one
    summary in memory at a time besides the merge. A file that cannot be read or is no
    version-1 summary is skipped with a line in the result's ``warnings``."""
    warns: List[str] = []
    m = StreamMerge(share=True)
    with no_cyclic_gc():
        for doc in _read_summaries(paths, warns):
            m.add(doc)
        m.warnings.update(warns)
    return m.result()


def write_merged(paths: Iterable[str], out_path: str) -> dict:
    """Merge the summary files ``paths`` (:func:`merge_files`) and write the result to
    ``out_path`` (a ``*.summary.json`` name, written atomically, mode 0600, no symlink
    followed): one summary of summaries, e.g. of 1,000 nodes, for the roll call to read in
    place of them. Returns the merged summary. Raises OSError when it cannot be written."""
    out = merge_files(paths)
    fsio.write_atomic(out_path, json.dumps(out, separators=(",", ":")))
    return out

