# Source: https://github.com/open-compass/VLMEvalKit/pull/772 (the barrier moves to the top of the loop body)
# expect: none
import torch.distributed as dist

from vlmeval.smp import *  # noqa: F401,F403


def main(args, models, datasets):
    rank, world_size = get_rank_and_world_size()  # noqa: F405
    for model_name in models:
        for dataset_name in datasets:
            if world_size > 1:
                dist.barrier()
            result_file = infer_data_job(model_name, dataset_name, args)  # noqa: F405
            if rank == 0:
                if args.mode == "infer":
                    continue
                evaluate(dataset_name, result_file)  # noqa: F405
