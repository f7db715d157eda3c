# Source: https://github.com/bytedance/UNO/issues/71 (fix: barrier on every process, then main saves)
# expect: none
import os


def maybe_checkpoint(accelerator, dit, args, global_step, logger):
    if accelerator.sync_gradients and global_step % args.checkpointing_steps == 0:
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            logger.info(f"saving checkpoint in {global_step=}")
            save_path = os.path.join(args.project_dir, f"checkpoint-{global_step}")
            os.makedirs(save_path, exist_ok=True)
            unwrapped_model = accelerator.unwrap_model(dit)
            state = unwrapped_model.state_dict()
            keys = [k for k, v in unwrapped_model.named_parameters() if v.requires_grad]
            return {k: state[k] for k in keys}
    return None
