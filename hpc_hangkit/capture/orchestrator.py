"""Capture diagnostics from the live ranks of one node, on a confirmed hang.

Where the data comes from: the rank processes of this host
(:func:`hpc_hangkit.capture.ranks.discover_ranks`: heartbeat records, else
watchdog log headers) and the capture step of every source of
:data:`hpc_hangkit.evidence.registry.SOURCES`.

Steps, in order, each bounded in time and each failing alone:

1. an on-demand watchdog dump of every rank
   (:func:`hpc_hangkit.capture.ranks.request_dumps`), waited for up to
   ``2 * dump_wait_s`` seconds so the dump lands before the copy;
2. the sampling plan (:func:`plan_sampling`): the roll call over this node's
   fresh dumps (``ctx.roll_call``, given by the caller: capture sits below the roll
   call) says which ranks get ``py-spy --native``
   (:mod:`hpc_hangkit.capture.native`, setting ``native_stacks``);
3. the ``capture`` step of each source, in the registry's order, each guarded:
   py-spy of every rank into ``<hd_dir>/stack_traces/``
   (:mod:`hpc_hangkit.evidence.stacks`), Flight Recorder dumps, the nvidia-smi
   snapshot, the NCCL RAS history and report;
4. a copy of ``watchdog/``, ``heartbeats/`` and ``unwatched/`` from scratch
   into ``<hd_dir>/`` (plain files only; symlinks are never followed).

Nothing here raises for a missing tool or a dead rank: problems are returned in
:attr:`CaptureResult.problems` (one line each) and logged once.
"""
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

from hpc_hangkit import layout
from hpc_hangkit.capture.native import Sampling, plan
from hpc_hangkit.capture.ranks import RankProc, request_dumps
from hpc_hangkit.evidence.registry import SOURCES

log = logging.getLogger("hpc_hangkit.capture")


@dataclass
class CaptureContext:
    """What a capture step gets.

    ``settings``: :class:`hpc_hangkit.config.Settings`; ``scratch``: the job's
    node scratch (``$HANGKIT_SCRATCH_DIR``); ``hd_dir``: the output
    ``hang_detector`` directory; ``ranks``: ``{rank: RankProc}`` on this host;
    ``problems``: append one line per problem (a step reports here);
    ``suspects``: the job's suspect ranks when the caller knows them (the
    monitor's confirmation); ``sampling``: ``{rank: Sampling}``, how py-spy samples
    each rank (:func:`plan_sampling` fills it; empty: ``--native`` for all);
    ``roll_call``: ``roll_call(path) -> Report``, the roll call over a directory with the
    caller's settings (:func:`hpc_hangkit.rollcall.report_from_dir`), which the plan is made
    from (None: no plan, every rank ``--native``).
    """

    settings: object
    scratch: str
    hd_dir: str
    ranks: Dict[int, RankProc]
    problems: List[str] = field(default_factory=list)
    suspects: List[int] = field(default_factory=list)
    sampling: Dict[int, Sampling] = field(default_factory=dict)
    roll_call: Optional[Callable[[str], object]] = None

    def problem(self, line: str) -> None:
        """Record one problem line (and log it as a warning)."""
        self.problems.append(line)
        log.warning("%s", line)


@dataclass
class CaptureResult:
    """``files``: paths written under hd_dir; ``problems``: one line per tool/rank problem;
    ``seconds``: wall time; ``ranks``: the ranks the capture was for (sorted)."""

    files: List[str]
    problems: List[str]
    seconds: float
    ranks: List[int] = field(default_factory=list)

    def tally(self) -> str:
        """``"12 file(s), 1 problem(s): <its line>"`` for a log line: the problems named (each
        cut to 100 characters, at most three, then how many more), so the summary needs no
        search for the warnings above it."""
        out = "%d file(s), %d problem(s)" % (len(self.files), len(self.problems))
        if not self.problems:
            return out
        named = [p if len(p) <= 100 else p[:99] + "\u2026" for p in self.problems[:3]]
        more = len(self.problems) - len(named)
        return out + ": " + "; ".join(named) + (" (and %d more)" % more if more else "")


