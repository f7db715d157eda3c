"""Golden roll-call reports: the exact output for every fixture scenario the roll call reads.

Each case copies real samples from tests/fixtures/ (or writes the few inputs a case
needs: a launcher log holding a traceback, an unwatched marker, a node summary built
from real dumps) into ``<tmp>/<case>/`` and runs the report the way
``hpc-hangkit report PATH --summary-out F`` does (``summarize_dir`` then
``report_from_summary_and_dir``), with a fixed clock (``now`` = :data:`NOW`) and
every copied file's mtime set to :data:`MTIME` (or the case's own times), so
nothing depends on when or where it runs. The only normalization: the absolute
temporary directory is replaced by ``<tmp>`` (it appears in warnings and section
text). Four files per case under ``tests/report/golden/<case>/``:

- ``report.txt``   :func:`hpc_hangkit.report.render.render_text`
- ``report.json``  :func:`hpc_hangkit.report.render.render_json` (what report.json holds)
- ``tree.txt``     :func:`hpc_hangkit.report.render.render_tree`
- ``summary.json`` the node summary as ``--summary-out`` writes it (compact JSON)

Usage (from the repository root)::

    python3 tests/report/golden.py               # show the unified diff; exit 1 on any difference
    python3 tests/report/golden.py --regenerate  # rewrite the golden files, printing what changed
    python3 tests/report/golden.py CASE ...      # only these cases
"""
import argparse
import difflib
import json
import os
import shutil
import sys
import tempfile
from types import SimpleNamespace
from typing import Callable, Dict, List, NamedTuple, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
REPO = os.path.dirname(TESTS)
if sys.path[:1] != [REPO]:
    sys.path.insert(0, REPO)  # this tree's hpc_hangkit, never an installed copy
FIXTURES = os.path.join(TESTS, "fixtures")
TORCH = os.path.join(FIXTURES, "torch_samples")
GOLDEN = os.path.join(HERE, "golden")
OUTPUTS = ("report.txt", "report.json", "tree.txt", "summary.json")

#: the report's clock (epoch seconds): check-in ages are measured against it
NOW = 1796095400.0
#: mtime of every input file, unless a case sets its own (the roll call trusts file
#: times in node scratch: "went silent", "checked in after its last dump")
MTIME = 1796095300.0
#: wall time of the checked-in heartbeat fixture (tests/fixtures/heartbeat/rank_3.pid16135.hb)
HB_WALL = 1796095330.5949814
HB_FILE = os.path.join(FIXTURES, "heartbeat", "rank_3.pid16135.hb")


class Case(NamedTuple):
    """One golden case: ``build(d)`` fills the empty directory ``d`` (a ``pathlib.Path``)."""
    name: str
    build: Callable
    world_size: Optional[int] = None
    depth: Optional[int] = None
    samples: int = 5
    #: relative path -> mtime (epoch s) for files that must not get :data:`MTIME`
    mtimes: Optional[Callable] = None
    #: report over this subdirectory of the case directory ("" = the case directory)
    sub: str = ""


# --- input builders ---------------------------------------------------------------

def _copy(d, dest, *src):
    p = d / dest
    p.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(os.path.join(*src), str(p))


def _tree(d, dest, *src):
    shutil.copytree(os.path.join(*src), str(d / dest) if dest else str(d), dirs_exist_ok=True)


def _write(d, dest, data):
    p = d / dest
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    p.write_bytes(data)


def _logs(d, sample, ranks, under="watchdog"):
    for r in ranks:
        _copy(d, "%s/rank_%d.log" % (under, r), TORCH, sample, "faulthandler", "rank_%d.log" % r)


def _read(*parts) -> bytes:
    with open(os.path.join(*parts), "rb") as fh:
        return fh.read()


def _startup_only():
    """rank 1's real log of gloo_divergent_barrier cut after its first dump (an import)."""
    data = _read(TORCH, "gloo_divergent_barrier", "faulthandler", "rank_1.log")
    return data[:data.index(b"Timeout", data.index(b"Timeout") + 1)]


def _running_rank3_cut():
    """The real log of a running gloo rank, cut right after its one mid-transition dump."""
    from hpc_hangkit.parse.faulthandler import parse_faulthandler
    from hpc_hangkit.rollcall import main_thread, user_frame

    data = _read(TORCH, "gloo_sigusr1_register_running", "rank_3_head520.log")
    log = parse_faulthandler(data)
    odd = [i for i, s in enumerate(log.samples)
           if user_frame(main_thread(s).frames).function != "sync_grads" and i < 86]
    return data[:log.samples[odd[0] + 1].offset]


