# Look-alike of https://github.com/mosaicml/composer/blob/v0.28.0/composer/utils/file_helpers.py#L439
# (a false alarm of the blind check on Composer 0.28.0, the mosaicml PyPI sdist): rank 0 fills
# the path's placeholders in the `dbfs` branch only; the `else` branch reads the path as the
# URI gave it, the same on every rank. An assignment in one branch of an `if`/`else` never runs
# before a read in the other (no loop holds both).
# expect: none
import torch.distributed as dist


def open_path(uri, resolve_placeholders):
    backend, _, path = uri.partition("://")
    if backend == "dbfs":
        if dist.get_rank() == 0:
            path = resolve_placeholders(path)
        paths = [path]
        dist.broadcast_object_list(paths, src=0)
        return paths[0]
    else:
        if path.endswith(".symlink"):
            dist.barrier()
        return path
