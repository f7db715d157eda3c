# Excerpt in the shape of facebookresearch/optimizers distributed_shampoo/distributed_shampoo.py and
# distributed_shampoo/utils/shampoo_ddp_distributor.py at 03bfd83 (after #149). Unrelated code dropped.
import torch
import torch.distributed as dist
from torch import Tensor

DISTRIBUTOR = "distributor"
MASKED_BLOCKED_GRADS = "masked_blocked_grads"
STEP = "step"
LR = "lr"


class DDPDistributor:
    def __init__(self, param_group, distributed_config):
        self._global_size = dist.get_world_size()
        self._group_size = (
            distributed_config.num_trainers_per_group
            if distributed_config.num_trainers_per_group != -1
            else self._global_size
        )
        self._dist_group = (
            dist.distributed_c10d.GroupMember.WORLD
            if self._group_size == self._global_size
            else dist.new_subgroups(group_size=self._group_size)[0]
        )

    # NOTE: Remove this function once PT2 supports all_gather with functional collective
    @torch.no_grad()
    @torch.compiler.disable
    def all_gather_into_tensor(self) -> None:
        dist.all_gather_into_tensor(
            self._global_dist_buffer,
            self._local_dist_buffer,
            group=self._dist_group,
        )

    @torch.no_grad()
    def update_params(self, masked_blocked_search_directions: tuple[Tensor, ...]) -> None:
        # Search directions multiplied by alpha are distributed.
        # Copy the local search directions to the communication buffer.
        if masked_blocked_search_directions:
            torch._foreach_copy_(self._local_masked_dist_blocked_buffers, masked_blocked_search_directions)

        self.all_gather_into_tensor()

        if self._global_masked_blocked_params:
            torch._foreach_add_(self._global_masked_blocked_params, self._global_masked_dist_blocked_buffers)

    def merge_and_block_gradients(self) -> tuple[Tensor, ...]:
        """Returns local_masked_blocked_grads: local blocked gradients masked with grad existence."""
        return self._merge_and_block_gradients()


class DistributedShampoo(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-2, shampoo_pt2_compile_config=None):
        super().__init__(params, dict(lr=lr))
        self._per_group_state_lists = [{} for _ in self.param_groups]
        self._per_group_step = (
            torch.compile(self._per_group_step_impl, backend=shampoo_pt2_compile_config.pytorch_compile_backend)
            if shampoo_pt2_compile_config is not None
            else self._per_group_step_impl
        )

    @torch.no_grad()
    def _compute_search_directions(self, state_lists, step, lr) -> tuple[Tensor, ...]:
        masked_blocked_search_directions = self._precondition_and_grafting(state_lists, step, lr)
        torch._foreach_mul_(masked_blocked_search_directions, -lr)
        return masked_blocked_search_directions

    @torch.no_grad()
    def _per_group_step_impl(self, state_lists, step, lr) -> None:
        # Call update_params on the distributor with the computed search directions
        state_lists[DISTRIBUTOR].update_params(
            masked_blocked_search_directions=self._compute_search_directions(state_lists, step, lr)
            # Only update parameters if there are gradients to use
            # Otherwise, return an empty tuple to avoid unnecessary computation
            if state_lists[MASKED_BLOCKED_GRADS]
            else ()
        )

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for state_lists, group in zip(self._per_group_state_lists, self.param_groups, strict=True):
            # Construct blocked gradient list.
            state_lists[MASKED_BLOCKED_GRADS] = state_lists[DISTRIBUTOR].merge_and_block_gradients()

            # Iterate group step counter and define Python scalar step.
            step = state_lists[STEP].add_(1)
            lr = torch.tensor(group[LR], dtype=torch.float)

            self._per_group_step(state_lists, step, lr)

        return loss
