# Excerpt in the shape of EleutherAI/bergson at commit 8eea5ef2d5bfe91245454f5c8018376631508a9f
# (parent of fix 4174502, PR #376). Two modules merged; unrelated code dropped.
import os

import torch
import torch.distributed as dist
from torch.distributed._functional_collectives import all_reduce as differentiable_all_reduce
from torch.distributed._functional_collectives import wait_tensor

from bergson.distributed import grad_tree


# ---- bergson/utils/load_from_optimizer.py ----
def save_second_moments_as_optimizer_pt(model, opt_state, path, step=None):
    """Export a torchopt AdamW opt_state to optimizer.pt.

    Call from every rank - gathering sharded (DTensor) moments is a collective;
    only rank 0 writes the file.
    """
    params = {k: v for k, v in model.named_parameters(remove_duplicate=False) if v.requires_grad}
    ordered_names = sorted(params)
    adam_state = next((s for s in opt_state if hasattr(s, "nu")), None)
    nu = list(adam_state.nu)

    def _to_cpu(t):
        # FSDP: gather the sharded moment (a collective - all ranks reach it).
        t = t.full_tensor() if hasattr(t, "full_tensor") else t
        return t.detach().to("cpu")

    main = not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
    name_to_nu = {}
    for name, moment in zip(ordered_names, nu):
        if moment is None:
            continue
        moment = _to_cpu(moment)
        if main:
            name_to_nu[name] = moment

    if not main:
        return len(name_to_nu)
    torch.save({"state": name_to_nu}, path)
    return len(name_to_nu)


# ---- bergson/magic/cli.py ----
def compute_query_gradients(fwd_state, model, query_stream, method="mean", fsdp=False):
    grad_accum = None
    loss_accum = 0.0
    with fwd_state.activate(model) as params:
        for batch in query_stream:
            loss = model(**batch).loss
            grads = grad_tree(loss, params)
            if grad_accum is None:
                grad_accum = {k: g.detach().clone() for k, g in grads.items()}
            else:
                for k, g in grads.items():
                    grad_accum[k] += g.detach()
            loss_accum += loss.detach()

    if dist.is_initialized():
        if not fsdp:
            grad_accum = {
                k: wait_tensor(differentiable_all_reduce(g, "sum", dist.distributed_c10d._get_default_group()))
                for k, g in grad_accum.items()
            }
        dist.all_reduce(loss_accum)
    return grad_accum, float(loss_accum)


def worker(global_rank, rank, world_size, run_cfg, trainer, fwd_state, model, stream, query_stream):
    fwd_state = trainer.train(fwd_state, stream, fsdp=run_cfg.fsdp)

    if getattr(run_cfg, "save_optimizer_state", "none") != "none" and global_rank == 0:
        save_second_moments_as_optimizer_pt(
            model,
            fwd_state.opt_state,
            os.path.join(run_cfg.run_path, "optimizer.pt"),
        )

    if getattr(run_cfg, "save_models", False) and global_rank == 0:
        base_dir = os.path.join(run_cfg.run_path, "retrained", "base")
        os.makedirs(base_dir, exist_ok=True)
        model.save_pretrained(base_dir, safe_serialization=True)

    query_grads, baseline = compute_query_gradients(
        fwd_state, model, query_stream, run_cfg.query_method, run_cfg.fsdp
    )
    return query_grads, baseline
