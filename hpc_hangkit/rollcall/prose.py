"""The roll call in words: frames as people read them and the verdict's sentences.

The classifier (:mod:`hpc_hangkit.rollcall.verdict`) decides a verdict and returns it
structured (kind, sentence case, the ranks, groups and facts the sentence names);
:func:`explain` writes the ``reason`` (the ``=>`` sentence of the text report, the
``summary`` of report.json) and the ``why`` of an INCONCLUSIVE / NO_HANG verdict.
The classifier calls it, so this module imports no other module of hpc_hangkit.rollcall.
"""
import functools
import json
import re
from typing import List, Optional, Tuple

from hpc_hangkit.parse.exits import Exit, ExitHow
from hpc_hangkit.parse.model import Frame, basename
from hpc_hangkit.ranges import format_ranks, ranks_label

__all__ = ["short_where", "where", "join", "explain", "split_at", "vanished_error",
           "VANISHED_START", "exit_text", "exit_from_text", "exit_public"]


def short_where(f: Frame) -> str:
    """``"base.py:61 in sync_grads"``: a frame as people read it (full path in JSON).
    Line 0 (unknown, or a polling loop over several lines) prints as ``"base.py in f"``."""
    if f.native:
        return "%s (%s)" % (f.function, basename(f.file))
    if not f.line:
        return "%s in %s" % (basename(f.file), f.function)
    return "%s:%d in %s" % (basename(f.file), f.line, f.function)


def where(g) -> str:
    """A group's position (``g.frame``, ``g.collective`` of a :class:`hpc_hangkit.rollcall.verdict.Group`):
    ``"train.py:61 in sync_grads (in all_reduce)"``."""
    f = g.frame
    s = short_where(f) if f else "(no Python frame)"
    if g.collective:
        s += " (in %s)" % g.collective
    return s


def split_at(branch: dict) -> str:
    """The "where the paths split" line of a group's ``branch``
    (:mod:`hpc_hangkit.rollcall.branch`): ``"train.py:35 `if rank == 0:` (rank-dependent if)"``."""
    what = {"if": "if", "loop": "loop", "except": "except handler", "early_exit": "early exit"}.get(
        branch["kind"], branch["kind"])
    return "%s:%d `%s` (%s %s)" % (basename(branch["file"]), branch["line"], branch["text"],
                                   "rank-dependent" if branch["rank_dependent"] else "rank-local", what)


def join(items: List[str], n: int = 4) -> str:
    """``a; b; c`` with at most ``n`` items, then ``and K more``."""
    if len(items) <= n:
        return "; ".join(items)
    return "; ".join(items[:n]) + "; and %d more" % (len(items) - n)


def _is(ranks) -> str:
    return "is" if len(ranks) == 1 else "are"


def _ranks_at(groups) -> str:
    return join(["%s at %s" % (ranks_label(g.ranks), where(g)) for g in groups])


def explain(v) -> Tuple[str, Optional[str]]:
    """``(reason, why)`` for a structured verdict ``v``
    (:class:`hpc_hangkit.rollcall.verdict.Verdict`): ``reason`` is one paragraph naming
    where the collective is and where the bug is; ``why`` is set for the INCONCLUSIVE and
    NO_HANG cases only. Raises KeyError for an unknown ``v.case``."""
    why, reason = _CASES[v.case](v)
    if v.label_groups:
        reason += _labels(v)
    if v.suspect_labels:
        reason += " " + " ".join(
            "%s last checked in at %s." % (("Rank %s" if len(rs) == 1 else "Ranks %s") % format_ranks(rs), json.dumps(lab))
            for lab, rs in v.suspect_labels)
    return reason, why


def _no_hang(v):
    rs = ranks_label(v.checked_in)
    return ("no rank wrote a stack dump; %s checked in (heartbeats)" % rs,
            "no hang seen: no rank stopped long enough for its watchdog to dump, and %s checked in." % rs)


def _cannot_tell(why):
    return why, "cannot tell: %s." % why


def _no_dumps(v):
    return _cannot_tell("no stack dumps found")


