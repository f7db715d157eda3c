# Excerpt in the shape of rwth-i6/returnn returnn/torch/engine.py at ab8521dd1^
# (before "Torch distributed: fix synchronization (#1461)"). Unrelated code dropped.
import torch
import torch.distributed
from torch.distributed import init_process_group
from torch.utils.data import DataLoader

from returnn.torch.data import pipeline as data_pipeline
from returnn.torch.data import returnn_dataset_wrapper


class Engine:
    def __init__(self, config):
        self.config = config
        self._use_torch_distributed = config.typed_value("torch_distributed") is not None
        self._train_dataloader = None
        self._eval_dataloaders = {}

    def init_train_from_config(self, train_data=None, eval_data=None):
        self._train_dataloader = self._create_data_loader(train_data) if train_data else None
        for dataset_name, dataset in self.eval_datasets.items():
            self._eval_dataloaders[dataset_name] = self._create_data_loader(dataset)

    def train(self):
        while self.epoch + 1 <= self._final_epoch:
            self.epoch += 1
            self.init_train_epoch()
            self.train_epoch()

    def train_epoch(self):
        step_idx = 0
        data_iter = iter(self._train_dataloader)

        while True:
            with torch.no_grad():
                extern_data_raw = next(data_iter, None)

            _has_data = torch.tensor([extern_data_raw is not None], dtype=torch.int8)
            if self._use_torch_distributed:
                # use all reduce to check if all workers have data, if at least one worker does not have data,
                # all workers finish this epoch
                torch.distributed.all_reduce(_has_data, op=torch.distributed.ReduceOp.MIN)
            if not _has_data[0]:
                break

            self._run_step(extern_data_raw, train_flag=True, train_func=True)
            step_idx += 1

        if self.epoch % self._save_model_epoch_interval == 0 or self.epoch == self._final_epoch:
            self._save_model()

        if not self._use_torch_distributed or torch.distributed.get_rank() == 0:
            self.eval_model()

    def eval_model(self, *, skip_already_evaluated=False):
        self._pt_model.eval()
        eval_dump_str = []
        for dataset_name, dataset in self.eval_datasets.items():
            if skip_already_evaluated and self._is_dataset_evaluated(name=dataset_name):
                continue
            print(f"Evaluating dataset {dataset_name!r}")

            data_loader = self._eval_dataloaders[dataset_name]

            step_idx = 0
            with torch.no_grad():
                for extern_data_raw in data_loader:
                    self._run_step(extern_data_raw, train_func=True)
                    step_idx += 1
            eval_dump_str += [f"{dataset_name}: steps {step_idx}"]

        print(" ".join(eval_dump_str) if eval_dump_str else "(No evaluations.)")

    def _create_data_loader(self, dataset):
        wrapped_dataset = returnn_dataset_wrapper.ReturnnDatasetIterDataPipe(dataset)
        batches_dataset = data_pipeline.BatchingIterDataPipe(wrapped_dataset, batch_size=1000, max_seqs=-1)
        return DataLoader(
            batches_dataset,
            collate_fn=data_pipeline.collate_batch,
            batch_size=None,
            shuffle=None,
            sampler=None,
            batch_sampler=None,
        )
