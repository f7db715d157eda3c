"""The lint's tests run the command with its default facts cache in a directory of this
session's own (never the user's ~/.cache): every test after the first that lints the same files
reads their facts from it, so the whole suite checks that a cached run finds what a fresh one does."""
import os
import shutil
import tempfile

import pytest


@pytest.fixture(autouse=True, scope="session")
def _session_cache_home():
    old = os.environ.get("XDG_CACHE_HOME")
    home = tempfile.mkdtemp(prefix="hk-lint-cache-")
    os.environ["XDG_CACHE_HOME"] = home
    yield home
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old
    shutil.rmtree(home, ignore_errors=True)
