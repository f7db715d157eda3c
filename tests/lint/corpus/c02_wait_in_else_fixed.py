# Source: https://github.com/huggingface/accelerate/issues/2690 (the run_clm_no_trainer shape)
# Fixed: every process waits, then only the main process writes.
# expect: none
from accelerate import Accelerator


def save(accelerator: Accelerator, model, tokenizer, output_dir):
    accelerator.wait_for_everyone()
    unwrapped_model = accelerator.unwrap_model(model)
    state_dict = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        unwrapped_model.save_pretrained(output_dir, state_dict=state_dict, safe_serialization=True)
        tokenizer.save_pretrained(output_dir)
