# Excerpt in the shape of huggingface/optimum-neuron at 347e7f87^ (before PR #925):
#   optimum/neuron/trainers/base.py (_TrainerForNeuron.train / synchronize_hub_cache)
#   optimum/neuron/cache/hub_cache.py (synchronize_hub_cache / CompileCacheHfProxy.synchronize)
# Unrelated code dropped; the two modules are merged into one file.
import logging
import os

import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from huggingface_hub import HfApi
from transformers import Trainer

from optimum.neuron.utils.cache_utils import get_hf_hub_cache_repos, get_neuron_cache_path, has_write_access_to_repo
from optimum.neuron.utils.misc import is_precompilation

logger = logging.getLogger(__name__)


# ---- optimum/neuron/cache/hub_cache.py ----
class CompileCacheHfProxy:
    def __init__(self, repo_id, default_cache):
        self.repo_id = repo_id
        self.default_cache = default_cache
        self.api = HfApi()

    def synchronize(self, non_blocking: bool = False):
        logger.info(f"Synchronizing {self.repo_id} Hub cache with {self.default_cache.cache_path} local cache")

        if os.environ.get("TORCHELASTIC_RUN_ID", None) is None:
            self.api.upload_folder(
                repo_id=self.repo_id,
                folder_path=self.default_cache.cache_path,
                commit_message="Synchronizing local compiler cache.",
                ignore_patterns="lock",
                run_as_future=non_blocking,
            )
        else:
            if xr.local_ordinal() == 0:
                # Only the first process uploads the cache to the Hub
                self.api.upload_folder(
                    repo_id=self.repo_id,
                    folder_path=self.default_cache.cache_path,
                    commit_message="Synchronizing local compiler cache.",
                    ignore_patterns="lock",
                    run_as_future=non_blocking,
                )
            xm.rendezvous("synchronize_hub_cache")
        logger.info("Synchronization complete.")


def create_hub_compile_cache_proxy(cache_url=None, cache_repo_id=None):
    return CompileCacheHfProxy(cache_repo_id, default_cache=cache_url)


def synchronize_hub_cache(cache_path=None, cache_repo_id=None, non_blocking: bool = False):
    hub_cache_proxy = create_hub_compile_cache_proxy(cache_url=cache_path, cache_repo_id=cache_repo_id)
    hub_cache_proxy.synchronize(non_blocking=non_blocking)


# ---- optimum/neuron/trainers/base.py ----
class _TrainerForNeuron(Trainer):
    def synchronize_hub_cache(self):
        repo_id = get_hf_hub_cache_repos()[0]
        if not self.args.skip_cache_push and xr.global_ordinal() == 0:
            has_write_access = has_write_access_to_repo(repo_id)
            if has_write_access:
                cache_path = get_neuron_cache_path()
                synchronize_hub_cache(cache_path=cache_path, cache_repo_id=repo_id)
        xm.rendezvous("Hub cache synchronization done")

    def train(self, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None, **kwargs):
        result = super().train(
            resume_from_checkpoint=resume_from_checkpoint,
            trial=trial,
            ignore_keys_for_eval=ignore_keys_for_eval,
            **kwargs,
        )
        if not is_precompilation():
            self.synchronize_hub_cache()
        return result
