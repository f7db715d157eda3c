# Look-alike of https://github.com/huggingface/accelerate/pull/1709: process 0 reads the batches
# from a plain iterator (no collective in it), every process then meets in the broadcast.
# expect: none
import torch.distributed as dist
from torch.utils.data import DataLoader


class DataLoaderDispatcher(DataLoader):
    def __init__(self, dataset, state, **kwargs):
        super().__init__(dataset, **kwargs)
        self.state = state

    def __iter__(self):
        source = iter(self.dataset) if self.state.process_index == 0 else None
        while True:
            box = [next(source, None) if source is not None else None]
            dist.broadcast_object_list(box, src=0)
            if box[0] is None:
                return
            yield box[0]
