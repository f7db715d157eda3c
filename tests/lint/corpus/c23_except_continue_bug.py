# Source: https://github.com/EvolvingLMMs-Lab/lmms-eval/pull/1304
# Bug: a rank whose evaluation raises logs the error and moves on; it skips the barrier and
#      the gather that the other ranks are waiting in for this task.
# Class: except handler (only the rank that raised runs it) with continue before a collective
# expect: HK202 collective=18 branch=14
import torch.distributed as dist


def cli_evaluate(tasks, evaluate, logger):
    results_list = []
    for task in tasks:
        try:
            results = evaluate(task)
        except Exception as e:
            logger.error("error during evaluation of %s: %s", task, e)
            results_list.append(None)
            continue
        dist.barrier()
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, results)
        results_list.append(gathered)
    return results_list
