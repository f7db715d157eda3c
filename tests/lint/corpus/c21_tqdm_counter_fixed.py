# Source: https://github.com/huggingface/transformers/issues/31532 (fix: schedule on a step counter every process keeps)
# expect: none
from tqdm.auto import tqdm


def evaluate(accelerator, model, eval_loader):
    preds = []
    for batch in eval_loader:
        logits = model(**batch).logits
        preds.append(accelerator.gather_for_metrics(logits.argmax(-1)))
    return preds


def train(accelerator, model, optimizer, train_loader, eval_loader, num_epochs, eval_steps):
    progress_bar = tqdm(range(num_epochs * len(train_loader)), disable=not accelerator.is_main_process)
    completed_steps = 0
    for epoch in range(num_epochs):
        for batch in train_loader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            progress_bar.update(1)
            completed_steps += 1
            if completed_steps % eval_steps == 0:
                evaluate(accelerator, model, eval_loader)
