# Look-alike of https://github.com/pytorch/ignite/blob/v0.5.5/ignite/metrics/precision_recall_curve.py#L97
# (a false alarm of the blind check on pytorch-ignite 0.5.5): rank 0 alone computes three
# tensors (the others hold None), then, when there is more than one process, every rank takes
# each from `broadcast(..., src=0)` (the project's helper on a module global) before the
# tuple is stored: with one process nothing else runs, so `self._result` agrees.
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

    def broadcast(self, tensor, src=0, safe_mode=False):
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

    def broadcast(self, tensor, src=0, safe_mode=False):
        obj = [tensor]
        dist.broadcast_object_list(obj, src=src)
        return obj[0]


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


def broadcast(tensor, src=0, safe_mode=False):
    return _model.broadcast(tensor, src=src, safe_mode=safe_mode)


class PrecisionRecallCurve:
    def __init__(self, compute_fn):
        self.compute_fn = compute_fn
        self._predictions = []
        self._result = None

    def reset(self):
        self._predictions = []
        self._result = None

    def compute(self):
        if self._result is None:
            prediction = torch.cat(self._predictions, dim=0)
            ws = get_world_size()
            if ws > 1:
                prediction = all_gather(prediction)
            if get_rank() == 0:
                precision, recall, thresholds = self.compute_fn(prediction)
                precision = torch.tensor(precision)
            else:
                precision, recall, thresholds = None, None, None
            if ws > 1:
                precision = broadcast(precision, src=0, safe_mode=True)
                recall = broadcast(recall, src=0, safe_mode=True)
                thresholds = broadcast(thresholds, src=0, safe_mode=True)
            self._result = (precision, recall, thresholds)
        return self._result
