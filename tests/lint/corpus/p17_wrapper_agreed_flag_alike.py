# Look-alike of https://github.com/mosaicml/composer/blob/v0.28.0/composer/trainer/trainer.py#L3655
# (a false alarm of the blind check on Composer 0.28.0, the mosaicml PyPI sdist): a rank whose
# loader is exhausted marks itself finished, but the flag is all-reduced with MAX through the
# project's own wrapper before it is tested, so every rank breaks in the same iteration.
# expect: none
import torch
import torch.distributed as dist


def all_reduce(tensor, reduce_operation="SUM", group=None):
    if dist.is_available() and dist.is_initialized():
        reduce_op = getattr(dist.ReduceOp, reduce_operation.upper())
        dist.all_reduce(tensor, op=reduce_op, group=group)
        return
    raise RuntimeError("the distributed package is not initialized")


def iterate_uneven(dataloader_iter):
    iter_finished = torch.zeros(1, dtype=torch.uint8)
    batch = None
    while True:
        try:
            batch = next(dataloader_iter)
        except StopIteration:
            iter_finished += 1
        all_reduce(iter_finished, reduce_operation="MAX")
        if iter_finished.item() == 1:
            break
        yield batch
