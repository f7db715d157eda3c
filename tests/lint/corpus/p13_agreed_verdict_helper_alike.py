# Look-alike of https://github.com/NVIDIA/Megatron-LM/blob/core_v0.12.0/megatron/core/dist_checkpointing/strategies/state_dict_saver.py#L171
# (a false alarm of the blind check on megatron-core 0.12.0, the PyPI sdist): the helper is
# handed the rank to compare this rank's plan with the loaded one, but it all-reduces the
# verdict with MIN and returns only that or False: every rank takes the same side.
# expect: none
import torch
import torch.distributed as dist


def verify_global_md_reuse(loaded_all_plans, local_plan, rank, world_size):
    if not loaded_all_plans:
        global_md_verify_reuse = False
    elif len(loaded_all_plans) == world_size:
        local_verify_reuse = local_plan == loaded_all_plans[rank]
        all_results = torch.tensor([local_verify_reuse], dtype=torch.int)
        dist.all_reduce(all_results, op=dist.ReduceOp.MIN)
        global_md_verify_reuse = all_results.item() == 1
    else:
        global_md_verify_reuse = False
    return global_md_verify_reuse


def save_plan(loaded_all_plans, local_plan):
    rank = dist.get_rank()
    reuse = verify_global_md_reuse(loaded_all_plans, local_plan, rank, dist.get_world_size())
    if not loaded_all_plans or not reuse:
        all_local_plans = [None] * dist.get_world_size()
        dist.all_gather_object(all_local_plans, local_plan)
        return all_local_plans
    return None
