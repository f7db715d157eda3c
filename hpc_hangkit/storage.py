"""Storage: where a job's files live under the site's ``storage_url`` (any fsspec URL).

Layout (names from :mod:`hpc_hangkit.layout`)::

    <storage_url>/                      ``{user}`` in it is the job's user name
        <job_id>/attempt_<n>/hang_detector/...   one attempt's files (the collector)
        <job_id>/hangkit_requeue.json   hpc-hangkit's own count of hang requeues
                                        (:mod:`hpc_hangkit.slurm.requeue`; a per-job record)
        <A>_<T>.jobid                   an array task's unique SLURM_JOB_ID (one line)

Everything here runs as the job's user (the batch-step monitor, the epilog's
dropped child, ``hpc-hangkit collect``); storage errors propagate unless a
function says otherwise.
"""
import errno
import hashlib
import logging
import os
import re
import socket
import stat
from typing import List, Optional

from hpc_hangkit import fsio, layout
from hpc_hangkit.slurmjob import JobEnv

log = logging.getLogger("hpc_hangkit.storage")

#: file name suffix of an array-task alias (``<A>_<T>.jobid``)
ALIAS_SUFFIX = ".jobid"


def fs_and_root(url: str):
    """``(fsspec file system, path)`` of ``url``, the path without a trailing ``/``.
    Raises ValueError/ImportError for an unknown protocol or a missing backend (s3fs...)."""
    global _reload_fsspec_config
    import fsspec.core

    if _reload_fsspec_config:
        _reload_fsspec_config = False
        _load_fsspec_config()
    fs, root = fsspec.core.url_to_fs(url)
    return fs, root.rstrip("/")


def expand_storage_url(storage_url: str, user: Optional[str] = None) -> str:
    """``storage_url`` with ``{user}`` replaced by the job's user name (no trailing ``/``).

    A per-user prefix (``file:///shared/hangkit/{user}``) keeps one user's
    dumps out of another's reach on a shared file system. Raises ValueError
    if ``{user}`` is used and the user is unknown or not a plain name
    (:func:`hpc_hangkit.layout.validate_user`).
    """
    if "{user}" not in storage_url:
        return storage_url.rstrip("/")
    try:
        layout.validate_user(user)
    except ValueError:
        raise ValueError("storage_url %r needs {user}, but the user name %r is unusable"
                         % (storage_url, user)) from None
    return storage_url.replace("{user}", user).rstrip("/")


def job_url(storage_url: str, job_id, user: Optional[str] = None) -> str:
    """``<storage_url>/<job_id>`` for the unique numeric id. Raises ValueError for a bad
    id (:func:`hpc_hangkit.layout.unique_job_id`) or an unusable ``{user}``."""
    return "%s/%s" % (expand_storage_url(storage_url, user), layout.unique_job_id(job_id))


def attempt_url(storage_url: str, job_id, attempt: int, user: Optional[str] = None) -> str:
    """``<storage_url>/<job_id>/attempt_<n>`` (the ``hang_detector/`` tree is below it).
    Raises ValueError like :func:`job_url`, or for a negative attempt."""
    return "%s/%s" % (expand_storage_url(storage_url, user),
                      layout.storage_attempt_prefix(layout.unique_job_id(job_id), int(attempt)))


def stored_numbers(url: str, number_of) -> List[int]:
    """The numbers ``number_of(name)`` gives the entries of the storage folder ``url`` (names
    it gives None are skipped), sorted and distinct; [] if the folder is missing. Storage
    errors propagate."""
    fs, root = fs_and_root(url)
    try:
        entries = fs.ls(root, detail=False)
    except FileNotFoundError:
        return []
    out = {number_of(e.rstrip("/").rsplit("/", 1)[-1]) for e in entries}
    return sorted(out - {None})


def storage_attempts(storage_url: str, job_id, user: Optional[str] = None) -> List[int]:
    """Attempt numbers stored for a job (sorted, distinct); [] if none. Storage errors propagate."""
    return stored_numbers(job_url(storage_url, job_id, user), layout.attempt_of)


#: set in a collector child after its privilege drop: fs_and_root reloads fsspec's config
_reload_fsspec_config = False


