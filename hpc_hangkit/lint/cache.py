"""The lint's facts cache: each file's indexed facts kept on disk, so that a run over files that
did not change (a pre-commit hook's) skips their parsing and indexing.

An entry holds what :func:`hpc_hangkit.lint._index_file` returns for one file, with the digest
of the bytes it was built from; it is used only when the file's bytes are the same now, and the
file is named the same way (the path as given, from the same directory) in the same package. The
entries of one run live in a directory named by a *salt*: the lint's own code, the Python
version, the settings that change the facts (``collectives``, ``rank_sources``) and the set of
files linted (what a call may resolve to depends on it). Any of these changing starts a fresh
directory; directories not used for :data:`PRUNE_DAYS` days are removed. The rules and the
propagation across files always run; only the per-file phase is kept.

Entries are pickles, so the cache directory must be this user's alone: a directory that is a
symlink, owned by another user, or writable by group or others is not used (the run goes on
without a cache, and says why once). Nothing here fails a run: a damaged or unreadable entry is
a miss, and a write that fails stops the writing for the rest of the run.
"""
import hashlib
import os
import pickle
import shutil
import stat
import sys
import tempfile
import time

__all__ = ["FactsCache", "default_dir", "PRUNE_DAYS"]

#: a salt directory not used for this many days is removed at the start of a run
PRUNE_DAYS = 7


def default_dir():
    """``$XDG_CACHE_HOME/hpc-hangkit/lint``, else ``~/.cache/hpc-hangkit/lint`` (a path; not
    created). A relative ``XDG_CACHE_HOME`` is ignored, as the XDG base directory
    specification asks (it would put the cache inside whatever directory the lint runs in)."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hpc-hangkit", "lint")


def _code_digest():
    """A digest of the lint package's own source files (a new lint builds new facts)."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            h.update(name.encode())
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
    return h.digest()


def _private_dir(path):
    """Create ``path`` (mode 0700) when missing; return None when it is this user's alone, else
    why it is not (a sentence). Never follows a symlink at ``path`` itself."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except FileExistsError:  # a file, or a symlink to one, in the way
        return "%s is not a directory (a symlink is not followed)" % path
    except OSError as e:
        return "cannot create %s: %s" % (path, e.strerror or e)
    if not stat.S_ISDIR(st.st_mode):
        return "%s is not a directory (a symlink is not followed)" % path
    if st.st_uid != os.geteuid():
        return "%s belongs to another user" % path
    if st.st_mode & 0o022:
        return "%s is writable by group or others" % path
    return None


class FactsCache:
    """The facts cache under directory ``root`` for one run.

    ``settings``: what besides the files' bytes changes their facts (a tuple of sorted tuples of
    str: the settings' collectives and rank sources as the lint's tables hold them);
    ``paths``: every file of the run (the tree the calls resolve in). ``note`` is None, or one
    sentence saying why the cache is not (or no longer) used; :attr:`hits` and :attr:`stored`
    count this run's entries read and written."""

    def __init__(self, root, settings, paths):
        h = hashlib.sha256(_code_digest())
        h.update(repr((sys.version_info[:3], pickle.HIGHEST_PROTOCOL, settings)).encode())
        for p in sorted(os.path.normpath(os.path.abspath(p)) for p in paths):
            h.update(p.encode("utf-8", "surrogateescape") + b"\0")
        self.salt = h.hexdigest()[:24]
        self.root = os.path.abspath(root)
        self.dir = os.path.join(self.root, self.salt)
        self.hits = 0
        self.stored = 0
        self.note = _private_dir(self.root) or _private_dir(self.dir)
        if self.note is None:
            self._prune()

    @property
    def usable(self):
        """True while entries are read and written."""
        return self.note is None

    def _prune(self):
        now = time.time()
        try:
            os.utime(self.dir)
            names = os.listdir(self.root)
        except OSError:
            return
        for name in names:
            p = os.path.join(self.root, name)
            try:
                st = os.lstat(p)
                if name != self.salt and stat.S_ISDIR(st.st_mode) and now - st.st_mtime > PRUNE_DAYS * 86400:
                    shutil.rmtree(p, ignore_errors=True)
            except OSError:
                continue

    def _entry(self, path):
        # the facts name the file as it was given (findings quote that path), live at its
        # absolute path, and take the module name its package directories make
        from hpc_hangkit.lint.model import module_name
        key = "\0".join((path, os.path.normpath(os.path.abspath(path)), module_name(path)))
        return os.path.join(self.dir, hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]
                            + ".pickle")

    @staticmethod
    def digest(raw):
        """The digest an entry is matched by: of a file's bytes (``raw``), as bytes."""
        return hashlib.blake2b(raw, digest_size=20).digest()

    def get(self, path, raw):
        """The result kept for file ``path`` whose bytes are now ``raw``, or None (no entry, a
        stale one, a damaged one)."""
        if self.note is not None:
            return None
        try:
            with open(self._entry(path), "rb") as f:
                data = f.read()
        except OSError:
            return None
        want = self.digest(raw)
        if data[:len(want)] != want:
            return None
        try:
            got = pickle.loads(data[len(want):])
        except Exception:  # a truncated or foreign entry is a miss; it is written again
            return None
        self.hits += 1
        return got

    def put(self, path, digest, blob):
        """Keep ``blob`` (a result pickled by :func:`pickle.dumps`) for file ``path`` whose bytes
        had ``digest`` (:meth:`digest`). A failed write sets :attr:`note` and stops the cache for
        the rest of the run."""
        if self.note is not None:
            return
        try:
            fd, tmp = tempfile.mkstemp(dir=self.dir, suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(digest)
                    f.write(blob)
                os.replace(tmp, self._entry(path))
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as e:
            self.note = "cannot write to %s: %s" % (self.dir, e.strerror or e)
            return
        self.stored += 1
