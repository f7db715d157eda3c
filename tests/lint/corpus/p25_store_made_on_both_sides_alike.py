# Look-alike of https://github.com/mosaicml/composer/blob/v0.28.0/composer/trainer/trainer.py#L1698
# (a false alarm of the blind check on Composer 0.28.0, the mosaicml PyPI sdist): the store
# factory builds the store on rank 0 first (`if get_rank() == 0: store = Store(path)`), broadcasts
# the resolved path, then builds it on the others (`if get_rank() != 0: store = Store(path)`):
# every rank gets a store, so whether the factory returns None is decided by the URI alone, and
# `if store is not None:` takes the same branch on every rank.
# expect: none
import torch.distributed as dist


class Store:
    def __init__(self, path):
        self.path = path

    def resolved(self, path):
        return path.replace("{run}", "run-1")


def open_store(uri):
    backend, _, path = uri.partition("://")
    if backend == "":
        return None
    store = None
    if dist.get_rank() == 0:
        store = Store(path)
        path = store.resolved(path)
    paths = [path]
    dist.broadcast_object_list(paths, src=0)
    path = paths[0]
    if dist.get_rank() != 0:
        store = Store(path)
    return store


def resume(save_folder):
    store = open_store(save_folder)
    if store is not None:
        found = [None]
        dist.broadcast_object_list(found, src=0)
        return found[0]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, save_folder)
    return gathered[0]
