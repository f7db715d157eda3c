# Source: https://github.com/bytedance/UNO/issues/71
# Bug: the checkpoint block, guarded by is_main_process, starts with wait_for_everyone();
#      only the main process reaches that barrier.
# Class: accelerate, compound condition with is_main_process
# expect: HK101 collective=14 branch=10
import os


def maybe_checkpoint(accelerator, dit, args, global_step, logger):
    if accelerator.sync_gradients and accelerator.is_main_process and global_step % args.checkpointing_steps == 0:
        logger.info(f"saving checkpoint in {global_step=}")
        save_path = os.path.join(args.project_dir, f"checkpoint-{global_step}")
        os.makedirs(save_path, exist_ok=True)
        accelerator.wait_for_everyone()
        unwrapped_model = accelerator.unwrap_model(dit)
        state = unwrapped_model.state_dict()
        keys = [k for k, v in unwrapped_model.named_parameters() if v.requires_grad]
        return {k: state[k] for k in keys}
    return None
