"""Scenario 2: a metric-sync all_reduce of 1025 elements runs only on ranks 0 and 1, before the model's large all_reduce."""
import torch
import torch.distributed as dist

from _common import init, linger, say, warmup


def log_metrics(step):
    m = torch.ones(1025)
    dist.all_reduce(m)  # METRICS_LINE


def train_step(step):
    g = torch.ones(1 << 16)
    dist.all_reduce(g)  # TRAIN_LINE


def main():
    rank, world = init()
    warmup()
    for step in range(1, 6):
        say("step", step)
        try:
            if step == 3 and rank in (0, 1):
                log_metrics(step)
            train_step(step)
        except RuntimeError as e:  # gloo raises on a size mismatch
            linger(e)
    say("done")


main()
