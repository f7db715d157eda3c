# Look-alike of https://github.com/bigscience-workshop/Megatron-DeepSpeed/pull/48 (tools/preprocess_dataset_mpi.py bcast):
# the root's length is broadcast first, then every rank allocates that many elements.
# expect: none
import torch
import torch.distributed as dist


def bcast(vals, root=0):
    length = [len(vals)]
    dist.broadcast_object_list(length, src=root)
    if dist.get_rank() == root:
        tvals = torch.tensor(vals, dtype=torch.int64)
    else:
        tvals = torch.zeros([length[0]], dtype=torch.int64)
    dist.broadcast(tvals, src=root)
    return tvals.tolist()
