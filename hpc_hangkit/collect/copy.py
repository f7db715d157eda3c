"""The copy engine: one attempt's node scratch -> storage, verified, with a manifest.

Runs as the job's user (the collector's dropped child, :mod:`hpc_hangkit.collect.attempt`, or
``hpc-hangkit collect`` on the node) on a tree the user controls: it walks the
tree through directory file descriptors with ``O_NOFOLLOW`` and copies only
regular files (symlinks, fifos, devices and sockets are listed in the manifest
as skipped, never opened). One collector per attempt (:func:`lock_attempt`).
Each copy is verified (size and sha256 read back) before the local file is
deleted; whatever was not copied stays in scratch with a manifest
(``collect-manifest.json`` plus its append-only ``.journal``;
:func:`read_manifest`) that says what and why. Storage is reached through
:func:`hpc_hangkit.storage.open_store` (``file://``: no symlink followed,
nothing written into what another user made).
"""
import enum
import errno
import fcntl
import json
import os
import re
import socket
import stat
import time

from hpc_hangkit import fsio, layout
from hpc_hangkit.capture.whyfile import alt_name

MANIFEST_NAME = "collect-manifest.json"
#: this run's per-file outcomes, one JSON line each (replayed onto the manifest)
JOURNAL_NAME = MANIFEST_NAME + ".journal"
#: the attempt's collector lock (flock; names under MANIFEST_NAME + "." are never copied)
LOCK_NAME = MANIFEST_NAME + ".lock"
#: how long a second collector waits for the attempt lock before it reports ``busy``
LOCK_WAIT_S = 5.0
MANIFEST_SCHEMA = "hpc-hangkit/collect-manifest/1"
HANG_DETECTOR = layout.HANG_DETECTOR_DIR
_CHUNK = 1 << 20
_MAX_DEPTH = 16
_MAX_FILES = 100000
#: a larger local manifest is moved aside and rebuilt, never a reason to stop
_MAX_MANIFEST_BYTES = 256 << 20
#: progress writes of the whole manifest when no journal can be kept, at most this often
_MANIFEST_EVERY_S = 1.0
_VIEW_WHY = "the batch-step monitor's transient view (copies of other nodes' rank files; not collected)"
#: a manifest, journal or lock that could not be used is renamed to
#: ``<ASIDE_PREFIX><what>-<kind>-<pid>-<ns>``: the collector's own bookkeeping, never a dump
ASIDE_PREFIX = "collect-manifest.aside-"
_ASIDE_RE = re.compile(r"^" + re.escape(ASIDE_PREFIX)
                       + r"(manifest|journal|lock)-(too-large|not-regular|unreadable|not-ours)"
                       r"-\d+-\d+$")
_ASIDE_WHY = ("set aside by the collector, not a dump: not copied, deleted once the attempt is "
              "copied")


class Skip(enum.Enum):
    """Why a scanned entry is not copied (the manifest's ``why`` says it in words)."""
    SYMLINK = "symlink"
    FIFO = "fifo"
    SOCKET = "socket"
    DEVICE = "device"                   # any other non-regular file
    VIEW = "view"                       # the batch-step monitor's transient view
    ASIDE = "aside"                     # the collector's own set-aside bookkeeping
    STAT_FAILED = "stat failed"
    TOO_DEEP = "too deep"
    DIR_UNREADABLE = "directory unreadable"


#: skipped entries removed from scratch after a complete copy (recorded in the manifest)
_JUNK = frozenset((Skip.SYMLINK, Skip.FIFO, Skip.SOCKET, Skip.VIEW, Skip.ASIDE))
#: the junk that is regular files (removed although regular: they are not dumps)
_JUNK_REGULAR = frozenset((Skip.VIEW, Skip.ASIDE))


# --------------------------------------------------------------------------
# the attempt scratch (names from hpc_hangkit.layout)


def job_scratch(scratch_dir, job_id, attempt):
    """Node-local scratch of one attempt, ``<scratch_dir>/job_<id>/attempt_<n>``
    (:func:`hpc_hangkit.layout.job_scratch_dir`) for the unique numeric id. Raises
    ValueError for any other id (the array form included) or a negative attempt."""
    return layout.job_scratch_dir(scratch_dir, layout.unique_job_id(job_id), int(attempt))


def scratch_parts(scratch_dir, job_id, attempt):
    """Components of the attempt scratch below ``scratch_dir`` (each opened O_NOFOLLOW).
    Raises ValueError like :func:`job_scratch`."""
    full = job_scratch(scratch_dir, job_id, attempt)
    rel = os.path.relpath(full, scratch_dir)
    parts = rel.split(os.sep)
    layout.split_rel("/".join(parts))
    return parts


