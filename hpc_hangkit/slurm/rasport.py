"""Each Slurm job's own NCCL RAS address on a node (``NCCL_RAS_ADDR=localhost:<port>``).

Why: every NCCL process listens for RAS queries on ``NCCL_RAS_ADDR``, by default
``localhost:28028`` for all of them. Two jobs on one node then share one address:
NCCL documents that jobs of different users cannot, one job's RAS is lost, and a
monitor could read the other job's communicators. So the prolog gives each job a port
of its own from the site's ``ncclras_port_range`` (:func:`take_port`), the SPANK
plugin exports it with the rest of ``hangkit.env`` (never over a value the user set:
a user's ``NCCL_RAS_ADDR`` wins), the monitor queries only that address, and the
epilog gives the port back (:func:`release_ports`).

Choosing the port: the first candidate is derived from the job id
(``lo + job_id % size``, so a job gets the same port on all its nodes unless one is
taken there); from there the range is walked until a port is both unreserved and
free. Reservations are files ``<scratch_dir>/nccl_ras_ports/<port>`` (root-owned,
created O_EXCL: two prologs on one node never take the same port; content: the job
id), because between the prolog and NCCL's first bind a free port proves nothing. A
reservation whose job has no scratch directory on the node any more is stale (its
epilog never ran) and is reclaimed. "Free" means a bind to 127.0.0.1:<port> works now.

Root-side code: everything is opened through directory fds with O_NOFOLLOW under the
root-owned scratch root; nothing the job's user owns is read.
"""
import enum
import errno
import os
import socket
from typing import Callable, List, Mapping, NamedTuple, Optional, Tuple

from hpc_hangkit import fsio, layout

#: the host part of every per-job address: loopback only (the queries run on the node)
RAS_HOST = "localhost"
#: most bytes a reservation file holds (a job id)
_MAX = 64


def first_port(job_id: str, lo: int, hi: int) -> int:
    """The job's first-choice port: ``lo + int(job_id) % (hi - lo + 1)``. Pure.
    Raises ValueError for an id that is not the unique numeric one."""
    jid = layout.unique_job_id(job_id)
    return lo + int(jid) % (hi - lo + 1)


def candidates(job_id: str, lo: int, hi: int) -> List[int]:
    """Every port of ``lo..hi`` once, starting at :func:`first_port`. Pure."""
    n = hi - lo + 1
    start = first_port(job_id, lo, hi) - lo
    return [lo + (start + i) % n for i in range(n)]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a TCP bind to ``host:port`` succeeds now (a listener on any address
    of that port makes it fail). Without SO_REUSEADDR, as NCCL binds."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _open_ports_dir(scratch_fd: int, create: bool) -> Optional[int]:
    """fd of ``<scratch_dir>/nccl_ras_ports`` (root-owned 0755, created if ``create``),
    or None when it is missing or is anything else (a planted entry is never used)."""
    if create:
        try:
            os.mkdir(layout.RAS_PORTS_DIR, 0o755, dir_fd=scratch_fd)
        except FileExistsError:
            pass
    try:
        fd = os.open(layout.RAS_PORTS_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=scratch_fd)
    except OSError:
        return None
    st = os.fstat(fd)
    if st.st_uid != 0 and st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        return None
    return fd


def _read_small(dir_fd: int, name: str) -> Optional[str]:
    try:
        return fsio.read_regular(dir_fd, name, _MAX).decode("ascii", "replace").strip()
    except OSError:
        return None


def _stale(scratch_fd: int, holder: Optional[str]) -> bool:
    """A reservation whose job has no ``job_<id>`` scratch on this node any more."""
    if not holder or not holder.isdigit():
        return False  # unreadable: keep it (it costs one port)
    try:
        os.stat("job_%s" % holder, dir_fd=scratch_fd, follow_symlinks=False)
        return False
    except FileNotFoundError:
        return True
    except OSError:
        return False


def take_port(scratch_fd: int, job_id: str, lo: int, hi: int,
              is_free: Callable[[int], bool] = port_is_free) -> Tuple[Optional[int], str]:
    """Reserve this job's RAS port on this node under the scratch root ``scratch_fd``.

    Returns ``(port, note)``: the port (None when every port of the range is
    reserved or bound) and a one-line note for the log (which port, and why not the
    first choice). A job that already holds a reservation (a re-run prolog, the
    next attempt of a requeued job) gets the same port again. Raises OSError only
    when the reservation directory cannot be created.
    """
    jid = layout.unique_job_id(job_id)
    dfd = _open_ports_dir(scratch_fd, create=True)
    if dfd is None:
        raise OSError(errno.EPERM, "%s is not a root-owned directory" % layout.RAS_PORTS_DIR)
    try:
        first = first_port(jid, lo, hi)
        skipped = []
        for port in candidates(jid, lo, hi):
            name = str(port)
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o644, dir_fd=dfd)
            except FileExistsError:
                holder = _read_small(dfd, name)
                if holder == jid:
                    return port, "port %d (already this job's)" % port
                if not _stale(scratch_fd, holder):
                    skipped.append("%d reserved by job %s" % (port, holder))
                    continue
                try:
                    os.unlink(name, dir_fd=dfd)
                    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                                 0o644, dir_fd=dfd)
                except OSError:
                    skipped.append("%d reserved" % port)
                    continue
            if not is_free(port):
                os.close(fd)
                os.unlink(name, dir_fd=dfd)
                skipped.append("%d in use" % port)
                continue
            with os.fdopen(fd, "w") as f:
                f.write(jid + "\n")
            why = "" if port == first else " (not %d: %s)" % (first, "; ".join(skipped[:3]))
            return port, "port %d%s" % (port, why)
        return None, "no free port in %d-%d (%d reserved or in use)" % (lo, hi, len(skipped))
    finally:
        os.close(dfd)


