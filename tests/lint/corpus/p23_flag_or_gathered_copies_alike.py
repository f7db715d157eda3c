# Look-alike of https://github.com/mosaicml/composer/blob/v0.28.0/composer/utils/checkpoint.py#L304
# (a false alarm of the blind check on Composer 0.28.0, the mosaicml PyPI sdist): a rank whose
# download fails sets `download_error = True` in its except handler, but the flag is gathered
# from every rank (`tensor(1 if download_error else 0)`) and set again when any rank's entry is
# true: this rank's own entry is among them, so after the loop the flag is true on every rank or
# on none, and every rank raises or none does.
# expect: none
import torch
import torch.distributed as dist


def download_all(items, download):
    download_error = False
    try:
        for item in items:
            download(item)
    except Exception:
        download_error = True
    download_error_tensor = torch.tensor(1 if download_error else 0)
    error_by_rank = [torch.zeros_like(download_error_tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(error_by_rank, download_error_tensor)
    failed_ranks = []
    for rank, error in enumerate(list(error_by_rank)):
        if error > 0:
            failed_ranks.append(rank)
            download_error = True
    if download_error:
        raise RuntimeError(f"Ranks {failed_ranks} failed to download.")
    dist.barrier()
