# Source: https://github.com/speechbrain/speechbrain/pull/2268 (fix: every process calls delete_checkpoints)
# expect: none
from sblike.utils.checkpoints import Checkpointer


def main(save_dir):
    checkpointer = Checkpointer(save_dir)
    checkpointer.delete_checkpoints(num_to_keep=1)