def _node_summary(d, dest, logs, heartbeats=(), **kw):
    """A ``*.summary.json`` built from parsed real dumps (and check-ins), as a node writes it."""
    from hpc_hangkit.rollcall import summarize_node

    s = summarize_node(logs, heartbeats=heartbeats, **kw)
    _write(d, dest, json.dumps(s, separators=(",", ":")))


def _barrier_logs(ranks):
    from hpc_hangkit.parse.faulthandler import parse_faulthandler

    out = []
    for r in ranks:
        lg = parse_faulthandler(_read(TORCH, "gloo_divergent_barrier", "faulthandler", "rank_%d.log" % r),
                                "watchdog/rank_%d.log" % r)
        out.append(lg)
    return out


def _checkin(rank, label, wall, counter=3, world=-1):
    return SimpleNamespace(rank=rank, label=label, wall_s=wall, counter=counter, period_s=3.0, world=world,
                           host="n%d" % (rank // 2))


def _new_group_logs():
    from hpc_hangkit.parse.faulthandler import parse_faulthandler

    return [parse_faulthandler(_read(TORCH, "gloo_new_group", "faulthandler", "rank_%d.log" % r),
                               "watchdog/rank_%d.log" % r) for r in range(4)]


def _new_group_checkins(local="", makes=(1, 1, 1, 1)):
    """The real run's auto check-in labels of gloo_new_group (ranks 0,1: [0, 1, 2]; ranks 2,3:
    [2, 3]); ``local`` appended to each, ``makes`` the creation counts by rank."""
    return [_checkin(r, "torch.distributed.new_group make=%d ranks=%s%s" % (
        makes[r], "[0, 1, 2]" if r < 2 else "[2, 3]", local), NOW - 30, counter=1, world=4) for r in range(4)]


def _moving_logs():
    """Two ranks whose samples keep changing: real samples of different positions, interleaved."""
    from hpc_hangkit.parse.faulthandler import parse_faulthandler
    from hpc_hangkit.parse.model import ParsedLog

    pool = []
    for sample in ("gloo_divergent_barrier", "gloo_divergent_sleep", "mpi_mpich_allreduce_obj"):
        for r in (0, 1):
            pool.append(parse_faulthandler(_read(TORCH, sample, "faulthandler", "rank_%d.log" % r)).samples[-1])
    out = []
    for r in (0, 1):
        order = pool[r:] + pool[:r]
        out.append(ParsedLog("rank_%d.log" % r, rank=r, pid=500 + r, host="n0", world=2, samples=order[:5],
                             kind="faulthandler"))
    return out


LAUNCHER_BOOM = ("[rank1]: Traceback (most recent call last):\n"
                 '[rank1]:   File "/job/train.py", line 12, in <module>\n'
                 '[rank1]:   File "/job/train.py", line 7, in load_shard\n'
                 "[rank1]: RuntimeError: shard 7 is corrupt\n")


#: a real fatal-error dump (CPython 3.11, a segfault in ctypes), appended to a rank's watchdog log
FATAL_DUMP = ("Fatal Python error: Segmentation fault\n\n"
              "Current thread 0x00007f85c0840b80 (most recent call first):\n"
              '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at\n'
              '  File "/job/train.py", line 6 in load_shard\n'
              '  File "/job/train.py", line 7 in <module>\n')


def _fatal_rank1(d):
    _logs(d, "gloo_divergent_barrier", (0, 2, 3))
    _write(d, "watchdog/rank_1.log", _read(TORCH, "gloo_divergent_barrier", "faulthandler", "rank_1.log")
           + b"\n" + FATAL_DUMP.encode())


#: a source for the frames of gloo_divergent_barrier (hang_gloo.py itself is not in the
#: fixtures): the real dumps' lines (sync_grads all_reduce 61, checkpoint_barrier barrier 69,
#: train calling them at 76 / 78, <module> at 85) placed in a minimal program with the same shape
HANG_GLOO_LINES = {
    1: "import torch",
    2: "import torch.distributed as dist",
    59: "def sync_grads(grads):",
    60: "    # every rank but one reduces here",
    61: "    dist.all_reduce(grads)",
    67: "def checkpoint_barrier():",
    68: "    # the rank that skipped the reduction waits here",
    69: "    dist.barrier()",
    72: "def train(rank, steps=6, skip_step=3, skip_rank=1):",
    73: "    for step in range(steps):",
    74: "        if rank != skip_rank or step != skip_step:",
    75: "            grads = torch.ones(16)",
    76: "            sync_grads(grads)",
    77: "        else:",
    78: "            checkpoint_barrier()",
    84: "dist.init_process_group('gloo')",
    85: "train(dist.get_rank())",
}


def _with_source(d):
    """gloo_divergent_barrier's real dumps, their frames pointing at a readable source."""
    src = d / "jobs" / "hang_gloo.py"
    _write(d, "jobs/hang_gloo.py", "\n".join(HANG_GLOO_LINES.get(i, "") for i in range(1, 86)) + "\n")
    for r in range(4):
        data = _read(TORCH, "gloo_divergent_barrier", "faulthandler", "rank_%d.log" % r)
        _write(d, "watchdog/rank_%d.log" % r, data.replace(b"/home/user/hangdemo/jobs/hang_gloo.py",
                                                            str(src).encode()))


def _whole(sample):
    return lambda d: _tree(d, "", TORCH, sample)


def _cases() -> List[Case]:
    cases = [Case(name, _whole(name)) for name in sorted(os.listdir(TORCH))
             if os.path.isdir(os.path.join(TORCH, name))]
    bar = "gloo_divergent_barrier"
    mpi = "mpi_mpich_allreduce_obj"
    cases += [
        Case("barrier_depth1_k3", _whole(bar), depth=1, samples=3),
        Case("barrier_pyspy_only", lambda d: _tree(d, "", TORCH, bar, "pyspy")),
        Case("barrier_together", lambda d: _logs(d, bar, (0, 2, 3))),
        Case("branch_source_readable", _with_source),
        Case("barrier_missing_world4", lambda d: _logs(d, bar, (0, 2, 3)), world_size=4),
        Case("barrier_unwatched_world5", lambda d: (_logs(d, bar, (0, 2, 3)), _write(
            d, "unwatched/rank_1.pid77.txt", "faulthandler.register failed: signal SIGURG already in use\n")),
            world_size=5),
        Case("barrier_pair_no_majority", lambda d: _logs(d, bar, (0, 1))),
        Case("barrier_one_rank", lambda d: _logs(d, bar, (2,))),
        Case("barrier_truncated_rank2", lambda d: (_logs(d, bar, (0, 1, 3)), _copy(
            d, "watchdog/rank_2.log", TORCH, "faulthandler_crash_stress", "gloo_rank2_truncated_dump_before_segv.log"))),
        Case("barrier_capture_and_scratch", lambda d: (_logs(d, bar, range(4), "scratch/watchdog"),
                                                       _logs(d, bar, range(4), "out/hang_detector/watchdog"))),
        Case("barrier_pyspy_rank_from_pid", lambda d: (
            _logs(d, bar, (0, 2, 3)), _copy(d, "pyspy_pid7699.txt", TORCH, bar, "pyspy", "dump_native_rank1.txt"),
            _copy(d, "r1.log", TORCH, bar, "faulthandler", "rank_1.log"))),
        Case("pyspy_without_rank", lambda d: (
            _logs(d, bar, (0, 2, 3)), _copy(d, "pyspy_pid7699.txt", TORCH, bar, "pyspy", "dump_native_rank1.txt"))),
        Case("mpi_faulthandler_only", lambda d: _logs(d, mpi, range(4))),
        Case("mpi_two_ranks_no_majority", lambda d: _logs(d, mpi, (0, 1))),
        Case("empty", lambda d: _write(d, "notes.txt", "nothing to see\n")),
        Case("unwatched_only", lambda d: _write(d, "unwatched/rank_0.pid1.txt", "HANGKIT_MODE='x' is not a mode\n")),
        Case("startup_only", lambda d: _write(d, "watchdog/rank_1.log", _startup_only())),
        Case("modal_mid_transition", lambda d: (_tree(d, "", TORCH, "hung_sigusr1_register", "gloo"),
                                                _write(d, "rank_3.log", _running_rank3_cut()))),
        Case("modal_mid_transition_k1", lambda d: (_tree(d, "", TORCH, "hung_sigusr1_register", "gloo"),
                                                   _write(d, "rank_3.log", _running_rank3_cut())), samples=1),
        Case("gone_victims_and_one_alive", lambda d: (
            [_copy(d, "stdout/rank_%d.txt" % r, TORCH, "gloo_pg_timeout_10s", "stdout_rank%d.txt" % r)
             for r in (0, 2, 3)], _logs(d, bar, (1,)))),
        Case("gone_primary_with_victim", lambda d: (
            _logs(d, bar, (0, 2, 3)), _write(d, "launcher.out", LAUNCHER_BOOM),
            _copy(d, "stdout/rank_2.txt", TORCH, "gloo_pg_timeout_10s", "stdout_rank2.txt"))),
        Case("gone_two_victims", lambda d: [
            _copy(d, "stdout/rank_%d.txt" % r, TORCH, "gloo_pg_timeout_10s", "stdout_rank%d.txt" % r)
            for r in (0, 2)]),
        Case("gone_fatal_dump", _fatal_rank1),
        Case("gone_fatal_dump_and_traceback", lambda d: (_fatal_rank1(d), _write(d, "launcher.out", LAUNCHER_BOOM))),
        Case("pyspy_with_heartbeat", lambda d: (_tree(d, "", TORCH, bar, "pyspy"),
                                                _copy(d, "heartbeats/rank_3.pid16135.hb", HB_FILE))),
        Case("flight_recorder_capture", lambda d: (
            _logs(d, bar, range(4), "out/hang_detector/watchdog"),
            _tree(d, "out/hang_detector/flight_recorder", FIXTURES, "flight_recorder", bar, "pickle_raw")), sub="out"),
        Case("flight_recorder_adopted", lambda d: (
            _logs(d, bar, (0, 2, 3), "out/hang_detector/watchdog"),
            _tree(d, "out/hang_detector/flight_recorder", FIXTURES, "flight_recorder", bar, "pickle_raw")), sub="out"),
        Case("nccl_ras_adopted", lambda d: (
            _logs(d, bar, (0, 2, 3), "out/hang_detector/watchdog"),
            [_copy(d, "out/hang_detector/nccl_ras/ncclras_%02d.json" % i, FIXTURES, "nccl", "b_history",
                   "poll_%02d.json" % i) for i in range(1, 6)]), sub="out"),
        Case("heartbeat_only", lambda d: _copy(d, "heartbeats/rank_3.pid16135.hb", HB_FILE)),
        Case("heartbeat_checked_in_after_dump", lambda d: (
            _logs(d, bar, range(4)), _copy(d, "heartbeats/rank_3.pid16135.hb", HB_FILE)),
            mtimes=lambda rel: HB_WALL - 2.0),
        Case("went_silent", lambda d: _logs(d, bar, range(4)),
             mtimes=lambda rel: MTIME - 60.0 if rel.endswith("rank_2.log") else MTIME),
        Case("node_summaries_merged", lambda d: (
            _node_summary(d, "nodes/a.summary.json", _barrier_logs((0, 1)), host="a"),
            _node_summary(d, "nodes/b.summary.json", _barrier_logs((2, 3)), host="b"))),
        Case("summary_and_raw_dumps", lambda d: (
            _node_summary(d, "nodes/a.summary.json", _barrier_logs((0, 1)), host="a"), _logs(d, bar, (2, 3)))),
        Case("together_checkin_behind", lambda d: _node_summary(
            d, "a.summary.json", _barrier_logs((0, 2, 3)),
            [_checkin(0, "step 12", NOW - 40), _checkin(2, "step 11", NOW - 45), _checkin(3, "step 12", NOW - 41)])),
        Case("together_checkins_differ", lambda d: _node_summary(
            d, "a.summary.json", _barrier_logs((0, 2)),
            [_checkin(0, "step 12", NOW - 40), _checkin(2, "step 11", NOW - 45)])),
        Case("suspect_checkin_labels", lambda d: _node_summary(
            d, "a.summary.json", _barrier_logs(range(4)),
            [_checkin(r, "allreduce grads" if r != 1 else "barrier", NOW - 20 - r) for r in range(4)])),
        Case("checkins_never", lambda d: _node_summary(
            d, "a.summary.json", _barrier_logs((0, 1, 2)), [_checkin(r, "", NOW - 10, counter=0) for r in range(3)])),
        Case("new_group_different_lists", lambda d: _node_summary(
            d, "a.summary.json", _new_group_logs(), _new_group_checkins())),
        Case("new_group_local_sync_lists", lambda d: _node_summary(
            d, "a.summary.json", _new_group_logs(), _new_group_checkins(" local"))),
        Case("new_group_different_counts", lambda d: _node_summary(
            d, "a.summary.json", _new_group_logs(), _new_group_checkins(makes=(1, 1, 2, 2)))),
        Case("slow_all_moving", lambda d: _node_summary(d, "a.summary.json", _moving_logs())),
        Case("slow_some_moving", lambda d: _node_summary(d, "a.summary.json", _barrier_logs((0, 2, 3)) + [
            lg for lg in _moving_logs() if lg.rank == 1])),
        Case("no_hang_checkins", lambda d: _node_summary(
            d, "a.summary.json", [], [_checkin(r, "step %d" % r, NOW - 5, counter=r + 1) for r in range(3)])),
    ]
    return cases


CASES: Dict[str, Case] = {c.name: c for c in _cases()}


# --- running a case -----------------------------------------------------------------

def build(case: Case, root: str) -> str:
    """Fill ``<root>/<case>/`` with the case's inputs (fixed mtimes); returns the report path."""
    import pathlib

    d = pathlib.Path(root) / case.name
    d.mkdir(parents=True)
    case.build(d)
    for dirpath, _dirs, names in os.walk(str(d)):
        for n in names:
            p = os.path.join(dirpath, n)
            t = case.mtimes(os.path.relpath(p, str(d))) if case.mtimes else MTIME
            os.utime(p, (t, t))
    return os.path.join(str(d), case.sub) if case.sub else str(d)


def outputs(case: Case) -> Dict[str, str]:
    """The four golden outputs of ``case``, built in a fresh temporary directory."""
    from hpc_hangkit.report.render import render_json, render_text, render_tree
    from hpc_hangkit.rollcall import report_from_summary_and_dir, summarize_dir

    root = tempfile.mkdtemp(prefix="hk-golden-")
    try:
        path = build(case, root)
        summary = summarize_dir(path, world_size=case.world_size, samples=case.samples, workers=1)
        rep = report_from_summary_and_dir(summary, path, depth=case.depth, world_size=case.world_size, now=NOW)
        out = {"report.txt": render_text(rep), "report.json": render_json(rep), "tree.txt": render_tree(rep),
               "summary.json": json.dumps(summary, separators=(",", ":")) + "\n"}
        return {k: v.replace(root, "<tmp>") for k, v in out.items()}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def golden_path(case: str, name: str) -> str:
    return os.path.join(GOLDEN, case, name)


def read_golden(case: str, name: str) -> Optional[str]:
    try:
        with open(golden_path(case, name), encoding="utf-8", newline="") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def diff(case: str, name: str, new: str) -> str:
    """Unified diff golden -> ``new`` ("" when equal; a missing golden diffs against nothing)."""
    old = read_golden(case, name)
    if old == new:
        return ""
    return "".join(difflib.unified_diff(
        (old or "").splitlines(True), new.splitlines(True),
        "golden/%s/%s" % (case, name) if old is not None else "/dev/null", "now/%s/%s" % (case, name)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--regenerate", action="store_true", help="rewrite the golden files (prints what changed)")
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    a = ap.parse_args(argv)
    unknown = [c for c in a.cases if c not in CASES]
    if unknown:
        ap.error("unknown case(s): %s (known: %s)" % (", ".join(unknown), ", ".join(CASES)))
    changed = 0
    for name in a.cases or list(CASES):
        for fname, text in outputs(CASES[name]).items():
            dd = diff(name, fname, text)
            if not dd:
                continue
            changed += 1
            sys.stdout.write(dd if dd.endswith("\n") else dd + "\n")
            if a.regenerate:
                os.makedirs(os.path.dirname(golden_path(name, fname)), exist_ok=True)
                with open(golden_path(name, fname), "w", encoding="utf-8", newline="") as fh:
                    fh.write(text)
    if a.regenerate:
        print("golden: %d file(s) rewritten" % changed)
        return 0
    print("golden: %s" % ("%d file(s) differ" % changed if changed else "all equal"))
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
