"""The roll call of a directory of dumps, as ``hpc-hangkit report PATH`` prints it."""
import os
from typing import List, NamedTuple, Optional

__all__ = ["DirReport", "NoDumps", "report_dir", "default_samples"]


class NoDumps(ValueError):
    """A directory holds no stack dumps, tracebacks, heartbeats, unwatched markers or
    summaries; ``warnings`` are the reader's warnings (why files were skipped)."""

    def __init__(self, path: str, warnings: List[str]):
        ValueError.__init__(self, "no stack dumps, tracebacks, heartbeats or summaries under %s" % path)
        self.path = path
        self.warnings = warnings


class DirReport(NamedTuple):
    """``summary``: the node summary of the directory (the ``*.summary.json`` document,
    :func:`hpc_hangkit.rollcall.summarize_dir`); ``report``: the roll call built from it."""
    summary: dict
    report: object


def default_samples() -> int:
    """K for the modal position: the ``stack_samples`` setting (site config and
    HANGKIT_* environment), or its built-in default when the settings cannot be loaded
    (a broken site config must not block a post-mortem)."""
    from hpc_hangkit import config

    try:
        return config.load_settings().stack_samples
    except Exception:
        return config.Settings.defaults().stack_samples


def report_dir(path: str, *, depth: Optional[int] = None, world_size: Optional[int] = None,
               samples: Optional[int] = None) -> DirReport:
    """Summarise ``path`` (a directory, searched recursively, symlinks not followed) and
    build its roll call.

    depth: group ranks by the innermost N frames (None: the whole chain). world_size:
    number of ranks (None: from the dump headers). samples: K newest samples per rank
    (None: :func:`default_samples`). Raises FileNotFoundError if ``path`` does not
    exist, :class:`NoDumps` if it holds nothing to report on.
    """
    from hpc_hangkit import rollcall

    if not os.path.exists(path):
        raise FileNotFoundError(path)
    if samples is None:
        samples = default_samples()
    summary = rollcall.summarize_dir(path, world_size=world_size, samples=samples)
    if not summary["positions"] and not summary["unwatched"]:
        raise NoDumps(path, summary["warnings"])
    return DirReport(summary, rollcall.report_from_summary_and_dir(summary, path, depth=depth,
                                                                   world_size=world_size))
