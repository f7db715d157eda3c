"""The one interface of a source of evidence: poll (detect), capture (confirm), section (report).

A :class:`Source` is a record of up to three callables, each optional:

- ``poll(ctx: PollContext) -> detector source or None``: the object the
  monitor polls (``name``, ``poll(now) -> {key: (stalled, detail[, since])}``, see
  :mod:`hpc_hangkit.detect.monitor`); None when the source cannot work here
  (e.g. no ``ncclras`` on PATH);
- ``capture(ctx: CaptureContext) -> list of paths or None``: one capture step
  at confirmation, while the ranks live (:mod:`hpc_hangkit.capture.orchestrator`
  runs it guarded; problems go to ``ctx.problem``); the paths returned count as
  captured files;
- ``section(hd_dir) -> dict or None``: the roll-call section over a captured
  ``hang_detector`` directory (docs/internals.md), read only when
  ``<hd_dir>/<section_dir>`` exists.

The sources are listed once, in :data:`hpc_hangkit.evidence.registry.SOURCES`.
"""
from dataclasses import dataclass
from typing import Any, Callable, List, Optional


@dataclass(frozen=True)
class PollContext:
    """What a poll factory gets.

    ``settings``: :class:`hpc_hangkit.config.Settings`; ``scratch``: the node
    scratch the ranks write (``$HANGKIT_SCRATCH_DIR``); ``hd_dir``: the output
    ``hang_detector`` directory; ``judge``: the roll call's rules for the stack
    source (:class:`hpc_hangkit.evidence.stacks.Judge`; the report stage sits
    downstream of the sources, so the caller hands it in).
    """

    settings: Any
    scratch: str
    hd_dir: str
    judge: Any = None


@dataclass(frozen=True)
class Source:
    """One source of evidence (see the module docstring). ``name``: the report section's
    key and the log label (``stacks``, ``flight_recorder``, ``nvidia_smi``, ``nccl_ras``);
    ``section_dir``: the directory under ``hang_detector/`` that holds its captured files.
    ``together_names_suspects``: whether a TOGETHER verdict of its section, when adopted,
    brings its suspects (False for a source that only sees the ranks' shared state)."""

    name: str
    section_dir: Optional[str] = None
    poll: Optional[Callable[[PollContext], Any]] = None
    capture: Optional[Callable[[Any], Optional[List[str]]]] = None
    section: Optional[Callable[[str], Optional[dict]]] = None
    together_names_suspects: bool = True
