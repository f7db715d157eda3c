"""Same line, different sizes: a histogram made with ``bincount`` without ``minlength``.

Every rank calls the same all_reduce, but ``torch.bincount(labels)`` is as long as the largest
label the rank saw: rank 1 saw no label 7, so its tensor has 7 elements, the others' 8. With
NCCL such a mismatch hangs or corrupts (NVIDIA/nccl#1417,
https://github.com/NVIDIA/nccl/issues/1417: "For AllReduce communications with a shape mismatch,
some cases will hang while others will not"); gloo raises on some sizes (NVIDIA/nccl#1394,
https://github.com/NVIDIA/nccl/issues/1394) and waits for ever on others, as here.
"""
import time

import torch
import torch.distributed as dist

from _job import init, say


def class_histogram(labels):
    counts = torch.bincount(labels).float()
    dist.all_reduce(counts)  # SYNC_LINE
    return counts


def main():
    rank, _ = init()
    for step in range(1, 6):
        labels = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7])
        if step == 3 and rank == 1:
            labels = labels[:-1]  # this rank's batch has no label 7
        class_histogram(labels)
        say("step", step)
        time.sleep(0.05)
    say("done")


if __name__ == "__main__":
    main()
