# Source: https://github.com/huggingface/transformers/pull/1081 (fix: the cache barriers skip evaluation)
# expect: none
import torch


def load_and_cache_examples(args, task, tokenizer, evaluate=False):
    if args.local_rank not in [-1, 0] and not evaluate:
        torch.distributed.barrier()
    features = build_features(args, task, tokenizer, evaluate)
    if args.local_rank == 0 and not evaluate:
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