def _none_watched(v):
    return _cannot_tell("no rank was watched (%s unwatched)" % ranks_label(v.unwatched))


def _no_usable_sample(v):
    return _cannot_tell("no rank has a usable stack sample (%s)" % "; ".join(v.details))


def _one_rank(v):
    why = "only one rank: a single rank cannot disagree with itself"
    return why, "cannot tell: %s (it is at %s)." % (why, where(v.lead))


#: how the exit error of a vanished rank (:func:`vanished_error`) starts
VANISHED_START = "vanished (pid "
_FATAL_START = "Fatal Python error: "
_SILENT_START = "went silent"


def vanished_error(pids) -> str:
    """The exit error of ranks the monitor saw vanish (their vanished records: the pid gone,
    no exit record); ``pids``: an int or a list of ints. ``"vanished (pid 1234 gone with no
    exit record: SIGKILL, the OOM killer or os._exit)"``, ``"vanished (pids 12, 13 gone
    ...)"``; the report's sentence puts the rank label before it."""
    pids = [pids] if isinstance(pids, int) else sorted(pids)
    return "%s%s gone with no exit record: SIGKILL, the OOM killer or os._exit)" % (
        VANISHED_START if len(pids) == 1 else "vanished (pids ", ", ".join(str(p) for p in pids))


def exit_text(e: Exit) -> str:
    """A rank's exit error in words, from its :class:`~hpc_hangkit.parse.exits.Exit`: what
    the report prints and a node summary stores as ``exit`` (``"exited normally (status
    0)"``, ``"called sys.exit(3): exit status 3"``, the exception's last line, ``"Fatal
    Python error: Segmentation fault"``, :func:`vanished_error`, ``"went silent: ..."``)."""
    how = e.how
    if how is ExitHow.NORMAL:
        return "exited normally (status %d)" % (e.status or 0)
    if how is ExitHow.SYS_EXIT:
        return "called sys.exit(%d): exit status %d" % (e.status or 0, e.status or 0)
    if how is ExitHow.FATAL:
        return _FATAL_START + (e.error or "")
    if how is ExitHow.VANISHED:
        return vanished_error(e.pid if e.pid is not None else [])
    if how is ExitHow.SILENT:
        return ("went silent: nothing written for %.0f s while other ranks kept writing "
                "(exited, killed, or its node is gone)" % (e.silent_s or 0.0))
    if e.error:
        return e.error
    if e.status is not None:
        return "exited with an uncaught exception (status %d)" % e.status
    return "exited with a Python traceback"


_NORMAL_RE = re.compile(r"^exited normally \(status (\d+)\)")
_SYSEXIT_RE = re.compile(r"^called sys\.exit\((-?\d+)\): exit status (\d+)")
_UNCAUGHT_RE = re.compile(r"^exited with an uncaught exception \(status (-?\d+)\)$")
_VANISHED_RE = re.compile(r"^vanished \(pid (\d+) gone with no exit record")
_SILENT_RE = re.compile(r"^went silent: nothing written for (\d+) s ")


@functools.lru_cache(maxsize=4096)  # the ranks of a job share a few errors; Exit is immutable
def exit_from_text(err: str) -> Exit:
    """The :class:`~hpc_hangkit.parse.exits.Exit` an exit error of :func:`exit_text` says:
    how a node summary's ``exit`` is read back (a summary stores the words, and an ``end``
    object only where the words alone would be misread). Any other text is an exception's
    last line."""
    m = _NORMAL_RE.match(err)
    if m:
        return Exit(ExitHow.NORMAL, status=int(m.group(1)))
    m = _SYSEXIT_RE.match(err)
    if m:
        return Exit(ExitHow.SYS_EXIT, status=int(m.group(2)))
    if err.startswith(_FATAL_START):
        return Exit(ExitHow.FATAL, error=err[len(_FATAL_START):])
    m = _VANISHED_RE.match(err)
    if m:
        return Exit(ExitHow.VANISHED, pid=int(m.group(1)))
    m = _SILENT_RE.match(err)
    if m:
        return Exit(ExitHow.SILENT, silent_s=float(m.group(1)))
    m = _UNCAUGHT_RE.match(err)
    if m:
        return Exit(ExitHow.EXCEPTION, status=int(m.group(1)))
    if err == "exited with a Python traceback":
        return Exit(ExitHow.EXCEPTION)
    return Exit(ExitHow.EXCEPTION, error=err)


