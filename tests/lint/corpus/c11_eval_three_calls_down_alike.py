# Look-alike of https://github.com/huggingface/transformers/pull/1081: the "first process builds
# the cache" pair itself (complementary barriers, every rank reaches one), then rank-0-only
# evaluation with no collective below it.
# expect: none
import torch


def load_and_cache_examples(args, task, tokenizer):
    if args.local_rank not in [-1, 0]:
        torch.distributed.barrier()
    features = [tokenizer(x) for x in task.examples(False)]
    if args.local_rank == 0:
        torch.distributed.barrier()
    return features


def evaluate(args, model, dataset):
    return [model(x) for x in dataset]


def main(args, model, tokenizer, task):
    train_dataset = load_and_cache_examples(args, task, tokenizer)
    if args.do_eval and args.local_rank in [-1, 0]:
        return evaluate(args, model, train_dataset)
    return None