def local_attempts(scratch_dir, job_id):
    """Attempt numbers with a directory in this node's scratch of ``job_id`` (sorted);
    [] if the job has none here or it cannot be listed. Raises ValueError for a bad id."""
    path = os.path.dirname(job_scratch(scratch_dir, job_id, 0))
    try:
        names = os.listdir(path)
    except OSError:
        return []
    return sorted(a for a in map(layout.attempt_of, names) if a is not None)


def open_dir_at(parent_fd, name):
    """fd of the directory ``name`` under ``parent_fd``, never following a symlink
    (O_NOFOLLOW, O_CLOEXEC). Raises OSError."""
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                 dir_fd=parent_fd)
    return fd


# --------------------------------------------------------------------------
# no-follow access to a tree the user controls


class Tree:
    """A directory tree reached only through dir fds opened with O_NOFOLLOW; ``root_fd``
    (the caller's, not closed here) is its top. Relative paths are checked with
    :func:`hpc_hangkit.layout.split_rel` (ValueError)."""

    def __init__(self, root_fd):
        self.root_fd = root_fd

    def _parent(self, rel):
        """(fd of the parent dir, basename); caller closes fd if != root_fd."""
        parts = layout.split_rel(rel)
        fd = self.root_fd
        try:
            for p in parts[:-1]:
                nfd = open_dir_at(fd, p)
                if fd != self.root_fd:
                    os.close(fd)
                fd = nfd
        except BaseException:
            if fd != self.root_fd:
                os.close(fd)
            raise
        return fd, parts[-1]

    def scan(self):
        """-> (files [(rel, size)], skipped [(rel, Skip, why)], deferred) of the whole tree:
        at most ``_MAX_FILES`` files; ``deferred`` counts the regular files beyond; ``why``
        is the manifest's sentence for the :class:`Skip`."""
        files, skipped = [], []
        deferred = [0]

        def walk(dfd, prefix, depth, view=False):
            with os.scandir(dfd) as it:
                entries = sorted(e.name for e in it)
            for name in entries:
                rel = prefix + name
                if prefix == "" and (name == MANIFEST_NAME or name.startswith(MANIFEST_NAME + ".")):
                    continue
                if prefix == "" and name.startswith(ASIDE_PREFIX):
                    skipped.append((rel, Skip.ASIDE, _aside_why(name)))     # never opened or walked
                    continue
                in_view = view or (prefix == "" and name.startswith(layout.MONITOR_VIEW_PREFIX))
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except OSError as e:
                    skipped.append((rel, Skip.STAT_FAILED, "stat failed: %s" % e.strerror))
                    continue
                if stat.S_ISLNK(st.st_mode):
                    skipped.append((rel, Skip.SYMLINK, "symlink (not followed)"))
                elif stat.S_ISDIR(st.st_mode):
                    if depth >= _MAX_DEPTH:
                        skipped.append((rel, Skip.TOO_DEEP, "directory deeper than %d levels" % _MAX_DEPTH))
                        continue
                    try:
                        sub = open_dir_at(dfd, name)
                    except OSError as e:
                        skipped.append((rel, Skip.DIR_UNREADABLE, "cannot open directory: %s" % e.strerror))
                        continue
                    try:
                        walk(sub, rel + "/", depth + 1, in_view)
                    finally:
                        os.close(sub)
                elif stat.S_ISREG(st.st_mode):
                    if in_view:
                        skipped.append((rel, Skip.VIEW, _VIEW_WHY))
                        continue
                    if len(files) >= _MAX_FILES:
                        deferred[0] += 1
                        continue
                    files.append((rel, st.st_size))
                else:
                    kind = Skip.FIFO if stat.S_ISFIFO(st.st_mode) else \
                        Skip.SOCKET if stat.S_ISSOCK(st.st_mode) else Skip.DEVICE
                    skipped.append((rel, kind, "not a regular file (%s)" % _kind(st.st_mode)))

        walk(self.root_fd, "", 0)
        return files, skipped, deferred[0]

    def open_regular(self, rel):
        """Open a regular file for reading without following any symlink.

        O_NONBLOCK keeps a planted fifo from blocking the open; anything but a
        regular file is refused with OSError(EINVAL). Returns (fd, stat)."""
        pfd, name = self._parent(rel)
        try:
            return fsio.open_regular(pfd, name)
        finally:
            if pfd != self.root_fd:
                os.close(pfd)

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
                        sub = open_dir_at(dfd, name)
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
            data = fsio.read_fd(fd, st.st_size, limit + 1)
        finally:
            os.close(fd)
        if len(data) > limit:
            raise OSError(errno.EFBIG, "file grew past %d bytes" % limit)
        return data

    def write_atomic(self, name, data):
        """Write a file in the root dir via a fresh temp file + rename (:func:`hpc_hangkit.fsio.write_atomic`)."""
        fsio.write_atomic(name, data, dir_fd=self.root_fd)

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