_SIGNALS = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
            "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}
_EXC_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure|Timeout)?)(?:: (.*))?$",
                     re.S)


def exit_public(e: Optional[Exit]) -> dict:
    """An exited group's ``exit`` in report.json (docs/report-schema.md): ``{"how",
    "status", "signal", "type", "message"}`` with ``how`` one of ``normal`` (status from
    the program's end), ``exit`` (``sys.exit``), ``exception`` (``type``/``message`` of
    the uncaught exception), ``signal`` (a fatal signal: ``signal`` its name),
    ``vanished`` (no record: the monitor saw its pid gone, or it went silent, or ``e`` is
    None). Unset entries are None."""
    out = {"how": "vanished", "status": None, "signal": None, "type": None, "message": None}
    if e is None:
        return out
    how = e.how
    if how is ExitHow.NORMAL:
        out.update(how="normal", status=e.status)
    elif how is ExitHow.SYS_EXIT:
        out.update(how="exit", status=e.status)
    elif how is ExitHow.FATAL:
        what = (e.error or "").strip()
        out.update(how="signal", signal=_SIGNALS.get(what), message=what)
    elif how in (ExitHow.VANISHED, ExitHow.SILENT):
        out.update(message=exit_text(e))
    else:
        err = exit_text(e).strip()
        m = _EXC_RE.match(err)
        if m and " " not in m.group(1):
            out.update(how="exception", status=1, type=m.group(1), message=m.group(2))
        else:
            out.update(how="exception", status=1, message=exit_text(e))
    return out


def _gone_primary(v):
    primary = v.primary
    ends = v.primary_exits
    vanished = bool(ends) and all(e is not None and e.how is ExitHow.VANISHED for e in ends)
    clean = vanished or all(e is not None and e.how in (ExitHow.NORMAL, ExitHow.SYS_EXIT) for e in ends)
    if vanished:  # one sentence for all: "ranks 2-3 vanished (pids 12, 13 gone ...)"
        parts = ["%s %s" % (ranks_label(primary), vanished_error([e.pid for e in ends]))]
    elif clean:  # "ranks 1-3 exited normally (status 0)": no "on their own (...)" around it
        parts = ["%s %s" % (ranks_label(primary), "; ".join(v.primary_errors))]
    else:
        parts = ["%s exited on %s own (%s)" % (ranks_label(primary), "its" if len(primary) == 1 else "their",
                                              "; ".join(v.primary_errors))]
    if v.lead is not None:
        parts.append("while %s wait%s at %s: %s waiting for %s that %s gone" % (
            ranks_label(v.moving), "s" if len(v.moving) == 1 else "", where(v.lead),
            "it is" if len(v.moving) == 1 else "they are", "a rank" if len(primary) == 1 else "ranks",
            "is" if len(primary) == 1 else "are"))
    if v.victims:
        parts.append("%s then failed because a peer went away (%s)" % (ranks_label(v.victims),
                                                                        "; ".join(v.victim_errors)))
    if vanished:
        return None, ("%s. %s died without Python's shutdown while others still expected %s in a "
                      "collective: %s %s where to look (the node's kernel log, dmesg, names an OOM kill)." % (
                          "; ".join(parts), ranks_label(primary).capitalize(), "it" if len(primary) == 1 else "them",
                          ranks_label(primary), _is(primary)))
    if clean:
        return None, "%s. %s left while others still expected %s in a collective: %s %s where the bug is." % (
            "; ".join(parts), ranks_label(primary).capitalize(), "it" if len(primary) == 1 else "them",
            ranks_label(primary), _is(primary))
    return None, "%s. %s %s where the bug is: see the last traceback below." % (
        "; ".join(parts), ranks_label(primary).capitalize(), _is(primary))


