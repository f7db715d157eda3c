# Source: https://github.com/speechbrain/speechbrain/pull/2268 (issue #2250)
# Bug: the recipe deletes old checkpoints under `if if_main_process():`, and deletion now
#      synchronises before and after (ddp_barrier in the project's own distributed utilities):
#      the main process waits in a barrier the others never call.
# Class: wrapper module in the tree (`from sblike.utils import distributed`), rank from a
#        project helper (if_main_process), collective two calls down through a method
# expect: HK101 collective=sblike/utils/checkpoints.py:12|train.py:15 branch=train.py:14
from sblike.utils.checkpoints import Checkpointer
from sblike.utils.distributed import if_main_process


def main(save_dir):
    checkpointer = Checkpointer(save_dir)
    if if_main_process():
        checkpointer.delete_checkpoints(num_to_keep=1)
