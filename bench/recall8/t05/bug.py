# Repository: https://github.com/Project-MONAI/MONAI
# Commit (before fix): 5eb919869b4211b8f8146a89132127c5fb6bec89
# Files excerpted: monai/handlers/classification_saver.py (ClassificationSaver),
#                  monai/handlers/utils.py (evenly_divisible_all_gather, string_list_all_gather),
#   plus the per-iteration event loop of pytorch-ignite 0.4.4 (ignite/engine/engine.py,
#   Engine._run_once_on_dataset; heavily trimmed) that drives the handler.
from typing import Callable, List, Optional

import torch
import ignite.distributed as idist
from ignite.engine import Events

from monai.data import CSVSaver
from monai.utils import ImageMetaKey as Key


# ---- ignite/engine/engine.py (trimmed) ----
class Engine:
    def _run_once_on_dataset(self):
        # each rank iterates over its own shard; with MONAI's
        # DistributedSampler(even_divisible=False) the shards differ in length
        for batch in self._dataloader_iter:
            self.state.batch = batch
            self.state.output = self._process_function(self, self.state.batch)
            self._fire_event(Events.ITERATION_COMPLETED)
        self._fire_event(Events.EPOCH_COMPLETED)


# ---- monai/handlers/utils.py ----
def evenly_divisible_all_gather(data: torch.Tensor) -> torch.Tensor:
    if not isinstance(data, torch.Tensor):
        raise ValueError("input data must be PyTorch Tensor.")

    if idist.get_world_size() <= 1:
        return data

    # make sure the data is evenly-divisible on multi-GPUs
    length = data.shape[0]
    all_lens = idist.all_gather(length)
    max_len = max(all_lens)
    if length < max_len:
        size = [max_len - length] + list(data.shape[1:])
        data = torch.cat([data, data.new_full(size, 0)], dim=0)
    # all gather across all processes
    data = idist.all_gather(data)
    # delete the padding NaN items
    return torch.cat([data[i * max_len : i * max_len + l, ...] for i, l in enumerate(all_lens)], dim=0)


def string_list_all_gather(strings: List[str]) -> List[str]:
    world_size = idist.get_world_size()
    if world_size <= 1:
        return strings

    result: List[List[str]] = [[] for _ in range(world_size)]
    # get length of strings
    length = len(strings)
    all_lens = idist.all_gather(length)
    max_len = max(all_lens)
    # pad the item to make sure the same length
    if length < max_len:
        strings = strings + ["" for _ in range(max_len - length)]
    for s in strings:
        gathered = idist.all_gather(s)
        for i, g in enumerate(gathered):
            if len(g) > 0:
                result[i].append(g)
    return [i for k in result for i in k]


# ---- monai/handlers/classification_saver.py ----
class ClassificationSaver:
    """
    Event handler triggered on completing every iteration to save the classification predictions as CSV file.
    If running in distributed data parallel, only saves CSV file in the specified rank.
    """

    def __init__(
        self,
        output_dir: str = "./",
        filename: str = "predictions.csv",
        overwrite: bool = True,
        batch_transform: Callable = lambda x: x,
        output_transform: Callable = lambda x: x,
        name: Optional[str] = None,
        save_rank: int = 0,
    ) -> None:
        self._expected_rank: bool = idist.get_rank() == save_rank
        self.saver = CSVSaver(output_dir, filename, overwrite)
        self.batch_transform = batch_transform
        self.output_transform = output_transform
        self._name = name

    def attach(self, engine: Engine) -> None:
        if not engine.has_event_handler(self, Events.ITERATION_COMPLETED):
            engine.add_event_handler(Events.ITERATION_COMPLETED, self)
        if self._expected_rank and not engine.has_event_handler(self.saver.finalize, Events.COMPLETED):
            engine.add_event_handler(Events.COMPLETED, lambda engine: self.saver.finalize())

    def __call__(self, engine: Engine) -> None:
        _meta_data = self.batch_transform(engine.state.batch)
        if Key.FILENAME_OR_OBJ in _meta_data:
            # all gather filenames across ranks, only filenames are necessary
            _meta_data = {Key.FILENAME_OR_OBJ: string_list_all_gather(_meta_data[Key.FILENAME_OR_OBJ])}
        # all gather predictions across ranks
        _engine_output = evenly_divisible_all_gather(self.output_transform(engine.state.output))

        if self._expected_rank:
            self.saver.save_batch(_engine_output, _meta_data)
