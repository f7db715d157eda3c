"""The one list of sources of evidence, read by the monitor, the capture and the roll call.

Order matters: it is the order of the capture steps (py-spy first, while the
on-demand watchdog dumps are fresh; the Flight Recorder dumps next, since they
make the ranks write) and of the report sections (Flight Recorder, then NCCL
RAS; :func:`hpc_hangkit.rollcall.sections.adopt_sections` adopts in this order too).
"""
import os
from typing import Dict, List, Tuple

from hpc_hangkit.evidence import flightrec, nvsmi, ras, stacks
from hpc_hangkit.evidence.source import PollContext, Source

#: every source, in capture and report order
SOURCES: Tuple[Source, ...] = (stacks.SOURCE, flightrec.SOURCE, nvsmi.SOURCE, ras.SOURCE)


def poll_sources(ctx: PollContext) -> List[object]:
    """The detector sources of :data:`SOURCES` that can work here: each ``poll`` factory's
    answer for ``ctx``, Nones left out (e.g. no ``ncclras`` on PATH), in registry order.
    A factory that raises is not caught here (a broken setup is the caller's to report)."""
    out = []
    for src in SOURCES:
        if src.poll is not None:
            got = src.poll(ctx)
            if got is not None:
                out.append(got)
    return out


def report_sections(hd_dir: str) -> Tuple[Dict[str, dict], List[str]]:
    """The roll-call sections over a captured ``hang_detector`` directory.

    Returns ``(sections, warnings)``: ``sections`` maps a source's name
    (``flight_recorder``, ``nccl_ras``) to its section dict (docs/internals.md),
    in registry order, for every source whose ``<hd_dir>/<section_dir>`` exists and
    whose section is not None; ``warnings`` has one line per source whose section
    raised (``"<name> section unavailable (<Error>: <message>)"``, name with spaces).
    Never raises: evidence must never lose the roll call.
    """
    sections: Dict[str, dict] = {}
    warnings: List[str] = []
    for src in SOURCES:
        if src.section is None or not os.path.isdir(os.path.join(hd_dir, src.section_dir)):
            continue
        try:
            sec = src.section(hd_dir)
        except Exception as e:  # an extension must never lose the roll call
            warnings.append("%s section unavailable (%s: %s)" % (src.name.replace("_", " "),
                                                                 e.__class__.__name__, e))
            continue
        if sec is not None:
            sections[src.name] = sec
    return sections, warnings
