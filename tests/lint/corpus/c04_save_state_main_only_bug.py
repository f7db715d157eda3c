# Source: https://github.com/huggingface/accelerate/issues/1171 (diffusers train_text_to_image_lora.py)
# Bug: accelerator.save_state() is collective under DeepSpeed (it calls the engine's
#      save_checkpoint, which synchronises every rank); called only on the main process it hangs.
# Class: library method that is collective (accelerate save_state)
# expect: HK101 collective=21 branch=18
import os


def train_loop(accelerator, unet, optimizer, loader, args):
    global_step = 0
    for batch in loader:
        with accelerator.accumulate(unet):
            loss = unet(batch).loss
            accelerator.backward(loss)
            optimizer.step()
        if accelerator.sync_gradients:
            global_step += 1
            if accelerator.is_main_process:
                if global_step % args.checkpointing_steps == 0:
                    save_path = os.path.join(args.output_dir, f"checkpoint-{global_step}")
                    accelerator.save_state(save_path)
