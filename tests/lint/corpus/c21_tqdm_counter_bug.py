# Source: https://github.com/huggingface/transformers/issues/31532
# Bug: the progress bar is disabled on the non-main processes, and a disabled tqdm never
#      advances its counter `n`; evaluation is scheduled on progress_bar.n, so the processes
#      disagree on when to evaluate and gather_for_metrics waits for ever.
# Class: a rank-dependent value hidden in an object built with a display keyword
#        (tqdm(disable=not is_main_process)): the counter, not the keyword, is rank-dependent
# expect: HK101 collective=15|28 branch=27
from tqdm.auto import tqdm


def evaluate(accelerator, model, eval_loader):
    preds = []
    for batch in eval_loader:
        logits = model(**batch).logits
        preds.append(accelerator.gather_for_metrics(logits.argmax(-1)))
    return preds


def train(accelerator, model, optimizer, train_loader, eval_loader, num_epochs, eval_steps):
    progress_bar = tqdm(range(num_epochs * len(train_loader)), disable=not accelerator.is_main_process)
    for epoch in range(num_epochs):
        for batch in train_loader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            progress_bar.update(1)
            if progress_bar.n % eval_steps == 0:
                evaluate(accelerator, model, eval_loader)
