# Look-alike of https://github.com/facebookresearch/fairscale/blob/v0.4.13/benchmarks/oss.py#L147
# with the wrapper of fairscale/nn/data_parallel/sharded_ddp.py#L343 (a false alarm of the
# measured projects): the helper is called with the rank and returns (model, loader); only the
# loader's sampler uses the rank, the model is built alike everywhere, so the wrapper's loop
# over the model's buffers has one trip count on every rank.
# expect: none
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


class ShardedWrapper(torch.nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module = module
        for buffer in self.module.buffers(recurse=True):
            dist.broadcast(buffer, 0)


def get_problem(rank, world_size, dataset, device):
    model = torch.nn.Linear(8, 2).to(device)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    loader = DataLoader(dataset, sampler=sampler, batch_size=4)
    return model, loader


def train(rank, world_size, dataset):
    device = torch.device(rank)
    model, loader = get_problem(rank, world_size, dataset, device)
    model = ShardedWrapper(model)
    for batch in loader:
        model(batch).sum().backward()
