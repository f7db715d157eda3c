# Source: https://github.com/pytorch/pytorch/issues/22834 (fix: agree on the stop decision)
# expect: none
import time

import torch
import torch.distributed as dist


def benchmark(model, criterion, optimizer, xs, targets, mintime, mintrials, maxtrials):
    start = time.time()
    for trial in range(maxtrials):
        optimizer.zero_grad()
        loss = criterion(model(xs), targets)
        loss.backward()
        dist.all_reduce(loss)
        optimizer.step()
        done = torch.tensor([int(time.time() - start >= mintime and trial >= mintrials)])
        dist.all_reduce(done, op=dist.ReduceOp.MAX)
        if done.item():
            break
