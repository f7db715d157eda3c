# Look-alike of https://github.com/huggingface/transformers/blob/v4.57.1/src/transformers/training_args.py#L2528
# (a false alarm of the blind check on transformers 4.57.1): main-process-first with the second
# half in a `finally:` block. The other ranks wait in the barrier before the body, the main
# process calls it after the body, in `finally`, which every rank runs: each rank calls it
# once. (An `if` of a `try` body and one of its `finally` block pair up as two `if`s of one
# block do.)
# expect: none
import contextlib

import torch.distributed as dist


class TrainingArguments:
    @contextlib.contextmanager
    def main_process_first(self, local=True, desc="work"):
        if self.world_size > 1:
            is_main_process = self.local_process_index == 0 if local else self.process_index == 0
            try:
                if not is_main_process:
                    print("%d: waiting for the main process to perform %s" % (self.process_index, desc))
                    dist.barrier()
                yield
            finally:
                if is_main_process:
                    print("%d: main process completed %s, releasing all replicas" % (self.process_index, desc))
                    dist.barrier()
        else:
            yield