def open_attempt(scratch_dir, job_id, attempt, expect_uid=None):
    """fd of the attempt scratch; every component below ``scratch_dir`` (which
    the admin configures) is opened with O_NOFOLLOW; a directory not owned by
    ``expect_uid`` is refused (PermissionError). Raises FileNotFoundError when there
    is none, OSError for a symlink or another error."""
    fd = os.open(scratch_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in scratch_parts(scratch_dir, job_id, attempt):
            nfd = open_dir_at(fd, part)
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
# one collector per attempt


class CollectorBusy(Exception):
    """Another collector holds the attempt's lock; ``holder`` is what it wrote there
    (``pid <n> on <host> since <time>``), or '' if unknown."""

    def __init__(self, holder):
        super().__init__("another collector holds %s/%s (%s)" % ("<attempt>", LOCK_NAME,
                                                                 holder or "holder unknown"))
        self.holder = holder


def lock_attempt(tree, wait_s, host=None):
    """Take the attempt's collector lock: ``flock`` on ``collect-manifest.json.lock`` in
    the attempt scratch (opened relative to ``tree.root_fd``, O_NOFOLLOW; the kernel drops
    the lock when its holder dies, however it dies). Polls up to ``wait_s`` seconds.

    Returns the lock fd (close it to release). Raises :class:`CollectorBusy` when another
    process still holds it, FileNotFoundError when the attempt directory was removed (a
    finished collector emptied it), OSError for a lock name that cannot be used. A
    holder that removes the lock file while holding it (a finished copy) is detected:
    the lock is then taken again on a fresh file."""
    end = time.monotonic() + max(0.0, wait_s)
    cleared = False
    while True:
        try:
            fd = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o600, dir_fd=tree.root_fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO) and not cleared:
                _move_aside(tree, LOCK_NAME, "not-regular")    # the user's own planted junk
                cleared = True
                continue
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "%s is not a regular file" % LOCK_NAME)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
                if time.monotonic() >= end:
                    raise CollectorBusy(holder) from None
                os.close(fd)
                fd = None
                time.sleep(0.05)
                continue
            st = os.fstat(fd)
            try:
                now = os.stat(LOCK_NAME, dir_fd=tree.root_fd, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                os.close(fd)     # the previous holder removed it as it finished
                fd = None
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, ("pid %d on %s since %s\n" % (
                os.getpid(), host or socket.gethostname(),
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))).encode(), 0)
            out, fd = fd, None
            return out
        finally:
            if fd is not None:
                os.close(fd)


def _move_aside(tree, name, kind):
    """Rename ``name`` (the manifest, its journal or the lock, in the attempt root) out of
    the collector's way; ``kind`` says why (``too-large``, ``not-regular``, ``unreadable``,
    ``not-ours``) and is kept in the new name, so that any later run or reader lists it
    with the reason (:func:`_aside_why`). A set-aside name is never copied: it is the
    collector's own bookkeeping (or what the user planted under its name), not evidence,
    and a copy of it would land in storage as if it were a dump; it stays in scratch
    while the attempt is not fully copied and is deleted with the other skipped junk
    once it is (left behind, it would keep the attempt directory on the node for good).
    Returns the new name, or None if it could not be moved."""
    what = {MANIFEST_NAME: "manifest", JOURNAL_NAME: "journal", LOCK_NAME: "lock"}[name]
    new = "%s%s-%s-%d-%d" % (ASIDE_PREFIX, what, kind, os.getpid(), time.time_ns())
    try:
        os.rename(name, new, src_dir_fd=tree.root_fd, dst_dir_fd=tree.root_fd)
    except OSError:
        return None
    return new


def _aside_kind(e):
    """The ``kind`` of :func:`_move_aside` for the OSError that reading a manifest raised."""
    if e.errno == errno.EFBIG:
        return "too-large"
    if e.errno in (errno.ELOOP, errno.EINVAL, errno.EISDIR):
        return "not-regular"
    return "unreadable"


