"""The roll call over a directory: read it, summarize it, build the report, add the sections."""
import time
from typing import Optional

from hpc_hangkit.rollcall.nodes import summarize_dir
from hpc_hangkit.rollcall.sections import add_sections
from hpc_hangkit.rollcall.verdict import Report, build_report

__all__ = ["report_from_dir", "report_from_summary_and_dir"]


def report_from_dir(path: str, *, world_size: Optional[int] = None, depth: Optional[int] = None,
                    samples: int = 5, now: Optional[float] = None) -> Report:
    """The roll call over everything under ``path`` (a directory or one file).

    ``world_size``: number of ranks (default: from the dump headers); ranks
    below it with no data are listed as missing. ``depth``: group by the
    innermost N frames (default: the whole chain). ``samples``: K, how many of
    each rank's newest samples decide its position. ``now``: epoch seconds for
    check-in ages (default: the report's own clock).

    After the stack analysis, the sections of the sources of evidence
    (:func:`hpc_hangkit.rollcall.sections.add_sections`) are added where their directories exist; then, for MISSED / SPLIT /
    GONE, where each minority group's path split from the majority's
    (:func:`hpc_hangkit.rollcall.branch.add_branches`: reads the source files the frames name).
    Raises ``FileNotFoundError`` when ``path`` does not exist; everything else
    (bad files, missing modules) becomes a warning.
    """
    summary = summarize_dir(path, world_size=world_size, samples=samples)
    return report_from_summary_and_dir(summary, path, depth=depth, world_size=world_size, now=now)


def report_from_summary_and_dir(summary: dict, path: str, *, depth: Optional[int] = None,
                                world_size: Optional[int] = None, now: Optional[float] = None) -> Report:
    """:func:`build_report` of ``summary``, plus the extension sections found under ``path``."""
    rep = build_report(summary, depth=depth, world_size=world_size,
                       now=now if now is not None else time.time())
    add_sections(rep, path)
    # the branch analysis is the lint's (hpc_hangkit.lint): loaded only for a report that
    # is built, never by the monitor's or the stack source's use of the roll call's rules
    from hpc_hangkit.rollcall.branch import add_branches

    add_branches(rep)
    return rep

