import os
import shutil

from sblike.utils import distributed


class Checkpointer:
    def __init__(self, directory):
        self.directory = directory

    def delete_checkpoints(self, num_to_keep=1):
        distributed.ddp_barrier()
        ckpts = sorted(os.listdir(self.directory))
        for name in ckpts[:-num_to_keep]:
            shutil.rmtree(os.path.join(self.directory, name))
        distributed.ddp_barrier()
