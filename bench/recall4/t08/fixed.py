# Excerpt in the shape of bghira/SimpleTuner train_sdxl.py::main() at f730d9a01
# (after "bghira/SimpleTuner#262 use_deepspeed_optimizer should tell us whether or not to
# save_state on all processes"). Unrelated code dropped.
import os
import shutil

from accelerate import Accelerator

from helpers.arguments import parse_args
from helpers.training.state_tracker import StateTracker
from helpers.data_backend.factory import random_dataloader_iterator


def main():
    args = parse_args()
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)

    use_deepspeed_optimizer = False
    if (
        hasattr(accelerator.state, "deepspeed_plugin")
        and accelerator.state.deepspeed_plugin is not None
    ):
        use_deepspeed_optimizer = True

    unet, optimizer, lr_scheduler = accelerator.prepare(args.unet, args.optimizer, args.lr_scheduler)
    accelerator.wait_for_everyone()

    global_step = 0
    for epoch in range(args.first_epoch, args.num_train_epochs):
        unet.train()
        for step, batch in random_dataloader_iterator(StateTracker.get_data_backends()):
            with accelerator.accumulate(unet):
                loss = unet(batch).mean()
                avg_loss = accelerator.gather(loss.repeat(args.train_batch_size)).mean()
                accelerator.backward(loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad(set_to_none=True)

            if accelerator.sync_gradients:
                global_step += 1

                if global_step % args.checkpointing_steps == 0:
                    if accelerator.is_main_process:
                        # _before_ saving state, check if this save would set us over the `checkpoints_total_limit`
                        if args.checkpoints_total_limit is not None:
                            checkpoints = os.listdir(args.output_dir)
                            checkpoints = [d for d in checkpoints if d.startswith("checkpoint")]
                            checkpoints = sorted(checkpoints, key=lambda x: int(x.split("-")[1]))
                            if len(checkpoints) >= args.checkpoints_total_limit:
                                num_to_remove = len(checkpoints) - args.checkpoints_total_limit + 1
                                for removing_checkpoint in checkpoints[0:num_to_remove]:
                                    shutil.rmtree(os.path.join(args.output_dir, removing_checkpoint))

                    if accelerator.is_main_process or use_deepspeed_optimizer:
                        save_path = os.path.join(args.output_dir, f"checkpoint-{global_step}")
                        print("\n")
                        accelerator.save_state(save_path)
                        for _, backend in StateTracker.get_data_backends().items():
                            backend["sampler"].save_state(
                                state_path=os.path.join(save_path, "training_state.json"),
                            )

            if global_step >= args.max_train_steps:
                break

    # Create the pipeline using the trained modules and save it.
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        unet = accelerator.unwrap_model(unet)
        unet.save_pretrained(os.path.join(args.output_dir, "unet"))
    accelerator.end_training()


if __name__ == "__main__":
    main()
