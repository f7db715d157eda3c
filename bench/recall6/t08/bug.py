# huggingface/diffusers @ 3e35628873e5a1723fdbb84a8789e99f243b4858 (commit before the fix 58237364b1, PR #7816)
# Excerpt: examples/text_to_image/train_text_to_image_lora_sdxl.py
#          (+ the accelerate / DeepSpeed library methods it drives, simplified)
import os
import shutil

import deepspeed.comm as dist
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration, set_seed

MODEL_NAME = "pytorch_model"


# ---- deepspeed/runtime/engine.py (library, simplified) ----
class DeepSpeedEngine:
    def save_checkpoint(self, save_dir, tag=None, client_state={}, save_latest=True):
        """Save training checkpoint.  Important: all processes must call this method and not just the
        process with rank 0. ... This method will hang waiting to synchronize with other processes if
        it's called just for the process with rank 0."""
        if self.global_rank == 0:
            self.checkpoint_engine.makedirs(save_dir, exist_ok=True)
        dist.barrier()
        tag = str(tag)
        self._checkpoint_tag_validation(tag)
        self._save_checkpoint(save_dir, tag, client_state=client_state)
        self._save_zero_checkpoint(save_dir, tag)
        dist.barrier()
        return True


# ---- accelerate/accelerator.py (library, simplified) ----
class AcceleratorLib:
    def save_state(self, output_dir=None, **save_model_func_kwargs):
        os.makedirs(output_dir, exist_ok=True)
        weights = []
        for i, model in enumerate(self._models):
            if self.distributed_type == "DEEPSPEED":
                ckpt_id = f"{MODEL_NAME}" if i == 0 else f"{MODEL_NAME}_{i}"
                model.save_checkpoint(output_dir, ckpt_id)
            else:
                weights.append(self.get_state_dict(model, unwrap=False))
        for hook in self._save_model_state_pre_hook.values():
            hook(self._models, weights, output_dir)


# ---- examples/text_to_image/train_text_to_image_lora_sdxl.py ----
def main(args):
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        mixed_precision=args.mixed_precision,
        project_config=ProjectConfiguration(project_dir=args.output_dir),
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],
    )
    unet, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        args.unet, args.optimizer, args.train_dataloader, args.lr_scheduler
    )
    global_step = 0

    for epoch in range(args.first_epoch, args.num_train_epochs):
        unet.train()
        for step, batch in enumerate(train_dataloader):
            with accelerator.accumulate(unet):
                loss = unet(batch)
                accelerator.backward(loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()

            # Checks if the accelerator has performed an optimization step behind the scenes
            if accelerator.sync_gradients:
                global_step += 1

                if accelerator.is_main_process:
                    if global_step % args.checkpointing_steps == 0:
                        # _before_ saving state, check if this save would set us over the `checkpoints_total_limit`
                        if args.checkpoints_total_limit is not None:
                            checkpoints = os.listdir(args.output_dir)
                            checkpoints = [d for d in checkpoints if d.startswith("checkpoint")]
                            checkpoints = sorted(checkpoints, key=lambda x: int(x.split("-")[1]))
                            if len(checkpoints) >= args.checkpoints_total_limit:
                                num_to_remove = len(checkpoints) - args.checkpoints_total_limit + 1
                                for removing_checkpoint in checkpoints[0:num_to_remove]:
                                    shutil.rmtree(os.path.join(args.output_dir, removing_checkpoint))

                        save_path = os.path.join(args.output_dir, f"checkpoint-{global_step}")
                        accelerator.save_state(save_path)

            if global_step >= args.max_train_steps:
                break

    accelerator.wait_for_everyone()
    accelerator.end_training()
