"""collect: node scratch -> storage (fsspec), verified; the epilog; ``collect JOBID``.

Three entry points:

- :func:`epilog` -- what ``slurm/epilog`` runs on every node of a job when it
  ends (as root, from slurmd). It finds the job's node-local scratch
  (``<scratch_dir>/<job_id>/attempt_<n>/``), drops to the job's user in a
  forked child, copies every regular file to
  ``<storage_url>/<job_id>/attempt_<n>/hang_detector/...`` with fsspec,
  verifies each copy (size and sha256 read back), deletes the local file only
  after its copy verified, and finishes inside a time budget. It never calls a
  Slurm command and always returns 0. Whatever was not copied stays in scratch
  with a JSON manifest (``collect-manifest.json``) that says what and why.
- :func:`finish_local` -- the same copy, run later (``hpc-hangkit collect`` on
  the node, as the user or root) to finish what a failed epilog left.
- :func:`collect_job` -- ``hpc-hangkit collect JOBID``: a running job is
  gathered live from every node (``srun --overlap`` running
  ``hpc-hangkit slurm-capture``: on-demand dumps, py-spy...); a finished job
  is read from storage; both end in a roll call (:func:`hpc_hangkit.rollcall.report_from_dir`).

Security model (the epilog runs as root on a directory the user controls):
the root parent never opens anything under the job scratch. It forks a child
that drops to the job's uid/gid (``SLURM_JOB_UID``/``SLURM_JOB_GID``,
supplementary groups of ``SLURM_JOB_USER``) before touching scratch or
storage, so the child can read and write only what the user could anyway; the
parent supervises the child with a deadline and kills it when the budget is
spent. The child walks the tree through directory file descriptors with
``O_NOFOLLOW`` and copies only regular files (symlinks, fifos, devices and
sockets are listed in the manifest as skipped, never opened).
"""
import errno
import hashlib
import json
import os
import re
import select
import shutil
import signal
import socket
import stat
import sys
import time

from hpc_hangkit import layout
from hpc_hangkit.capture import is_why_data

__all__ = [
    "DEFAULT_BUDGET_S",
    "MANIFEST_NAME",
    "parse_job_id",
    "job_id_from_env",
    "attempt_from_env",
    "job_scratch",
    "attempt_url",
    "copy_tree",
    "load_site_settings",
    "record_array_alias",
    "epilog",
    "finish_local",
    "expand_storage_url",
    "storage_attempts",
    "fetch_from_storage",
    "Collected",
    "collect_job",
    "main",
]

DEFAULT_BUDGET_S = 60.0
"""Seconds the epilog may spend in total when the site config cannot be read (the
default of the setting ``epilog_budget_s``); keep it below EpilogTimeout."""

MANIFEST_NAME = "collect-manifest.json"
MANIFEST_SCHEMA = "hpc-hangkit/collect-manifest/1"
HANG_DETECTOR = layout.HANG_DETECTOR_DIR
ALIAS_SUFFIX = ".jobid"
_FINALIZE_S = 2.0          # reserved at the end of the budget to record a timeout
_CHUNK = 1 << 20
_MAX_DEPTH = 16
_MAX_FILES = 100000
_MAX_MANIFEST_BYTES = 32 << 20
_MANIFEST_EVERY_S = 1.0
#: skipped entries removed from scratch after a complete copy (recorded in the manifest)
_VIEW_WHY = "the batch-step monitor's transient view (copies of other nodes' rank files; not collected)"
_JUNK = ("symlink", "not a regular file (fifo)", "not a regular file (socket)", _VIEW_WHY)     # progress writes of the local manifest, at most this often

_ATTEMPT_RE = re.compile(r"^attempt_([0-9]{1,6})\Z")
_NUMERIC_ID_RE = re.compile(r"^[0-9]{1,12}\Z")


# --------------------------------------------------------------------------
# job ids and paths (names come from hpc_hangkit.layout)


def parse_job_id(text):
    """Validate a Slurm job id (``123`` or an array task ``123_4``); return it as a str.

    Anything else -- ``..``, slashes, ranges ``123_[1-3]``, het-job ``123+0``,
    empty -- raises ValueError naming the accepted forms, so a job id can
    never escape the scratch or storage directory it is joined to.
    """
    from hpc_hangkit.slurm import validate_job_id

    return validate_job_id(text)


def _numeric_id(job_id):
    s = parse_job_id(job_id)
    if not _NUMERIC_ID_RE.match(s):
        raise ValueError("job id %r: scratch and storage use the unique numeric id"
                         " (SLURM_JOB_ID), not the array form" % (job_id,))
    return s


def job_id_from_env(env):
    """The unique numeric ``SLURM_JOB_ID`` of a prolog/epilog/job environment.

    Raises ValueError if it is missing or not digits."""
    return _numeric_id(env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "")


def attempt_from_env(env):
    """0-based attempt number (SLURM_JOB_RESTART_COUNT / SLURM_RESTART_COUNT, unset = 0)."""
    from hpc_hangkit.slurm import attempt_from_env as _a

    return _a(env)


def job_scratch(scratch_dir, job_id, attempt):
    """Node-local scratch of one attempt (:func:`hpc_hangkit.layout.job_scratch_dir`)."""
    from hpc_hangkit.layout import job_scratch_dir

    return job_scratch_dir(scratch_dir, _numeric_id(job_id), int(attempt))


def _scratch_parts(scratch_dir, job_id, attempt):
    """Components of the attempt scratch below scratch_dir (each opened O_NOFOLLOW)."""
    full = job_scratch(scratch_dir, job_id, attempt)
    rel = os.path.relpath(full, scratch_dir)
    parts = rel.split(os.sep)
    _safe_rel("/".join(parts))
    return parts


def expand_storage_url(storage_url, user=None):
    """``storage_url`` with ``{user}`` replaced by the job's user name.

    A per-user prefix (``file:///shared/hangkit/{user}``) keeps one user's
    dumps out of another's reach on a shared file system. Raises ValueError
    if ``{user}`` is used and the user is unknown or not a plain name.
    """
    if "{user}" not in storage_url:
        return storage_url.rstrip("/")
    if not user or not re.match(r"^[A-Za-z0-9_.][A-Za-z0-9_.@-]*\Z", user) or user in (".", ".."):
        raise ValueError("storage_url %r needs {user}, but the user name %r is unusable"
                         % (storage_url, user))
    return storage_url.replace("{user}", user).rstrip("/")


def attempt_url(storage_url, job_id, attempt, user=None):
    """``<storage_url>/<job_id>/attempt_<n>`` (the ``hang_detector/`` tree is below it)."""
    from hpc_hangkit.layout import storage_attempt_prefix

    return "%s/%s" % (expand_storage_url(storage_url, user),
                      storage_attempt_prefix(_numeric_id(job_id), int(attempt)))