def run_steps(ctx: CaptureContext) -> List[str]:
    """The ``capture`` step of every source of the registry, in order, each guarded (an exception
    becomes one problem line naming the step); returns the paths the steps report as written."""
    files: List[str] = []
    for src in SOURCES:
        fn = src.capture
        if fn is None:
            continue
        label = getattr(fn, "__module__", "?") + "." + getattr(fn, "__name__", "?")
        try:
            files += fn(ctx) or []
        except Exception as e:  # a capture step never stops the others
            ctx.problem("capture step %s failed: %s: %s" % (label, type(e).__name__, e))
    return files


def copy_rank_files(scratch: str, hd_dir: str) -> List[str]:
    """Copy ``watchdog/``, ``heartbeats/``, ``unwatched/``, ``exits/``, ``vanished/`` (regular files
    only, no symlinks) into ``hd_dir``."""
    copied = []
    for sub in (layout.WATCHDOG_DIR, layout.HEARTBEAT_DIR, layout.UNWATCHED_DIR, layout.EXITS_DIR,
                layout.VANISHED_DIR):
        src = os.path.join(scratch, sub)
        if not os.path.isdir(src) or os.path.islink(src):
            continue
        dst = os.path.join(hd_dir, sub)
        os.makedirs(dst, exist_ok=True)
        for name in sorted(os.listdir(src)):
            s = os.path.join(src, name)
            try:
                if os.path.islink(s) or not os.path.isfile(s):
                    continue
                shutil.copyfile(s, os.path.join(dst, name), follow_symlinks=False)
                copied.append(os.path.join(dst, name))
            except OSError as e:
                log.warning("could not copy %s: %s", s, e)
    return copied


def plan_sampling(ctx: CaptureContext) -> Dict[int, Sampling]:
    """Fill ``ctx.sampling`` for ``ctx.ranks`` (:func:`hpc_hangkit.capture.native.plan`, mode
    from ``settings.native_stacks``) from the roll call over ``ctx.scratch``'s watchdog logs
    (this node's ranks, on-demand dumps included) by ``ctx.roll_call``; returns it. A roll call
    that fails leaves the plan without one (every rank ``--native``), recorded as a problem."""
    mode = getattr(ctx.settings, "native_stacks", "auto")
    rep = None
    if mode == "auto" and ctx.ranks and ctx.roll_call is not None:
        try:
            # the watchdog logs only: a hang_detector/ inside the scratch holds older captures
            rep = ctx.roll_call(os.path.join(ctx.scratch, layout.WATCHDOG_DIR))
        except Exception as e:  # the plan is an economy: without it, sample everything
            ctx.problem("no roll call to choose native stacks from (%s: %s); --native for every "
                        "rank" % (type(e).__name__, e))
    ctx.sampling = plan(ctx.ranks, rep, ctx.suspects, mode)
    return ctx.sampling


def capture(ctx: CaptureContext, dump_wait_s: float = 1.0) -> CaptureResult:
    """All capture steps (see the module docstring) for ``ctx.ranks``; never raises for a tool/rank problem."""
    t0 = time.monotonic()
    os.makedirs(ctx.hd_dir, exist_ok=True)
    if not ctx.ranks:
        ctx.problem("no live rank found in %s (no heartbeat record or watchdog log)" % ctx.scratch)
    else:
        request_dumps(ctx, wait_s=dump_wait_s)
        log.info("on-demand watchdog dumps: %.1f s", time.monotonic() - t0)
        if not ctx.sampling:
            plan_sampling(ctx)
    t1 = time.monotonic()
    files = run_steps(ctx)
    log.info("capture steps: %.1f s", time.monotonic() - t1)
    files += copy_rank_files(ctx.scratch, ctx.hd_dir)
    return CaptureResult(files, list(ctx.problems), time.monotonic() - t0, sorted(ctx.ranks))
