# EleutherAI/sparsify @ 2cc21c8 (parent of fix c5c63b5, PR #5)
# File excerpted: sae/trainer.py (SaeTrainer.fit / maybe_all_reduce / save), trimmed.
import torch
import torch.distributed as dist
from torch import Tensor


class SaeTrainer:
    def __init__(self, cfg, saes, optimizer, lr_scheduler):
        self.cfg = cfg
        self.saes = saes
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler

    def fit(self, pbar, avg_fvu, wrapped, denom, get_hidden_list):
        rank_zero = not dist.is_initialized() or dist.get_rank() == 0

        for i, batch in enumerate(pbar):
            hidden_list = get_hidden_list(batch)
            for j, (hiddens, raw) in enumerate(zip(hidden_list, self.saes)):
                for chunk in hiddens.chunk(self.cfg.micro_acc_steps):
                    out = wrapped(chunk)
                    avg_fvu[j] += self.maybe_all_reduce(out.fvu.detach()) / denom
                    out.fvu.backward()

            step, substep = divmod(i + 1, self.cfg.grad_acc_steps)
            if substep == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
                self.lr_scheduler.step()

                if (step + 1) % self.cfg.save_every == 0:
                    self.save()

        self.save()
        pbar.close()

    def maybe_all_reduce(self, x: Tensor, op: str = "mean") -> Tensor:
        if not dist.is_initialized() or self.cfg.distribute_layers:
            return x

        if op == "sum":
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
        elif op == "mean":
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
            x /= dist.get_world_size()
        elif op == "max":
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
        else:
            raise ValueError(f"Unknown reduction op '{op}'")

        return x

    def save(self):
        """Save the SAEs to disk."""
        if (dist.is_initialized() and dist.get_rank() != 0) and not self.cfg.distribute_layers:
            return

        for i, sae in zip(self.cfg.layers, self.saes):
            print(f"Saving layer {i}")

            path = self.cfg.run_name or "checkpoints"
            sae.save_to_disk(f"{path}/layer_{i}.pt")

        # Barrier to ensure all ranks have saved before continuing
        dist.barrier()