def fsspec_config_as_this_user() -> None:
    """Make the next :func:`fs_and_root` (re)load fsspec's option files as the current
    user (call it right after a privilege drop). Cheap: nothing is imported now."""
    global _reload_fsspec_config
    _reload_fsspec_config = True


def _load_fsspec_config():
    """(Re)load fsspec's option files as the current (dropped) user: the site's
    ``FSSPEC_CONFIG_DIR`` (set by slurm/epilog) first, then ``$HOME/.config/fsspec`` (the
    user's, which wins), then ``FSSPEC_*`` variables. Needed because fsspec reads its
    configuration once, at import: imported before the drop, it would hold root's.
    A missing fsspec is left to the copy to report."""
    try:
        import fsspec.config as fc
    except ImportError:
        return
    fc.conf.clear()
    dirs = [os.environ.get("FSSPEC_CONFIG_DIR"),
            os.path.join(os.environ.get("HOME") or "/nonexistent", ".config", "fsspec")]
    seen = set()
    for d in dirs:
        if d and d not in seen and os.path.isdir(d):
            seen.add(d)
            try:
                fc.set_conf_files(d, fc.conf)
            except Exception:  # noqa: BLE001 -- a bad option file must not stop the copy
                pass
    fc.set_conf_env(fc.conf)


# --------------------------------------------------------------------------- array aliases

def alias_url(storage_url: str, array_id, user: Optional[str] = None) -> str:
    """``<storage_url>/<A>_<T>.jobid``: the alias that names the unique id of an array task.
    Raises ValueError for a bad id or an unusable ``{user}``."""
    return "%s/%s%s" % (expand_storage_url(storage_url, user), layout.validate_job_id(array_id),
                        ALIAS_SUFFIX)


def _put_local(local, data: bytes, replace: bool) -> None:
    """Write one record through the ``(LocalStore, name)`` of :func:`_local_record`: replaced
    by rename (``replace``) or created only if absent (the first writer wins)."""
    store, name = local
    try:
        store.prepare()
        (store.write_bytes if replace else store.create_bytes)(name, data)
    finally:
        store.close()


def write_alias(storage_url: str, alias: str, job_id, user: Optional[str] = None) -> None:
    """Store the alias ``alias`` (``<A>_<T>``) naming ``job_id`` (one line), unless one is
    there already (the first writer wins). On ``file://`` it is written by
    :meth:`LocalStore.create_bytes` (no symlink followed): StoreRefused when the name is
    already a symlink or another user's file. Other storage errors propagate."""
    url = alias_url(storage_url, alias, user)
    data = ("%s\n" % job_id).encode()
    local = _local_record(url, 0)
    if local is not None:
        _put_local(local, data, replace=False)
        return
    fs, path = fs_and_root(url)
    if not fs.exists(path):
        with fs.open(path, "wb") as f:
            f.write(data)


def read_alias(storage_url: str, alias: str, user: Optional[str] = None) -> Optional[str]:
    """The unique job id the alias ``alias`` (``<A>_<T>``) names, or None if there is no
    alias or it does not hold a numeric id. Other storage errors propagate."""
    fs, path = fs_and_root(alias_url(storage_url, alias, user))
    try:
        with fs.open(path, "rb") as f:
            text = f.read(64).decode("ascii", "replace").strip()
    except FileNotFoundError:
        return None
    try:
        return layout.unique_job_id(text)
    except ValueError:
        return None


def record_array_alias(storage_url: Optional[str], job: JobEnv) -> Optional[str]:
    """For an array task, store ``<storage_url>/<A>_<T>.jobid`` naming its SLURM_JOB_ID.

    Call it from inside the job (the batch-step monitor): ``job``
    (:class:`hpc_hangkit.slurmjob.JobEnv` of the job environment) has the array job and
    task; slurmd's prolog and epilog environments do not (Slurm's prep_script_slurmd.c).
    With it, ``collect 123_4`` finds the job in storage after Slurm forgot it; ``{user}``
    in ``storage_url`` is ``job.user``. Returns the alias written (or already there), None
    when the job is not an array task or storage_url is unset. Storage errors propagate.
    """
    if not (storage_url and job.alias):
        return None
    write_alias(storage_url, job.alias, job.job_id, job.user)
    return job.alias


# --------------------------------------------------------------------------- per-job records


