# Look-alike of https://github.com/mosaicml/composer/blob/v0.28.0/composer/algorithms/seq_length_warmup/seq_length_warmup.py#L307
# (a false alarm of the blind check on Composer 0.28.0, the mosaicml PyPI sdist): a rank that
# runs out of memory sets `found_cuda_oom = 1` in its except handler, but the flag the raise
# tests was assigned just before, in the same block, from a MAX all-reduce over all ranks: the
# handler's value never reaches the test, and every rank raises or none does.
# expect: none
import torch
import torch.distributed as dist


def warm_up(model, batches, adjust):
    for batch in batches:
        while True:
            found_cuda_oom = 0
            try:
                model(batch)
                t = torch.tensor([0], dtype=torch.uint8)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                found_cuda_oom = t.item()
                if found_cuda_oom == 1:
                    raise RuntimeError("CUDA out of memory encountered on a different rank")
                model.zero_grad()
            except RuntimeError as e:
                if "out of memory" in str(e):
                    found_cuda_oom = 1
                else:
                    raise
            t = torch.tensor([found_cuda_oom], dtype=torch.uint8)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            if t.item() == 1:
                adjust()
                continue
            break
