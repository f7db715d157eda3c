"""Extension sections of the roll call (Flight Recorder, NCCL RAS): read under a report's
directory and the rule that lets a section's verdict replace an undecided stack verdict."""
import os

from hpc_hangkit import layout
from hpc_hangkit.ranges import ranks_label
from hpc_hangkit.rollcall.verdict import VERDICTS, Group, Report


def section_order():
    """The names of the sources that have a report section, in registry order: the order
    sections are read and the priority of :func:`adopt_sections`. Imported on first use, so
    a roll call without sections (node summaries, merge) never loads the evidence modules."""
    from hpc_hangkit.evidence.registry import SOURCES

    return tuple(src.name for src in SOURCES if src.section is not None)


def _together_names_suspects(name: str) -> bool:
    """Whether the section of source ``name`` brings its suspects with an adopted TOGETHER
    (:attr:`hpc_hangkit.evidence.source.Source.together_names_suspects`)."""
    from hpc_hangkit.evidence.registry import SOURCES

    return next((src.together_names_suspects for src in SOURCES if src.name == name), True)

__all__ = ["add_sections", "adopt_sections", "adopt_membership", "hd_dir"]


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
        if v == "TOGETHER" and not _together_names_suspects(name):
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


def adopt_membership(rep: Report) -> None:
    """The membership rule: when the stacks say SPLIT or MISSED and the Flight Recorder section
    names suspects from the process groups the ranks wait on (``membership``:
    :func:`hpc_hangkit.evidence.flightrec.membership`), those ranks become the suspects, the
    sentence says why, and a suspect that shares a stack group with other ranks gets a group of
    its own (same position, waiting on another group: role ``divergent``)."""
    sec = rep.sections.get("flight_recorder")
    m = sec.get("membership") if isinstance(sec, dict) else None
    if rep.verdict not in ("SPLIT", "MISSED") or not isinstance(m, dict):
        return
    sus = sorted({r for r in m.get("suspects") or () if isinstance(r, int) and r in rep.ranks})
    if not sus or sus == rep.suspect_ranks:
        return
    groups = []
    for g in rep.groups:
        inner = [r for r in g.ranks if r in sus]
        if inner and len(inner) < len(g.ranks):
            rest = Group([r for r in g.ranks if r not in sus], g.role, g.state, g.chain, g.native, g.collective,
                         g.detail, g.key, g.exit)
            rest.inside = g.inside
            own = Group(inner, "divergent", g.state, g.chain, g.native, g.collective, g.detail, g.key, g.exit)
            groups += [rest, own]
        else:
            if inner and g.role == "waiting":
                g.role = "divergent"
            elif not inner and g.role == "divergent":
                g.role = "waiting"
            groups.append(g)
    rep.groups = groups
    before = ranks_label(rep.suspect_ranks) if rep.suspect_ranks else "none"
    rep.warnings.append("suspects %s taken from the process groups the ranks wait on (the stacks alone named "
                        "%s): %s" % (ranks_label(sus), before, m.get("why") or ""))
    rep.suspect_ranks = sus
    # the stacks' first sentence (where the groups are), then why these ranks
    first = rep.reason.split(". ", 1)[0].rstrip(".")
    rep.reason = "%s. By the process groups they wait on, the suspect is %s: %s." % (
        first, ranks_label(sus), (m.get("why") or "").rstrip("."))


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
    adopt_membership(rep)
