# Look-alike of https://github.com/EleutherAI/sparsify/pull/5: the barrier comes first, then
# the other ranks return and rank 0 writes alone.
# expect: none
import torch.distributed as dist


class SaeTrainer:
    def save(self):
        if dist.is_initialized():
            dist.barrier()

        rank = dist.get_rank() if dist.is_initialized() else 0
        if rank != 0:
            return

        for hook, sae in self.saes.items():
            sae.save_to_disk(f"checkpoints/{hook}")