def _aside_why(name):
    """The manifest entry's ``why`` for a set-aside name (see :func:`_move_aside`)."""
    m = _ASIDE_RE.match(name)
    if m is None:
        return "%s (set aside earlier)" % _ASIDE_WHY
    detail = {"too-large": "larger than %d bytes" % _MAX_MANIFEST_BYTES,
              "not-regular": "not a regular file (a symlink, a directory, a fifo...)",
              "unreadable": "could not be read",
              "not-ours": "not JSON of the collect-manifest schema"}[m.group(2)]
    return "%s (the local %s was %s)" % (_ASIDE_WHY, m.group(1), detail)


# --------------------------------------------------------------------------
# storage paths


def _split_step(rel):
    """``(step dir + "/", rest)`` of a scratch path under an interactive step's own
    directory (``step_<s>/...``, :data:`hpc_hangkit.layout.STEP_DIR_RE`), else ``("", rel)``."""
    head, sep, rest = rel.partition("/")
    if sep and layout.step_of(head) is not None:
        return head + "/", rest
    return "", rel


def _dest_rel(rel):
    """Scratch path -> path under the storage attempt dir: ``<f>`` ->
    ``hang_detector/<f>``, and an interactive step's ``step_<s>/<f>`` ->
    ``step_<s>/hang_detector/<f>`` (each step a tree of its own, never mixed)."""
    step, rel = _split_step(rel)
    if rel == HANG_DETECTOR or rel.startswith(HANG_DETECTOR + "/"):
        return step + rel
    return step + HANG_DETECTOR + "/" + rel


def _priority(rel):
    # copy the small, decisive evidence first: reports, stack dumps, heartbeats (of every step)
    rel = _split_step(rel)[1]
    order = ("hang_detector/report", "hang_detector/stack_traces/", "watchdog/",
             "hang_detector/watchdog/", "heartbeats/", "hang_detector/heartbeats/",
             "unwatched/", "hang_detector/events", "hang_detector/flight_recorder/",
             "hang_detector/nccl_ras/")
    for i, p in enumerate(order):
        if rel.startswith(p):
            return i
    return len(order)


# --------------------------------------------------------------------------
# the manifest: a JSON snapshot plus an append-only journal of this run's changes


def _now():
    return time.time()


def _new_manifest(job_id, attempt, host, dest_url):
    return {"schema": MANIFEST_SCHEMA, "job": job_id, "attempt": attempt, "host": host,
            "dest": dest_url, "status": "in_progress", "reason": None,
            "run": "%d-%d" % (os.getpid(), time.time_ns()),
            "started": _now(), "updated": _now(), "files": []}


def _write_manifest(tree, man):
    """Write the full snapshot (temp + rename), then a fresh journal holding only its
    header (the run id), so that a stop can always be recorded with one append."""
    man["updated"] = _now()
    tree.write_atomic(MANIFEST_NAME, (json.dumps(man, separators=(",", ":"), sort_keys=True)
                                      + "\n").encode())
    tree.write_atomic(JOURNAL_NAME, (json.dumps({"run": man["run"]}) + "\n").encode())


def _journal_open(tree, run):
    """fd of the journal for appending (O_APPEND, O_NOFOLLOW; made afresh with its header
    if it is missing or unusable), or None if it cannot be made."""
    for _ in range(2):
        try:
            fd = os.open(JOURNAL_NAME, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, dir_fd=tree.root_fd)
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return fd
            os.close(fd)
        except OSError:
            pass
        _move_aside(tree, JOURNAL_NAME, "not-regular")
        try:
            tree.write_atomic(JOURNAL_NAME, (json.dumps({"run": run}) + "\n").encode())
        except OSError:
            return None
    return None


def _journal_add(jfd, run, rec):
    """Append one record (one line, one write) for run ``run``; False if it failed."""
    if jfd is None:
        return False
    try:
        os.write(jfd, (json.dumps(dict(rec, run=run), separators=(",", ":")) + "\n").encode())
        return True
    except OSError:
        return False


