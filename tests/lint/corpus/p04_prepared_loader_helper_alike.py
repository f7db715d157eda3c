# Look-alike of https://github.com/huggingface/accelerate/blob/v1.2.1/src/accelerate/test_utils/scripts/test_distributed_data_loop.py#L334
# (a false alarm of the measured projects): the loader comes from a helper that shuffles the
# values with torch.randperm and returns the loader prepared by accelerate, which gives every
# process as many batches; the save_state inside the loop runs on every process alike.
# expect: none
import torch
from torch.utils.data import DataLoader, TensorDataset


def create_dataloader(accelerator, dataset_size, batch_size, shuffle=False):
    values = torch.as_tensor(range(dataset_size))
    if shuffle:
        values = values[torch.randperm(values.size(0))]
    dl = DataLoader(TensorDataset(values), batch_size=batch_size)
    dl = accelerator.prepare(dl)
    return dl


def save_midway(accelerator, tmpdir):
    prepared_dl = create_dataloader(accelerator, dataset_size=32 * accelerator.num_processes, batch_size=4,
                                    shuffle=True)
    for step, batch in enumerate(prepared_dl):
        if step == 2:
            accelerator.save_state(tmpdir)