def read_job_record(url: str, limit: int) -> bytes:
    """The bytes of a record kept per job (``<storage>/<job_id>/<name>``; the requeue state)
    at ``url``, at most ``limit + 1`` (a caller tells "too large" by the extra byte). On
    ``file://`` it is read like the collector reads storage (:class:`LocalStore`: a symlink,
    another user's file or a job directory that is not the user's own is refused). Raises
    FileNotFoundError when there is none, OSError/:class:`StoreRefused` (or the backend's
    error) otherwise."""
    local = _local_record(url, 1)
    if local is not None:
        store, name = local
        try:
            store.prepare()
            with store.open_read(name) as f:
                return f.read(limit + 1)
        finally:
            store.close()
    fs, path = fs_and_root(url)
    with fs.open(path, "rb") as f:
        return f.read(limit + 1)


def write_job_record(url: str, data: bytes) -> None:
    """Replace the per-job record at ``url`` by ``data``. On ``file://`` through
    :class:`LocalStore` (the ``<job_id>`` directory must be the user's own or is created
    0700; the file is replaced by rename, a planted symlink is never followed): raises
    StoreRefused for a job path that is not the user's. Raises OSError (or the backend's
    error) if storage refuses."""
    local = _local_record(url, 1)
    if local is not None:
        _put_local(local, data, replace=True)
        return
    fs, path = fs_and_root(url)
    parent = path.rsplit("/", 1)[0]
    try:
        fs.makedirs(parent, exist_ok=True)
    except Exception:  # object stores need no directories
        pass
    with fs.open(path, "wb") as f:
        f.write(data)


# --------------------------------------------------------------------------- the report

def publish_report(storage_url: str, job_id, attempt: int, hd_dir: str,
                   user: Optional[str] = None, step=None) -> str:
    """Copy ``report.txt``/``report.json`` (and ``report.html`` when the monitor wrote it)
    of the local ``hd_dir`` to ``<storage_url>/<job_id>/attempt_<n>/hang_detector/``, or with
    ``step`` (an interactive step's id) to ``.../attempt_<n>/step_<s>/hang_detector/`` (the
    epilog stores the same files later; this makes the report visible at once). Returns the
    URL of the stored ``report.txt``. Raises OSError for a missing local report (txt/json), ValueError for a bad id or
    ``{user}``, :class:`StoreRefused` when a ``file://`` job path is not the user's own
    (the rules of :class:`LocalStore`, as for the collector), and whatever storage raises."""
    url = attempt_url(storage_url, job_id, attempt, user)
    store = open_store(url, job_id, attempt)
    hd_rel = layout.HANG_DETECTOR_DIR
    if step is not None:
        hd_rel = layout.step_dir_name(step) + "/" + hd_rel
    try:
        store.prepare()
        for name in (layout.REPORT_TXT, layout.REPORT_JSON, layout.REPORT_HTML):
            try:
                with open(os.path.join(hd_dir, name), "rb") as src:
                    data = src.read()
            except FileNotFoundError:
                if name == layout.REPORT_HTML:
                    continue  # the page is optional: its failure never costs the text report
                raise
            store.write_bytes(hd_rel + "/" + name, data)
    finally:
        store.close()
    return "%s/%s/%s" % (url, hd_rel, layout.REPORT_TXT)


# --------------------------------------------------------------------------- the collector's store

class StoreRefused(OSError):
    """Storage holds something at the job's path that this collector must not write into
    (a symlink, a file, a directory another user owns); the dumps stay local."""


_CHUNK = 1 << 20
#: directory fds a LocalStore keeps open (the parents of the files it writes)
_MAX_OPEN_DIRS = 256
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _stream(fd, write):
    """Send ``fd`` from offset 0 to ``write(bytes)`` -> (bytes sent, their sha256)."""
    h, n = hashlib.sha256(), 0
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        b = os.read(fd, _CHUNK)
        if not b:
            break
        h.update(b)
        n += len(b)
        write(b)
    return n, h.hexdigest()


