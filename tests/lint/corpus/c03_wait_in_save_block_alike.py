# Look-alike of https://github.com/bytedance/UNO/issues/71: the same guarded block, with only
# local work inside (makedirs, logging, torch.save of an already gathered state).
# expect: none
import os

import torch


def maybe_checkpoint(accelerator, state, args, global_step, logger):
    if accelerator.sync_gradients and accelerator.is_main_process and global_step % args.checkpointing_steps == 0:
        logger.info(f"saving checkpoint in {global_step=}")
        save_path = os.path.join(args.project_dir, f"checkpoint-{global_step}")
        os.makedirs(save_path, exist_ok=True)
        torch.save(state, os.path.join(save_path, "weights.pt"))
