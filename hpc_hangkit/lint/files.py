"""Which files the lint reads: ``*.py`` under the given paths, minus excluded ones. Stdlib only."""
import fnmatch
import os

__all__ = ["DEFAULT_EXCLUDE", "iter_files"]

#: directory names never entered (a virtual environment or build output is not the user's code)
DEFAULT_EXCLUDE = (".git", ".hg", "__pycache__", ".venv", "venv", ".tox", ".nox", ".eggs", "build", "dist",
                   "node_modules", ".mypy_cache", ".pytest_cache")


def _excluded(path, patterns):
    """``path`` matches a pattern by its base name, as given, or normalized (``./a/b`` as ``a/b``)."""
    if not patterns:
        return False
    base = os.path.basename(path)
    norm = os.path.normpath(path)
    return any(fnmatch.fnmatch(base, p) or fnmatch.fnmatch(path, p) or fnmatch.fnmatch(norm, p) for p in patterns)


def iter_files(paths, exclude=()):
    """Yield every ``*.py`` file under ``paths`` in sorted order (a file given by name is
    always read). Symbolic links to directories are not followed. Raises
    ``FileNotFoundError`` for a path that does not exist."""
    patterns = tuple(exclude)
    for p in paths:
        if not os.path.exists(p):
            raise FileNotFoundError(p)
        if os.path.isfile(p):
            yield p
            continue
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if d not in DEFAULT_EXCLUDE and not d.startswith(".")
                             and not _excluded(os.path.join(root, d), patterns))
            for f in sorted(files):
                full = os.path.join(root, f)
                if f.endswith(".py") and not _excluded(full, patterns):
                    yield full
