"""Auto check-in labels from a real 2-rank gloo job (no watchdog needed).

Each rank installs the auto check-in hook itself, with a checkpoint that
records labels in a list, BEFORE torch is imported (argv[1] == "before") or
after (argv[1] == "after"), runs collectives, point-to-point ops and object
variants on the world group and a sub-group, creates process groups (``new_group``
with a list in reverse order and one with ``use_local_synchronization``,
``new_subgroups_by_enumeration``, ``init_device_mesh`` imported from its own
module), and prints ``RESULT <json>``.
Launched once per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
PYTHONPATH containing hpc_hangkit/boot.
"""
import json
import sys

import _hangkit_autocheckin as ac

labels = []
when = sys.argv[1]
if when == "before":
    ac.arm({}, checkpoint=labels.append)
    hook_installed = ac._finder is not None and ac._finder in sys.meta_path
    torch_before = "torch" in sys.modules

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if when == "after":
    hook_installed = None
    torch_before = True
    ac.arm({}, checkpoint=labels.append)

dist.init_process_group("gloo")
rank = dist.get_rank()
peer = 1 - rank
t = torch.ones(2)
dist.all_reduce(t)
dist.all_reduce(t, group=dist.group.WORLD)  # the default group object counts as world
dist.broadcast(t, src=0)
sub = dist.new_group([1, 0])
dist.all_reduce(t, group=sub)
if rank == 0:
    dist.send(t, dst=1)
    w = dist.isend(t, 1)
    w.wait()
    dist.send_object_list(["x"], dst=1)
else:
    dist.recv(t, src=0)
    w = dist.irecv(t, 0)
    w.wait()
    objs = [None]
    dist.recv_object_list(objs, src=0)
out = [None, None]
dist.all_gather_object(out, rank)
dist.new_group([rank], use_local_synchronization=True)
dist.new_subgroups_by_enumeration([[0], [1]])
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402

init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
dist.barrier()
result = {
    "rank": rank,
    "labels": labels,
    "hook_installed": hook_installed,
    "torch_before": torch_before,
    "hook_left": ac._finder is not None,
    "loader_is_wrapper": type(dist.__loader__).__name__ == "_PatchingLoader"
    or type(dist.__spec__.loader).__name__ == "_PatchingLoader",
    "patched": sorted(ac._patched),
    "all_reduce_value": t.tolist(),
    "all_gather_object": out,
    "wrapped_name": dist.all_reduce.__name__,
}
print("RESULT " + json.dumps(result), flush=True)
dist.destroy_process_group()
