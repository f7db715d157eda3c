# Source: https://github.com/huggingface/accelerate/pull/1709
# Bug: DataLoaderDispatcher creates the underlying iterator only on process 0; the DataLoader
#      iterator broadcasts a shared seed across all processes when it is created, so process 0
#      waits in that broadcast alone.
# Class: call through super().__iter__() that is collective
# expect: HK101 collective=30 branch=29
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader


class SeededDataLoader(DataLoader):
    def __iter__(self):
        seed = torch.empty((), dtype=torch.int64)
        if dist.get_rank() == 0:
            seed.random_()
        dist.broadcast(seed, src=0)
        self.generator = torch.Generator().manual_seed(int(seed))
        return super().__iter__()


class DataLoaderDispatcher(SeededDataLoader):
    def __init__(self, dataset, state, **kwargs):
        super().__init__(dataset, **kwargs)
        self.state = state

    def __iter__(self):
        main_iterator = None
        if self.state.process_index == 0:
            main_iterator = super().__iter__()
        stop_iteration = False
        while not stop_iteration:
            batch, stop_iteration = self._fetch_batches(main_iterator)
            yield batch
