# Source: https://github.com/huggingface/accelerate/issues/1171 (fix: save_state on every process)
# expect: none
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
            if global_step % args.checkpointing_steps == 0:
                save_path = os.path.join(args.output_dir, f"checkpoint-{global_step}")
                accelerator.save_state(save_path)
