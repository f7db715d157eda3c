"""Uneven inputs under DDP: rank 3's shard has one batch fewer.

pytorch/pytorch#33148 (https://github.com/pytorch/pytorch/issues/33148): "DDP instances
processing more input batches will hang, as the peer with least input batch will not join those
additional allreduce operations". Ranks 0-2 wait in backward (the reducer's all_reduce, issued
from C++); rank 3 left the loop and waits in the evaluation's all_reduce on the CPU metrics
group. The branch is the loop's trip count: ``for x in shard``.
"""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from _job import init, say


def evaluate(metrics_pg):
    acc = torch.ones(1)
    dist.all_reduce(acc, group=metrics_pg)  # EVAL_LINE
    return acc


def train(model, shard, metrics_pg):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i, x in enumerate(shard):  # BRANCH_LINE
        loss = model(x).sum()
        loss.backward()  # BACKWARD_LINE
        opt.step()
        say("batch", i)
    evaluate(metrics_pg)


def main():
    rank, world = init()
    metrics_pg = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    data = [torch.randn(4, 8) for _ in range(15)]  # 15 batches over 4 ranks: 4, 4, 4, 3
    shard = data[rank::world]
    model = DDP(torch.nn.Linear(8, 4))
    train(model, shard, metrics_pg)
    say("done")


if __name__ == "__main__":
    main()
