# Look-alike of https://github.com/speechbrain/speechbrain/pull/2268: the main process writes a
# summary file under if_main_process(); the synchronising deletion is called by everyone.
# expect: none
import json

from sblike.utils.checkpoints import Checkpointer
from sblike.utils.distributed import if_main_process


def main(save_dir, stats):
    checkpointer = Checkpointer(save_dir)
    checkpointer.delete_checkpoints(num_to_keep=1)
    if if_main_process():
        with open(save_dir + "/summary.json", "w") as f:
            json.dump(stats, f)
