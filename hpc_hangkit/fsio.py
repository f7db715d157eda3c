"""Hostile-file I/O, written once: reading a file someone else may have planted, writing one
where someone else may have planted a name.

Scratch, capture and storage directories hold files the job's user (or its ranks) wrote, and
parts of hpc-hangkit read and write there as root or in the monitor. The rules:

- :func:`open_regular` / :func:`read_regular`: never through a symbolic link (``O_NOFOLLOW``;
  a symlink raises ``OSError(ELOOP)``), never blocking on a fifo (``O_NONBLOCK``), only a
  regular file (anything else raises :class:`NotRegular`), and bounded (at most ``limit``
  bytes are read, whatever the file claims).
- :func:`write_atomic`: a fresh temporary file next to the target, created with
  ``O_CREAT | O_EXCL | O_NOFOLLOW`` (a symlink or file planted at the temporary name is
  removed, never opened, and a name planted again meanwhile makes the create fail), written,
  ``fsync``-ed, given its mode, then renamed over the target (a symlink at the target is
  replaced, not followed).
- :func:`sha256_fd`: the digest of an open file, read with ``pread`` (the offset is left alone).

The rank side (``boot/``) keeps its own stdlib copy: it runs where hpc_hangkit is not
importable. Standard library only.
"""
import errno
import hashlib
import os
import stat
from typing import Optional, Tuple, Union

__all__ = ["DEFAULT_LIMIT", "NotRegular", "open_regular", "read_fd", "read_regular", "write_atomic",
           "tmp_name", "open_tmp", "sha256_fd"]

#: the most :func:`read_regular` reads unless told otherwise (bytes)
DEFAULT_LIMIT = 256 << 20
#: bytes read beyond a file's size at open (a file still being written grows meanwhile)
_READ_SLACK = 64 * 1024
#: reads beyond the first one are this large at most
_CHUNK = 1 << 20
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class NotRegular(OSError):
    """The name is there, but it is not a regular file (a directory, fifo, socket, device)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "mode %o" % stat.S_IFMT(mode)


def open_regular(path_or_dirfd: Union[str, int], name: Optional[str] = None) -> Tuple[int, os.stat_result]:
    """Open a regular file for reading: ``path_or_dirfd`` a path (``name`` None, or a name
    joined to it) or a directory fd (``name`` opened relative to it). Returns ``(fd, stat)``;
    the caller closes ``fd``. Raises OSError (``ELOOP`` for a symbolic link, :class:`NotRegular`
    for anything but a regular file)."""
    if isinstance(path_or_dirfd, int):
        fd = os.open(name, _READ_FLAGS, dir_fd=path_or_dirfd)
    else:
        fd = os.open(path_or_dirfd if name is None else os.path.join(path_or_dirfd, name), _READ_FLAGS)
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegular(errno.EINVAL, "not a regular file (%s)" % _kind(st.st_mode))
    return fd, st


def read_fd(fd: int, size: int, limit: int = DEFAULT_LIMIT) -> bytes:
    """The bytes of ``fd`` from its offset to the end, at most ``limit``. ``size`` (the file's
    size at open) sizes the first read: a read of n bytes allocates n first, so it asks for what
    is there plus a little slack, not for the limit. Raises OSError."""
    want = min(size + _READ_SLACK, limit)
    parts = [os.read(fd, want)]
    got = len(parts[0])
    while parts[-1] and got < limit:
        # to the end (a short read is not the end until a read returns nothing), or the limit
        parts.append(os.read(fd, min(limit - got, want - got if got < want else _CHUNK)))
        got += len(parts[-1])
    return parts[0] if len(parts) <= 2 and not parts[-1] else b"".join(parts)


def read_regular(path_or_dirfd: Union[str, int], name: Optional[str] = None,
                 limit: int = DEFAULT_LIMIT) -> bytes:
    """The first ``limit`` bytes (at most) of a regular file, opened as :func:`open_regular`
    does. A caller that must know whether the file was longer asks for one byte more than it
    keeps. Raises OSError (``ELOOP``: a symbolic link; :class:`NotRegular`)."""
    fd, st = open_regular(path_or_dirfd, name)
    try:
        return read_fd(fd, st.st_size, limit)
    finally:
        os.close(fd)


def tmp_name(name: str) -> str:
    """The temporary name :func:`write_atomic` writes ``name`` through: ``<name>.<pid>.tmp``."""
    return "%s.%d.tmp" % (name, os.getpid())


def open_tmp(tmp: str, mode: int = 0o600, *, dir_fd: Optional[int] = None, read: bool = False) -> int:
    """A new, empty temporary file ``tmp`` (relative to ``dir_fd`` when given) for writing (and
    reading, if ``read``): whatever is at that name (a leftover of a killed run, a planted symlink)
    is unlinked first, never opened; the create is ``O_CREAT | O_EXCL | O_NOFOLLOW``, so a name
    planted again in between makes it fail. Returns the fd. Raises OSError."""
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    flags = _TMP_FLAGS if not read else (_TMP_FLAGS & ~os.O_WRONLY) | os.O_RDWR
    return os.open(tmp, flags, mode, dir_fd=dir_fd)


def write_atomic(path: str, data: Union[bytes, str], mode: int = 0o600, *, dir_fd: Optional[int] = None) -> None:
    """Replace ``path`` (relative to ``dir_fd`` when given) by ``data`` (``str`` is written as
    UTF-8) at once: written to :func:`tmp_name` (a planted entry there is unlinked first, the
    create is ``O_EXCL | O_NOFOLLOW``), ``fsync``-ed, given exactly ``mode``, renamed onto
    ``path``. Readers see the old file or the new one, never a part. The parent directory must
    exist. Raises OSError; a failed write removes its own temporary file."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    tmp = tmp_name(path)
    fd = open_tmp(tmp, mode, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def sha256_fd(fd: int, limit: Optional[int] = None) -> Tuple[int, str]:
    """``(bytes read, sha256 hex digest)`` of ``fd`` from offset 0 to its end (or to ``limit``
    bytes), read with ``pread``: the fd's offset is not moved. Raises OSError."""
    h, off = hashlib.sha256(), 0
    while limit is None or off < limit:
        b = os.pread(fd, _CHUNK if limit is None else min(_CHUNK, limit - off), off)
        if not b:
            break
        h.update(b)
        off += len(b)
    return off, h.hexdigest()
