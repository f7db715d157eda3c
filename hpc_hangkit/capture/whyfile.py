"""Why-files, and the one rule for two copies of one captured file.

A why-file is the one line a capture step writes where its tool could not
produce output (``hpc-hangkit: py-spy unavailable: ptrace refused``), so a
missing file always says why. Real output is evidence, a why-file is an
excuse: the rule in :func:`choose` decides every case where two versions of
one captured file meet -- a later capture on the same node, another node's
copy sent over srun, a live gather in ``collect JOBID`` -- so that no path
ever loses real output to an excuse or to a shorter copy of itself.
"""
import os
from typing import Optional

from hpc_hangkit import fsio

#: how every why-file starts (:func:`unavailable_line`)
WHY_PREFIX = b"hpc-hangkit: "

#: :func:`choose` answers
WRITE, KEEP, BOTH = "write", "keep", "both"


def unavailable_line(tool: str, why: str) -> str:
    """The one line of a why-file: ``hpc-hangkit: <tool> unavailable: <why>`` (newline-terminated;
    ``why`` folded onto one line, whatever the tool printed)."""
    why = " ".join(str(why).split())
    return "hpc-hangkit: %s unavailable: %s\n" % (tool, why)


def is_why_data(data: bytes) -> bool:
    """True if ``data`` is a one-line why-file (a tool could not produce its output),
    not real captured output (a real dump that merely mentions hpc-hangkit is real)."""
    return data.startswith(WHY_PREFIX) and b" unavailable: " in data[:200] \
        and data.rstrip(b"\n").count(b"\n") == 0


def choose(old: Optional[bytes], new: bytes) -> str:
    """What to do when ``new`` arrives for a path that holds ``old`` (None: nothing there).

    - nothing there: :data:`WRITE`;
    - ``new`` is a why-file: :data:`KEEP` real output, :data:`WRITE` over an older why-file
      (the latest reason is the one that matters);
    - ``new`` is real: :data:`WRITE` over a why-file or over a prefix of itself (a longer copy
      of the same growing file), :data:`KEEP` a longer copy of it, otherwise :data:`BOTH`
      (really different output: the caller stores ``new`` under another name).
    """
    if old is None:
        return WRITE
    if is_why_data(new):
        return KEEP if old and not is_why_data(old) else WRITE
    if not old or is_why_data(old) or new.startswith(old):
        return WRITE
    return KEEP if old.startswith(new) else BOTH


def _read_head(path: str, n: Optional[int] = None) -> Optional[bytes]:
    """The file's bytes (all, or the first ``n``), or None if there is no readable regular file."""
    try:
        return fsio.read_regular(path, limit=fsio.DEFAULT_LIMIT if n is None else n)
    except OSError:
        return None


def write_why_file(path: str, tool: str, why: str) -> str:
    """Write the one-line why-file at ``path`` (parents created) unless :func:`choose` keeps
    what is there (real output from an earlier capture where the tool worked); returns ``path``.
    Raises OSError if the directory or file cannot be written."""
    data = unavailable_line(tool, why).encode("utf-8", "replace")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if choose(_read_head(path, 4096), data) == KEEP:
        return path
    fsio.write_atomic(path, data)
    return path


def alt_name(rel: str, host: str) -> str:
    """Where :data:`BOTH` puts the second copy: ``dir/stem.<host>.ext`` (host reduced to
    ``[A-Za-z0-9_.-]``, ``unknown`` if empty)."""
    safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in host) or "unknown"
    head, _, base = rel.rpartition("/")
    stem, dot, ext = base.rpartition(".")
    if not dot or not stem:
        stem, ext = base, ""
    return "%s%s.%s%s" % (head + "/" if head else "", stem, safe, ("." + ext) if ext else "")


def merge_file(path: str, data: bytes, host: str) -> Optional[str]:
    """Apply :func:`choose` to the file at ``path`` and write ``data`` (atomically, via a
    temp file) where the rule says: at ``path``, at :func:`alt_name` (``host`` names the
    sender), or nowhere. A symlink at ``path`` is never written through (the data goes
    nowhere). Returns the path written or None. Raises OSError if writing fails."""
    if os.path.islink(path):
        return None
    old = _read_head(path) if os.path.lexists(path) else None
    if os.path.lexists(path) and old is None:
        return None                      # there, but not a readable regular file
    what = choose(old, data)
    if what == KEEP:
        return None
    if what == BOTH:
        d, base = os.path.split(path)
        path = os.path.join(d, alt_name(base, host))
        if os.path.lexists(path):
            return None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fsio.write_atomic(path, data)
    return path
