"""The lint's facts cache (hpc_hangkit.lint.cache): a cached run finds what a fresh run finds; a
changed file, setting, file set or cache entry is never read stale; a cache directory that is
not the user's alone is not used, and the run goes on."""
import json
import os
import subprocess
import sys
import textwrap

from testlib import REPO

from hpc_hangkit.lint import lint_paths
from hpc_hangkit.lint.cache import FactsCache

COMM = """
import torch.distributed as dist


def sync(t):
    dist.all_reduce(t)
"""

TRAIN = """
import torch.distributed as dist
from comm import sync


def step(t):
    if dist.get_rank() == 0:
        sync(t)
"""

OTHER = """
import torch.distributed as dist


def other(t):
    if dist.get_rank() == 1:
        return
    dist.barrier()
"""


def _tree(root):
    root.mkdir()
    for name, text in (("comm.py", COMM), ("train.py", TRAIN), ("other.py", OTHER)):
        (root / name).write_text(textwrap.dedent(text).lstrip("\n"))
    return str(root)


def _key(res):
    return sorted((os.path.basename(f.path), f.line, f.code, f.message) for f in res.findings)


def test_a_cached_run_finds_what_a_fresh_run_finds(tmp_path):
    src = _tree(tmp_path / "src")
    cache = str(tmp_path / "cache")
    fresh = lint_paths([src], level="note")
    first = lint_paths([src], level="note", cache_dir=cache)
    again = lint_paths([src], level="note", cache_dir=cache)
    assert [(f, l, c) for f, l, c, _ in _key(fresh)] == [("other.py", 7, "HK102"), ("train.py", 7, "HK101")]
    assert _key(first) == _key(again) == _key(fresh)
    assert fresh.cache is None
    assert (first.cache["hits"], first.cache["stored"], first.cache["note"]) == (0, 3, None)
    assert (again.cache["hits"], again.cache["stored"], again.cache["note"]) == (3, 0, None)
    assert (again.files, again.lines) == (fresh.files, fresh.lines)


def test_a_changed_file_is_read_again_and_its_callers_see_the_change(tmp_path):
    src = _tree(tmp_path / "src")
    cache = str(tmp_path / "cache")
    lint_paths([src], cache_dir=cache)
    # the helper no longer reaches a collective: train.py's facts come from the cache, but the
    # finding there goes, since what reaches a collective is worked out again on every run
    (tmp_path / "src" / "comm.py").write_text("def sync(t):\n    return t\n")
    res = lint_paths([src], cache_dir=cache)
    assert (res.cache["hits"], res.cache["stored"]) == (2, 1)
    assert [(f, l, c) for f, l, c, _ in _key(res)] == [("other.py", 7, "HK102")]
    assert _key(res) == _key(lint_paths([src]))


def test_settings_and_the_file_set_start_a_cache_of_their_own(tmp_path):
    src = _tree(tmp_path / "src")
    cache = str(tmp_path / "cache")
    base = lint_paths([src], cache_dir=cache)
    # a configured collective changes what a file's calls are: nothing kept may be read
    got = lint_paths([src], cache_dir=cache, collectives=["sync_all"])
    assert got.cache["hits"] == 0 and got.cache["dir"] != base.cache["dir"]
    # another file in the tree changes what a call may resolve to
    (tmp_path / "src" / "extra.py").write_text("x = 1\n")
    more = lint_paths([src], cache_dir=cache)
    assert more.cache["hits"] == 0 and more.cache["dir"] not in (base.cache["dir"], got.cache["dir"])
    assert lint_paths([src], cache_dir=cache).cache["hits"] == 4


def test_a_damaged_entry_is_a_miss_and_is_written_again(tmp_path):
    src = _tree(tmp_path / "src")
    cache = str(tmp_path / "cache")
    fresh = lint_paths([src], level="note", cache_dir=cache)
    entries = sorted(os.path.join(fresh.cache["dir"], n) for n in os.listdir(fresh.cache["dir"]))
    assert len(entries) == 3
    with open(entries[0], "r+b") as f:  # the digest kept, the pickle cut short
        f.truncate(40)
    with open(entries[1], "wb") as f:
        f.write(b"not a cache entry")
    res = lint_paths([src], level="note", cache_dir=cache)
    assert (res.cache["hits"], res.cache["stored"]) == (1, 2)
    assert _key(res) == _key(fresh)
    assert lint_paths([src], level="note", cache_dir=cache).cache["hits"] == 3


