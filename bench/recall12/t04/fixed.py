# Repository: TensorAuto/OpenTau
# Fix commit: 6b29a013c508f19784848cec637da4826548c7c1 (PR #409), after-fix shape
# Files excerpted: src/opentau/policies/pi07/low_level/modeling_pi07_low_level.py
#                    (_global_or_branch_decisions, PI07LowLevelFlowMatching.embed_prefix / sample_actions,
#                     PI07LowLevelPolicy.select_action),
#                  src/opentau/scripts/eval.py (rollout / eval_policy),
#                  src/opentau/scripts/train.py (in-training sim eval), shortened
from collections import deque

import numpy as np
import torch
import torch.distributed
from accelerate import DistributedType
from accelerate.utils import gather_object


def _global_or_branch_decisions(any_locals, device, sync_across_ranks=True):
    """OR-reduce embed_prefix branch decisions across ranks (one SUM all-reduce).

    sync_across_ranks=False (independent per-rank sim-eval rollouts): return the local
    decision, because those rollouts call the forward a different number of times per rank.
    """
    if not sync_across_ranks or not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return tuple(bool(a) for a in any_locals)
    flag = torch.tensor([int(bool(a)) for a in any_locals], device=device, dtype=torch.int32)
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.SUM)
    return tuple(c > 0 for c in flag.tolist())


class PI07LowLevelFlowMatching(torch.nn.Module):
    def embed_prefix(self, lang_tokens, response_masks=None, subgoal_img_masks=None, metadata_masks=None,
                     sync_across_ranks=True):
        device = lang_tokens.device
        has_response_local = response_masks is not None and bool(response_masks.any())
        has_subgoal_local = bool(subgoal_img_masks) and any(bool(m.any()) for m in subgoal_img_masks)
        has_metadata_local = metadata_masks is not None and bool(metadata_masks.any())
        has_response, has_subgoal, has_metadata = _global_or_branch_decisions(
            (has_response_local, has_subgoal_local, has_metadata_local), device=device,
            sync_across_ranks=sync_across_ranks,
        )
        embs = [self.embed_language_tokens(lang_tokens)]
        if has_response:
            embs.append(self.embed_response())
        if has_subgoal or has_metadata:
            embs.append(self.embed_optional())
        return torch.cat(embs, dim=1)

    @torch.no_grad()
    def sample_actions(self, batch, noise=None):
        # Independent per-rank rollout (sim eval): skip the cross-rank branch all-reduce
        prefix_embs = self.embed_prefix(batch["lang_tokens"], batch.get("response_masks"),
                                        batch.get("subgoal_img_masks"), batch.get("metadata_masks"),
                                        sync_across_ranks=False)
        return self.denoise(prefix_embs, noise)


class PI07LowLevelPolicy(torch.nn.Module):
    def __init__(self, config, model):
        super().__init__()
        self.config = config
        self.model = model
        self._action_queue = deque([], maxlen=config.n_action_steps)

    def reset(self):
        self._action_queue.clear()

    def select_action(self, batch):
        if len(self._action_queue) == 0:
            actions = self.model.sample_actions(batch)
            self._action_queue.extend(actions.transpose(0, 1)[: self.config.n_action_steps])
        return self._action_queue.popleft()


def rollout(env, policy, seeds=None):
    policy.reset()
    observation, info = env.reset(seed=seeds)
    step = 0
    done = np.array([False] * env.num_envs)
    max_steps = env.call("_max_episode_steps")[0]
    while not np.all(done) and step < max_steps:
        with torch.inference_mode():
            action = policy.select_action(observation)
        observation, reward, terminated, truncated, info = env.step(action.to("cpu").numpy())
        done = terminated | truncated | done
        step += 1
    return {"n_steps": step}


def eval_policy(env, policy, n_episodes, start_seed, accelerator):
    n_batches = n_episodes // env.num_envs + int((n_episodes % env.num_envs) != 0)
    lengths = []
    for batch_ix in range(n_batches):
        # HACK: to get different seeds per accelerator process when using distributed eval.
        acc_offset = accelerator.process_index * 10000
        seeds = range(start_seed + acc_offset + batch_ix * env.num_envs,
                      start_seed + acc_offset + (batch_ix + 1) * env.num_envs)
        lengths.append(rollout(env, policy, seeds=list(seeds))["n_steps"])
    return {"episode_lengths": lengths}


def train(cfg, policy, accelerator, eval_env, update_policy):
    if cfg.eval_freq > 0 and eval_env:
        # under parameter sharding the eval forward would still all-gather params per layer
        sharded_params = accelerator.distributed_type == DistributedType.FSDP
        if accelerator.distributed_type == DistributedType.DEEPSPEED:
            zero = accelerator.deepspeed_plugin.hf_ds_config.config.get("zero_optimization", {})
            sharded_params = zero.get("stage", 0) >= 3
        if sharded_params:
            raise ValueError("In-training sim eval is not supported under ZeRO-3 / FSDP.")
    for step in range(1, cfg.steps + 1):
        update_policy(policy, accelerator)  # DDP / ZeRO-1/2 training step
        is_eval_step = cfg.eval_freq > 0 and step % cfg.eval_freq == 0
        if is_eval_step and eval_env:
            with torch.no_grad():
                eval_info = eval_policy(eval_env, accelerator.unwrap_model(policy), cfg.eval.n_episodes,
                                        cfg.seed, accelerator)
            eval_info = gather_object([eval_info])  # gather across all accelerator processes
            if accelerator.is_main_process:
                print(eval_info)
