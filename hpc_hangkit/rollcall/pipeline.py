"""The roll call over a directory, the one entry point every caller uses (``hpc-hangkit
report``, ``hpc-hangkit collect``, the monitor, capture's native-stack plan): read it,
summarize it, build the report, add the sections."""
import os
import time
from typing import Dict, List, Mapping, Optional

from hpc_hangkit.rollcall.nodes import parse_runs, summarize_dir
from hpc_hangkit.rollcall.sections import add_sections
from hpc_hangkit.rollcall.unreachable import read_unreachable
from hpc_hangkit.rollcall.verdict import Report, build_report

__all__ = ["NoDumps", "report_from_dir", "report_from_summary_and_dir"]

#: K when no settings are given (the ``stack_samples`` setting's built-in default)
DEFAULT_SAMPLES = 5


class NoDumps(ValueError):
    """A directory holds no stack dumps, tracebacks, heartbeats, unwatched markers or
    summaries; ``warnings`` are the reader's warnings (why files were skipped)."""

    def __init__(self, path: str, warnings: List[str]):
        ValueError.__init__(self, "no stack dumps, tracebacks, heartbeats or summaries under %s" % path)
        self.path = path
        self.warnings = warnings


def report_from_dir(path: str, settings=None, *, samples: Optional[int] = None, world_size: Optional[int] = None,
                    depth: Optional[int] = None, now: Optional[float] = None, empty_ok: bool = True) -> Report:
    """The roll call over everything under ``path`` (a directory, searched recursively,
    symlinks not followed, or one file).

    ``settings``: a :class:`hpc_hangkit.config.Settings` (or anything with ``stack_samples``);
    its ``stack_samples`` is K, how many of each rank's newest samples decide its position.
    ``samples``: K given directly (wins over ``settings``); with neither, K is
    :data:`DEFAULT_SAMPLES`. ``world_size``: number of ranks (default: from the dump
    headers); ranks below it with no data are listed as missing. ``depth``: group by the
    innermost N frames (default: the whole chain). ``now``: epoch seconds for check-in ages
    (default: the report's own clock). The node summary the report was built from is
    ``report.summary``. Ranks known only from node summaries that their node stamped
    (``taken_at``: the batch monitor's view) are judged silent up to when their node took
    them, not up to the newest write here (:func:`hpc_hangkit.rollcall.nodes.observed_times`).

    After the stack analysis, the sections of the sources of evidence
    (:func:`hpc_hangkit.rollcall.sections.add_sections`) are added where their directories
    exist; then, for MISSED / SPLIT / GONE, where each minority group's path split from the
    majority's (:func:`hpc_hangkit.rollcall.branch.add_branches`: reads the source files the
    frames name).

    Raises ``FileNotFoundError`` when ``path`` does not exist, :class:`NoDumps` when it holds
    nothing to report on and ``empty_ok`` is false (true: an INCONCLUSIVE report saying so);
    everything else (bad files, missing modules) becomes a warning.
    """
    if samples is None:
        samples = DEFAULT_SAMPLES if settings is None else settings.stack_samples
    seen: Dict[int, float] = {}
    summary = summarize_dir(path, world_size=world_size, samples=samples, observed=seen)
    if not empty_ok and not summary["positions"] and not summary["unwatched"]:
        raise NoDumps(path, summary["warnings"])
    return report_from_summary_and_dir(summary, path, depth=depth, world_size=world_size, now=now,
                                       observed_at=seen)


def report_from_summary_and_dir(summary: dict, path: str, *, depth: Optional[int] = None,
                                world_size: Optional[int] = None, now: Optional[float] = None,
                                observed_at: Optional[Mapping[int, float]] = None) -> Report:
    """:func:`build_report` of ``summary``, plus the extension sections and the unreachable-node
    records (:mod:`hpc_hangkit.rollcall.unreachable`) found under ``path``. ``observed_at``:
    rank -> epoch s its facts were observed (:func:`build_report`; default: all now)."""
    warns: List[str] = []
    gone = read_unreachable(path, warns) if os.path.isdir(path) else []
    held = set()
    for u in gone:
        held.update(r for lo, hi in parse_runs(u["ranks"]) for r in range(lo, hi + 1))
    rep = build_report(summary, depth=depth, world_size=world_size,
                       now=now if now is not None else time.time(), unreachable_ranks=held,
                       observed_at=observed_at)
    rep.summary = summary
    rep.unreachable = gone
    rep.warnings.extend(warns)
    add_sections(rep, path)
    # the branch analysis is the lint's (hpc_hangkit.lint): loaded only for a report that
    # is built, never by the monitor's or the stack source's use of the roll call's rules
    from hpc_hangkit.rollcall.branch import add_branches

    add_branches(rep)
    return rep
