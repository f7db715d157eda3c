# Source: https://github.com/open-compass/VLMEvalKit/issues/726 (fixed by https://github.com/open-compass/VLMEvalKit/pull/772)
# Bug: in --mode infer, rank 0 takes `continue` inside its evaluation block and goes back to
#      the top of the loop; the other ranks reach the dist.barrier() at the end of the body.
# Class: rank from a project helper (get_rank_and_world_size, star import from outside the
#        tree), rank-dependent continue before a collective
# expect: HK102 collective=22 branch=18|17
import torch.distributed as dist

from vlmeval.smp import *  # noqa: F401,F403


def main(args, models, datasets):
    rank, world_size = get_rank_and_world_size()  # noqa: F405
    for model_name in models:
        for dataset_name in datasets:
            result_file = infer_data_job(model_name, dataset_name, args)  # noqa: F405
            if rank == 0:
                if args.mode == "infer":
                    continue
                evaluate(dataset_name, result_file)  # noqa: F405
            if world_size > 1:
                dist.barrier()
