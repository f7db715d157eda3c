# Repository: axolotl-ai-cloud/axolotl (then OpenAccess-AI-Collective/axolotl)
# Fix commit: c69faee7a74dee0595f7a1d1b73d1af661306646 (PR #461), after-fix shape
# Files excerpted: src/axolotl/utils/dataloader.py (MultipackDistributedDataloader),
#                  src/axolotl/utils/trainer.py (AxolotlTrainer._get_train_sampler / get_train_dataloader);
#                  _train_epoch is the shape of transformers.Trainer's inner training loop, shortened
import itertools
import math

import numpy as np
from torch.utils.data import DistributedSampler
from transformers import Trainer


def chunk(iterable, n):
    it = iter(iterable)
    while batch := tuple(itertools.islice(it, n)):
        yield batch


def pack_first_fit(lengths, c):
    """First-fit-decreasing packing of this rank's samples into bins of c tokens."""
    bins, bins_result = [], []
    for idx in np.argsort(lengths)[::-1]:
        for b in range(len(bins)):
            if bins[b] >= lengths[idx]:
                bins[b] -= lengths[idx]
                bins_result[b].append(int(idx))
                break
        else:
            bins.append(c - lengths[idx])
            bins_result.append([int(idx)])
    return bins_result


class MultipackDistributedDataloader:
    def __init__(self, dataset, collate_fn, seq_max_length=2048, batch_size=1, sampler=None,
                 packing_efficiency_estimate=1.0, sample_packing_seq_len_multiplier=1, device_count=1):
        self.dataset = dataset
        self.lengths = np.array([ids[-1] + 1 for ids in dataset["position_ids"]])
        self.sampler = sampler
        self.batch_size = batch_size
        self.sample_packing_seq_len_multiplier = sample_packing_seq_len_multiplier
        self.seq_max_length = seq_max_length
        self.collate_fn = collate_fn
        self.packing_efficiency_estimate = packing_efficiency_estimate or 1.0
        self.device_count = device_count

    def generate_batches(self):
        indices = [idx for idx in self.sampler]  # this rank's DistributedSampler shard
        lengths = self.lengths[indices]
        batches = pack_first_fit(lengths, c=self.seq_max_length * self.sample_packing_seq_len_multiplier)
        return [[indices[b_idx] for b_idx in batch] for batch in batches]

    def __iter__(self):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(self.sampler.epoch + 1)
        all_batches = self.generate_batches()
        len_remaining = self._len_est()
        for batches in chunk(all_batches, self.batch_size // self.sample_packing_seq_len_multiplier):
            chunked_data = []
            for batch in batches:
                items = [self.dataset[i] for i in batch]
                chunked_data.append({k: np.concatenate([np.array(it[k]) for it in items]) for k in items[0]})
            yield self.collate_fn(chunked_data)
            len_remaining -= 1
            if not len_remaining:
                return
        # yield a no-op for cases where we don't have any data left to pack
        for _ in range(0, len_remaining):
            yield self.collate_fn(
                [
                    {
                        "input_ids": [0],
                        "labels": [-100],
                        "attention_mask": [True],
                        "position_ids": [0],
                    }
                ]
            )

    def _len_est(self):
        # estimated from the *global* token count, the same number on every rank
        lengths_sum_per_device = np.sum(self.lengths) // self.device_count
        return math.floor(0.99 * lengths_sum_per_device / self.packing_efficiency_estimate
                          // self.seq_max_length // self.batch_size) - 1

    def __len__(self):
        return max(1, self._len_est())


class AxolotlTrainer(Trainer):
    def _get_train_sampler(self):
        return DistributedSampler(self.train_dataset, num_replicas=self.args.world_size,
                                  rank=self.args.process_index, seed=self.args.seed)

    def get_train_dataloader(self):
        return self.accelerator.prepare(MultipackDistributedDataloader(
            self.train_dataset, batch_size=self._train_batch_size, seq_max_length=self.args.max_seq_length,
            collate_fn=self.data_collator, sampler=self._get_train_sampler(),
            packing_efficiency_estimate=self.args.sample_packing_efficiency,
            device_count=self.args.world_size))

    def _train_epoch(self, model):
        epoch_iterator = self.get_train_dataloader()
        for step, inputs in enumerate(epoch_iterator):
            with self.accelerator.accumulate(model):
                loss = self.compute_loss(model, inputs)
                self.accelerator.backward(loss)  # DDP / DeepSpeed gradient all-reduce
            self.optimizer.step()
            self.lr_scheduler.step()
            model.zero_grad()
