"""Can an output path be written?  Checked before any work starts, so a command that
would run for minutes refuses an unusable ``--out`` at once (used by the CLI's output
options: report --svg/--summary-out, run --out/--json-out, collect --out,
admin build-spank --out)."""
import os
import tempfile

__all__ = ["output_problem"]


def output_problem(path, kind, make_parents):
    """Why ``path`` cannot be written, or None if it can.

    ``kind``: "file" (written with open(path, "w")) or "dir" (created with
    os.makedirs, files made inside). ``make_parents``: the command creates
    missing parent directories itself. The test is real: a temporary file is
    created and removed in the directory that would receive the output (or in
    its nearest existing ancestor when parents are created), so a read-only
    mount, /proc or a missing permission is found as the OS reports it.
    Returns a short reason (str) such as ``"it is a directory"``; never raises
    for an unusable path.
    """
    ap = os.path.abspath(path)
    if kind == "file":
        if os.path.isdir(ap):
            return "it is a directory"
        where = os.path.dirname(ap)
    else:
        if os.path.lexists(ap) and not os.path.isdir(ap):
            return "it exists and is not a directory"
        where = ap
    if not os.path.isdir(where):
        anc = where
        while not os.path.lexists(anc) and os.path.dirname(anc) != anc:
            anc = os.path.dirname(anc)
        if not make_parents or not os.path.isdir(anc):
            if os.path.lexists(anc) and not os.path.isdir(anc):
                return "%s is not a directory" % anc
            return "directory %s does not exist (create it first)" % where
        where = anc
    try:
        fd, probe = tempfile.mkstemp(prefix=".hangkit-probe-", dir=where)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return "cannot create files in %s: %s" % (where, e.strerror or e)
    return None
