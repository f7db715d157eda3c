# Source: https://github.com/huggingface/transformers/pull/1081 (issue #998, run_glue.py)
# Bug: evaluation runs only on the master process (local_rank in [-1, 0]); evaluate() loads
#      the cached features through load_and_cache_examples(), whose "first process builds the
#      cache" barriers are reached by the master alone: it waits for ranks that already exited.
# Class: a collective reached three calls down from the rank branch
# expect: HK101 collective=15|38 branch=37
import torch


def load_and_cache_examples(args, task, tokenizer, evaluate=False):
    if args.local_rank not in [-1, 0]:
        torch.distributed.barrier()
    features = build_features(args, task, tokenizer, evaluate)
    if args.local_rank == 0:
        torch.distributed.barrier()
    return features


def build_features(args, task, tokenizer, evaluate):
    return [tokenizer(x) for x in task.examples(evaluate)]


def run_eval_loop(args, model, dataset):
    return [model(x) for x in dataset]


def evaluate(args, model, tokenizer, task):
    eval_dataset = load_and_cache_examples(args, task, tokenizer, evaluate=True)
    return run_eval_loop(args, model, eval_dataset)


def run_task(args, model, tokenizer, task):
    return evaluate(args, model, tokenizer, task)


def main(args, model, tokenizer, task):
    if args.do_eval and args.local_rank in [-1, 0]:
        return run_task(args, model, tokenizer, task)
    return None
