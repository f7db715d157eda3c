import logging
from collections import Counter

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class MetricsTracker(Counter):
    def reduce(self, device):
        keys = sorted(self.keys())
        s = torch.tensor([float(self[k]) for k in keys], device=device)
        dist.all_reduce(s, op=dist.ReduceOp.SUM)
        for k, v in zip(keys, s.cpu().tolist()):
            self[k] = v


def compute_loss(params, model, batch, is_training):
    with torch.set_grad_enabled(is_training):
        predicts, loss = model(batch["text_tokens"], batch["audio_features"])
    loss_info = MetricsTracker()
    loss_info["frames"] = batch["audio_features"].shape[0]
    loss_info["loss"] = loss.detach().cpu().item()
    return predicts, loss, loss_info


def compute_validation_loss(params, model, valid_dl, world_size=1):
    model.eval()
    tot_loss = MetricsTracker()
    for batch_idx, batch in enumerate(valid_dl):
        predicts, loss, loss_info = compute_loss(params, model, batch, is_training=False)
        tot_loss = tot_loss + loss_info
    if world_size > 1:
        tot_loss.reduce(loss.device)
    return tot_loss


def train_one_epoch(params, model, optimizer, train_dl, valid_dl, scaler,
                    world_size=1, rank=0):
    model.train()
    tot_loss = MetricsTracker()
    iter_dl = iter(train_dl)

    def evaluate():
        logging.info("Computing validation loss")
        valid_info = compute_validation_loss(params, model, valid_dl, world_size=world_size)
        model.train()
        logging.info(f"Epoch {params.cur_epoch}, validation: {valid_info}")

    batch_idx = 0
    while True:
        try:
            batch = next(iter_dl)
        except StopIteration:
            logging.info("Reaches end of dataloader.")
            break

        batch_idx += 1
        params.batch_idx_train += 1
        _, loss, loss_info = compute_loss(params, model, batch, is_training=True)
        tot_loss = tot_loss + loss_info

        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

        if params.batch_idx_train % params.valid_interval == 0:
            evaluate()

    # eval every epoch
    evaluate()
