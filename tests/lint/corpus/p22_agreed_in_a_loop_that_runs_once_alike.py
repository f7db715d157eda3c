# Look-alike of https://github.com/mosaicml/composer/blob/v0.28.0/composer/trainer/trainer.py#L2757
# (a false alarm of the blind check on Composer 0.28.0, the mosaicml PyPI sdist): a rank that
# runs out of memory sets `found_cuda_oom = 1` in its except handler, but the flag is replaced by
# its MAX all-reduce inside `while not all_ranks_finished:`, right after
# `all_ranks_finished = False`: that loop's body runs at least once, so the handler's value never
# reaches the test after it, and every rank takes the same branch.
# expect: none
import torch
import torch.distributed as dist


def train_batch(step, adjust, sync_stats):
    oom_found_this_batch = False
    while True:
        found_cuda_oom = 0
        try:
            step()
        except RuntimeError as e:
            if "out of memory" in str(e):
                found_cuda_oom = 1
            else:
                raise
        all_ranks_finished = False
        while not all_ranks_finished:
            found_cuda_oom_tensor = torch.tensor([found_cuda_oom], dtype=torch.uint8)
            dist.all_reduce(found_cuda_oom_tensor, op=dist.ReduceOp.MAX)
            found_cuda_oom = found_cuda_oom_tensor.item()
            finished = torch.tensor([1], dtype=torch.uint8)
            dist.all_reduce(finished, op=dist.ReduceOp.MIN)
            all_ranks_finished = finished.item() == 1
        if found_cuda_oom == 1:
            adjust()
            oom_found_this_batch = True
            continue
        if not oom_found_this_batch and torch.cuda.is_available():
            sync_stats()
            dist.barrier()
        return
