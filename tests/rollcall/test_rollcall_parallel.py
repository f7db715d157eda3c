"""The raw-dump roll call parsed on several cores gives the same summary as serially.

Ranks are split whole between worker processes (rollcall.nodes.split_by_rank); a rank that
also appears in files the split cannot route by name (a launcher log holding its
traceback, an unwatched marker, a rank-less log of its pid) stays in the parent.
"""
from testlib import TESTS
import json
import os
import shutil
import sys

import pytest

from hpc_hangkit import rollcall
from hpc_hangkit.rollcall.nodes import PARALLEL_MIN_FILES, split_by_rank, workers_for
from hpc_hangkit.rollcall.read import list_files

HERE = TESTS
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))
import gen_dumps  # noqa: E402


def _tree(tmp_path, ranks=240):
    out = str(tmp_path / "scratch")
    suspects, _ = gen_dumps.generate(out, ranks, samples=5, n_divergent=3)
    hb = os.path.join(out, "heartbeats")
    os.makedirs(hb)
    shutil.copy(os.path.join(HERE, "fixtures", "heartbeat", "rank_3.pid16135.hb"), hb)
    os.makedirs(os.path.join(out, "unwatched"))
    with open(os.path.join(out, "unwatched", "rank_9.txt"), "w") as f:
        f.write("HANGKIT_WATCHDOG_PERIOD_S='x' is not a number of seconds\n")
    with open(os.path.join(out, "launcher.out"), "w") as f:
        f.write("[rank7]: Traceback (most recent call last):\n"
                '[rank7]:   File "/job/train.py", line 12, in <module>\n'
                "[rank7]: RuntimeError: boom\n")
    # a log whose name has no rank: it belongs to rank 11 through its pid
    src = os.path.join(out, "watchdog", "rank_11.pid%d.log" % (100000 + 11))
    with open(src, "rb") as f:
        data = f.read()
    os.makedirs(os.path.join(out, "extra"))
    with open(os.path.join(out, "extra", "copy_of_a_log.txt"), "wb") as f:
        f.write(data)
    with open(os.path.join(out, "watchdog", "rank_17.pid%d.log" % (100000 + 17)), "ab") as f:
        f.write(b"Stack (most recent call first):\n  File \"/x.py\", line")  # truncated dump
    return out, suspects


@pytest.mark.timeout(120)
def test_parallel_summary_equals_serial(tmp_path):
    out, suspects = _tree(tmp_path)
    files = list_files(out)
    c, buckets = split_by_rank(out, files, 2)
    assert len(buckets) == 2 and all(buckets)
    routed = {os.path.basename(f) for b in buckets for f in b}
    for r in (7, 9, 11):  # mentioned outside the routable files: kept in the parent
        assert not any(n.startswith("rank_%d." % r) for n in routed), r
    assert "rank_3.pid16135.hb" not in routed or 3 not in {lg.rank for lg in c.logs}
    serial = rollcall.summarize_dir(out, workers=1)
    parallel = rollcall.summarize_dir(out, workers=2)
    assert json.dumps(parallel, sort_keys=True) == json.dumps(serial, sort_keys=True)
    rep = rollcall.build_report(parallel, now=0.0)
    assert rep.verdict == "GONE" and list(rep.suspect_ranks) == [7]  # the planted traceback
    f7 = parallel["facts"]["7"]
    assert "boom" in json.dumps(f7) and parallel["unwatched"] == {"9": serial["unwatched"]["9"]}
    assert any("rank_17" in w for w in parallel["warnings"])


def test_default_is_serial_below_the_threshold(tmp_path):
    out, _ = _tree(tmp_path, ranks=20)
    assert workers_for(len(list_files(out)), None) == 1
    assert workers_for(PARALLEL_MIN_FILES, 3) == 3


def test_a_symlinked_dump_is_skipped_silently_and_a_missing_one_is_named(tmp_path):
    """read_dir opens with O_NOFOLLOW and asks whether the path is a link only when the open
    fails: a link is skipped without a word, a file that cannot be opened gets a warning."""
    from hpc_hangkit.rollcall.read import read_dir

    wd = tmp_path / "watchdog"
    wd.mkdir()
    real = tmp_path / "elsewhere.log"
    real.write_bytes(b"# hpc-hangkit rank=0 world=1 pid=5\nStack (most recent call first):\n"
                     b'  File "/x/a.py", line 3 in f\n')
    os.symlink(real, wd / "rank_0.pid5.log")
    c = read_dir(str(tmp_path), [str(wd / "rank_0.pid5.log"), str(wd / "rank_1.pid6.log")])
    assert c.logs == [] and c.files == 0
    assert len(c.warnings) == 1 and "rank_1.pid6.log: cannot read" in c.warnings[0]
