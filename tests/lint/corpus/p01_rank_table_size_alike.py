# Look-alike of https://github.com/deepspeedai/DeepSpeed/blob/v0.16.2/deepspeed/runtime/utils.py#L965
# (all_gather_dp_groups, a false alarm of the measured projects): every rank holds every rank's
# partition (the list is read at each rank's number below); the shard count comes from this
# rank's entry, and the other entries are cut with the same bounds, so the entries are one size
# (padded) and every rank runs as many all_gathers.
# expect: none
import torch.distributed as dist


def all_gather_partitions(partitioned_param_groups, groups, bucket_size):
    for group_id, partitions in enumerate(partitioned_param_groups):
        me = dist.get_rank(group=groups[group_id])
        world_size = dist.get_world_size(group=groups[group_id])
        num_shards = max(1, partitions[me].numel() * world_size // bucket_size)
        shard_size = partitions[me].numel() // num_shards
        for shard_id in range(num_shards):
            shards = []
            for r in range(world_size):
                shards.append(partitions[r].narrow(0, shard_id * shard_size, shard_size))
            dist.all_gather(shards, shards[me], group=groups[group_id])
