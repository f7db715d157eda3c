# Look-alike of https://github.com/huggingface/accelerate/issues/1171: the main process saves
# the unwrapped weights with save_pretrained (plain file IO), every process runs save_state.
# expect: none
import os


def checkpoint(accelerator, unet, args, global_step):
    save_path = os.path.join(args.output_dir, f"checkpoint-{global_step}")
    accelerator.save_state(save_path)
    if accelerator.is_main_process:
        accelerator.unwrap_model(unet).save_pretrained(os.path.join(save_path, "unet"))
        print("saved", save_path)
