"""The roll call: from what every rank left behind, say where the collective is,
which ranks wait there, and which rank(s) went the other way.

Pipeline (each step a public function, data flowing one way; modules in brackets)::

    parsed logs (parse.faulthandler / parse.pyspy / parse.traceback)   [read: a directory]
        -> rank_facts()        per rank: main thread, modal position, state  [frames, facts]
        -> summarize_node()    compact JSON-able node summary (positions -> rank sets)  [nodes]
        -> merge()             associative + commutative merge of node summaries  [nodes]
        -> build_report()      groups, verdict, suspects -> :class:`Report`  [verdict]
                               (its sentences: hpc_hangkit.rollcall.prose)
        -> add_sections()      Flight Recorder / NCCL RAS sections  [sections]

:func:`report_from_dir` does all of it for a directory holding any mix of
watchdog logs, py-spy dumps, stdout/stderr tracebacks, heartbeats, unwatched
markers and ``*.summary.json`` node summaries. A report over node summaries is
the same as one over the raw dumps (tests/rollcall/test_rollcall_merge.py).

Rules (each has a regression test):

- **Main thread by outermost frame**, not depth: the thread whose outermost
  Python frame is the script's ``<module>`` (or runpy's ``_run_module_as_main``)
  is the main thread; threads whose outermost frame is ``threading``'s
  ``_bootstrap`` are helpers. A telemetry thread deep in an HTTP client never
  wins over the main thread blocked two frames into ``all_reduce``.
- **Modal position over the last K samples**, ties to the newest: a stuck rank
  shows the same position every period; one sample caught mid-transition must
  not split a group. Start-up samples (an import in progress:
  ``importlib._bootstrap`` frames) never decide a position.
- **State per rank**: ``stuck`` (the mode holds a strict majority of the last K
  samples, or every sample is in one polling loop: same call path and function,
  only the line moves), ``progressing`` (three or more samples and no majority,
  or a check-in after its last dump), ``exited`` (a fatal-error dump, an exit
  traceback, or it went silent in node scratch while others kept writing),
  ``unknown`` (no usable sample: only start-up dumps, py-spy refused, ...).
- **Grouping** by the Python call chain of the main thread (file, line,
  function of every frame; ``depth`` limits it to the innermost N frames).
  Files compare by base name and functions by their last dotted part, so
  faulthandler (full paths, ``co_name``) and py-spy text (short paths,
  qualified names) of the same position group together.
- **Collective or elsewhere**: a chain with torch.distributed frames, c10d /
  MPI native frames or mpi4py frames is *in a collective*; mpi4py's Cython
  frames are invisible to faulthandler, so an MPI rank shows only the user's
  line calling ``comm.allreduce`` (*unknown*: the majority then decides).

Verdicts: MISSED, SPLIT, TOGETHER, GONE, SLOW, NO_HANG, INCONCLUSIVE (see
docs/report.md); a Flight Recorder or RAS section may turn TOGETHER or
INCONCLUSIVE into its own verdict (e.g. SAME_LINE_DIFFERENT_ARGS).
"""
import importlib

#: public name -> the module of this package that defines it; imported on first use, so that a
#: process needing one stage (a node's probe summarising its ranks) does not load them all
_WHERE = {
    "SUMMARY_VERSION": "facts", "Checkin": "facts", "RankFacts": "facts", "rank_facts": "facts",
    "collective_of": "frames", "is_library_frame": "frames", "is_startup": "frames",
    "main_thread": "frames", "user_frame": "frames",
    "merge": "nodes", "positions": "nodes", "summarize_dir": "nodes", "summarize_node": "nodes",
    "NoDumps": "pipeline", "report_from_dir": "pipeline", "report_from_summary_and_dir": "pipeline",
    "read_dir": "read", "rank_from_name": "read",
    "add_sections": "sections", "adopt_sections": "sections",
    "ROLES": "verdict", "VERDICTS": "verdict", "Group": "verdict", "Report": "verdict",
    "Verdict": "verdict", "build_report": "verdict", "short_error": "verdict",
}

__all__ = sorted(_WHERE)


def __getattr__(name):
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    value = getattr(importlib.import_module("hpc_hangkit.rollcall." + mod), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))
