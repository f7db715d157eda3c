# Source: https://github.com/huggingface/accelerate/issues/2690
# Bug: the non-main processes wait in wait_for_everyone() in the else branch while the main
#      process saves and goes on to the next step; they never meet in the same barrier.
# Class: accelerate, rank condition on is_main_process, collective in the else branch
# expect: HK101 collective=16 branch=10
from accelerate import Accelerator


def save(accelerator: Accelerator, model, tokenizer, output_dir):
    if accelerator.is_main_process:
        unwrapped_model = accelerator.unwrap_model(model)
        state_dict = accelerator.get_state_dict(model)
        unwrapped_model.save_pretrained(output_dir, state_dict=state_dict, safe_serialization=True)
        tokenizer.save_pretrained(output_dir)
    else:
        accelerator.wait_for_everyone()