class FsspecStore:
    """The attempt directory ``<storage>/<job_id>/attempt_<n>`` on any fsspec backend.

    ``rel`` arguments are ``/``-separated paths below it. Errors are the backend's."""

    def __init__(self, url: str):
        self.fs, self.root = fs_and_root(url)

    def prepare(self) -> None:
        """Nothing to check on an object store (objects are created by their writer)."""

    def url(self, rel: str) -> str:
        return self.root + "/" + rel

    def size(self, rel: str) -> Optional[int]:
        """Bytes stored at ``rel``, None if there is nothing there."""
        path = self.url(rel)
        try:
            self.fs.invalidate_cache(path)
        except Exception:  # noqa: BLE001 -- cache invalidation is best effort
            pass
        try:
            info = self.fs.info(path)
        except FileNotFoundError:
            return None
        if info.get("type", "file") != "file":
            return None
        return int(info["size"])

    def open_read(self, rel: str):
        return self.fs.open(self.url(rel), "rb")

    def put(self, rel: str, fd: int) -> tuple:
        """Stream ``fd`` (from offset 0) to ``rel`` and verify it (size from ``fs.info``,
        sha256 of a full read-back). Returns (size, sha256). Raises IOError for a failed
        verify (the stored object is left as it is: another writer may own it now), and the
        backend's error for a failed write (then the half-written object, ours, is removed)."""
        path = self.url(rel)
        parent = path.rsplit("/", 1)[0]
        mkdir_error = None
        try:
            self.fs.makedirs(parent, exist_ok=True)
        except Exception as e:  # noqa: BLE001 -- object stores need no directories
            mkdir_error = e
        try:
            out = self.fs.open(path, "wb")
        except Exception:  # noqa: BLE001
            if mkdir_error is not None:     # the real cause (e.g. PermissionError)
                raise mkdir_error
            raise
        try:
            with out:
                n, sha = _stream(fd, out.write)
        except BaseException:
            self._remove_own(path)
            raise
        rsize = self.size(rel)
        if rsize != n:
            raise IOError("verify failed: %s has %s bytes, expected %d" % (path, rsize, n))
        rh = hashlib.sha256()
        with self.fs.open(path, "rb") as f:
            while True:
                b = f.read(_CHUNK)
                if not b:
                    break
                rh.update(b)
        if rh.hexdigest() != sha:
            raise IOError("verify failed: %s sha256 %s, expected %s" % (path, rh.hexdigest(), sha))
        return n, sha

    def write_bytes(self, rel: str, data: bytes) -> None:
        with self.fs.open(self.url(rel), "wb") as f:
            f.write(data)

    def _remove_own(self, path):
        """Best effort: a half-written object of this run must not hold space on a full store."""
        try:
            if self.fs.exists(path):
                self.fs.rm_file(path)
        except Exception:  # noqa: BLE001 -- the manifest already says it failed
            pass

    def close(self) -> None:
        pass


