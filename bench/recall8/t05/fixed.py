# Repository: https://github.com/Project-MONAI/MONAI
# Commit (fix): 9e1a7d4c0d71e123d735f1cd4d5eb7c6a8169651 (PR #2096); before: 5eb919869b4211b8f8146a89132127c5fb6bec89
# Files excerpted: monai/handlers/classification_saver.py (ClassificationSaver),
#                  monai/handlers/utils.py (evenly_divisible_all_gather, string_list_all_gather),
#   plus the per-iteration event loop of pytorch-ignite 0.4.4 (ignite/engine/engine.py,
#   Engine._run_once_on_dataset; heavily trimmed) that drives the handler.
import warnings
from typing import Callable, List, Optional

import torch
import ignite.distributed as idist
from ignite.engine import Events

from monai.data import CSVSaver
from monai.utils import ImageMetaKey as Key
from monai.utils import issequenceiterable


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
        self.save_rank = save_rank
        self.output_dir = output_dir
        self.filename = filename
        self.overwrite = overwrite
        self.batch_transform = batch_transform
        self.output_transform = output_transform
        self._name = name
        self._outputs: List[torch.Tensor] = []
        self._filenames: List[str] = []

    def attach(self, engine: Engine) -> None:
        if not engine.has_event_handler(self._started, Events.EPOCH_STARTED):
            engine.add_event_handler(Events.EPOCH_STARTED, self._started)
        if not engine.has_event_handler(self, Events.ITERATION_COMPLETED):
            engine.add_event_handler(Events.ITERATION_COMPLETED, self)
        if not engine.has_event_handler(self._finalize, Events.EPOCH_COMPLETED):
            engine.add_event_handler(Events.EPOCH_COMPLETED, self._finalize)

    def _started(self, engine: Engine) -> None:
        self._outputs = []
        self._filenames = []

    def __call__(self, engine: Engine) -> None:
        filenames = self.batch_transform(engine.state.batch).get(Key.FILENAME_OR_OBJ)
        if issequenceiterable(filenames):
            self._filenames.extend(filenames)
        outputs = self.output_transform(engine.state.output)
        if outputs is not None:
            self._outputs.append(outputs)

    def _finalize(self, engine: Engine) -> None:
        """
        All gather classification results from ranks and save to CSV file.
        """
        ws = idist.get_world_size()
        if self.save_rank >= ws:
            raise ValueError("target save rank is greater than the distributed group size.")

        outputs = torch.cat(self._outputs, dim=0)
        filenames = self._filenames
        if ws > 1:
            outputs = evenly_divisible_all_gather(outputs)
            filenames = string_list_all_gather(filenames)

        if len(filenames) == 0:
            meta_dict = None
        else:
            if len(filenames) != len(outputs):
                warnings.warn(f"filenames length: {len(filenames)} doesn't match outputs length: {len(outputs)}.")
            meta_dict = {Key.FILENAME_OR_OBJ: filenames}

        # save to CSV file only in the expected rank
        if idist.get_rank() == self.save_rank:
            saver = CSVSaver(self.output_dir, self.filename, self.overwrite)
            saver.save_batch(outputs, meta_dict)
            saver.finalize()
