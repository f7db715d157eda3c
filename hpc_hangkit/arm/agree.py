"""``ranks_agree`` (the positive audit) and the ``@collective`` decorator.

Rank-side API, cheap to import: neither torch nor mpi4py is imported here;
the communication library is whichever one the job has already imported
(``sys.modules``) and initialised.

- :func:`ranks_agree` -- every rank passes a label (say, the branch it took);
  returns when all ranks of the group gave the same label, else raises
  :class:`RanksDisagree` naming which ranks gave which label. It is itself a
  collective: while it waits, the rank's heartbeat says
  ``in ranks_agree(<label>)``, so a rank that never arrives is named by the
  roll call from the others' dumps and heartbeats.
- :func:`collective` -- decorator for a user's own functions that contain
  collectives: on entry it checkpoints ``entering <name>() [collective]``.
  When the watchdog is not armed it costs one attribute test (and the call
  of the wrapper itself).

See docs/agree.md.
"""

import functools
import os
import sys

from hpc_hangkit.arm import watchdog as _watchdog
from hpc_hangkit.ranges import format_ranks, ranks_label

__all__ = ["ranks_agree", "collective", "RanksDisagree"]


class RanksDisagree(RuntimeError):
    """Ranks reached ``ranks_agree`` with different labels.

    Attributes: ``label`` (the label to compare, as given by this rank),
    ``labels`` (dict global rank -> label string, every rank of the group),
    ``groups`` (list of ``(label, [global ranks])``, ordered by lowest rank),
    ``backend`` (``"torch.distributed"`` or ``"mpi4py"``).
    Every rank of the group raises the same error (same message).
    """

    def __init__(self, label, labels, backend, group_desc):
        self.label = label
        self.labels = dict(labels)
        self.backend = backend
        by_label = {}
        for rank in sorted(self.labels):
            by_label.setdefault(self.labels[rank], []).append(rank)
        self.groups = sorted(by_label.items(), key=lambda kv: kv[1][0])
        lines = [
            "ranks_agree: ranks disagree: %d labels across %d ranks (%s, %s):"
            % (len(self.groups), len(self.labels), backend, group_desc)
        ]
        for text, ranks in self.groups:
            lines.append(
                "  %s: %r" % (ranks_label(ranks), text)
            )
        super().__init__("\n".join(lines))


# ---------------------------------------------------------------- backends