class LocalStore:
    """A job's directory on a local or shared file system (``file://``), written
    without ever following a symlink or writing into something another user made: the
    attempt directory (the collector, the early report), ``<job_id>/`` (the requeue
    state) or the store root itself (``prefix`` '': the array aliases).

    ``base`` is the site's storage directory (``{user}`` expanded; configured by the
    admin, so it is opened normally). Below it, the ``prefix`` directories (``<job_id>``
    and ``attempt_<n>``) and every directory under them are opened with ``O_NOFOLLOW``
    relative to their parent;
    :meth:`prepare` creates missing ones 0700 and refuses (:class:`StoreRefused`) any
    that is not a real directory owned by this process's uid, then sets 0700 on the job
    directory (which also masks any ACL entries it inherited). Files are written to a
    fresh ``O_EXCL`` temp name, verified by reading back, then renamed into place
    (rename replaces a name, it never follows it)."""

    def __init__(self, base: str, prefix: str, tag: Optional[str] = None):
        # ``prefix``: the directories below ``base`` that must be this uid's own, the first
        # being the job directory (``<job_id>/attempt_<n>``, ``<job_id>``, or '' for
        # records kept in ``base`` itself, the array aliases)
        # one collector per attempt and host (the attempt lock): a temp name of this host
        # left by a killed run is ours to replace
        self.tag = re.sub(r"[^A-Za-z0-9_.-]", "_", tag or socket.gethostname())[:64]
        self.base = base.rstrip("/") or "/"
        self.prefix = "/".join(layout.split_rel(prefix)) if prefix else ""
        self.root = self.base.rstrip("/") + "/" + self.prefix if self.prefix else self.base
        self._fd = None
        self._dirs = {}

    def url(self, rel: str) -> str:
        return self.root.rstrip("/") + "/" + rel

    def _own_dir(self, parent_fd, name, create, where, mode=0o700):
        if create:
            try:
                os.mkdir(name, mode, dir_fd=parent_fd)
            except FileExistsError:
                pass
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                try:
                    link = stat.S_ISLNK(os.stat(name, dir_fd=parent_fd,
                                                follow_symlinks=False).st_mode)
                except OSError:
                    link = False
                raise StoreRefused(e.errno, "%s is %s: refused (never followed or written "
                                   "into)" % (where, "a symlink" if link else
                                              "not a directory")) from None
            raise
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            os.close(fd)
            raise StoreRefused(errno.EPERM, "%s belongs to uid %d, not to the job's uid %d: "
                               "refused (someone else created it)" % (where, st.st_uid,
                                                                      os.geteuid()))
        return fd

    def prepare(self) -> None:
        """Open (creating if missing) the prefix (``<job_id>/attempt_<n>``) below ``base``. Raises
        StoreRefused for a foreign or non-directory component, OSError otherwise."""
        if self._fd is not None:
            return
        fd = self._open_base()
        try:
            where = self.base
            for i, part in enumerate(self.prefix.split("/") if self.prefix else []):
                where = where.rstrip("/") + "/" + part
                nfd = self._own_dir(fd, part, True, where)
                if i == 0:
                    os.fchmod(nfd, 0o700)   # the job dir is private, whatever made it
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _open_base(self):
        """fd of ``base``, walked from ``/`` one component at a time: a missing one is
        created 0700 (and must then be ours), a symlink is followed only if root or this
        uid owns it (what the kernel's protected_symlinks does in sticky directories),
        so a link another user planted in a shared directory (``{user}`` of a root job)
        is refused."""
        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        where = ""
        try:
            for part in [p for p in self.base.split("/") if p]:
                where += "/" + part
                try:
                    st = os.stat(part, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    st = None
                if st is None:
                    nfd = self._own_dir(fd, part, True, where)
                elif stat.S_ISLNK(st.st_mode):
                    if st.st_uid not in (0, os.geteuid()):
                        raise StoreRefused(errno.EPERM, "%s is a symlink of uid %d: refused"
                                           % (where, st.st_uid))
                    nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
                else:
                    try:
                        nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                    except OSError as e:
                        if e.errno in (errno.ELOOP, errno.ENOTDIR):
                            raise StoreRefused(e.errno, "%s is not a directory" % where) from None
                        raise
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _parent(self, rel, create):
        parts = layout.split_rel(rel)
        key = tuple(parts[:-1])
        fd = self._dirs.get(key)
        if fd is not None:
            return fd, parts[-1]
        if len(self._dirs) >= _MAX_OPEN_DIRS:      # a tree of many directories: stay
            for d in self._dirs.values():         # well below the fd limit
                os.close(d)
            self._dirs = {}
        fd = self._fd
        for i, p in enumerate(parts[:-1]):
            sub = tuple(parts[:i + 1])
            nfd = self._dirs.get(sub)
            if nfd is None:
                nfd = self._own_dir(fd, p, create, self.url("/".join(sub)))
                self._dirs[sub] = nfd
            fd = nfd
        return fd, parts[-1]

    def size(self, rel: str) -> Optional[int]:
        try:
            pfd, name = self._parent(rel, False)
            st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None     # not ours: replaced by rename, never read or written into
        return st.st_size

    def open_read(self, rel: str):
        """Binary file object of ``rel``, opened without following a symlink. Raises
        FileNotFoundError, OSError(ELOOP) for a symlink, StoreRefused for anything but a
        regular file of this uid (never read: another user may have put it there)."""
        pfd, name = self._parent(rel, False)
        try:
            fd, st = fsio.open_regular(pfd, name)
        except fsio.NotRegular as e:
            raise StoreRefused(errno.EPERM, "%s: %s: refused" % (self.url(rel), e.strerror)) from None
        if st.st_uid != os.geteuid():
            os.close(fd)
            raise StoreRefused(errno.EPERM, "%s is not a regular file of uid %d (uid %d, mode "
                               "%o): refused" % (self.url(rel), os.geteuid(), st.st_uid,
                                                 st.st_mode))
        return os.fdopen(fd, "rb")

    def put(self, rel: str, fd: int) -> tuple:
        """Copy ``fd`` (from offset 0) to ``rel`` via an O_EXCL temp file, verified (size
        and sha256 read back), then renamed into place. Returns (size, sha256). Raises
        OSError/IOError; a failed write removes only its own temp file."""
        pfd, name = self._parent(rel, True)
        tmp = ".%s.%s.hk.tmp" % (name[:160], self.tag)
        out = fsio.open_tmp(tmp, dir_fd=pfd, read=True)   # unlinks our own leftover of a killed run
        try:
            def write(b):
                view = memoryview(b)
                while view:
                    view = view[os.write(out, view):]
            n, sha = _stream(fd, write)
            rsize, rsha = fsio.sha256_fd(out)
            if rsize != n or rsha != sha:
                raise IOError("verify failed: %s read back %d bytes sha256 %s, expected %d %s"
                              % (self.url(rel), rsize, rsha, n, sha))
            os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
            tmp = None
        finally:
            os.close(out)
            if tmp is not None:
                try:
                    os.unlink(tmp, dir_fd=pfd)
                except OSError:
                    pass
        return n, sha

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Store ``data`` at ``rel`` through :meth:`put` (small records: the node manifest)."""
        fd = os.memfd_create("hangkit-record", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            self.put(rel, fd)
        finally:
            os.close(fd)

    def create_bytes(self, rel: str, data: bytes) -> bool:
        """Store ``data`` at ``rel`` unless something is there already (the first writer
        wins). Returns True when written, False when ``rel`` already is a regular file of
        this uid. Raises StoreRefused when it is anything else (a symlink, another user's
        file): that is never followed, read or replaced. In a sticky (1777) directory a
        name planted between the check and the rename is not replaced either (rename onto
        another user's entry fails with EPERM there)."""
        pfd, name = self._parent(rel, True)
        try:
            st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            self.write_bytes(rel, data)
            return True
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            return False
        raise StoreRefused(errno.EEXIST, "%s is already there as %s of uid %d: refused (not "
                           "followed, not replaced)" % (
                               self.url(rel), "a symlink" if stat.S_ISLNK(st.st_mode) else
                               "a file" if stat.S_ISREG(st.st_mode) else "mode %o" % st.st_mode,
                               st.st_uid))

    def close(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs = {}
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _local_path(url: str) -> Optional[str]:
    """The file-system path of a ``file://`` URL or a plain absolute path; None for any
    other URL (an fsspec protocol or chain)."""
    path = url[len("file://"):] if url.startswith("file://") else url
    if "://" in path or "::" in path or not path.startswith("/"):
        return None
    return path


def _local_record(url: str, owned_dirs: int):
    """``(LocalStore, file name)`` for a record file at a file-system ``url`` (None for
    any other URL): the last ``owned_dirs`` directories above the file are held to the
    job-directory rules of :class:`LocalStore` (1: ``<job_id>/`` of the requeue state;
    0: a record in the store root, the array alias). Raises ValueError for a name that
    is empty or ``.``/``..``."""
    path = _local_path(url)
    if path is None:
        return None
    parts = [p for p in path.split("/") if p]
    if len(parts) <= owned_dirs:
        raise ValueError("%s has no directory above its %d job directories" % (url, owned_dirs))
    name = layout.split_rel(parts[-1])[0]
    cut = len(parts) - 1 - owned_dirs
    return LocalStore("/" + "/".join(parts[:cut]), "/".join(parts[cut:-1])), name


def open_store(attempt_dest: str, job_id, attempt: int, host: Optional[str] = None):
    """The store of one attempt's URL (:func:`attempt_url`): a :class:`LocalStore` for
    ``file://`` and plain paths, else an :class:`FsspecStore`. Raises ValueError/ImportError
    for an unusable URL (unknown protocol, missing backend)."""
    prefix = layout.storage_attempt_prefix(layout.unique_job_id(job_id), int(attempt))
    path = _local_path(attempt_dest)
    if path is not None and path.endswith("/" + prefix):
        return LocalStore(path[:-len(prefix) - 1] or "/", prefix, host)
    return FsspecStore(attempt_dest)
