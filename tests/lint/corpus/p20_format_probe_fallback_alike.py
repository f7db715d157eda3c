# Look-alike of https://github.com/mosaicml/composer/blob/v0.28.0/composer/trainer/trainer.py#L1675
# (a false alarm of the blind check on Composer 0.28.0, the mosaicml PyPI sdist): the save
# folder is filled in by `partial_format`, which retries `s.format(*args, **kwargs)` with the
# missing keys put back in its `except KeyError` / `except IndexError` handlers. Whether
# formatting raises is a function of the string and its arguments, the same on every rank, so
# the handlers' values are not rank-local, and neither is the configuration check after it.
# expect: none
import torch.distributed as dist


def partial_format(s, *args, **kwargs):
    for _ in range(10_000):
        try:
            return s.format(*args, **kwargs)
        except IndexError:
            args += ("{}",)
        except KeyError as e:
            key = e.args[0]
            kwargs[key] = "{" + key + "}"
    raise RuntimeError(f"Failed to format string {s}")


def resume(save_folder, run_id, load):
    if save_folder is not None:
        save_folder = partial_format(save_folder, run_id=run_id)
    error_message = ""
    if save_folder is None:
        error_message += "The `save_folder` must be specified when autoresume is enabled. "
    if error_message != "":
        raise ValueError(error_message)
    dist.barrier()
    return load(save_folder)
