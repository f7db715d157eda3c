# Repository: https://github.com/Lightning-AI/torchmetrics
# Commit (fix): cd7ccfc079cc68ae3a64440d1929b171b77d8674 (PR #2468); before: 9d046675a1524e2d10b321bd6e72e985561db272
# Files excerpted: src/torchmetrics/metric.py, src/torchmetrics/utilities/distributed.py (gather_all_tensors),
#   lightning_utilities/core/apply_func.py (dependency 0.11.2), tests/unittests/_helpers/testers.py (DummyListMetric)
import functools
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from torchmetrics.utilities.data import dim_zero_cat
from torchmetrics.utilities.imports import _TORCH_GREATER_EQUAL_2_1


# ---- lightning_utilities/core/apply_func.py ----
def _apply_to_collection_slow(data, dtype, function, *args, **kwargs):
    # Breaking condition
    if isinstance(data, dtype):
        return function(data, *args, **kwargs)
    elem_type = type(data)
    # Recursively apply to collection items
    if isinstance(data, Mapping):
        out = []
        for k, v in data.items():
            v = _apply_to_collection_slow(v, dtype, function, *args, **kwargs)
            out.append((k, v))
        return elem_type(OrderedDict(out))
    if isinstance(data, Sequence) and not isinstance(data, str):
        out = []
        for d in data:
            v = _apply_to_collection_slow(d, dtype, function, *args, **kwargs)
            out.append(v)
        return elem_type(out)
    return data

apply_to_collection = _apply_to_collection_slow


# ---- src/torchmetrics/utilities/distributed.py ----
def gather_all_tensors(result: Tensor, group: Optional[Any] = None):
    if group is None:
        group = torch.distributed.group.WORLD
    result = result.contiguous()
    world_size = torch.distributed.get_world_size(group)
    torch.distributed.barrier(group=group)

    # 1. Gather sizes of all tensors
    local_size = torch.tensor(result.shape, device=result.device)
    local_sizes = [torch.zeros_like(local_size) for _ in range(world_size)]
    torch.distributed.all_gather(local_sizes, local_size, group=group)
    ...  # 2./3. simple gather if all sizes are equal, otherwise pad to the max size
    gathered_result = [torch.zeros_like(result_padded) for _ in range(world_size)]
    torch.distributed.all_gather(gathered_result, result_padded, group)
    return gathered_result


# ---- src/torchmetrics/metric.py ----
class Metric(torch.nn.Module):
    def _sync_dist(self, dist_sync_fn: Callable = gather_all_tensors, process_group: Optional[Any] = None) -> None:
        input_dict = {attr: getattr(self, attr) for attr in self._reductions}

        for attr, reduction_fn in self._reductions.items():
            # pre-concatenate metric states that are lists to reduce number of all_gather operations
            if reduction_fn == dim_zero_cat and isinstance(input_dict[attr], list) and len(input_dict[attr]) > 1:
                input_dict[attr] = [dim_zero_cat(input_dict[attr])]

            # cornor case in distributed settings where a rank have not received any data, create empty to concatenate
            if (
                _TORCH_GREATER_EQUAL_2_1
                and reduction_fn == dim_zero_cat
                and isinstance(input_dict[attr], list)
                and len(input_dict[attr]) == 0
            ):
                input_dict[attr] = [torch.tensor([], device=self.device, dtype=self.dtype)]

        output_dict = apply_to_collection(input_dict, Tensor, dist_sync_fn, group=process_group or self.process_group)

        for attr, reduction_fn in self._reductions.items():
            # pre-processing ops (stack or flatten for inputs)
            if isinstance(output_dict[attr], list) and len(output_dict[attr]) == 0:
                setattr(self, attr, [])
                continue

            if isinstance(output_dict[attr][0], Tensor):
                output_dict[attr] = torch.stack(output_dict[attr])
            reduced = reduction_fn(output_dict[attr]) if reduction_fn is not None else output_dict[attr]
            setattr(self, attr, reduced)

    def sync(self, dist_sync_fn=None, process_group=None, should_sync=True, distributed_available=None) -> None:
        if distributed_available is None and self.distributed_available_fn is not None:
            distributed_available = self.distributed_available_fn
        is_distributed = distributed_available() if callable(distributed_available) else None
        if not should_sync or not is_distributed:
            return
        if dist_sync_fn is None:
            dist_sync_fn = gather_all_tensors
        # cache prior to syncing
        self._cache = self._copy_state_dict()
        # sync
        self._sync_dist(dist_sync_fn, process_group=process_group)
        self._is_synced = True

    @contextmanager
    def sync_context(self, dist_sync_fn=None, process_group=None, should_sync=True, should_unsync=True,
                     distributed_available=None):
        self.sync(
            dist_sync_fn=dist_sync_fn,
            process_group=process_group,
            should_sync=should_sync,
            distributed_available=distributed_available,
        )
        yield
        self.unsync(should_unsync=self._is_synced and should_unsync)

    def _wrap_compute(self, compute: Callable) -> Callable:
        @functools.wraps(compute)
        def wrapped_func(*args: Any, **kwargs: Any) -> Any:
            with self.sync_context(
                dist_sync_fn=self.dist_sync_fn,
                should_sync=self._to_sync,
                should_unsync=self._should_unsync,
            ):
                value = compute(*args, **kwargs)
            return value
        return wrapped_func


# ---- tests/unittests/_helpers/testers.py ----
class DummyListMetric(Metric):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("x", [], dist_reduce_fx="cat")
    def update(self, x=None):
        x = torch.tensor(1) if x is None else x
        self.x.append(x)
    def compute(self):
        return self.x


# ---- tests/unittests/bases/test_ddp.py (scenario added with the fix, run on every rank) ----
def _test_sync_with_unequal_size_lists(rank):
    dummy = DummyListMetric()
    if rank == 0:
        dummy.update(torch.zeros(2))
    assert torch.all(dummy.compute() == torch.tensor([0.0, 0.0]))
