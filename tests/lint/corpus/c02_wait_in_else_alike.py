# Look-alike of https://github.com/huggingface/accelerate/issues/2690: a training loop with a
# progress bar shown only on the main process (tqdm(disable=not is_local_main_process)),
# collectives in the loop body on every process, rank-0-only logging and saving.
# expect: none
from tqdm.auto import tqdm


def train(accelerator, model, optimizer, loader, epochs, output_dir):
    for epoch in range(epochs):
        for batch in tqdm(loader, disable=not accelerator.is_local_main_process, desc="epoch %d" % epoch):
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses = accelerator.gather_for_metrics(loss.detach())
            if accelerator.is_main_process:
                print("loss", losses.mean().item())
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            accelerator.unwrap_model(model).save_pretrained(output_dir)
