"""The report's memory follows the files it reads, never a number written in them.

Heartbeats and dump headers claiming huge ranks and world sizes (crafted, and
random byte flips of a real heartbeat record) are read by the real
``hpc-hangkit report`` under an address-space limit: it must finish, with the
claims named in warnings.
"""
import json
import os
import random
import resource
import shutil
import struct
import subprocess
import sys

import pytest

from testlib import FIXTURES, REPO

HB = os.path.join(FIXTURES, "heartbeat", "rank_3.pid16135.hb")
RANK_OFF, WORLD_OFF = 16, 20      # int32 rank, world in the record's static part
#: address space for the report process: the interpreter and its imports fit easily;
#: a missing-rank list of 50,000,000 ranks does not
LIMIT = 1 << 30


def _hb(path, rank=None, world=None, flips=()):
    data = bytearray(open(HB, "rb").read())
    if rank is not None:
        struct.pack_into("<i", data, RANK_OFF, rank)
    if world is not None:
        struct.pack_into("<i", data, WORLD_OFF, world)
    for off, bit in flips:
        data[off] ^= 1 << bit
    with open(path, "wb") as f:
        f.write(bytes(data))


def _dump(path, rank, world):
    with open(path, "w") as f:
        f.write("# hpc-hangkit rank=%d world=%d local_rank=0 pid=%d host=n1 t=1796095330.0"
                " signal=SIGURG period_s=30 argv=[\"train.py\"]\n" % (rank, world, 100 + rank))
        f.write("Thread 0x00007f0000000001 (most recent call first):\n"
                '  File "/x/train.py", line 9 in step\n  File "/x/train.py", line 20 in <module>\n')


def _report(d):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))
    p = subprocess.run([sys.executable, "-m", "hpc_hangkit", "report", "--json", d],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300, cwd=REPO,
                       preexec_fn=limit, env=dict(os.environ, PYTHONPATH=REPO))
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    return json.loads(p.stdout)


@pytest.mark.timeout(300)
def test_crafted_rank_and_world_claims_are_bounded(tmp_path):
    hd = tmp_path / "hang_detector"
    (hd / "heartbeats").mkdir(parents=True)
    (hd / "watchdog").mkdir()
    for r in range(4):
        _dump(str(hd / "watchdog" / ("rank_%d.pid%d.log" % (r, 100 + r))), r, 4)
    _hb(str(hd / "heartbeats" / "rank_1.pid7.hb"), rank=1, world=50000000)
    _hb(str(hd / "heartbeats" / "rank_9.pid8.hb"), rank=4390970, world=4)
    _dump(str(hd / "watchdog" / "rank_2.pid9.log"), 2, 2 ** 31 - 1)
    rep = _report(str(tmp_path))
    assert rep["world_size"] == 4, rep["world_size"]
    text = " ".join(rep["warnings"])
    assert "50000000" in text and "4390970" in text and str(2 ** 31 - 1) in text, text


@pytest.mark.timeout(600)
def test_fuzzed_heartbeats_keep_the_report_bounded(tmp_path):
    """200 heartbeats, each the real record with 1-4 random bit flips (seeded)."""
    rnd = random.Random(16)
    hd = tmp_path / "hang_detector"
    (hd / "heartbeats").mkdir(parents=True)
    (hd / "watchdog").mkdir()
    for r in range(4):
        _dump(str(hd / "watchdog" / ("rank_%d.pid%d.log" % (r, 100 + r))), r, 4)
    for i in range(200):
        flips = [(rnd.choice([RANK_OFF + rnd.randrange(4), WORLD_OFF + rnd.randrange(4),
                              rnd.randrange(512)]), rnd.randrange(8))
                 for _ in range(rnd.randint(1, 4))]
        _hb(str(hd / "heartbeats" / ("rank_%d.pid%d.hb" % (i % 4, 1000 + i))), rank=i % 4,
            flips=flips)
    rep = _report(str(tmp_path))
    assert rep["world_size"] is None or rep["world_size"] <= (1 << 20)
    assert len(rep.get("missing_ranks") or []) <= (1 << 20)
    shutil.rmtree(str(hd))
