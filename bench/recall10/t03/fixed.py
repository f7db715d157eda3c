# areal/engine/fsdp_utils/grad.py (excerpt)
import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed import ProcessGroup
from torch.distributed.tensor import DTensor

from areal.infra.platforms import current_platform


def to_local_if_dtensor(tensor):
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def is_param_not_tensor_parallel_duplicate(param, tensor_parallel_rank: int):
    if tensor_parallel_rank == 0:
        return True
    if not isinstance(param, DTensor):
        return False
    return True


def get_main_grads_for_grad_norm(params, tensor_parallel_rank: int) -> list[Tensor]:
    return [
        param.grad
        for param in params
        if param.grad is not None
        and is_param_not_tensor_parallel_duplicate(param, tensor_parallel_rank)
    ]


def get_grad_norm_fp32(
    grads_for_norm,
    data_parallel_group: ProcessGroup | None = None,
    model_parallel_group: ProcessGroup | None = None,
    norm_type: float = 2.0,
) -> float:
    if isinstance(grads_for_norm, Tensor):
        grads_for_norm = [grads_for_norm]

    grads_for_norm = [to_local_if_dtensor(grad).detach() for grad in grads_for_norm]

    norm_type = float(norm_type)
    total_norm = 0.0

    device = current_platform.current_device()

    if not grads_for_norm:
        total_norm_cuda = torch.tensor(0.0, dtype=torch.float, device=device)
        reduce_op = dist.ReduceOp.MAX if norm_type == torch.inf else dist.ReduceOp.SUM
        if data_parallel_group:
            dist.all_reduce(total_norm_cuda, op=reduce_op, group=data_parallel_group)
        if model_parallel_group is not None:
            dist.all_reduce(total_norm_cuda, op=reduce_op, group=model_parallel_group)
        total_norm = float(total_norm_cuda.item())
        if norm_type != torch.inf and total_norm > 0:
            total_norm = total_norm ** (1.0 / norm_type)
        return total_norm

    if norm_type == torch.inf:
        norms = [grad.abs().max() for grad in grads_for_norm]
        total_norm = torch.max(torch.stack(norms))
        total_norm_cuda = torch.tensor(float(total_norm), dtype=torch.float, device=device)
        if data_parallel_group:
            dist.all_reduce(total_norm_cuda, op=dist.ReduceOp.MAX, group=data_parallel_group)
        if model_parallel_group is not None:
            dist.all_reduce(total_norm_cuda, op=dist.ReduceOp.MAX, group=model_parallel_group)
        total_norm = float(total_norm_cuda.item())
    else:
        grad_norms = [torch.norm(grad, norm_type) for grad in grads_for_norm]
        total_norm_cuda = torch.stack(grad_norms).pow(norm_type).sum()
        if data_parallel_group:
            dist.all_reduce(total_norm_cuda, op=dist.ReduceOp.SUM, group=data_parallel_group)
        if model_parallel_group is not None:
            dist.all_reduce(total_norm_cuda, op=dist.ReduceOp.SUM, group=model_parallel_group)
        total_norm = float(total_norm_cuda.item()) ** (1.0 / norm_type)

    return total_norm


def clip_grad_by_total_norm_fp32(parameters, max_norm, total_norm):
    clip_coeff = max_norm / (total_norm + 1.0e-6)
    if clip_coeff >= 1.0:
        return
    for param in parameters:
        if param.grad is not None:
            to_local_if_dtensor(param.grad).detach().mul_(clip_coeff)


def fsdp2_clip_grad_norm(
    parameters: list[nn.Parameter],
    max_norm: float,
    fsdp_group: ProcessGroup,
    tp_group: ProcessGroup | None = None,
    pp_group: ProcessGroup | None = None,
    norm_type: float = 2.0,
) -> float:
    tensor_parallel_rank = dist.get_rank(tp_group) if tp_group is not None else 0

    grads_for_norm = get_main_grads_for_grad_norm(parameters, tensor_parallel_rank)

    grad_norm = get_grad_norm_fp32(
        grads_for_norm,
        fsdp_group,
        tp_group,
        norm_type=norm_type,
    )

    if pp_group is not None:
        device = current_platform.current_device()
        grad_norm_tensor = torch.tensor(grad_norm, dtype=torch.float, device=device)
        grad_norm_tensor **= norm_type
        dist.all_reduce(grad_norm_tensor, op=dist.ReduceOp.SUM, group=pp_group)
        grad_norm_tensor **= 1.0 / norm_type
        grad_norm = float(grad_norm_tensor.item())

    if parameters:
        clip_grad_by_total_norm_fp32(parameters, max_norm, grad_norm)

    return grad_norm
