# colossalai/amp/naive_amp/_fp16_optimizer.py + colossalai/utils/common.py (excerpt)
import torch
import torch.distributed as dist
from torch.optim import Optimizer

from colossalai.context import ParallelMode
from colossalai.core import global_context as gpc


def clip_grad_norm_fp32(parameters, max_norm, norm_type=2):
    params = []
    for param in parameters:
        if param.grad is not None:
            params.append(param)

    if len(params) == 0:
        return 0.0
    max_norm = float(max_norm)
    norm_type = float(norm_type)

    grads = [p.grad.data for p in params]
    total_norm = sum(torch.norm(g, norm_type) ** norm_type for g in grads)

    if gpc.is_initialized(ParallelMode.TENSOR):
        dist.all_reduce(total_norm, op=dist.ReduceOp.SUM, group=gpc.get_group(ParallelMode.TENSOR))
    if gpc.is_initialized(ParallelMode.PIPELINE) and gpc.get_world_size(ParallelMode.PIPELINE) > 1:
        dist.all_reduce(total_norm, op=dist.ReduceOp.SUM, group=gpc.get_group(ParallelMode.PIPELINE))
    total_norm = total_norm ** (1.0 / norm_type)
    if torch.is_tensor(total_norm):
        total_norm = total_norm.item()

    clip_coeff = max_norm / (total_norm + 1.0e-6)
    if clip_coeff < 1.0:
        for p in params:
            p.grad.detach().mul_(clip_coeff)
    return total_norm


def has_inf_or_nan(tensor):
    s = float(tensor.float().sum())
    return s == float('inf') or s == -float('inf') or s != s


class FP16Optimizer(Optimizer):

    def __init__(self, optimizer, grad_scaler, clip_grad_norm=0,
                 dp_process_group=None, mp_process_group=None):
        self._optimizer = optimizer
        self._grad_scaler = grad_scaler
        self._found_overflow = torch.cuda.FloatTensor([0.0])
        self._clip_grad_max_norm = clip_grad_norm

        def _get_process_group(parallel_mode):
            if gpc.is_initialized(ParallelMode.DATA) and gpc.get_world_size(ParallelMode.DATA):
                return gpc.get_group(ParallelMode.DATA)
            else:
                return None

        if dp_process_group is None:
            dp_process_group = _get_process_group(ParallelMode.DATA)
        if mp_process_group is None:
            mp_process_group = _get_process_group(ParallelMode.MODEL)

        self._dp_process_group = dp_process_group
        self._mp_process_group = mp_process_group

    def _check_overflow(self):
        self._found_overflow.fill_(0.0)

        for group in self._optimizer.param_groups:
            for p in group['params']:
                if p.grad is not None and has_inf_or_nan(p.grad):
                    self._found_overflow.fill_(1.0)
                    break

        if self._dp_process_group:
            dist.all_reduce(self._found_overflow, op=dist.ReduceOp.MAX, group=self._dp_process_group)

        if self._mp_process_group:
            dist.all_reduce(self._found_overflow, op=dist.ReduceOp.MAX, group=self._mp_process_group)

        return self._found_overflow.item() > 0

    def zero_grad(self, set_to_none=True):
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def _assign_grad_to_fp32_master_param(self):
        pass

    def _unscale_grads(self):
        pass

    def _update_fp16_param_from_fp32_param(self):
        pass

    def clip_grad_norm(self, clip_grad):
        params = []
        for param_group in self._optimizer.param_groups:
            for param in param_group['params']:
                params.append(param)
        return clip_grad_norm_fp32(params, clip_grad)

    def step(self):
        self._assign_grad_to_fp32_master_param()
        self._unscale_grads()

        overflow = self._check_overflow()
        self._grad_scaler.update(overflow)

        if overflow:
            self.zero_grad()
            return False, None

        grad_norm = None
        if self._clip_grad_max_norm > 0.0:
            grad_norm = self.clip_grad_norm(self._clip_grad_max_norm)

        self._optimizer.step()

        self._update_fp16_param_from_fp32_param()

        return True, grad_norm
