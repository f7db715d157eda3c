# Source: https://github.com/huggingface/accelerate/pull/1709 (fix: every process creates the iterator)
# expect: none
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
        main_iterator = super().__iter__()
        if self.state.process_index != 0:
            main_iterator = None
        stop_iteration = False
        while not stop_iteration:
            batch, stop_iteration = self._fetch_batches(main_iterator)
            yield batch
