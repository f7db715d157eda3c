import torch
import torch.distributed


def all_gather_ddp_if_available(tensor, group=None, sync_grads=False):
    group = group if group is not None else torch.distributed.group.WORLD
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        gathered = [torch.zeros_like(tensor) for _ in range(torch.distributed.get_world_size(group))]
        torch.distributed.all_gather(gathered, tensor, group=group)
        return torch.stack(gathered)
    return tensor


class DDPPlugin:
    def all_gather(self, tensor, group=None, sync_grads=False):
        return all_gather_ddp_if_available(tensor, group=group, sync_grads=sync_grads)


class LightningModule(torch.nn.Module):
    def all_gather(self, data, group=None, sync_grads=False):
        group = group if group is not None else torch.distributed.group.WORLD
        all_gather = self.trainer.training_type_plugin.all_gather
        data = torch.as_tensor(data, device=self.device)
        return all_gather(data, group=group, sync_grads=sync_grads)

    def validation_epoch_end(self, outputs):
        rank = torch.distributed.get_rank()
        res = {}
        if rank == 0:
            res = {"reduced_metric": 0.1}
        self.log_dict(res)


class HookResultStore:
    def __init__(self, fx_name, all_gather_fn, should_warn):
        self._fx_name = fx_name
        self._all_gather_fn = all_gather_fn
        self._should_warn = should_warn
        self.warned_metrics = []

    def run_epoch_func(self, results, opt_metric, func_name, *args, **kwargs):
        func = getattr(opt_metric, func_name)
        metrics_to_log = func(*args, **kwargs)
        if self._should_warn:
            for non_metric_key in opt_metric.get_non_metrics_keys():
                if non_metric_key in metrics_to_log and non_metric_key not in self.warned_metrics:
                    metric = self._all_gather_fn(metrics_to_log[non_metric_key])
                    if any(metric[0] != m for m in metric[1:]):
                        print(f"The value associated to the key {non_metric_key} "
                              "doesn't appear to be the same accross all processes.")
                    self.warned_metrics.append(non_metric_key)
        results.append(metrics_to_log)


class EpochResultStore:
    def __init__(self, trainer):
        self.trainer = trainer
        self._should_warn = trainer.accelerator_connector.is_distributed
        self._internals = {}

    def cache_result(self, fx_name, hook_result):
        all_gather_fn = self.trainer.lightning_module.all_gather
        store = self._internals.setdefault(
            fx_name, HookResultStore(fx_name, all_gather_fn, self._should_warn))
        return store

    def get_epoch_log_metrics(self):
        results = []
        for fx_name, store in self._internals.items():
            for opt_metric in self.trainer.reduced_results[fx_name]:
                store.run_epoch_func(results, opt_metric, "get_epoch_log_metrics")
        return results
