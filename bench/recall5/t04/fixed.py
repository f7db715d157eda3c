# Excerpt in the shape of Bria-AI/Zero-to-Wan training/train.py after PR #1
# "bugfix: checkpoint saving hangup" (applied on top of ba4d9ed1d26a1aadd09fdfbe6419b19064579d3b).
# Unrelated code dropped.
import json
import os

import torch
import torch.distributed as dist
from safetensors.torch import save_file
from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def avg_scalar_across_ranks(scalar):
    scalar_tensor = torch.tensor(scalar, device="cuda")
    dist.all_reduce(scalar_tensor, op=dist.ReduceOp.AVG)
    return scalar_tensor.item()


def save_checkpoint(transformer, optimizer, global_step, args, rank):
    with FSDP.state_dict_type(
        transformer,
        StateDictType.FULL_STATE_DICT,
        FullStateDictConfig(offload_to_cpu=True, rank0_only=True),
        FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=True),
    ):
        cpu_state = transformer.state_dict()
        optim_state = FSDP.optim_state_dict(
            transformer,
            optimizer,
        )

    save_dir = os.path.join(args.output_dir, f"checkpoint-{global_step}")
    os.makedirs(save_dir, exist_ok=True)
    if rank <= 0:
        save_file(cpu_state, os.path.join(save_dir, "diffusion_pytorch_model.safetensors"))
        with open(os.path.join(save_dir, "config.json"), "w") as f:
            json.dump(dict(transformer.config), f, indent=4)
        torch.save(optim_state, os.path.join(save_dir, "optimizer.pt"))


def main(args, transformer, optimizer, lr_scheduler, scheduler, train_dataloader, device, forward):
    dist.init_process_group(backend="nccl")
    ddp_rank = int(os.environ["RANK"])
    master_process = ddp_rank == 0

    global_step = 0
    for epoch in range(500000):
        if global_step >= args.max_steps:
            break
        for batch_idx, batch in enumerate(train_dataloader):
            if global_step >= args.max_steps:
                break
            diffusion_loss = forward(transformer=transformer, scheduler=scheduler, batch=batch, device=device)
            optimizer.zero_grad()
            diffusion_loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(transformer.parameters(), max_norm=args.grad_clip_norm)
            optimizer.step()
            lr_scheduler.step()

            if global_step % args.log_every == 0:
                diffusion_loss_avg = avg_scalar_across_ranks(diffusion_loss.item())
                if master_process:
                    print(f"Step [{global_step}] Loss: {diffusion_loss_avg:.4f} Grad Norm: {grad_norm:.6f}")

            if global_step % args.checkpoint_every == 0 and global_step > 0:
                save_checkpoint(
                    transformer=transformer, optimizer=optimizer, global_step=global_step, args=args, rank=ddp_rank
                )

            global_step += 1

    dist.destroy_process_group()
