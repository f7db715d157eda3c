"""Extension sections of the roll call (Flight Recorder, NCCL RAS): read under a report's
directory and the rule that lets a section's verdict replace an undecided stack verdict."""
import os

from hpc_hangkit import layout
from hpc_hangkit.rollcall.verdict import VERDICTS, Report


def section_order():
    """The names of the sources that have a report section, in registry order: the order
    sections are read and the priority of :func:`adopt_sections`. Imported on first use, so
    a roll call without sections (node summaries, merge) never loads the evidence modules."""
    from hpc_hangkit.evidence.registry import SOURCES

    return tuple(src.name for src in SOURCES if src.section is not None)

__all__ = ["add_sections", "adopt_sections", "hd_dir"]


def hd_dir(path: str) -> str:
    """``path/hang_detector`` when it exists (a storage attempt or a run's output), else ``path``."""
    hd = os.path.join(path, layout.HANG_DETECTOR_DIR)
    return hd if os.path.isdir(hd) else path


def adopt_sections(rep: Report):
    """The extension rule: when the stacks say TOGETHER or INCONCLUSIVE and a section
    (in :func:`section_order`: Flight Recorder first, then NCCL RAS) gives a verdict, adopt it and its suspects,
    with a warning naming the source; a RAS verdict of TOGETHER never adds suspects."""
    if rep.stack_verdict not in ("TOGETHER", "INCONCLUSIVE") or rep.adopted_from or not rep.sections:
        return
    for name in section_order():
        sec = rep.sections.get(name)
        if not isinstance(sec, dict):
            continue
        v = sec.get("verdict")
        if not v or v not in VERDICTS or v == rep.verdict:
            continue
        sus = sec.get("suspect_ranks")
        if name == "nccl_ras" and v == "TOGETHER":
            sus = None
        label = name.replace("_", " ")
        rep.warnings.append("verdict %s taken from the %s section (the stacks said %s): %s" % (
            v, label, rep.stack_verdict, sec.get("summary") or ""))
        rep.verdict = v
        rep.adopted_from = name
        rep.suspect_ranks = sorted(int(x) for x in sus if isinstance(x, int)) if isinstance(sus, list) else []
        rep.reason = "%s (from the %s section; the stacks alone said %s: %s)" % (
            (sec.get("summary") or v).rstrip("."), label, rep.stack_verdict, rep.reason)
        return


def add_sections(rep: Report, path: str) -> None:
    """Add the sections of every source of evidence found under ``path`` (or
    ``path/hang_detector``) to ``rep`` (:func:`hpc_hangkit.evidence.registry.report_sections`)
    and apply the adoption rule (docs/report.md). Failures become warnings."""
    if not os.path.isdir(path):
        return
    from hpc_hangkit.evidence.registry import report_sections

    sections, warnings = report_sections(hd_dir(path))
    rep.warnings += warnings
    rep.sections.update(sections)
    adopt_sections(rep)
