# Source: https://github.com/EleutherAI/sparsify/pull/5 (no early return: rank 0 writes, every
# rank reaches the barrier)
# expect: none
import torch.distributed as dist


class SaeTrainer:
    def save(self):
        rank = dist.get_rank() if dist.is_initialized() else 0
        if rank == 0:
            for hook, sae in self.saes.items():
                sae.save_to_disk(f"checkpoints/{hook}")

        if dist.is_initialized():
            dist.barrier()