def _alias_url(storage_url, array_id, user=None):
    """``<storage_url>/<A>_<T>.jobid``: names the unique id of an array task."""
    return "%s/%s%s" % (expand_storage_url(storage_url, user), parse_job_id(array_id),
                        ALIAS_SUFFIX)


# --------------------------------------------------------------------------
# no-follow access to a tree the user controls


def _open_dir_at(parent_fd, name):
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                 dir_fd=parent_fd)
    return fd


def _safe_rel(rel):
    parts = rel.split("/")
    if not parts or any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise ValueError("unsafe relative path %r" % (rel,))
    return parts


class _Tree:
    """A directory tree reached only through dir fds opened with O_NOFOLLOW."""

    def __init__(self, root_fd):
        self.root_fd = root_fd

    def _parent(self, rel):
        """(fd of the parent dir, basename); caller closes fd if != root_fd."""
        parts = _safe_rel(rel)
        fd = self.root_fd
        try:
            for p in parts[:-1]:
                nfd = _open_dir_at(fd, p)
                if fd != self.root_fd:
                    os.close(fd)
                fd = nfd
        except BaseException:
            if fd != self.root_fd:
                os.close(fd)
            raise
        return fd, parts[-1]

    def scan(self):
        """-> (files [(rel, size)], skipped [(rel, why)]) of the whole tree."""
        files, skipped = [], []

        from hpc_hangkit.batch import MONITOR_VIEW_PREFIX

        def walk(dfd, prefix, depth, view=False):
            with os.scandir(dfd) as it:
                entries = sorted(e.name for e in it)
            for name in entries:
                rel = prefix + name
                if prefix == "" and (name == MANIFEST_NAME or name.startswith(MANIFEST_NAME + ".")):
                    continue
                in_view = view or (prefix == "" and name.startswith(MONITOR_VIEW_PREFIX))
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except OSError as e:
                    skipped.append((rel, "stat failed: %s" % e.strerror))
                    continue
                if stat.S_ISLNK(st.st_mode):
                    skipped.append((rel, "symlink (not followed)"))
                elif stat.S_ISDIR(st.st_mode):
                    if depth >= _MAX_DEPTH:
                        skipped.append((rel, "directory deeper than %d levels" % _MAX_DEPTH))
                        continue
                    try:
                        sub = _open_dir_at(dfd, name)
                    except OSError as e:
                        skipped.append((rel, "cannot open directory: %s" % e.strerror))
                        continue
                    try:
                        walk(sub, rel + "/", depth + 1, in_view)
                    finally:
                        os.close(sub)
                elif stat.S_ISREG(st.st_mode):
                    if in_view:
                        skipped.append((rel, _VIEW_WHY))
                        continue
                    if len(files) >= _MAX_FILES:
                        skipped.append((rel, "more than %d files" % _MAX_FILES))
                        continue
                    files.append((rel, st.st_size))
                else:
                    skipped.append((rel, "not a regular file (%s)" % _kind(st.st_mode)))

        walk(self.root_fd, "", 0)
        return files, skipped

    def open_regular(self, rel):
        """Open a regular file for reading without following any symlink.

        O_NONBLOCK keeps a planted fifo from blocking the open; anything but a
        regular file is refused with OSError(EINVAL). Returns (fd, stat)."""
        pfd, name = self._parent(rel)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=pfd)
        finally:
            if pfd != self.root_fd:
                os.close(pfd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file (%s)" % _kind(st.st_mode))
        return fd, st

    def unlink_if_same(self, rel, st):
        """Unlink rel if it is still the inode that was copied."""
        pfd, name = self._parent(rel)
        try:
            now = os.stat(name, dir_fd=pfd, follow_symlinks=False)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                raise OSError(errno.ESTALE, "file was replaced during the copy")
            os.unlink(name, dir_fd=pfd)
        finally:
            if pfd != self.root_fd:
                os.close(pfd)

    def unlink_junk(self, rel, regular_ok=False):
        """Remove a symlink, fifo or socket (unlink never follows a link); with
        ``regular_ok`` also a regular file (the monitor's transient view)."""
        try:
            pfd, name = self._parent(rel)
        except (OSError, ValueError):
            return
        try:
            st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode) \
                    or (regular_ok and stat.S_ISREG(st.st_mode)):
                os.unlink(name, dir_fd=pfd)
        except OSError:
            pass
        finally:
            if pfd != self.root_fd:
                os.close(pfd)

    def prune_empty_dirs(self):
        """rmdir every empty subdirectory (bottom-up); never follows links."""

        def walk(dfd):
            with os.scandir(dfd) as it:
                names = [e.name for e in it]
            for name in names:
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    try:
                        sub = _open_dir_at(dfd, name)
                    except OSError:
                        continue
                    try:
                        walk(sub)
                    finally:
                        os.close(sub)
                    try:
                        os.rmdir(name, dir_fd=dfd)
                    except OSError:
                        pass

        walk(self.root_fd)

    def read_small(self, name, limit=_MAX_MANIFEST_BYTES):
        fd, st = self.open_regular(name)
        try:
            if st.st_size > limit:
                raise OSError(errno.EFBIG, "%s is larger than %d bytes" % (name, limit))
            return _read_all(fd, limit)
        finally:
            os.close(fd)

    def write_atomic(self, name, data):
        """Write a file in the root dir via a fresh temp file + rename."""
        tmp = "%s.%d.tmp" % (name, os.getpid())
        try:
            os.unlink(tmp, dir_fd=self.root_fd)
        except OSError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=self.root_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=self.root_fd, dst_dir_fd=self.root_fd)

    def remove(self, name):
        try:
            os.unlink(name, dir_fd=self.root_fd)
        except FileNotFoundError:
            pass


def _kind(mode):
    for test, name in ((stat.S_ISFIFO, "fifo"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISLNK, "symlink"), (stat.S_ISDIR, "directory")):
        if test(mode):
            return name
    return "mode %o" % mode


def _read_all(fd, limit):
    chunks, n = [], 0
    while True:
        b = os.read(fd, _CHUNK)
        if not b:
            break
        n += len(b)
        if n > limit:
            raise OSError(errno.EFBIG, "file grew past %d bytes" % limit)
        chunks.append(b)
    return b"".join(chunks)


