# Source: https://github.com/EvolvingLMMs-Lab/lmms-eval/pull/1304 (fix: a failing rank tears the process group down and exits)
# expect: none
import sys

import torch.distributed as dist


def cli_evaluate(tasks, evaluate, logger):
    results_list = []
    for task in tasks:
        try:
            results = evaluate(task)
        except Exception as e:
            logger.error("error during evaluation of %s: %s", task, e)
            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
                sys.exit(1)
            results_list.append(None)
            continue
        dist.barrier()
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, results)
        results_list.append(gathered)
    return results_list
