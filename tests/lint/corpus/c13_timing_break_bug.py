# Source: https://github.com/pytorch/pytorch/issues/22834
# Bug: the benchmark loop stops when this process's own clock says enough time has passed;
#      one process leaves the loop while the others block in the next iteration's all_reduce
#      (DDP's gradient reduction in the original, written out here).
# Class: rank-local (clock) break before a collective later in the loop
# expect: HK202 collective=18 branch=21
import time

import torch.distributed as dist


def benchmark(model, criterion, optimizer, xs, targets, mintime, mintrials, maxtrials):
    start = time.time()
    for trial in range(maxtrials):
        optimizer.zero_grad()
        loss = criterion(model(xs), targets)
        loss.backward()
        dist.all_reduce(loss)
        optimizer.step()
        finish = time.time()
        if finish - start >= mintime and trial >= mintrials:
            break
