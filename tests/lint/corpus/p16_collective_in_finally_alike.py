# Look-alike of https://github.com/mosaicml/composer/blob/v0.28.0/composer/utils/checkpoint.py#L773
# (a false alarm of the blind check on Composer 0.28.0, the mosaicml PyPI sdist): local rank 0
# downloads and may raise, but the barriers are in the `finally:` block, which the raising
# rank runs too before its error propagates: every rank reaches them.
# expect: none
import os
import tarfile

import torch.distributed as dist


def download_checkpoint(path, folder, fetch):
    archive = os.path.join(folder, "rank0_checkpoint")
    try:
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            fetch(path, archive)
            try:
                with tarfile.open(archive) as tarball:
                    tarball.extractall(folder)
            except FileNotFoundError:
                raise RuntimeError(f"Checkpoint {path} does not exist")
    finally:
        dist.barrier()
        if dist.get_rank() == 0:
            print("downloaded", path)
        dist.barrier()
    return archive
