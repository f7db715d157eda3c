# Look-alike of https://github.com/huggingface/transformers/issues/31532: tqdm disabled on the
# non-main processes wraps the loader; the loop's trip count is the loader's, the same everywhere.
# expect: none
from tqdm.auto import tqdm


def evaluate(accelerator, model, eval_loader):
    preds = []
    for batch in tqdm(eval_loader, disable=not accelerator.is_main_process, desc="eval", position=1):
        logits = model(**batch).logits
        preds.append(accelerator.gather_for_metrics(logits.argmax(-1)))
    return preds
