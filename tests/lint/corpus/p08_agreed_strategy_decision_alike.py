# Look-alike of https://github.com/Lightning-AI/pytorch-lightning/blob/2.4.0/src/lightning/fabric/utilities/distributed.py#L72
# (a false alarm of the blind check on Lightning 2.4.0): the file check is handed to the
# strategy's reduce_boolean_decision, which the parallel strategy implements with an all_reduce
# and returns the reduced decision; every rank raises or none does, and all reach the barriers.
# expect: none
import torch
import torch.distributed as dist


class Strategy:
    def reduce_boolean_decision(self, decision, all=True):
        # one process: nothing to agree with
        return decision

    def barrier(self, name=None):
        pass


class ParallelStrategy(Strategy):
    world_size = 2

    def reduce_boolean_decision(self, decision, all=True):
        decision = torch.tensor(int(decision))
        dist.all_reduce(decision)
        decision = bool(decision == self.world_size) if all else bool(decision)
        return decision

    def barrier(self, name=None):
        dist.barrier()


def is_shared_filesystem(strategy, path):
    if not strategy.reduce_boolean_decision(path.exists(), all=True):
        raise FileNotFoundError("the path does not exist: %s" % path)
    check_file = path / ".shared_fs_check"
    strategy.barrier()
    found = check_file.exists()
    strategy.barrier()
    return found