def _gone_alive(v):
    alive = v.moving
    return None, ("%s exited with errors saying a peer went away or never answered (%s): %s victims. "
                  "%s did not fail that way; last seen at %s. %s went the other way (left without an "
                  "error, or is still elsewhere): %s %s where the bug is." % (
                      ranks_label(v.victims), "; ".join(v.victim_errors),
                      "they are" if len(v.victims) > 1 else "it is a",
                      ranks_label(alive).capitalize(), join([where(g) for g in v.others]),
                      "It" if len(alive) == 1 else "They", ranks_label(alive), _is(alive)))


def _gone_all_majority(v):
    return None, ("all observed ranks exited (%s). Before exiting, %s were at %s and %s elsewhere (%s): "
                  "%s %s where the bug is." % (
                      "; ".join(v.victim_errors), ranks_label(v.lead.ranks), where(v.lead),
                      ranks_label(v.suspects), join([where(g) for g in v.others]), ranks_label(v.suspects),
                      _is(v.suspects)))


def _gone_all(v):
    return None, ("all observed ranks exited (%s); their last positions do not single out a rank."
                  % ("; ".join(v.victim_errors) or "no traceback"))


def _slow_moving(v):
    return None, ("no hang: %s %s still moving (samples change between dumps). Slow, not stuck."
                  % (ranks_label(v.moving), _is(v.moving)))


def _slow_waiting(v):
    moving = v.moving
    one = len(moving) == 1
    return None, ("no confirmed hang: %s %s still moving while %s wait%s at %s. If %s never arrive%s "
                  "there, %s %s the one%s that went the other way." % (
                      ranks_label(moving), _is(moving), ranks_label(v.waiting), "s" if v.n_stuck == 1 else "",
                      where(v.lead), ranks_label(moving), "s" if one else "", "it" if one else "they",
                      _is(moving), "" if one else "s"))


def _missed_absent(v):
    why = []
    if v.missing:
        why.append("%s left no dumps" % ranks_label(v.missing))
    if v.unwatched:
        why.append("%s %s never armed" % (ranks_label(v.unwatched), "was" if len(v.unwatched) == 1 else "were"))
    if v.unknown:
        why.append("%s gave no usable stack" % ranks_label(v.unknown))
    return None, ("%d of %s ranks are waiting together at %s; %s. The ranks that are not there are "
                  "where the bug is (or their dumps were lost): %s." % (
                      v.n_stuck, v.world or v.n_stuck + len(v.suspects), where(v.lead), "; ".join(why),
                      ranks_label(v.suspects)))


def _together(v):
    return None, ("all %d ranks are waiting together at %s: this is not a missed collective. Check "
                  "what the ranks passed there (shapes, dtypes, sequence numbers: Flight Recorder), "
                  "the network and NCCL (RAS, NCCL logs) and the GPUs (nvidia-smi)." % (v.n_stuck, where(v.lead)))


def _p2p_cycle(v):
    op = v.lead.collective or "send"
    verb = "to receive before sending" if "recv" in op else "to send before receiving"
    return None, ("%s each wait %s at %s: a point-to-point ordering deadlock, not a missed collective. "
                  "Order the calls (one side sends first, the other receives first), or use batch_isend_irecv."
                  % ("ranks " + " -> ".join(str(r) for r in v.cycle), verb, where(v.lead)))


def _same_line_args(v):
    op = v.arg_groups[0][0].split("(", 1)[0]
    rule = ("with the same list, or pass use_local_synchronization=True" if op == "new_group"
            else "with the same arguments")
    return None, ("%s at %s: every rank must call %s %s. The ranks wait for each other inside group "
                  "creation, so the report names no culprit: the call is the bug." % (
                      join(["%s in %s" % (ranks_label(rs), call) for call, rs in v.arg_groups]),
                      short_where(v.lead.frame), op, rule)) + _not_seen(v)