def _open_attempt(scratch_dir, job_id, attempt, expect_uid=None):
    """fd of the attempt scratch; every component below ``scratch_dir`` (which
    the admin configures) is opened with O_NOFOLLOW; a directory not owned by
    ``expect_uid`` is refused (PermissionError)."""
    fd = os.open(scratch_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in _scratch_parts(scratch_dir, job_id, attempt):
            nfd = _open_dir_at(fd, part)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    if expect_uid is not None:
        st = os.fstat(fd)
        if st.st_uid != expect_uid:
            os.close(fd)
            raise PermissionError(errno.EPERM, "scratch %s is owned by uid %d, not the job's uid %d"
                                  % (job_scratch(scratch_dir, job_id, attempt), st.st_uid,
                                     expect_uid))
    return fd


# --------------------------------------------------------------------------
# storage


def _fs_and_root(url):
    import fsspec.core

    fs, root = fsspec.core.url_to_fs(url)
    return fs, root.rstrip("/")


def _sha256_remote(fs, path):
    h, n = hashlib.sha256(), 0
    with fs.open(path, "rb") as f:
        while True:
            b = f.read(_CHUNK)
            if not b:
                break
            h.update(b)
            n += len(b)
    return n, h.hexdigest()


def _remote_size(fs, path):
    try:
        fs.invalidate_cache(path)
    except Exception:  # noqa: BLE001 -- cache invalidation is best effort
        pass
    return int(fs.info(path)["size"])


def _put_fd(fs, fd, dest):
    """Stream fd to dest; return (size, sha256) of what was sent."""
    parent = dest.rsplit("/", 1)[0]
    mkdir_error = None
    try:
        fs.makedirs(parent, exist_ok=True)
    except Exception as e:  # noqa: BLE001 -- object stores need no directories
        mkdir_error = e
    h, n = hashlib.sha256(), 0
    try:
        out = fs.open(dest, "wb")
    except Exception:  # noqa: BLE001
        if mkdir_error is not None:     # the real cause (e.g. PermissionError)
            raise mkdir_error
        raise
    with out:
        while True:
            b = os.read(fd, _CHUNK)
            if not b:
                break
            h.update(b)
            n += len(b)
            out.write(b)
    return n, h.hexdigest()


def _verify(fs, dest, size, sha):
    rsize = _remote_size(fs, dest)
    if rsize != size:
        raise IOError("verify failed: %s has %d bytes, expected %d" % (dest, rsize, size))
    _, rsha = _sha256_remote(fs, dest)
    if rsha != sha:
        raise IOError("verify failed: %s sha256 %s, expected %s" % (dest, rsha, sha))


def _dest_rel(rel):
    """Scratch path -> path under the storage attempt dir."""
    if rel == HANG_DETECTOR or rel.startswith(HANG_DETECTOR + "/"):
        return rel
    return HANG_DETECTOR + "/" + rel


def _priority(rel):
    # copy the small, decisive evidence first: reports, stack dumps, heartbeats
    order = ("hang_detector/report", "hang_detector/stack_traces/", "watchdog/",
             "hang_detector/watchdog/", "heartbeats/", "hang_detector/heartbeats/",
             "unwatched/", "hang_detector/events", "hang_detector/flight_recorder/",
             "hang_detector/nccl_ras/")
    for i, p in enumerate(order):
        if rel.startswith(p):
            return i
    return len(order)


# --------------------------------------------------------------------------
# the copy (runs as the job's user)


def _now():
    return time.time()


def _new_manifest(job_id, attempt, host, dest_url):
    return {"schema": MANIFEST_SCHEMA, "job": job_id, "attempt": attempt, "host": host,
            "dest": dest_url, "status": "in_progress", "reason": None,
            "started": _now(), "updated": _now(), "files": []}


def _write_manifest(tree, man):
    man["updated"] = _now()
    tree.write_atomic(MANIFEST_NAME, (json.dumps(man, indent=1, sort_keys=True) + "\n").encode())


def _load_manifest(tree):
    try:
        data = tree.read_small(MANIFEST_NAME)
    except FileNotFoundError:
        return None
    try:
        man = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return man if isinstance(man, dict) and man.get("schema") == MANIFEST_SCHEMA else None


def _save(tree, man):
    """Write the local manifest; a full or broken scratch must not stop the copy
    (copying is what frees the space), so the error is only recorded."""
    try:
        _write_manifest(tree, man)
    except OSError as e:
        man["manifest_error"] = "local manifest not written: %s" % (e.strerror or e)


def copy_tree(root_fd, dest_url, *, job_id, attempt, host=None, deadline=None,
              delete_local=True, log=None):
    """Copy every regular file under ``root_fd`` to ``dest_url`` (fsspec URL), verified.

    ``root_fd``: an open directory fd (the attempt scratch). Files map to
    ``<dest_url>/hang_detector/<rel>`` (a top-level ``hang_detector/`` is not
    doubled). Each copy is verified (size via ``fs.info`` and sha256 of a full
    read-back); only then, if ``delete_local``, the local file is unlinked (if
    it is still the same inode). An existing destination that is identical,
    or a longer version of the same append-only file (the owner node's log
    vs. a capture or monitor copy on another node), counts as copied; one the
    local file extends (a half-written copy, an older copy) is replaced; a
    different one is kept and the local file is stored as
    ``<stem>.<host>.<ext>``. ``deadline`` (time.monotonic() value): no new
    file is started after it. Progress is written to ``collect-manifest.json``
    in the scratch before the first file and then at most every second (and
    at the end), so a kill leaves a manifest that lists every file not yet
    copied. When everything copied, the manifest is uploaded to
    ``<dest_url>/collect_<host>.json`` and removed locally; skipped
    symlinks, fifos and sockets are unlinked (never followed) and empty
    directories pruned.

    Returns the manifest dict: ``status`` is ``complete``, ``incomplete``
    (some file failed or the deadline passed) or ``no_files``; ``files`` is a
    list of ``{path, size, sha256, state, why, dest}`` with ``state`` in
    ``copied|kept|failed|pending|skipped``. Never raises for storage errors
    (they land in the manifest); a local manifest that cannot be written
    (full scratch) is noted in ``manifest_error`` and the copy goes on.
    """
    host = host or socket.gethostname()
    tree = _Tree(root_fd)
    prev = _load_manifest(tree)
    ours = {f["path"] for f in (prev or {}).get("files", []) if f.get("state") != "copied"}
    man = _new_manifest(job_id, attempt, host, dest_url)
    if prev:
        man["previous"] = {k: prev.get(k) for k in ("status", "reason", "started", "updated")}
    files, skipped = tree.scan()
    files.sort(key=lambda fs_: (_priority(fs_[0]), fs_[1], fs_[0]))
    entries = {}
    for rel, size in files:
        entries[rel] = {"path": rel, "size": size, "sha256": None, "state": "pending",
                        "why": None, "dest": None}
    for rel, why in skipped:
        entries[rel] = {"path": rel, "size": None, "sha256": None, "state": "skipped",
                        "why": why, "dest": None}
    man["files"] = [entries[r] for r, _ in files] + [entries[r] for r, _ in skipped]
    if not files:
        man["status"] = "no_files"
        tree.remove(MANIFEST_NAME)
        return man
    _save(tree, man)
    try:
        fs, root = _fs_and_root(dest_url)
    except Exception as e:  # noqa: BLE001 -- unknown protocol, missing s3fs, bad URL
        why = "storage %s unusable: %s: %s" % (dest_url, type(e).__name__, e)
        for rel, _ in files:
            entries[rel].update(state="failed", why=why)
        man.update(status="incomplete", reason=why)
        _save(tree, man)
        return man
    failures = 0
    last_write = time.monotonic()
    for rel, _ in files:
        ent = entries[rel]
        if deadline is not None and time.monotonic() >= deadline:
            ent["why"] = "epilog budget spent before this file was started"
            failures += 1
            continue
        dest = root + "/" + _dest_rel(rel)
        ent["dest"] = dest
        if time.monotonic() - last_write >= _MANIFEST_EVERY_S:
            _save(tree, man)      # progress, in case this process is killed
            last_write = time.monotonic()
        try:
            fd, st = tree.open_regular(rel)
        except OSError as e:
            ent.update(state="skipped", why="cannot open: %s" % (e.strerror or e))
            continue
        try:
            try:
                same, note = False, None
                if fs.exists(dest):
                    rel_ = _relation(fs, dest, fd, st.st_size, _remote_size(fs, dest))
                    if rel_ in ("same", "remote_extends"):
                        # stored already, or a longer version of this append-only
                        # log (the owner node's file vs a capture/monitor copy)
                        same, size, sha = True, st.st_size, _sha256_fd(fd)
                        if rel_ == "remote_extends":
                            note = "storage holds a longer version (this file is its prefix)"
                    elif rel_ == "differs" and rel not in ours:
                        # another node's different file of the same name: keep both
                        dest = _alt_name(dest, host)
                        ent["dest"] = dest
                    os.lseek(fd, 0, os.SEEK_SET)
                if not same:
                    size, sha = _put_fd(fs, fd, dest)
                    _verify(fs, dest, size, sha)
            except Exception as e:  # noqa: BLE001 -- every storage error is recorded
                ent.update(state="failed", why="%s: %s" % (type(e).__name__, e))
                failures += 1
                _remove_partial(fs, dest)
                if log:
                    log("copy %s -> %s failed: %s" % (rel, dest, ent["why"]))
                continue
            ent.update(size=size, sha256=sha, state="kept", why=note)
            if delete_local:
                try:
                    tree.unlink_if_same(rel, st)
                    ent["state"] = "copied"
                except OSError as e:
                    ent["why"] = "copied and verified; local delete failed: %s" % (e.strerror or e)
            else:
                ent["state"] = "copied"
        finally:
            os.close(fd)
    if failures:
        reasons = sorted({entries[r]["why"] for r, _ in files if entries[r]["state"] == "pending"
                          or entries[r]["state"] == "failed"} - {None})
        man.update(status="incomplete",
                   reason="%d of %d files not copied: %s" % (failures, len(files),
                                                            "; ".join(reasons)[:2000]))
        _save(tree, man)
        return man
    man["status"] = "complete"
    man["updated"] = _now()
    try:
        with fs.open(root + "/collect_%s.json" % _safe_host(host), "wb") as f:
            f.write((json.dumps(man, indent=1, sort_keys=True) + "\n").encode())
    except Exception as e:  # noqa: BLE001 -- the data is safe; the record is a courtesy
        man["reason"] = "data copied; storage manifest not written: %s" % e
    tree.remove(MANIFEST_NAME)
    if delete_local:
        for rel, why in skipped:
            if why.startswith(_JUNK):
                tree.unlink_junk(rel, regular_ok=why == _VIEW_WHY)
        tree.prune_empty_dirs()
    return man


def _relation(fs, dest, fd, lsize, rsize):
    """How the local file (fd, lsize bytes) relates to the stored one:
    ``same``, ``local_extends`` (stored is a prefix of local: a half-written
    copy, or an older copy of a growing log), ``remote_extends`` (local is a
    prefix of stored) or ``differs``."""
    n, off = min(lsize, rsize), 0
    with fs.open(dest, "rb") as f:
        while off < n:
            want = min(_CHUNK, n - off)
            r = f.read(want)
            if not r or r != os.pread(fd, len(r), off):
                return "differs"
            off += len(r)
    if lsize == rsize:
        return "same"
    return "local_extends" if lsize > rsize else "remote_extends"


def _remove_partial(fs, dest):
    """Best effort: a half-written object must not hold space on a full store."""
    try:
        if fs.exists(dest):
            fs.rm_file(dest)
    except Exception:  # noqa: BLE001 -- the manifest already says it failed
        pass


def _sha256_fd(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    h = hashlib.sha256()
    while True:
        b = os.read(fd, _CHUNK)
        if not b:
            break
        h.update(b)
    os.lseek(fd, 0, os.SEEK_SET)
    return h.hexdigest()


def _safe_host(host):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", host) or "unknown"


def _alt_name(dest, host):
    head, _, base = dest.rpartition("/")
    stem, dot, ext = base.rpartition(".")
    if not dot or not stem:
        stem, ext = base, ""
    return "%s/%s.%s%s" % (head, stem, _safe_host(host), ("." + ext) if ext else "")


# --------------------------------------------------------------------------
# privilege drop + supervision (the root parent only waits)


def _drop_privileges(uid, gid, user=None):
    """Become uid/gid for good (real, effective and saved ids). Raises OSError."""
    if os.geteuid() != 0:
        if uid != os.geteuid():
            raise PermissionError(errno.EPERM, "not root: cannot become uid %d" % uid)
        return
    if uid == 0:
        return
    try:
        import pwd

        if user and pwd.getpwnam(user).pw_uid == uid:
            os.initgroups(user, gid)      # the user's project groups (shared storage)
        else:
            os.setgroups([gid])
    except (OSError, KeyError):
        os.setgroups([gid])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise PermissionError(errno.EPERM, "privilege drop to %d:%d did not stick" % (uid, gid))
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise PermissionError(errno.EPERM, "could regain root after dropping to uid %d" % uid)


def _as_user(fn, *, uid, gid, user, deadline, home=None):
    """Run fn() in a forked child as uid/gid; return ("ok", value) |
    ("timeout", None) | ("error", text). The child is SIGKILLed at deadline."""
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            os.umask(0o077)
            _drop_privileges(uid, gid, user)
            if home:
                os.environ["HOME"] = home
            try:
                os.chdir("/")
            except OSError:
                pass
            out = {"ok": True, "value": fn()}
        except BaseException as e:  # noqa: BLE001 -- reported to the parent
            out = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
            code = 1
        try:
            data = json.dumps(out, default=str).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
        except BaseException:  # noqa: BLE001
            code = 2
        os._exit(code)
    os.close(w)
    buf = []
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([r], [], [], min(left, 0.5))
            if ready:
                b = os.read(r, 65536)
                if not b:
                    break
                buf.append(b)
    finally:
        os.close(r)
        if timed_out:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap(pid, None if timed_out else max(0.5, deadline - time.monotonic()))
    if timed_out:
        return "timeout", None
    try:
        out = json.loads(b"".join(buf).decode())
    except ValueError:
        return "error", "collector child died without a result"
    return ("ok", out["value"]) if out.get("ok") else ("error", out.get("error"))


def _reap(pid, wait_s):
    end = time.monotonic() + (wait_s if wait_s is not None else 5.0)
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        if time.monotonic() >= end:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            end = time.monotonic() + 5.0
        time.sleep(0.02)


# --------------------------------------------------------------------------
# collecting one attempt (shared by the epilog and `collect` on the node)


def _collect_one(scratch_dir, job_id, attempt, storage_url, *, uid, gid, user, deadline,
                 host, home=None, alias=None):
    """Copy one attempt's scratch as uid; record a timeout if the child is killed.

    Returns a dict {status, reason, copied, failed, skipped, pending, manifest}."""
    t0 = time.monotonic()
    reserve = min(_FINALIZE_S, max(0.2, (deadline - t0) * 0.2))
    work_deadline = deadline - reserve
    if storage_url:
        try:
            dest = attempt_url(storage_url, job_id, attempt, user)
        except ValueError as e:
            dest, no_dest = None, str(e)
        else:
            no_dest = None
    else:
        dest, no_dest = None, "no storage_url configured (site config.toml or HANGKIT_STORAGE_URL)"

    def work():
        afd = _open_attempt(scratch_dir, job_id, attempt, expect_uid=uid if uid else None)
        try:
            if dest is None:
                return _record_not_copied(_Tree(afd), job_id, attempt, host, None, "incomplete",
                                          no_dest)
            # leave the copy loop early enough to write the manifest
            man = copy_tree(afd, dest, job_id=job_id, attempt=attempt, host=host,
                            deadline=work_deadline - 0.2)
            if alias and man.get("status") != "no_files" and time.monotonic() < work_deadline:
                _write_alias(storage_url, alias, job_id, user)
            return _summary(man)
        finally:
            os.close(afd)

    status, value = _as_user(work, uid=uid, gid=gid, user=user, deadline=work_deadline, home=home)
    if status == "ok":
        return value
    if status == "timeout":
        why = ("storage %s did not finish within the budget; collector killed after %.1f s"
               % (dest, time.monotonic() - t0))
    else:
        why = "collector failed: %s" % value
    if status == "error" and value and ("FileNotFoundError" in value):
        return {"status": "no_scratch", "reason": value}

    def mark():
        afd = _open_attempt(scratch_dir, job_id, attempt, expect_uid=uid if uid else None)
        try:
            return _record_not_copied(_Tree(afd), job_id, attempt, host, dest,
                                      "timeout" if status == "timeout" else "incomplete", why)
        finally:
            os.close(afd)

    st2, value2 = _as_user(mark, uid=uid, gid=gid, user=user, deadline=deadline, home=home)
    if st2 == "ok":
        return value2
    return {"status": "timeout" if status == "timeout" else "error", "reason": why,
            "manifest_error": value2}


def _record_not_copied(tree, job_id, attempt, host, dest, status, why):
    """Leave (or complete) the local manifest: every file not copied gets ``why``."""
    man = _load_manifest(tree)
    files, skipped = tree.scan()
    if man is None:
        if not files:
            return {"status": "no_files"}
        man = _new_manifest(job_id, attempt, host, dest)
        man["files"] = ([{"path": r, "size": s, "state": "pending", "why": None} for r, s in files]
                        + [{"path": r, "state": "skipped", "why": w} for r, w in skipped])
    present = {r for r, _ in files}
    for ent in man.get("files", []):
        if ent.get("state") in ("pending", "failed", "kept") and ent.get("path") not in present:
            # progress is recorded at most every second: this one was copied,
            # verified and deleted after the last record (only we delete)
            ent.update(state="copied", why="not in scratch any more: copied before the collector"
                                            " was stopped (or removed by the user)")
        elif ent.get("state") in ("pending", "failed") and not ent.get("why"):
            ent["why"] = why
    man.update(status=status, reason=why)
    _write_manifest(tree, man)
    return _summary(man)


def record_array_alias(storage_url, env=None, user=None):
    """For an array task, store ``<storage_url>/<A>_<T>.jobid`` naming its SLURM_JOB_ID.

    Call it from inside the job (the batch-step monitor): the job environment
    has ``SLURM_ARRAY_JOB_ID``/``SLURM_ARRAY_TASK_ID``; slurmd's prolog and
    epilog environments do not (Slurm's prep_script_slurmd.c). With it,
    ``collect 123_4`` finds the job in storage after Slurm forgot it.
    Returns the alias written (or already there), None when the job is not
    an array task or storage_url is unset. Storage errors propagate.
    """
    env = os.environ if env is None else env
    arr, task = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
    if not (storage_url and arr.isdigit() and task.isdigit()):
        return None
    alias = "%s_%s" % (arr, task)
    fs, path = _fs_and_root(_alias_url(storage_url, alias, user))
    if not fs.exists(path):
        with fs.open(path, "wb") as f:
            f.write(("%s\n" % job_id_from_env(env)).encode())
    return alias


def _write_alias(storage_url, alias, job_id, user):
    try:
        fs, path = _fs_and_root(_alias_url(storage_url, alias, user))
        if not fs.exists(path):
            with fs.open(path, "wb") as f:
                f.write(("%s\n" % job_id).encode())
    except Exception:  # noqa: BLE001 -- the alias is a convenience; the data is keyed by id
        pass


def _read_alias(storage_url, alias, user):
    fs, path = _fs_and_root(_alias_url(storage_url, alias, user))
    try:
        with fs.open(path, "rb") as f:
            text = f.read(64).decode("ascii", "replace").strip()
    except FileNotFoundError:
        return None
    return text if _NUMERIC_ID_RE.match(text) else None


def _summary(man):
    counts = {}
    for ent in man.get("files", []):
        counts[ent.get("state")] = counts.get(ent.get("state"), 0) + 1
    return {"status": man.get("status"), "reason": man.get("reason"), "dest": man.get("dest"),
            "copied": counts.get("copied", 0), "kept": counts.get("kept", 0),
            "failed": counts.get("failed", 0), "pending": counts.get("pending", 0),
            "skipped": counts.get("skipped", 0),
            "skipped_paths": [e["path"] for e in man.get("files", [])
                              if e.get("state") == "skipped"][:20]}


# --------------------------------------------------------------------------
# settings


def load_site_settings(env=None, storage_url=None):
    """Settings for the collector: site config.toml < ``HANGKIT_*`` < ``storage_url``.

    ``HANGKIT_SCRATCH_DIR`` is ignored: inside a job it names that job's own
    attempt scratch, while the collector needs the scratch root. Raises
    :class:`hpc_hangkit.config.ConfigError` for a bad site config.
    """
    from hpc_hangkit.config import load_settings

    env = dict(os.environ if env is None else env)
    env.pop(layout.ENV_SCRATCH_DIR, None)
    return load_settings(env=env, overrides={"storage_url": storage_url} if storage_url else None)


def _budget(settings, env, budget_s=None, hard_timeout_s=None):
    if budget_s is None:
        budget_s = getattr(settings, "epilog_budget_s", None)
    if budget_s is None:
        raw = (env or {}).get("HANGKIT_EPILOG_BUDGET_S")
        try:
            budget_s = float(raw) if raw else DEFAULT_BUDGET_S
        except ValueError:
            budget_s = DEFAULT_BUDGET_S
    budget_s = float(budget_s)
    if hard_timeout_s:
        budget_s = min(budget_s, float(hard_timeout_s) - 3.0)
    return max(1.0, budget_s)


# --------------------------------------------------------------------------
# the epilog


def epilog(env=None, *, budget_s=None, hard_timeout_s=None, log=None):
    """Collect this node's scratch of the ending job; the body of ``slurm/epilog``.

    Reads (from ``env``, default os.environ, as set by slurmd):
    ``SLURM_JOB_ID`` (the unique numeric id), ``SLURM_ARRAY_JOB_ID`` +
    ``SLURM_ARRAY_TASK_ID`` if present (slurmd 22.05-24.11 does not set them
    for an epilog; the batch-step monitor records the array alias with
    :func:`record_array_alias`), ``SLURM_JOB_RESTART_COUNT`` (attempt), ``SLURM_JOB_UID``, ``SLURM_JOB_GID``,
    ``SLURM_JOB_USER``; settings ``scratch_dir``, ``storage_url`` and
    ``epilog_budget_s`` (site config.toml / ``HANGKIT_*``; default budget
    60 s, capped at ``hard_timeout_s - 3``). Never raises, never calls Slurm,
    returns 0 always; the outcome is logged as one line through ``log``
    (default: stderr) and, on failure, left in the scratch manifest.
    Returns the process exit status (0).
    """
    t0 = time.monotonic()
    env = dict(os.environ if env is None else env)
    log = log or (lambda msg: print("hpc-hangkit epilog: " + msg, file=sys.stderr, flush=True))
    try:
        key = job_id_from_env(env)
        attempt = attempt_from_env(env)
        uid, gid = int(env["SLURM_JOB_UID"]), int(env["SLURM_JOB_GID"])
        user = env.get("SLURM_JOB_USER") or None
        if user is not None and not re.match(r"^[A-Za-z0-9_.][A-Za-z0-9_.@$-]*\Z", user):
            user = None
        try:
            settings = load_site_settings(env=env)
            scratch_dir, storage_url = settings.scratch_dir, settings.storage_url
            cfg_err = None
        except Exception as e:  # noqa: BLE001 -- a bad site config must not fail the node
            settings, cfg_err = None, "%s: %s" % (type(e).__name__, e)
            scratch_dir, storage_url = layout.DEFAULT_SCRATCH_DIR, None
        deadline = t0 + _budget(settings, env, budget_s, hard_timeout_s)
        # The epilog that runs at a requeue already sees the NEXT restart count,
        # so the attempt that just ended cannot be told from the environment:
        # collect every attempt directory up to this count, oldest first.
        attempts = [a for a in _local_attempts(scratch_dir, key) if a <= attempt]
        if not attempts:
            log("job %s attempt %d: no scratch at %s; nothing to collect%s" % (
                key, attempt, job_scratch(scratch_dir, key, attempt),
                (" (site config error: %s)" % cfg_err) if cfg_err else ""))
            return 0
        home = None
        try:
            import pwd

            home = pwd.getpwuid(uid).pw_dir
        except (KeyError, ImportError):
            pass
        alias = None
        arr, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
        if arr and task and arr.isdigit() and task.isdigit():
            alias = "%s_%s" % (arr, task)
        for attempt in attempts:
            res = _collect_one(scratch_dir, key, attempt, storage_url, uid=uid, gid=gid, user=user,
                               deadline=deadline, host=_host(env), home=home, alias=alias)
            if cfg_err and res.get("status") not in ("complete", "no_files"):
                res["reason"] = "config error (%s); %s" % (cfg_err, res.get("reason"))
            log("job %s attempt %d: %s in %.1f s (%s)" % (
                key, attempt, res.get("status"), time.monotonic() - t0,
                ", ".join("%s=%s" % (k, res[k]) for k in ("copied", "failed", "pending", "skipped",
                                                           "reason") if res.get(k))))
            if res.get("status") == "complete":
                _rmdir_empty_attempt(scratch_dir, key, attempt)
    except BaseException as e:  # noqa: BLE001 -- the epilog must always exit 0
        try:
            log("error (ignored, node stays up): %s: %s" % (type(e).__name__, e))
        except BaseException:  # noqa: BLE001
            pass
    return 0


def _host(env):
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def _rmdir_empty_attempt(scratch_dir, key, attempt):
    """Remove the (now empty) attempt dir and its empty parents up to scratch_dir.

    Runs as root: only rmdir through dir fds opened with O_NOFOLLOW (rmdir
    never follows a link and fails on a non-empty directory)."""
    parts = _scratch_parts(scratch_dir, key, attempt)
    fds = []
    try:
        fds.append(os.open(scratch_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for p in parts[:-1]:
            fds.append(_open_dir_at(fds[-1], p))
        for i in range(len(parts) - 1, -1, -1):
            os.rmdir(parts[i], dir_fd=fds[i])
    except OSError:
        pass
    finally:
        for fd in fds:
            os.close(fd)


# --------------------------------------------------------------------------
# `collect JOBID`


def _local_attempts(scratch_dir, key):
    path = os.path.dirname(job_scratch(scratch_dir, key, 0))
    try:
        names = os.listdir(path)
    except OSError:
        return []
    out = []
    for n in names:
        m = _ATTEMPT_RE.match(n)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def finish_local(job_id, *, settings=None, attempt=None, budget_s=120.0, log=None, select=None):
    """Finish copies a failed epilog left in this node's scratch.

    For each ``<scratch_dir>/<job>/attempt_<n>`` here (or only ``attempt``),
    run the same verified copy as the epilog: as root, in a child that drops
    to the directory's owner; as a user, only for directories that user owns.
    ``select(attempt, has_manifest) -> bool`` picks the attempts to touch
    (default: all); the copy deletes local files, so never select the scratch
    of an attempt that is still running. Returns a list of per-attempt result
    dicts (``attempt``, ``status``, ``copied``, ``failed``, ``reason``...).
    Raises ValueError for a bad id.
    """
    key = _numeric_id(job_id)
    settings = settings or load_site_settings()
    out = []
    attempts = [attempt] if attempt is not None else _local_attempts(settings.scratch_dir, key)
    for a in attempts:
        path = job_scratch(settings.scratch_dir, key, a)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            out.append({"attempt": a, "status": "refused", "reason": "%s is not a directory" % path})
            continue
        if select is not None and not select(a, _has_manifest(path)):
            continue
        if os.geteuid() != 0 and st.st_uid != os.geteuid():
            out.append({"attempt": a, "status": "refused",
                        "reason": "%s belongs to uid %d; run as that user or root"
                                  % (path, st.st_uid)})
            continue
        import pwd

        try:
            pw = pwd.getpwuid(st.st_uid)
            user, home = pw.pw_name, pw.pw_dir
            gid = pw.pw_gid
        except KeyError:
            user, home, gid = None, None, st.st_gid
        res = _collect_one(settings.scratch_dir, key, a, settings.storage_url, uid=st.st_uid,
                           gid=gid, user=user, deadline=time.monotonic() + budget_s,
                           host=_host(os.environ), home=home)
        res["attempt"] = a
        if res.get("status") == "complete" and os.geteuid() == 0:
            _rmdir_empty_attempt(settings.scratch_dir, key, a)
        out.append(res)
        if log:
            log("finished local copy of %s attempt %d: %s" % (key, a, res.get("status")))
    return out


def _has_manifest(attempt_path):
    try:   # lstat only: nothing in the user's directory is opened here
        return stat.S_ISREG(os.lstat(os.path.join(attempt_path, MANIFEST_NAME)).st_mode)
    except OSError:
        return False


#: job states in which an attempt may still be writing (or its epilog copying) its scratch
_ACTIVE_STATES = frozenset(("RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "PENDING",
                            "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
                            "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"))


def _finish_selector(info):
    """Which local attempts ``collect`` may finish (copy, then delete locally).

    With a manifest (an epilog ran and could not finish): yes, except the
    current attempt of a job still active (its epilog may be running now).
    Without one: only attempts Slurm says are over (an earlier attempt, or
    a job in a final state); never when Slurm does not know the job."""
    def select(attempt, has_manifest):
        if info is None:
            return has_manifest
        active = info.get("state") in _ACTIVE_STATES
        if attempt < info["attempt"]:
            return True
        return not active
    return select


def storage_attempts(storage_url, job_id, user=None):
    """Attempt numbers stored for a job (sorted); [] if none. Storage errors propagate."""
    fs, root = _fs_and_root(attempt_url(storage_url, job_id, 0, user).rsplit("/", 1)[0])
    try:
        entries = fs.ls(root, detail=False)
    except FileNotFoundError:
        return []
    out = []
    for e in entries:
        m = _ATTEMPT_RE.match(e.rstrip("/").rsplit("/", 1)[-1])
        if m:
            out.append(int(m.group(1)))
    return sorted(set(out))


def fetch_from_storage(storage_url, job_id, attempt, dest_dir, user=None):
    """Download ``<storage>/<job>/attempt_<n>/hang_detector/`` into ``dest_dir/hang_detector``.

    Every object name is checked (no ``..``, no absolute parts) before it is
    joined to ``dest_dir``; symlinks (file systems) are skipped. Returns the local hang_detector path and the
    number of files. Raises FileNotFoundError if the attempt has no files.
    """
    src = attempt_url(storage_url, job_id, attempt, user) + "/" + HANG_DETECTOR
    fs, root = _fs_and_root(src)
    try:
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        found = {}
    out = os.path.join(dest_dir, HANG_DETECTOR)
    n = 0
    for path in sorted(found):
        info = found[path]
        if info.get("islink") or info.get("type", "file") != "file":
            continue        # a shared file system: never follow a planted link
        rel = path[len(root):].lstrip("/")
        try:
            parts = _safe_rel(rel)
        except ValueError:
            continue
        local = os.path.join(out, *parts)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        fs.get_file(path, local)
        n += 1
    if not n:
        raise FileNotFoundError("no files under %s" % src)
    return out, n


class Collected:
    """Result of :func:`collect_job`: ``report`` (rollcall Report), ``hd_dir``
    (local hang_detector tree it was built from), ``source`` (``live`` or the
    storage URL), ``attempt`` (int), ``notes`` (list of str for the user)."""

    def __init__(self, report, hd_dir, source, attempt, notes):
        self.report, self.hd_dir, self.source = report, hd_dir, source
        self.attempt, self.notes = attempt, notes


def collect_job(job_id, *, attempt=None, settings=None, out_dir=None, live=None,
                timeout_s=120.0):
    """Gather a job's dumps and build its roll call.

    - Finishes any partial local copy on this node first (:func:`finish_local`).
    - If the job is running (``live`` None: ask Slurm; True: insist; False:
      storage only), runs ``hpc-hangkit slurm-capture`` on every node of the
      job in one ``srun --overlap`` step (on-demand dump of each rank of the
      current attempt, py-spy, Flight Recorder, nvidia-smi, copy of the rank
      files; it also lands in the node scratch, so the epilog stores it); the
      answers are merged under ``out_dir/hang_detector`` (``timeout_s``
      bounds the step).
    - Otherwise downloads ``<storage>/<job>/attempt_<n>/hang_detector`` (the
      newest attempt unless ``attempt`` is given).

    ``out_dir``: where the gathered tree goes (a temp dir if None; the caller
    removes it). Returns :class:`Collected`. Raises ValueError (bad id),
    FileNotFoundError (nothing stored or gathered), RuntimeError (Slurm or
    storage unusable, with the reason).
    """
    import tempfile

    asked = parse_job_id(job_id)
    settings = settings or load_site_settings()
    notes = []
    user = _current_user()
    info = _job_info(asked) if live is None or live else None
    if live and (info is None or not info["running"]):
        raise RuntimeError("job %s is not running (or Slurm does not know it); "
                           "drop --live to read storage" % asked)
    key = info["jobid"] if info else None
    if key is None and _NUMERIC_ID_RE.match(asked):
        key = asked
    if key is None and settings.storage_url:
        key = _read_alias(settings.storage_url, asked, user)
    if key is None:
        raise FileNotFoundError("array task %s: Slurm no longer knows it and storage has no"
                                " %s%s alias; pass the numeric SLURM_JOB_ID" % (asked, asked,
                                                                                ALIAS_SUFFIX))
    if key != asked:
        notes.append("job %s is SLURM_JOB_ID %s" % (asked, key))
    for res in finish_local(key, settings=settings, attempt=attempt,
                            select=_finish_selector(info)):
        notes.append("local scratch attempt_%d: %s%s" % (
            res["attempt"], res.get("status"),
            (" (%s)" % res["reason"]) if res.get("reason") else ""))
    made = out_dir is None
    out_dir = out_dir or tempfile.mkdtemp(prefix="hangkit-collect-")
    try:
        hd_dir, source, used_attempt = _gather(asked, key, info, attempt, settings, user,
                                               out_dir, timeout_s, notes)
        from hpc_hangkit.rollcall import report_from_dir

        report = report_from_dir(hd_dir)
    except BaseException as e:
        if made:
            shutil.rmtree(out_dir, ignore_errors=True)
        if notes and isinstance(e, (FileNotFoundError, RuntimeError)):
            raise type(e)("%s (%s)" % (e, "; ".join(notes))) from e
        raise
    return Collected(report, hd_dir, source, used_attempt, notes)


def _gather(asked, key, info, attempt, settings, user, out_dir, timeout_s, notes):
    """Live from the nodes or from storage -> (hd_dir, source, attempt)."""
    if info is not None and info["running"] and attempt in (None, info["attempt"]):
        hd_dir, n, more = _gather_live(key, info, settings, out_dir, timeout_s)
        notes.extend(more)
        return hd_dir, "live from %d node(s) (%d files)" % (len(info["nodes"]), n), \
            info["attempt"]
    if not settings.storage_url:
        raise RuntimeError("job %s is not running and no storage_url is configured"
                           " (site config.toml or HANGKIT_STORAGE_URL)" % asked)
    attempts = storage_attempts(settings.storage_url, key, user)
    if not attempts:
        raise FileNotFoundError("nothing stored for job %s under %s" % (
            asked, expand_storage_url(settings.storage_url, user)))
    used = attempt if attempt is not None else attempts[-1]
    if used not in attempts:
        raise FileNotFoundError("job %s has no attempt_%d in storage (have: %s)" % (
            asked, used, ", ".join(str(a) for a in attempts)))
    hd_dir, n = fetch_from_storage(settings.storage_url, key, used, out_dir, user)
    if len(attempts) > 1:
        notes.append("attempts in storage: %s (showing %d; --attempt N for another)" % (
            ", ".join(str(a) for a in attempts), used))
    return hd_dir, attempt_url(settings.storage_url, key, used, user), used


def _current_user():
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        return os.environ.get("USER")


# --------------------------------------------------------------------------
# live gather: `hpc-hangkit slurm-capture` on every node (hpc_hangkit.batch)


def _write_docs(text, hd_root, host_order=None):
    """Write the files of framed ``slurm-capture`` answers (srun output) under
    hd_root. Names are checked (no ``..``/absolute parts). A name two nodes
    both sent (the batch node holds the monitor's copies of other nodes'
    files): if one is a prefix of the other the longer wins, otherwise both
    are kept (``<stem>.<host>.<ext>``). Returns (files, notes,
    hosts that answered)."""
    from hpc_hangkit import batch

    notes, hosts, n = [], [], 0
    seen = set()
    for doc in batch.parse_docs(text):
        host = _safe_host(str(doc.get("host") or "unknown").split(".")[0])
        hosts.append(host)
        for pr in doc.get("problems") or []:
            notes.append("node %s: %s" % (host, pr))
        for rel, f in sorted(batch.decode_files(doc.get("files") or {}).items()):
            try:
                parts = _safe_rel(rel)
            except ValueError:
                notes.append("node %s sent an unsafe name %r; ignored" % (host, rel))
                continue
            if parts[0] == HANG_DETECTOR:
                parts = parts[1:]
            if not parts:
                continue
            rel, data = "/".join(parts), f["data"]
            if rel in seen:
                with open(os.path.join(hd_root, *parts), "rb") as fh:
                    old = fh.read()
                if old.startswith(data) or (is_why_data(data) and not is_why_data(old)):
                    continue            # a copy (e.g. the monitor's) of a longer original,
                    #                     or only a why-file where real output exists
                if is_why_data(old) and not is_why_data(data):
                    pass                # real output replaces a why-file
                elif not data.startswith(old):
                    rel = _alt_name(rel, host)      # really different: keep both
                    parts = rel.split("/")
            seen.add(rel)
            path = os.path.join(hd_root, *parts)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(data)
            n += 1
    return n, notes, hosts


def _job_info(job_id):
    """{running, attempt, nodes, jobid} from Slurm (scontrol), or None when
    Slurm is absent or no longer knows the job (then storage is read)."""
    try:
        from hpc_hangkit import slurm

        info = slurm.job_info(job_id)
    except (ImportError, RuntimeError, OSError):
        return None
    state = (info.state or "").split()[0].upper() if info.state else ""
    return {"running": state in ("RUNNING", "SUSPENDED"), "state": state,
            "attempt": int(info.restarts or 0), "nodes": list(info.nodes),
            "jobid": str(info.job_id)}


def _gather_live(key, info, settings, out_dir, timeout_s):
    """Run ``hpc-hangkit slurm-capture`` (on-demand dump of every rank, py-spy,
    Flight Recorder, nvidia-smi, copy of the rank files) on every node of the
    running job through one ``srun --overlap`` step; merge the answers."""
    from hpc_hangkit import slurm

    hd_root = os.path.join(out_dir, HANG_DETECTOR)
    os.makedirs(hd_root, exist_ok=True)
    scratch = job_scratch(settings.scratch_dir, key, info["attempt"])
    argv = [sys.executable, "-m", "hpc_hangkit", "slurm-capture", "--scratch", scratch]
    p = slurm.srun_overlap(key, info["nodes"], argv, timeout=timeout_s)
    n, notes, hosts = _write_docs(p.stdout.decode("utf-8", "replace"), hd_root)
    missing = [h for h in info["nodes"] if h.split(".")[0] not in hosts]
    if missing:
        err = p.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        notes.append("no answer from node(s) %s (srun exit %d%s)" % (
            ",".join(missing), p.returncode, (": " + " | ".join(err)) if err else ""))
    if not n:
        raise FileNotFoundError("live gather of job %s returned no files (%s)" % (
            key, "; ".join(notes) or "no node answered"))
    return hd_root, n, notes


# --------------------------------------------------------------------------
# `python -m hpc_hangkit.collect epilog` (no click: the epilog imports little)


def main(argv=None):
    """``python -m hpc_hangkit.collect epilog [--budget-s S] [--hard-timeout-s S]``:
    the epilog body (run by slurm/epilog as root). Always returns 0."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m hpc_hangkit.collect")
    sub = ap.add_subparsers(dest="cmd")
    ep = sub.add_parser("epilog", help="collect this node's scratch (run by slurm/epilog as root)")
    ep.add_argument("--budget-s", type=float, default=None)
    ep.add_argument("--hard-timeout-s", type=float, default=None)
    try:
        args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit:
        args = argparse.Namespace(cmd="epilog", budget_s=None, hard_timeout_s=None)
    return epilog(budget_s=getattr(args, "budget_s", None),
                  hard_timeout_s=getattr(args, "hard_timeout_s", None))


if __name__ == "__main__":
    sys.exit(main())
