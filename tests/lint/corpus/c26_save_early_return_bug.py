# Source: https://github.com/EleutherAI/sparsify/pull/5
# Bug: save() returns at once on every rank but 0; rank 0 writes the weights and then waits in
#      the barrier at the end, which the others never enter (they go on to the next step's
#      collectives: "rank 0 is in a barrier while the others have moved on to reduce").
# Class: rank-dependent early return before a collective in the same function
# expect: HK102 collective=20 branch=13
import torch.distributed as dist


class SaeTrainer:
    def save(self):
        rank = dist.get_rank() if dist.is_initialized() else 0
        if rank != 0:
            return

        for hook, sae in self.saes.items():
            sae.save_to_disk(f"checkpoints/{hook}")

        if dist.is_initialized():
            dist.barrier()