def _labels(v) -> str:
    """TOGETHER, but the last check-ins differ: ``v.label_groups`` (label, ranks), most ranks first;
    ``v.suspects`` are the minority labels' ranks when one label holds a majority."""
    top = v.label_groups
    if not v.suspects:
        return (" But their last check-ins differ (%s): they may be in different iterations of this "
                "collective." % join(["%s at %s" % (ranks_label(rs), json.dumps(k)) for k, rs in top]))
    odd = v.suspects
    return (" But their last check-ins differ: %s checked in at %s, %s at %s. %s may be one step or "
            "collective behind (compare Flight Recorder sequence ids): the likely suspect%s." % (
                ranks_label(top[0][1]), json.dumps(top[0][0]), ranks_label(odd),
                join([json.dumps(k) for k, _ in top[1:]], 3), ranks_label(odd).capitalize(),
                "" if len(odd) == 1 else "s"))


def _not_seen(v) -> str:
    return " Not seen: %s." % ranks_label(v.absent) if v.absent else ""


def _split_majority(v):
    return None, ("the ranks wait in %d different collectives: %s. Each side waits for the other. "
                  "%d of %d ranks agree at %s, so the likely bug is the branch that sent %s to a "
                  "different collective; check both lines." % (
                      len(v.others), _ranks_at(v.others), len(v.lead.ranks), v.n_stuck, where(v.lead),
                      ranks_label(v.suspects))) + _not_seen(v)


def _split_backward(v):
    rest = [g for g in v.others if g is not v.lead]
    return None, ("%s %s in autograd's backward at %s with no collective frame visible: under "
                  "DistributedDataParallel the gradient all_reduce is issued from C++ there, so they most "
                  "likely wait in it; %s. %d of %d ranks agree, so the likely bug is the branch that sent %s "
                  "elsewhere (with DDP: fewer batches on %s; see DDP's join()); check both lines." % (
                      ranks_label(v.lead.ranks), _is(v.lead.ranks), where(v.lead), _ranks_at(rest),
                      len(v.lead.ranks), v.n_stuck, ranks_label(v.suspects),
                      ranks_label(v.suspects))) + _not_seen(v)


def _split_no_majority(v):
    return None, ("the ranks wait in %d different collectives: %s. No group holds a majority, so "
                  "the report names no culprit: find the branch that sends these ranks to different "
                  "collectives." % (len(v.others), _ranks_at(v.others))) + _not_seen(v)


def _missed_elsewhere(v, how):
    s = v.suspects
    return None, ("%d of %d ranks are waiting together at %s, and %s %s somewhere else (%s). That line "
                  "is where the collective is%s; %s %s where the bug is." % (
                      len(v.lead.ranks), v.n_stuck, where(v.lead), ranks_label(s), _is(s),
                      join([where(g) for g in v.others]), how, ranks_label(s), _is(s))) + _not_seen(v)


def _missed_one_collective(v):
    return _missed_elsewhere(v, "")


def _missed_majority(v):
    return _missed_elsewhere(v, " (its frames are not visible, e.g. mpi4py's Cython call)")


def _split_places(v):
    return None, ("the ranks are stopped at %d different places and no group holds a majority: %s. "
                  "The report names no culprit; compare the lines." % (len(v.others), _ranks_at(v.others))) \
        + _not_seen(v)


#: sentence case -> writer returning (why, reason); the cases are the classifier's
_CASES = {
    "no_hang": _no_hang, "no_dumps": _no_dumps, "none_watched": _none_watched,
    "no_usable_sample": _no_usable_sample, "one_rank": _one_rank,
    "gone_primary": _gone_primary, "gone_alive": _gone_alive, "gone_all_majority": _gone_all_majority,
    "gone_all": _gone_all, "slow_moving": _slow_moving, "slow_waiting": _slow_waiting,
    "missed_absent": _missed_absent, "together": _together, "p2p_cycle": _p2p_cycle, "split_majority": _split_majority,
    "split_no_majority": _split_no_majority, "missed_one_collective": _missed_one_collective,
    "split_backward": _split_backward,
    "missed_majority": _missed_majority, "split_places": _split_places, "same_line_args": _same_line_args,
}