def _journal_status(tree, status, why):
    """Append ``{status, reason}`` to the journal of the run named in its first line
    (nothing if there is no usable journal)."""
    fd = None
    try:
        fd = os.open(JOURNAL_NAME, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, dir_fd=tree.root_fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        head = json.loads(os.pread(fd, 4096, 0).split(b"\n", 1)[0].decode("utf-8"))
        if isinstance(head, dict) and head.get("run"):
            _journal_add(fd, head["run"], {"status": status, "reason": why})
    except (OSError, ValueError, UnicodeDecodeError):
        pass
    finally:
        if fd is not None:
            os.close(fd)


def _load_manifest(tree):
    """The local manifest with its journal replayed, or None if there is none. A manifest
    that is too large, not a regular file, or not ours (bad JSON, other schema) is moved
    aside (:func:`_move_aside`) so it never stops a copy; the next run starts afresh."""
    try:
        data = tree.read_small(MANIFEST_NAME, _MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return None
    except OSError as e:
        _move_aside(tree, MANIFEST_NAME, _aside_kind(e))
        tree.remove(JOURNAL_NAME)
        return None
    try:
        man = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        man = None
    if not (isinstance(man, dict) and man.get("schema") == MANIFEST_SCHEMA
            and isinstance(man.get("files"), list)):
        _move_aside(tree, MANIFEST_NAME, "not-ours")
        tree.remove(JOURNAL_NAME)
        return None
    _replay(tree, man)
    return man


def _replay(tree, man):
    try:
        data = tree.read_small(JOURNAL_NAME, _MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return
    except OSError as e:
        _move_aside(tree, JOURNAL_NAME, _aside_kind(e))
        return
    by_path = {e.get("path"): e for e in man["files"] if isinstance(e, dict)}
    run = man.get("run")
    for line in data.splitlines():
        try:
            rec = json.loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            continue        # a line cut by a kill
        if not isinstance(rec, dict) or rec.pop("run", None) != run:
            continue
        if "path" in rec:
            ent = by_path.get(rec["path"])
            if ent is not None:
                ent.update(rec)
        elif "status" in rec:
            man.update(status=rec["status"], reason=rec.get("reason"))


def read_manifest(attempt_path):
    """The local manifest of the attempt scratch at ``attempt_path`` with its journal
    replayed (what a stopped collector last recorded), or None if there is none. Opens
    nothing through a symlink; a manifest that is not usable is moved aside (as the
    collector does). Raises OSError if the directory cannot be opened."""
    fd = os.open(attempt_path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return _load_manifest(Tree(fd))
    finally:
        os.close(fd)


def _save(tree, man):
    """Write the local manifest; a full or broken scratch must not stop the copy
    (copying is what frees the space), so the error is only recorded."""
    try:
        _write_manifest(tree, man)
        return True
    except OSError as e:
        man["manifest_error"] = "local manifest not written: %s" % (e.strerror or e)
        return False


# --------------------------------------------------------------------------
# the copy


def _busy(job_id, attempt, host, dest_url, e):
    man = _new_manifest(job_id, attempt, host, dest_url)
    man.update(status="busy", reason="another collector is copying this attempt (%s); it "
               "finishes the copy" % (e.holder or "holder unknown"))
    return man


def copy_tree(root_fd, dest_url, *, job_id, attempt, host=None, deadline=None,
              delete_local=True, log=None, lock_wait_s=LOCK_WAIT_S):
    """Copy every regular file under ``root_fd`` to ``dest_url`` (fsspec URL), verified.

    ``root_fd``: an open directory fd (the attempt scratch); ``dest_url``: the attempt's
    storage URL (:func:`hpc_hangkit.storage.attempt_url`). One collector per attempt:
    the attempt lock (:func:`lock_attempt`) is taken first, waiting up to
    ``lock_wait_s`` seconds (never past ``deadline``); if another collector still holds
    it, nothing is touched and ``status`` is ``busy``. Files map to
    ``<dest_url>/hang_detector/<rel>`` (a top-level ``hang_detector/`` is not doubled),
    through :func:`hpc_hangkit.storage.open_store` (``file://``: no symlink followed,
    nothing written into what another user made; a refused job directory leaves every
    file local with the reason). Each copy is verified (size and sha256 read back);
    only then, if ``delete_local``, the local file is unlinked (if it is still the same
    inode). An existing destination that is identical, or a longer version of the same
    append-only file (the owner node's log vs. a capture or monitor copy on another
    node), counts as copied; one the local file extends is replaced; a different one is
    kept and the local file is stored as ``<stem>.<host>.<ext>``. No stored object is
    deleted except this run's own half-written one. ``deadline`` (time.monotonic()
    value): no new file is started after it (those stay ``pending`` with a reason).

    At most ``_MAX_FILES`` (100000) files are taken per run; the rest are counted in
    ``deferred`` and the run is ``incomplete`` (a later run copies them). Progress: the
    manifest ``collect-manifest.json`` is written once before the first copy, each
    file's outcome is appended to ``collect-manifest.json.journal`` as it happens, and
    the manifest is rewritten at the end; a kill at any point leaves manifest + journal
    that say which files were copied. Files a previous run copied are listed again
    (``copied``), so the stored ``<dest_url>/collect_<host>.json`` (written when
    everything is copied; the local manifest is then removed, skipped symlinks, fifos and
    sockets unlinked, empty directories pruned) lists every file of the attempt.

    Returns the manifest dict: ``status`` is ``complete``, ``incomplete``, ``busy`` or
    ``no_files``; ``files`` is a list of ``{path, size, sha256, state, why, dest}`` with
    ``state`` in ``copied|kept|failed|pending|skipped``. Never raises for storage errors
    (they land in the manifest); a local manifest that cannot be written (full scratch)
    is noted in ``manifest_error`` and the copy goes on.
    """
    from hpc_hangkit.storage import open_store

    host = host or socket.gethostname()
    tree = Tree(root_fd)
    if deadline is not None:
        lock_wait_s = min(lock_wait_s, max(0.0, deadline - time.monotonic()))
    try:
        lock = lock_attempt(tree, lock_wait_s, host)
    except CollectorBusy as e:
        return _busy(job_id, attempt, host, dest_url, e)
    except FileNotFoundError:
        man = _new_manifest(job_id, attempt, host, dest_url)
        man["status"] = "no_files"
        return man
    try:
        return _copy_locked(tree, dest_url, job_id, attempt, host, deadline, delete_local, log,
                            open_store)
    finally:
        os.close(lock)


def _remove_stale_temps(tree):
    """Unlink the temp files of manifest writes a killed collector left (``<name>.<pid>.tmp``
    of :meth:`Tree.write_atomic`); only the lock holder calls this, so none is in use."""
    try:
        with os.scandir(tree.root_fd) as it:
            names = [e.name for e in it if e.name.startswith(MANIFEST_NAME + ".")
                     and e.name.endswith(".tmp")]
    except OSError:
        return
    for name in names:
        try:
            tree.remove(name)
        except OSError:
            pass


def _copy_locked(tree, dest_url, job_id, attempt, host, deadline, delete_local, log, open_store):
    _remove_stale_temps(tree)
    prev = _load_manifest(tree)
    ours = {f["path"] for f in (prev or {}).get("files", []) if f.get("state") != "copied"}
    man = _new_manifest(job_id, attempt, host, dest_url)
    if prev:
        man["previous"] = {k: prev.get(k) for k in ("status", "reason", "started", "updated")}
    files, skipped, deferred = tree.scan()
    files.sort(key=lambda fs_: (_priority(fs_[0]), fs_[1], fs_[0]))
    entries = {}
    for rel, size in files:
        entries[rel] = {"path": rel, "size": size, "sha256": None, "state": "pending",
                        "why": None, "dest": None}
    for rel, _, why in skipped:
        entries[rel] = {"path": rel, "size": None, "sha256": None, "state": "skipped",
                        "why": why, "dest": None}
    # what earlier runs stored: listed again, so the stored record is the whole attempt
    carried = []
    for ent in (prev or {}).get("files", []):
        rel = ent.get("path") if isinstance(ent, dict) else None
        if rel is None or rel in entries:
            continue
        if ent.get("state") == "copied":
            carried.append(ent)
        elif ent.get("state") in ("pending", "failed", "kept") and ent.get("sha256") is None:
            carried.append(dict(ent, state="copied", why="not in scratch any more: copied by an"
                                " earlier run after its last record (or removed by the user)"))
    man["files"] = carried + [entries[r] for r, _ in files] + [entries[r] for r, _, _ in skipped]
    if deferred:
        man["deferred"] = deferred
    if not files and not deferred:
        if carried:
            _finish_complete(tree, man, dest_url, job_id, attempt, open_store, skipped,
                             delete_local)
        else:
            man["status"] = "no_files"
            tree.remove(MANIFEST_NAME)
            tree.remove(JOURNAL_NAME)
            tree.remove(LOCK_NAME)
        return man
    t0 = time.monotonic()
    _save(tree, man)
    # the final rewrite costs about what this one did: keep time for it
    final_s = 1.5 * (time.monotonic() - t0)
    try:
        store = open_store(dest_url, job_id, attempt, host)
        store.prepare()
    except Exception as e:  # noqa: BLE001 -- unknown protocol, missing s3fs, refused dir
        kind = "refused" if type(e).__name__ == "StoreRefused" else "unusable"
        why = "storage %s %s: %s: %s; the dumps stay here" % (dest_url, kind, type(e).__name__, e)
        for rel, _ in files:
            entries[rel].update(state="failed", why=why)
        man.update(status="incomplete", reason=why)
        _save(tree, man)
        return man
    run = man["run"]
    jfd = _journal_open(tree, run)
    stop = None if deadline is None else deadline - final_s
    failures = 0
    last_write = time.monotonic()
    try:
        for rel, _ in files:
            ent = entries[rel]
            if stop is not None and time.monotonic() >= stop:
                ent["why"] = "epilog budget spent before this file was started"
                failures += 1
                continue
            if jfd is None and time.monotonic() - last_write >= _MANIFEST_EVERY_S:
                _save(tree, man)      # no journal: progress, in case this process is killed
                last_write = time.monotonic()
            if _copy_one(tree, store, rel, ent, host, rel not in ours, delete_local, log):
                _journal_add(jfd, run, ent)
            else:
                if ent["state"] == "failed":
                    failures += 1
                _journal_add(jfd, run, ent)
    finally:
        if jfd is not None:
            os.close(jfd)
        try:
            store.close()
        except Exception:  # noqa: BLE001
            pass
    if failures or deferred:
        reasons = sorted({entries[r]["why"] for r, _ in files if entries[r]["state"] == "pending"
                          or entries[r]["state"] == "failed"} - {None})
        if deferred:
            reasons.append("%d more files than the per-run cap of %d: left for the next run"
                           % (deferred, _MAX_FILES))
        man.update(status="incomplete",
                   reason="%d of %d files not copied: %s" % (failures + deferred,
                                                            len(files) + deferred,
                                                            "; ".join(reasons)[:2000]))
        _save(tree, man)
        return man
    _finish_complete(tree, man, dest_url, job_id, attempt, open_store, skipped, delete_local,
                     store)
    return man


def _finish_complete(tree, man, dest_url, job_id, attempt, open_store, skipped, delete_local,
                     store=None):
    """Everything is stored: write ``collect_<host>.json``, clean the scratch."""
    man["status"] = "complete"
    man["updated"] = _now()
    try:
        if store is None:
            store = open_store(dest_url, job_id, attempt, man["host"])
        store.prepare()
        try:
            store.write_bytes("collect_%s.json" % _safe_host(man["host"]),
                              (json.dumps(man, indent=1, sort_keys=True) + "\n").encode())
        finally:
            store.close()
    except Exception as e:  # noqa: BLE001 -- the data is safe; the record is a courtesy
        man["reason"] = "data copied; storage manifest not written: %s" % e
    tree.remove(MANIFEST_NAME)
    tree.remove(JOURNAL_NAME)
    if delete_local:
        for rel, kind, _ in skipped:
            if kind in _JUNK:
                tree.unlink_junk(rel, regular_ok=kind in _JUNK_REGULAR)
        tree.prune_empty_dirs()
    tree.remove(LOCK_NAME)      # still held: a waiter sees the name gone and retries


def _copy_one(tree, store, rel, ent, host, may_alt, delete_local, log):
    """Copy one file (``ent`` updated in place). Returns True when it is stored."""
    drel = _dest_rel(rel)
    # ``dest`` only where it is not the default place (``<dest>/hang_detector/<path>``):
    # storage URLs are long, and a manifest lists every file
    ent["dest"] = None
    try:
        fd, st = tree.open_regular(rel)
    except OSError as e:
        ent.update(state="skipped", why="cannot open: %s" % (e.strerror or e))
        return False
    try:
        try:
            same, note = False, None
            rsize = store.size(drel)
            if rsize is not None:
                rel_ = _relation(store, drel, fd, st.st_size, rsize)
                if rel_ in ("same", "remote_extends"):
                    # stored already, or a longer version of this append-only
                    # log (the owner node's file vs a capture/monitor copy)
                    same, size, sha = True, st.st_size, fsio.sha256_fd(fd)[1]
                    if rel_ == "remote_extends":
                        note = "storage holds a longer version (this file is its prefix)"
                elif rel_ == "differs" and may_alt:
                    # another node's different file of the same name: keep both
                    drel = alt_name(drel, host)
                    ent["dest"] = store.url(drel)
            if not same:
                size, sha = store.put(drel, fd)
        except Exception as e:  # noqa: BLE001 -- every storage error is recorded
            ent.update(state="failed", why="%s: %s" % (type(e).__name__, e))
            if log:
                log("copy %s -> %s failed: %s" % (rel, store.url(drel), ent["why"]))
            return False
        ent.update(size=size, sha256=sha, state="kept", why=note)
        if delete_local:
            try:
                tree.unlink_if_same(rel, st)
                ent["state"] = "copied"
            except OSError as e:
                ent["why"] = "copied and verified; local delete failed: %s" % (e.strerror or e)
        else:
            ent["state"] = "copied"
        return True
    finally:
        os.close(fd)


def _relation(store, drel, fd, lsize, rsize):
    """How the local file (fd, lsize bytes) relates to the stored one:
    ``same``, ``local_extends`` (stored is a prefix of local: a half-written
    copy, or an older copy of a growing log), ``remote_extends`` (local is a
    prefix of stored) or ``differs``."""
    n, off = min(lsize, rsize), 0
    with store.open_read(drel) as f:
        while off < n:
            want = min(_CHUNK, n - off)
            r = f.read(want)
            if not r or r != os.pread(fd, len(r), off):
                return "differs"
            off += len(r)
    if lsize == rsize:
        return "same"
    return "local_extends" if lsize > rsize else "remote_extends"


def _safe_host(host):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", host) or "unknown"


# --------------------------------------------------------------------------
# the record of what was not copied


def record_not_copied(tree, job_id, attempt, host, dest, status, why, lock_wait_s=1.0):
    """Leave (or complete) the local manifest of ``tree`` (a :class:`Tree` of the attempt
    scratch) after a copy was stopped: every file not copied gets ``why``, the manifest
    ``status`` (``timeout``/``incomplete``) and ``reason``. The status is first appended
    to the journal (one write, so it lands even if this is killed too), then the manifest
    is rewritten. Returns :func:`summary` (``{"status": "no_files"}`` when there is
    nothing to record, ``busy`` when another collector holds the attempt and will record
    its own outcome). Raises OSError if the manifest cannot be written."""
    try:
        lock = lock_attempt(tree, lock_wait_s, host)
    except CollectorBusy as e:
        return summary(_busy(job_id, attempt, host, dest, e))
    except FileNotFoundError:
        return {"status": "no_files"}
    try:
        # first the one cheap write that makes the outcome stick (a big manifest may take
        # longer to rewrite than this process is given): the status, in the run's journal
        _journal_status(tree, status, why)
        man = _load_manifest(tree)
        files, skipped, deferred = tree.scan()
        if man is None:
            if not files and not deferred:
                tree.remove(LOCK_NAME)
                return {"status": "no_files"}
            man = _new_manifest(job_id, attempt, host, dest)
            man["files"] = ([{"path": r, "size": s, "state": "pending", "why": None}
                             for r, s in files]
                            + [{"path": r, "state": "skipped", "why": w} for r, _, w in skipped])
        present = {r for r, _ in files}
        for ent in man.get("files", []):
            if ent.get("state") in ("pending", "failed", "kept") and ent.get("path") not in present:
                # the journal is written right after each copy: this one was copied,
                # verified and deleted just before the collector was stopped
                ent.update(state="copied", why="not in scratch any more: copied before the"
                                                " collector was stopped (or removed by the user)")
            elif ent.get("state") in ("pending", "failed") and not ent.get("why"):
                ent["why"] = why
        if deferred:
            man["deferred"] = deferred
        man.update(status=status, reason=why)
        _write_manifest(tree, man)
        return summary(man)
    finally:
        os.close(lock)


def summary(man):
    """The outcome of a manifest dict as ``{status, reason, dest, copied, kept, failed,
    pending, skipped}`` (counts of files by state) plus ``skipped_paths`` (the first 20)."""
    counts = {}
    for ent in man.get("files", []):
        counts[ent.get("state")] = counts.get(ent.get("state"), 0) + 1
    return {"status": man.get("status"), "reason": man.get("reason"), "dest": man.get("dest"),
            "copied": counts.get("copied", 0), "kept": counts.get("kept", 0),
            "failed": counts.get("failed", 0), "pending": counts.get("pending", 0),
            "skipped": counts.get("skipped", 0),
            "skipped_paths": [e["path"] for e in man.get("files", [])
                              if e.get("state") == "skipped"][:20]}


def has_manifest(attempt_path):
    """True if the attempt scratch at ``attempt_path`` holds a local manifest (a copy
    that did not finish there)."""
    try:   # lstat only: nothing in the user's directory is opened here
        return stat.S_ISREG(os.lstat(os.path.join(attempt_path, MANIFEST_NAME)).st_mode)
    except OSError:
        return False