def release_ports(scratch_fd: int, job_id: str) -> List[int]:
    """Give back every RAS port this job reserved on this node (the epilog, after the
    job's last step). Returns the ports released; never raises for a missing
    directory or a file that is not the job's."""
    jid = layout.unique_job_id(job_id)
    dfd = _open_ports_dir(scratch_fd, create=False)
    if dfd is None:
        return []
    out = []
    try:
        for name in os.listdir(dfd):
            if name.isdigit() and _read_small(dfd, name) == jid:
                try:
                    os.unlink(name, dir_fd=dfd)
                    out.append(int(name))
                except OSError:
                    pass
    finally:
        os.close(dfd)
    return sorted(out)


def release_at(scratch_dir: str, job_id: str) -> List[int]:
    """:func:`release_ports` under the scratch root path ``scratch_dir`` (the epilog);
    [] when it is missing or not a directory (never followed through a final symlink)."""
    try:
        fd = os.open(scratch_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        return release_ports(fd, job_id)
    finally:
        os.close(fd)


def ras_addr(port: int) -> str:
    """``localhost:<port>``, the value of NCCL_RAS_ADDR for a job's port. Pure."""
    return "%s:%d" % (RAS_HOST, port)


class RasOrigin(enum.Enum):
    """Where the NCCL RAS address the ranks use comes from."""
    JOB_OVERRIDES = "job_overrides"  #: the job's NCCL_RAS_ADDR wins over the prolog's per-job address
    PROLOG = "prolog"                #: the per-job address the prolog chose
    JOB = "job"                      #: the job's NCCL_RAS_ADDR, no per-job address on this node
    DEFAULT = "default"              #: NCCL's default address, no per-job address on this node


class AddressInUse(NamedTuple):
    """The RAS address the ranks use (None: NCCL's default), its :class:`RasOrigin`, and the
    prolog's per-job address (None when this node has none)."""
    address: Optional[str]
    origin: RasOrigin
    ours: Optional[str]

    def sentence(self) -> str:
        """Where the address comes from, in words, for the monitor's log."""
        if self.origin is RasOrigin.JOB_OVERRIDES:
            return ("NCCL_RAS_ADDR=%s set by the job is used (it wins over the per-job "
                    "address %s the prolog chose)" % (self.address, self.ours))
        if self.origin is RasOrigin.PROLOG:
            return "per-job address %s (chosen by the prolog)" % self.address
        if self.origin is RasOrigin.JOB:
            return "NCCL_RAS_ADDR=%s set by the job (no per-job address on this node)" % self.address
        return "NCCL's default address (no per-job address on this node)"


def address_in_use(env: Mapping[str, str], job_env: Mapping[str, str]) -> AddressInUse:
    """The NCCL RAS address the job's ranks use and where it comes from (:class:`AddressInUse`;
    its :meth:`~AddressInUse.sentence` for the monitor's log): ``env`` is the job's environment
    (NCCL_RAS_ADDR as the ranks see it), ``job_env`` the prolog's ``hangkit.env`` of this node
    (:func:`read_job_env`). Pure."""
    used = env.get(layout.NCCL_RAS_ADDR_ENV) or None
    ours = job_env.get(layout.NCCL_RAS_ADDR_ENV) or None
    if used and ours and used != ours:
        return AddressInUse(used, RasOrigin.JOB_OVERRIDES, ours)
    if used and used == ours:
        return AddressInUse(used, RasOrigin.PROLOG, ours)
    if used:
        return AddressInUse(used, RasOrigin.JOB, None)
    return AddressInUse(None, RasOrigin.DEFAULT, None)


def read_job_env(path: str) -> dict:
    """``KEY=VALUE`` lines of a ``hangkit.env`` as a dict ({} when unreadable). Read
    by the monitor, as the job's user. Never follows a symlink."""
    try:
        text = fsio.read_regular(path, limit=64 * 1024).decode("utf-8", "replace")
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep and not line.startswith("#"):
            out[k] = v
    return out