def _torch_dist():
    """The imported and initialised torch.distributed module, or None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return dist
    except Exception:
        pass
    return None


def _mpi():
    """The imported, initialised and not finalised mpi4py.MPI module, or None."""
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is None:
        return None
    try:
        if MPI.Is_initialized() and not MPI.Is_finalized():
            return MPI
    except Exception:
        pass
    return None


def _world_size_from_env():
    for var in ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"):
        value = os.environ.get(var)
        if value and value.strip().isdigit():
            return int(value), var
    return 1, None


def _is_non_member(dist, group):
    """new_group() hands ranks outside the group a sentinel int, not a group."""
    try:
        return group is dist.GroupMember.NON_GROUP_MEMBER or (
            isinstance(group, int) and group == dist.GroupMember.NON_GROUP_MEMBER
        )
    except Exception:
        return False


def _coll_device(dist, group):
    """The device a collective of ``group`` takes tensors on (what all_gather_object uses)."""
    c10d = dist.distributed_c10d
    for name in ("_get_object_coll_device", "_get_pg_default_device"):
        fn = getattr(c10d, name, None)
        if fn is not None:
            try:
                return fn(group)
            except Exception:
                pass
    import torch

    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _all_gather_text(dist, text, group, n):
    """Every member's ``text`` (str), in group rank order: one all_gather of the byte
    lengths, one of the padded UTF-8 bytes (uint8 tensors on the group's device).
    Not all_gather_object: it pickles through numpy, which a torch install may lack.
    The c10d functions are the unwrapped ones: the auto check-in must not overwrite
    the ranks_agree label."""
    import torch

    c10d = dist.distributed_c10d
    dev = _coll_device(dist, group)
    data = text.encode("utf-8", "replace")
    sizes = [torch.zeros(1, dtype=torch.long, device=dev) for _ in range(n)]
    c10d.all_gather(sizes, torch.tensor([len(data)], dtype=torch.long, device=dev), group=group)
    lens = [int(t.item()) for t in sizes]
    width = max(lens + [1])
    buf = torch.zeros(width, dtype=torch.uint8)
    if data:
        buf[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    outs = [torch.zeros(width, dtype=torch.uint8, device=dev) for _ in range(n)]
    c10d.all_gather(outs, buf.to(dev), group=group)
    return [bytes(t[:k].cpu().tolist()).decode("utf-8", "replace") for t, k in zip(outs, lens)]


def _gather_torch(dist, text, group, before):
    """All labels of ``group`` (None = world) keyed by global rank, and a
    description of the group; ``(None, "")`` if this rank is not a member.
    ``before()`` runs once membership is known, right before the gather."""
    if group is not None and (_is_non_member(dist, group) or dist.get_rank(group) < 0):
        return None, ""
    n = dist.get_world_size(group)
    before()
    out = _all_gather_text(dist, text, group, n)
    if group is None:
        ranks = list(range(len(out)))
        desc = "world of %d" % len(out)
    else:
        ranks = list(dist.get_process_group_ranks(group))
        desc = "group %s of ranks %s" % (getattr(group, "group_name", "?"), format_ranks(ranks))
    return dict(zip(ranks, out)), desc


def _gather_mpi(MPI, text, comm, before):
    """As :func:`_gather_torch`, for an mpi4py communicator (None = COMM_WORLD)."""
    if comm is None:
        comm = MPI.COMM_WORLD
    if comm == MPI.COMM_NULL:
        return None, ""
    before()
    out = comm.allgather(text)
    size = len(out)
    if comm == MPI.COMM_WORLD:
        ranks = list(range(size))
        desc = "COMM_WORLD of %d" % size
    else:
        try:
            ranks = list(
                MPI.Group.Translate_ranks(comm.Get_group(), list(range(size)), MPI.COMM_WORLD.Get_group())
            )
            if any(r is None or r < 0 for r in ranks):
                raise ValueError("not in COMM_WORLD")
            desc = "%s of world ranks %s" % (_comm_name(comm), format_ranks(ranks))
        except Exception:
            ranks = list(range(size))
            desc = "%s of %d, its own ranks" % (_comm_name(comm), size)
    return dict(zip(ranks, out)), desc


def _comm_name(comm):
    try:
        name = comm.Get_name()
    except Exception:
        name = ""
    return "communicator %r" % name if name else "sub-communicator"


def _backend_for(group):
    """(name, module) of the library that ``group`` (or the job) uses."""
    if group is not None:
        MPI = sys.modules.get("mpi4py.MPI")
        if MPI is not None and isinstance(group, MPI.Comm):
            mpi = _mpi()
            if mpi is None:
                raise RuntimeError("ranks_agree: group is an mpi4py communicator but MPI is not initialised")
            return "mpi4py", mpi
        dist = sys.modules.get("torch.distributed")
        if dist is not None and (
            isinstance(group, getattr(dist, "ProcessGroup", ())) or _is_non_member(dist, group)
        ):
            d = _torch_dist()
            if d is None:
                raise RuntimeError(
                    "ranks_agree: group is a torch.distributed ProcessGroup but "
                    "torch.distributed is not initialised"
                )
            return "torch.distributed", d
        raise TypeError(
            "ranks_agree: group must be a torch.distributed ProcessGroup or an "
            "mpi4py communicator, got %s" % type(group).__name__
        )
    dist = _torch_dist()
    if dist is not None:
        return "torch.distributed", dist
    mpi = _mpi()
    if mpi is not None:
        return "mpi4py", mpi
    return None, None


# ---------------------------------------------------------------- public API


def ranks_agree(label, group=None):
    """Check that every rank of ``group`` reached this call with the same label.

    ``label``: any value, compared as ``str(label)`` (for example the name of
    the branch this rank took, or ``"step %d" % step``).
    ``group``: ``None`` for the whole job, a ``torch.distributed``
    ``ProcessGroup`` (any backend) or an ``mpi4py`` communicator.

    The library is the one the job already imported and initialised (checked
    in ``sys.modules``; neither is imported here): torch.distributed if its
    default group is initialised, else mpi4py if ``MPI.Is_initialized()``.
    A rank outside ``group`` returns at once. A job with neither library in
    use returns at once when the environment says it is a single process
    (``WORLD_SIZE``, ``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``, ``PMIX_SIZE``,
    ``SLURM_NTASKS`` absent or 1).

    Collective: every rank of the group must call it. While it waits, the
    watchdog heartbeat label is ``in ranks_agree(<label>)``; on success it is
    ``passed ranks_agree(<label>)``.

    Returns None. Raises :class:`RanksDisagree` (a ``RuntimeError``) on every
    rank of the group when the labels differ, listing which ranks (global
    ranks, compressed like ``0,2-7``) gave which label; ``RuntimeError`` when
    the environment says there are several ranks but no initialised library
    was found; ``TypeError`` for a ``group`` of another kind. Errors of the
    library itself (timeouts, a peer that died) propagate unchanged.
    """
    text = label if isinstance(label, str) else str(label)
    name, lib = _backend_for(group)
    if lib is None:
        size, var = _world_size_from_env()
        if size > 1:
            raise RuntimeError(
                "ranks_agree: %s=%d says this job has %d ranks, but neither torch.distributed "
                "(init_process_group) nor mpi4py (MPI) is initialised in this process; "
                "call ranks_agree after initialising the one your job uses" % (var, size, size)
            )
        return None
    waiting = "in ranks_agree(%s)" % text

    def before():
        _watchdog.checkpoint(waiting)

    gather = _gather_mpi if name == "mpi4py" else _gather_torch
    labels, desc = gather(lib, text, group, before)
    if labels is None:  # not a member of the group
        return None
    if len(set(labels.values())) > 1:
        _watchdog.checkpoint("failed ranks_agree(%s)" % text)
        raise RanksDisagree(text, labels, name, desc)
    _watchdog.checkpoint("passed ranks_agree(%s)" % text)
    return None


def collective(func=None, label=None):
    """Declare a function as collective: it checks in on entry.

    Use as ``@collective``, ``@collective(label="grad sync")`` or
    ``@collective("grad sync")``. On each call, when the watchdog is armed,
    ``checkpoint("entering <label> [collective]")`` runs first, where the
    default label is the function's qualified name with ``()``, without the
    enclosing functions (``entering Trainer.sync_grads() [collective]``); the heartbeat then
    says which declared collective the rank last entered, even while the rank
    is blocked in C. When the watchdog is not armed the wrapper does one
    attribute test and calls the function (about 0.1-0.2 us per call in all,
    bench/bench_agree.py); arming is checked per call, so ``watch()`` after
    decoration still takes effect. Arguments, return value and
    exceptions pass through unchanged; ``functools.wraps`` metadata is kept
    and the original is at ``__wrapped__``.
    """
    if isinstance(func, str) and label is None:
        func, label = None, func
    if func is None:
        return functools.partial(collective, label=label)
    if not callable(func):
        raise TypeError("collective: expected a function, got %s" % type(func).__name__)
    if label is None:
        name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
        label = "%s()" % name.rpartition("<locals>.")[2]  # f.<locals>.Trainer.step -> Trainer.step
    text = "entering %s [collective]" % label
    # The watchdog core's arming state: a dict while armed, None otherwise
    # (_hangkit_core.is_armed() tests exactly this, but a call would cost more
    # than the test).
    core = _watchdog._core
    checkpoint = _watchdog.checkpoint

    # named for the stack dumps, where this frame shows as "agree.py:N in collective_call"
    @functools.wraps(func)
    def collective_call(*args, **kwargs):
        if core._state is not None:
            checkpoint(text)
        return func(*args, **kwargs)

    collective_call.__hangkit_label__ = text
    return collective_call
