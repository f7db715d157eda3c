# Look-alike of https://github.com/pytorch/ignite/blob/v0.5.5/ignite/metrics/epoch_metric.py#L145
# (a false alarm of the blind check on pytorch-ignite 0.5.5): the project's distributed helpers
# call every collective on a module global (`_model.all_gather`, `_model.broadcast`); rank 0
# alone computes the metric, then every rank takes it from `broadcast(..., src=0)`, so
# `self._result` is None on every rank or on none and `ws > 1` is the number of processes.
# expect: none
import torch
import torch.distributed as dist


class _SerialModel:
    def get_world_size(self):
        return 1

    def get_rank(self):
        return 0

    def all_gather(self, tensor):
        return tensor

    def broadcast(self, tensor, src=0):
        return tensor


class _NativeModel(_SerialModel):
    def get_world_size(self):
        return dist.get_world_size()

    def get_rank(self):
        return dist.get_rank()

    def all_gather(self, tensor):
        out = torch.empty((dist.get_world_size(),) + tuple(tensor.shape), dtype=tensor.dtype)
        dist.all_gather_into_tensor(out, tensor)
        return out.flatten(0, 1)

    def broadcast(self, tensor, src=0):
        t = torch.tensor([tensor if dist.get_rank() == src else 0.0])
        dist.broadcast(t, src=src)
        return t.item()


_model = _SerialModel()


def setup():
    global _model
    if dist.is_initialized():
        _model = _NativeModel()


def get_world_size():
    return _model.get_world_size()


def get_rank():
    return _model.get_rank()


def all_gather(tensor):
    return _model.all_gather(tensor)


def broadcast(tensor, src=0):
    return _model.broadcast(tensor, src=src)


class EpochMetric:
    def __init__(self, compute_fn):
        self.compute_fn = compute_fn
        self._predictions = []
        self._result = None

    def reset(self):
        self._predictions = []
        self._result = None

    def update(self, y_pred):
        self._predictions.append(y_pred)
        self._result = None

    def compute(self):
        if self._result is None:
            prediction = torch.cat(self._predictions, dim=0)
            ws = get_world_size()
            if ws > 1:
                prediction = all_gather(prediction)
            self._result = 0.0
            if get_rank() == 0:
                self._result = self.compute_fn(prediction)
            if ws > 1:
                self._result = broadcast(self._result, src=0)
        return self._result
