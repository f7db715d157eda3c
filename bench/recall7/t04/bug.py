# EleutherAI/sparsify @ 10162b513b1bcddebc453b78ce5103ed7a828599 (parent of fix 0f662ad, PR #94)
# Files excerpted and merged (trimmed):
#   ---- sparsify/__main__.py ---- (load_artifacts, run)
#   ---- sparsify/trainer.py ---- (Trainer.fit, Trainer.maybe_all_reduce)
# Stubs: load_dataset, DataLoader usage kept; model forward/hook plumbing reduced.
import os

import torch
import torch.distributed as dist
from torch import Tensor
from torch.utils.data import DataLoader


def load_dataset(*args, **kwargs):
    ...


# ---- sparsify/trainer.py ----
class Trainer:
    def __init__(self, cfg, dataset, model):
        self.cfg = cfg
        self.dataset = dataset
        self.model = model

    def fit(self):
        ds = self.dataset
        device = self.model.device
        dl = DataLoader(
            ds,  # type: ignore
            batch_size=self.cfg.batch_size,
            shuffle=False,
        )

        def hook(module, inputs, outputs):
            out = self.saes[module](outputs)
            avg_fvu = float(self.maybe_all_reduce(out.fvu.detach()))
            loss = out.fvu
            loss.backward()
            return avg_fvu

        for batch in dl:
            x = batch["input_ids"].to(device)
            self.model(x)  # forward hooks run `hook` -> maybe_all_reduce per batch

        self.save()

    def maybe_all_reduce(self, x: Tensor, op: str = "mean") -> Tensor:
        if not dist.is_initialized() or self.cfg.distribute_modules:
            return x

        if op == "sum":
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
        elif op == "mean":
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
            x /= dist.get_world_size()
        elif op == "max":
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
        else:
            raise ValueError(f"Unknown reduction op '{op}'")

        return x

    def save(self):
        ...
        dist.barrier()


# ---- sparsify/__main__.py ----
def load_artifacts(args, rank: int):
    model = args.model
    dataset = load_dataset(args.dataset, split=args.split, trust_remote_code=True)
    dataset = dataset.shuffle(args.shuffle_seed)

    dataset = dataset.with_format("torch")
    if limit := args.max_examples:
        dataset = dataset.select(range(limit))

    return model, dataset


def run(args):
    local_rank = os.environ.get("LOCAL_RANK")
    ddp = local_rank is not None
    rank = int(local_rank) if ddp else 0

    if ddp:
        torch.cuda.set_device(int(local_rank))
        dist.init_process_group("nccl", device_id=torch.device(rank))

    # Awkward hack to prevent other ranks from duplicating data preprocessing
    if not ddp or rank == 0:
        model, dataset = load_artifacts(args, rank)
    if ddp:
        dist.barrier()
        if rank != 0:
            model, dataset = load_artifacts(args, rank)
        dataset = dataset.shard(dist.get_world_size(), rank)

    trainer = Trainer(args, dataset, model)
    trainer.fit()
