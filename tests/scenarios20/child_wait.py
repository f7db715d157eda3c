"""A rank blocked on a child process.

Shape of pytorch/pytorch#62381 (https://github.com/pytorch/pytorch/issues/62381:
"torch.distributed and subprocess do not work together?", a rank waiting in
``proc.communicate``): rank 0 runs an evaluation tool as a child at step 3 and waits for it; the
tool never ends. Ranks 1-3 wait in the all_reduce.
"""
import subprocess
import sys
import time

import torch
import torch.distributed as dist

from _job import init, say


def run_eval_tool():
    tool = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
    return tool.wait()  # CHILD_LINE


def train(rank):
    for step in range(1, 8):
        if rank == 0 and step == 3:  # BRANCH_LINE
            run_eval_tool()
        grad = torch.ones(16)
        dist.all_reduce(grad)  # TRAIN_LINE
        say("step", step)
        time.sleep(0.05)


def main():
    rank, _ = init()
    train(rank)
    say("done")


if __name__ == "__main__":
    main()
