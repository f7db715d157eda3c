# Look-alike of https://github.com/open-compass/VLMEvalKit/issues/726: the same loop, with the
# `continue` decided by a setting every rank shares, and rank-0-only evaluation.
# expect: none
import torch.distributed as dist

from vlmeval.smp import *  # noqa: F401,F403


def main(args, models, datasets):
    rank, world_size = get_rank_and_world_size()  # noqa: F405
    for model_name in models:
        for dataset_name in datasets:
            if args.mode == "infer" and dataset_name in args.skip:
                continue
            result_file = infer_data_job(model_name, dataset_name, args)  # noqa: F405
            if world_size > 1:
                dist.barrier()
            if rank == 0:
                evaluate(dataset_name, result_file)  # noqa: F405
