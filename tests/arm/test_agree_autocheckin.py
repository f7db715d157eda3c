"""Auto check-in (hpc_hangkit/boot/_hangkit_autocheckin.py) on real processes.

The hook is installed with a checkpoint that records labels, so these tests
need no watchdog; the end-to-end path (sitecustomize -> heartbeat -> report)
is in test_agree_jobs.py.
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, free_port

BOOT = os.path.join(REPO, "hpc_hangkit", "boot")
JOB = os.path.join(REPO, "tests", "agree_jobs", "autocheckin_job.py")

pytestmark = pytest.mark.torch


def _env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([BOOT, REPO] + [p for p in [env.get("PYTHONPATH")] if p])
    for k in list(env):
        if k.startswith("HANGKIT_"):
            del env[k]
    env.update(extra or {})
    return env


def _run_two_ranks(spawn, when):
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = _env(
            {"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        )
        procs.append(
            spawn([sys.executable, JOB, when], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        )
    results = {}
    for p in procs:
        out, err = p.communicate(timeout=90)
        assert p.returncode == 0, err.decode()[-3000:]
        line = [l for l in out.decode().splitlines() if l.startswith("RESULT ")][0]
        r = json.loads(line[len("RESULT "):])
        results[r["rank"]] = r
    return results


WORLD_SEQ = [
    "torch.distributed.all_reduce seq=1 group=world",
    "torch.distributed.all_reduce seq=2 group=world",
    "torch.distributed.broadcast seq=3 group=world src=0",
    "torch.distributed.new_group make=1 ranks=[0, 1]",  # sorted, as torch sorts them
    "torch.distributed.all_reduce seq=1 group=1",
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("when", ["before", "after"])
def test_labels_sequence_numbers_and_groups(spawn, when):
    res = _run_two_ranks(spawn, when)
    r0, r1 = res[0], res[1]
    # collectives: one counter per group, the default group object counts as world
    assert r0["labels"][:5] == WORLD_SEQ
    assert r1["labels"][:5] == WORLD_SEQ
    # point-to-point: a separate counter, with the peer
    assert r0["labels"][5:8] == [
        "torch.distributed.send p2p=1 group=world peer=1",
        "torch.distributed.isend p2p=2 group=world peer=1",
        "torch.distributed.send_object_list p2p=3 group=world peer=1",
    ]
    assert r1["labels"][5:8] == [
        "torch.distributed.recv p2p=1 group=world peer=0",
        "torch.distributed.irecv p2p=2 group=world peer=0",
        "torch.distributed.recv_object_list p2p=3 group=world peer=0",
    ]
    # object variants count once (their inner tensor collectives are not seen twice); group
    # creation counts its own calls, each once (the new_group calls inside the others are not seen)
    for rank, r in ((0, r0), (1, r1)):
        assert r["labels"][8:] == [
            "torch.distributed.all_gather_object seq=4 group=world",
            "torch.distributed.new_group make=2 ranks=[%d] local" % rank,
            "torch.distributed.new_subgroups_by_enumeration make=3 ranks_per_subgroup_list=[[0], [1]]",
            "torch.distributed.init_device_mesh make=4 mesh_shape=[2]",
            "torch.distributed.barrier seq=5 group=world",
        ]
        # the collectives still compute the right thing
        assert r["all_reduce_value"] == [8.0, 8.0]
        assert r["all_gather_object"] == [0, 1]
        assert r["wrapped_name"] == "all_reduce"
        # the module keeps its real loader; the hook removed itself
        assert r["loader_is_wrapper"] is False
        assert r["hook_left"] is False
        for name in ("all_reduce", "broadcast", "barrier", "all_gather", "reduce_scatter", "all_to_all",
                     "send", "recv", "isend", "irecv", "all_gather_object", "broadcast_object_list",
                     "send_object_list", "recv_object_list", "gather_object", "scatter_object_list",
                     "new_group", "new_subgroups", "new_subgroups_by_enumeration", "split_group",
                     "init_device_mesh", "device_mesh.init_device_mesh"):
            assert name in r["patched"]
    if when == "before":
        assert r0["hook_installed"] is True and r0["torch_before"] is False


PROBE = r"""
import json, sys
import _hangkit_autocheckin as ac
ac.arm({}, checkpoint=lambda label: None)
import json, email.parser, xml.dom.minidom, sqlite3, asyncio  # a process that never imports torch
print(json.dumps({"torch": [m for m in sys.modules if m.split(".")[0] == "torch"],
                  "hook": ac._finder in sys.meta_path, "patched": ac._patched}))
"""


@pytest.mark.timeout(60)
def test_process_that_never_imports_torch_is_untouched():
    out = subprocess.run([sys.executable, "-c", PROBE], env=_env(), capture_output=True, timeout=50)
    assert out.returncode == 0, out.stderr.decode()
    r = json.loads(out.stdout.decode())
    assert r == {"torch": [], "hook": True, "patched": []}


FAILING = r"""
import json, os, sys
import _hangkit_autocheckin as ac
def bad(label):
    raise OSError("disk full")
ac.arm({}, checkpoint=bad)
import torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
t = torch.ones(2)
dist.all_reduce(t)
wrapped = dist.all_reduce
ac.disarm()
print(json.dumps({"value": t.tolist(), "restored": dist.all_reduce is wrapped._hangkit_original,
                  "orig_is_c10d": dist.all_reduce is dist.distributed_c10d.all_reduce}))
dist.destroy_process_group()
"""


@pytest.mark.timeout(90)
def test_a_failing_checkpoint_never_reaches_the_collective_and_disarm_restores():
    out = subprocess.run(
        [sys.executable, "-c", FAILING, str(free_port())], env=_env(), capture_output=True, timeout=80
    )
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    assert json.loads(out.stdout.decode().splitlines()[-1]) == {
        "value": [1.0, 1.0],
        "restored": True,
        "orig_is_c10d": True,
    }


COMPACT = r"""
import json
import _hangkit_autocheckin as ac
a, b = list(range(64)), list(range(63)) + [99]
print(json.dumps([ac.compact([2, 3]), ac.compact((2, 2)), ac.compact(a), ac.compact(b), ac.compact(None)]))
"""


@pytest.mark.timeout(60)
def test_long_creation_arguments_keep_their_first_items_and_a_hash_of_the_whole():
    out = subprocess.run([sys.executable, "-c", COMPACT], env=_env(), capture_output=True, timeout=50)
    assert out.returncode == 0, out.stderr.decode()
    short, shape, a, b, none = json.loads(out.stdout.decode())
    assert (short, shape, none) == ("[2, 3]", "[2, 2]", "None")
    head = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, ...#"
    assert a.startswith(head) and b.startswith(head) and a != b  # same first ranks, different lists
    assert len(a) == len(head) + 8
