# Repository: https://github.com/huggingface/trl
# Commit (before fix): 2e6c462c7396b9ccb03c83fa94504f331e6b1bc6
# Files excerpted: trl/trainer/ppo_trainer.py (PPOTrainer.__init__, PPOTrainer.log_stats),
#                  examples/scripts/ppo.py (training loop calling log_stats on every rank)
import warnings
from typing import List

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object


class PPOTrainer:
    def __init__(self, config, model, ref_model, tokenizer, dataset=None):
        self.config = config
        self.accelerator = Accelerator(log_with=config.log_with)
        ...
        # In a distributed setup, only logging needs to be performed on the main process
        self.is_distributed = self.accelerator.num_processes > 1
        self.current_device = self.accelerator.device
        self.current_step = 0

    def step(self, queries, responses, scores):
        ...

    def log_stats(
        self,
        stats: dict,
        batch: dict,
        rewards: List[torch.FloatTensor],
        columns_to_log: List[str] = ["query", "response"],
    ):
        """
        A function that logs all the training stats. Call it at the end of each epoch.
        """
        if not isinstance(rewards, torch.Tensor):
            rewards = torch.tensor(rewards).to(self.current_device)
        rewards = self.accelerator.gather(rewards).flatten()

        # Log only if we are in the main process
        if self.accelerator.is_main_process:
            logs = {}

            # Log stats
            if "query" not in batch.keys() and "response" not in batch.keys():
                # warn the user that the game logs will not be logged
                warnings.warn(
                    "The game logs will not be logged because the batch does not contain the keys 'query' and "
                    "'response'. "
                )
            elif self.config.log_with == "wandb":
                import wandb

                if any([column_to_log not in batch.keys() for column_to_log in columns_to_log]):
                    raise ValueError(f"Columns to log {columns_to_log} are not present in the batch {batch.keys()}.")

                batch_list = [batch[column_to_log] for column_to_log in columns_to_log]
                if self.is_distributed:
                    self.accelerator.wait_for_everyone()
                    gathered_batch_list = []
                    for batch in batch_list:
                        flattened = gather_object(batch)
                        gathered_batch_list.append(flattened)
                    batch_list = gathered_batch_list

                table_rows = [list(r) for r in zip(*batch_list, rewards.cpu().tolist())]
                logs.update({"game_log": wandb.Table(columns=[*columns_to_log, "reward"], rows=table_rows)})

            logs.update(stats)

            logs["env/reward_mean"] = torch.mean(rewards).cpu().numpy().item()
            logs["env/reward_std"] = torch.std(rewards).cpu().numpy().item()
            logs["env/reward_dist"] = rewards.cpu().numpy()

            if self.config.log_with == "tensorboard":
                # update the current step
                self.current_step += 1

            self.accelerator.log(
                logs,
                step=self.current_step if self.config.log_with == "tensorboard" else None,
            )


# examples/scripts/ppo.py (trimmed): every rank runs this loop
def train(ppo_trainer, tokenizer, generation_kwargs, sentiment_pipe, sent_kwargs):
    for epoch, batch in enumerate(ppo_trainer.dataloader):
        query_tensors = batch["input_ids"]
        response_tensors = ...
        batch["response"] = tokenizer.batch_decode(response_tensors)
        texts = [q + r for q, r in zip(batch["query"], batch["response"])]
        pipe_outputs = sentiment_pipe(texts, **sent_kwargs)
        rewards = [torch.tensor(output[1]["score"]) for output in pipe_outputs]

        stats = ppo_trainer.step(query_tensors, response_tensors, rewards)
        ppo_trainer.log_stats(stats, batch, rewards, columns_to_log=["query", "response", "ref_response", "ref_rewards"])
