import os
from functools import wraps

import torch

MAIN_PROC_ONLY = 0


def run_on_main(func, args=None, kwargs=None):
    args = [] if args is None else args
    kwargs = {} if kwargs is None else kwargs
    main_process_only(func)(*args, **kwargs)
    ddp_barrier()


def if_main_process():
    if "LOCAL_RANK" in os.environ:
        if os.environ["LOCAL_RANK"] == "":
            return False
        return int(os.environ["LOCAL_RANK"]) == 0
    return True


def main_process_only(function):
    @wraps(function)
    def main_proc_wrapped_func(*args, **kwargs):
        global MAIN_PROC_ONLY
        MAIN_PROC_ONLY += 1
        if if_main_process():
            result = function(*args, **kwargs)
        else:
            result = None
        MAIN_PROC_ONLY -= 1
        return result

    return main_proc_wrapped_func


def ddp_barrier():
    if MAIN_PROC_ONLY >= 1:
        return
    elif torch.distributed.is_initialized():
        torch.distributed.barrier()


class Checkpointer:
    def save_checkpoint(self, meta={}, end_of_epoch=True, name=None):
        ckpt_dir = None
        if if_main_process():
            ckpt_dir = self._new_checkpoint_dirpath()
            os.makedirs(ckpt_dir, exist_ok=True)
            self._save_checkpoint_metafile(ckpt_dir / "CKPT.yaml", meta, end_of_epoch)

        # Communicate ckpt_dir to all procs
        communication_list = [ckpt_dir]
        if torch.distributed.is_initialized():
            torch.distributed.broadcast_object_list(communication_list, src=0)
        ckpt_dir = communication_list[0]

        for name, obj in self.recoverables.items():
            torch.save(obj.state_dict(), ckpt_dir / f"{name}.ckpt")

    def save_and_keep_only(self, meta={}, end_of_epoch=True, num_to_keep=1, min_keys=None):
        self.save_checkpoint(meta=meta, end_of_epoch=end_of_epoch)
        self.delete_checkpoints(num_to_keep=num_to_keep, min_keys=min_keys)

    def delete_checkpoints(self, num_to_keep=1, min_keys=None):
        ddp_barrier()
        for ckpt in self._find_deletable(num_to_keep, min_keys):
            self._delete_checkpoint(ckpt)
        ddp_barrier()


class Brain:
    def on_stage_end(self, stage, stage_loss, epoch=None):
        if stage == "valid":
            run_on_main(
                self.checkpointer.save_and_keep_only,
                kwargs={"meta": {"loss": stage_loss}, "min_keys": ["loss"]},
            )