def test_a_cache_directory_others_can_write_or_a_symlink_is_not_used(tmp_path):
    src = _tree(tmp_path / "src")
    fresh = lint_paths([src])
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(str(shared), 0o777)
    res = lint_paths([src], cache_dir=str(shared))
    assert "writable by group or others" in res.cache["note"]
    assert _key(res) == _key(fresh) and os.listdir(str(shared)) == []
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    res = lint_paths([src], cache_dir=str(link))
    assert "symlink is not followed" in res.cache["note"]
    assert _key(res) == _key(fresh) and os.listdir(str(real)) == []


def test_a_failed_write_stops_the_cache_and_loses_nothing(tmp_path):
    cache = FactsCache(str(tmp_path / "cache"), (), [])
    assert cache.usable
    os.rmdir(cache.dir)
    (tmp_path / "cache" / os.path.basename(cache.dir)).write_text("in the way")
    cache.put("a.py", FactsCache.digest(b"x"), b"blob")
    assert cache.stored == 0 and "cannot write" in cache.note and not cache.usable
    assert cache.get("a.py", b"x") is None


def _cli(*args, cwd, env):
    return subprocess.run([sys.executable, "-m", "hpc_hangkit", "lint", *args], cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=REPO, **env), capture_output=True, text=True, timeout=120)


def test_the_command_caches_under_xdg_cache_home_unless_told_not_to(tmp_path):
    src = _tree(tmp_path / "src")
    home = tmp_path / "xdg"
    env = {"XDG_CACHE_HOME": str(home)}
    none = _cli("--no-cache", "--format", "json", src, cwd=str(tmp_path), env=env)
    assert none.returncode == 1 and not home.exists()
    first = _cli("--format", "json", src, cwd=str(tmp_path), env=env)
    again = _cli("--format", "json", src, cwd=str(tmp_path), env=env)
    assert first.stdout == again.stdout == none.stdout and first.returncode == again.returncode == 1
    salts = os.listdir(str(home / "hpc-hangkit" / "lint"))
    assert len(salts) == 1 and len(os.listdir(str(home / "hpc-hangkit" / "lint" / salts[0]))) == 3
    assert len(json.loads(again.stdout)["findings"]) == 2
    own = tmp_path / "own"
    _cli("--cache-dir", str(own), src, cwd=str(tmp_path), env=env)
    assert len(os.listdir(str(own))) == 1
    # a cache the run may not use is said once on stderr; the findings and the exit status stand
    os.chmod(str(own), 0o775)
    r = _cli("--cache-dir", str(own), "--format", "json", src, cwd=str(tmp_path), env=env)
    assert r.returncode == 1 and r.stdout == none.stdout
    assert r.stderr.count("facts cache not used") == 1 and "writable by group or others" in r.stderr


def test_a_file_named_another_way_or_in_another_package_is_not_read_from_the_cache(tmp_path, monkeypatch):
    src = _tree(tmp_path / "src")
    cache = str(tmp_path / "cache")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(str(tmp_path))
    first = lint_paths(["src"], cache_dir=cache)
    assert sorted({f.path for f in first.findings}) == [os.path.join("src", "other.py"), os.path.join("src", "train.py")]
    monkeypatch.chdir(str(tmp_path / "elsewhere"))
    other = lint_paths([os.path.join("..", "src")], cache_dir=cache)
    # the findings quote the paths as given in this run, not the cached run's
    assert other.cache["hits"] == 0
    assert sorted({f.path for f in other.findings}) == [os.path.join("..", "src", n) for n in ("other.py", "train.py")]
    assert lint_paths([os.path.join("..", "src")], cache_dir=cache).cache["hits"] == 3
    # other.py named alone, then again once its directory became a package: another module name
    alone = os.path.join(src, "other.py")
    lint_paths([alone], cache_dir=cache)
    (tmp_path / "src" / "__init__.py").write_text("")
    res = lint_paths([alone], cache_dir=cache)
    assert res.cache["hits"] == 0 and _key(res) == _key(lint_paths([alone]))


def test_a_relative_xdg_cache_home_is_ignored_and_a_file_as_cache_dir_is_only_said(tmp_path):
    src = _tree(tmp_path / "src")
    home = tmp_path / "home"
    home.mkdir()
    env = {"XDG_CACHE_HOME": "relative", "HOME": str(home)}
    r = _cli("--format", "json", src, cwd=str(tmp_path), env=env)
    assert r.returncode == 1 and not (tmp_path / "relative").exists()
    assert len(os.listdir(str(home / ".cache" / "hpc-hangkit" / "lint"))) == 1
    afile = tmp_path / "afile"
    afile.write_text("")
    r2 = _cli("--cache-dir", str(afile), "--format", "json", src, cwd=str(tmp_path), env=env)
    assert r2.returncode == 1 and r2.stdout == r.stdout and "afile is not a directory" in r2.stderr
