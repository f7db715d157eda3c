# Excerpt in the shape of mosaicml/composer at commit 0da611ff46bc31dc7573b4280eea3e5af3a808bb
# (parent of fix 656bfe319, PR #238). Five modules merged; unrelated code dropped.
import abc
import time
from collections import deque

import torch
import torch.distributed

from composer.core.event import Event

# ---- composer/utils/dist.py ----
import os


def get_local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", 0))


def all_reduce(tensor: torch.Tensor, reduce_operation: str = "SUM") -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        reduce_op = getattr(torch.distributed.ReduceOp, reduce_operation.upper())
        torch.distributed.all_reduce(tensor, op=reduce_op)
        return


# ---- composer/core/callback.py ----
class Callback(abc.ABC):
    def run_event(self, event, state, logger) -> None:
        """This method is called by the engine on each event."""
        self._run_event(event, state, logger)

    def _run_event(self, event, state, logger) -> None:
        # default fallback if the callback does not override _run_event
        event_cb = getattr(self, event.value)
        return event_cb(state, logger)

    def batch_end(self, state, logger) -> None:
        pass


class RankZeroCallback(Callback, abc.ABC):
    """Base class for callbacks that only run on the local rank zero process."""

    def run_event(self, event, state, logger) -> None:
        if get_local_rank() != 0:
            return
        return self._run_event(event, state, logger)


# ---- composer/callbacks/speed_monitor.py ----
class SpeedMonitor(RankZeroCallback):
    """Logs the training throughput."""

    def __init__(self, window_size: int):
        super().__init__()
        self.window_size = window_size
        self.train_examples_per_epoch = 0
        self.batch_end_times = deque(maxlen=window_size + 1)
        self.batch_num_samples = deque(maxlen=window_size)

    def batch_end(self, state, logger):
        self.batch_end_times.append(time.time())
        batch_num_samples = torch.tensor([int(state.batch_num_samples)], device=state.batch.device)
        all_reduce(batch_num_samples, reduce_operation="SUM")
        self.batch_num_samples.append(int(batch_num_samples.item()))
        self.train_examples_per_epoch += batch_num_samples
        if len(self.batch_end_times) == self.window_size + 1:
            throughput = sum(self.batch_num_samples) / (self.batch_end_times[-1] - self.batch_end_times[0])
            logger.metric_batch({'throughput/step': throughput})


# ---- composer/core/engine.py ----
class Engine:
    def __init__(self, state, logger, algorithms=(), callbacks=()):
        self.state = state
        self.logger = logger
        self.algorithms = algorithms
        self.callbacks = callbacks or []

    def run_event(self, event):
        traces = self._run_algorithms(event)
        self._run_callbacks(event)
        return traces

    def _run_callbacks(self, event):
        for cb in self.callbacks:
            cb.run_event(event, self.state, self.logger)


# ---- composer/trainer/trainer.py ----
class Trainer:
    def _train_loop(self) -> None:
        state = self.state
        for _ in range(state.max_epochs):
            for batch_idx, state.batch in enumerate(state.train_dataloader):
                num_samples_in_batch = torch.tensor([state.batch_num_samples], dtype=torch.int)
                all_reduce(num_samples_in_batch, reduce_operation="SUM")

                self.engine.run_event(Event.BATCH_START)
                total_loss = self._train_batch()
                if total_loss is not None:
                    all_reduce(total_loss, reduce_operation="SUM")
                    torch.distributed.barrier()

                self.engine.run_event(Event.BATCH_END)
