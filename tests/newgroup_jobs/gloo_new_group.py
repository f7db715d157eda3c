"""A 4-rank gloo job where each rank builds only the process group it computed for itself
(SAME_LINE_DIFFERENT_ARGS; the shape of sglang #15805).

Launched by torchrun (``--nproc-per-node 4``); a plain user script. Ranks 0,1 call
``dist.new_group([0, 1, 2])`` and ranks 2,3 call ``dist.new_group([2, 3])`` at one line,
without ``use_local_synchronization`` (a layout bug: the ranks disagree on the groups).
torch expects every rank to call ``new_group`` with the same list. Here ranks 0,1 wait
in the backend's rendezvous for group rank 2, which no rank ever is; run with
``TORCH_DIST_INIT_BARRIER=1`` (the barrier torch runs after creating a group; older
releases always ran it), ranks 2,3 wait in the store-based barrier for ranks 0,1. Every
rank waits at the one line, for ever.
"""
import torch.distributed as dist


def build_tp_group(rank):
    mine = [0, 1, 2] if rank < 2 else [2, 3]
    return dist.new_group(mine)  # NEWGROUP: each rank passes its own list here


def main():
    dist.init_process_group("gloo")
    build_tp_group(dist.get_rank())
    dist.barrier()


if __name__ == "__main__":
    main()
