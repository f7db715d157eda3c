"""Rank-side Flight Recorder dump trigger (stdlib-only, CPython >= 3.8).

Loaded by the boot ``sitecustomize`` in the user's interpreter, which calls
:func:`arm` with the job environment. What it does:

1. ``arm(env)`` installs a ``sys.meta_path`` finder that waits for
   ``torch.distributed.distributed_c10d`` to be imported and then wraps its
   ``init_process_group``. A process that never imports torch.distributed pays
   one string comparison per import, starts no thread and blocks no signal.
2. When ``init_process_group`` returns, one daemon thread ``hangkit-fr`` is
   started. It blocks the trigger signal (``SIGWINCH`` unless
   ``HANGKIT_FR_SIGNAL`` names another) *in that thread only*, writes a
   registration file ``$HANGKIT_SCRATCH_DIR/flight_recorder/trigger/rank_<r>.pid<pid>``
   (``pid=<pid> tid=<native thread id> signal=<NAME> rank=<r>``), and waits in
   ``signal.sigwait``.
3. The capture step (:func:`hpc_hangkit.evidence.flightrec.dump_ranks`) sends the signal
   to that thread with ``tgkill(pid, tid, sig)``. A thread-directed signal that
   the thread blocks stays pending for it, whatever the process's disposition,
   so no handler of the user is touched and the main thread is not interrupted.
4. The thread calls ``torch._C._distributed_c10d._dump_fr_trace(True, True,
   False)`` (pickle with stack frames) and writes
   ``$HANGKIT_SCRATCH_DIR/flight_recorder/rank_<r>.pickle`` and ``rank_<r>.json``
   (the same data as JSON), each via a temporary file and ``rename``. Any
   failure writes ``rank_<r>.json`` holding only ``{"dump_error": "..."}``.

Why this trigger: on a hung gloo/NCCL rank the main thread waits in C++ with
the GIL released (``c10d::Work::wait`` under ``gil_scoped_release``), so a
Python thread can run the dump API; measured on torch 2.13 CPU (see
docs/flight-recorder.md). Limit: a rank blocked in C *with the GIL held*
cannot run any Python thread; its dump times out and the capture side writes
the ``dump_error`` file. The Flight Recorder buffer itself is armed by torch
from ``TORCH_FR_BUFFER_SIZE`` (set by ``Settings.to_env``) when the process
group is created; arming later records nothing.
"""
import os
import sys
import threading

if __package__:  # hpc_hangkit.boot._hangkit_fr (e.g. the capture side reusing _jsonable)
    from . import _hangkit_names as _names
else:  # top-level, loaded by sitecustomize with the boot directory on sys.path
    import _hangkit_names as _names

TARGET = "torch.distributed.distributed_c10d"
DEFAULT_SIGNAL = "SIGWINCH"

_state = {"env": None, "started": False, "finder": None, "thread": None}


def _rank_guess(env):
    for k in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        v = env.get(k)
        if v is not None and v.strip().isdigit():
            return int(v)
    return None


def _write_atomic(path, data):
    tmp = "%s.tmp%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def _jsonable(o):
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, bytes):
        return o.decode("utf-8", "replace")
    if o is None or isinstance(o, (str, int, float, bool)):
        return o
    return str(o)


def dump_now(out_dir, rank=None):
    """Dump this process's Flight Recorder buffer into ``out_dir`` (``rank_<r>.pickle`` + ``.json``).

    Returns the JSON path. Never raises: a failure writes ``{"dump_error": ...}``
    to ``rank_<r>.json``. ``rank`` defaults to ``torch.distributed.get_rank()``.
    """
    import json  # here, not at import: this module loads at interpreter start in every rank

    if rank is None:
        rank = _current_rank()
    name = "rank_%s" % ("x" if rank is None else rank)
    jpath = os.path.join(out_dir, name + ".json")
    try:
        import pickle
        from torch._C import _distributed_c10d as c10d  # noqa: the job's own torch
        raw = c10d._dump_fr_trace(True, True, False)
        _write_atomic(os.path.join(out_dir, name + ".pickle"), raw)
        doc = _jsonable(pickle.loads(raw))  # our own process's data, not a foreign file
        _write_atomic(jpath, json.dumps(doc).encode())
    except BaseException as e:  # noqa: the rank must never die of this
        try:
            _write_atomic(jpath, json.dumps({"dump_error": "%s: %s" % (type(e).__name__, e)}).encode())
        except OSError:
            pass
    return jpath


def _current_rank():
    try:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    return _rank_guess(_state["env"] or os.environ)


def _signum(env):
    import signal
    name = (env.get(_names.ENV_FR_SIGNAL) or DEFAULT_SIGNAL).upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    return getattr(signal, name, signal.SIGWINCH), name


def _serve(out_dir, sig, signame):
    import signal
    signal.pthread_sigmask(signal.SIG_BLOCK, {sig})
    rank = _current_rank()
    tdir = os.path.join(out_dir, _names.FR_TRIGGER_DIR)
    os.makedirs(tdir, mode=0o700, exist_ok=True)
    reg = os.path.join(tdir, "rank_%s.pid%d" % ("x" if rank is None else rank, os.getpid()))
    _write_atomic(reg, ("pid=%d tid=%d signal=%s rank=%s\n" % (
        os.getpid(), threading.get_native_id(), signame, "x" if rank is None else rank)).encode())
    while True:
        signal.sigwait({sig})
        dump_now(out_dir)


def start(env=None):
    """Start the trigger thread now (idempotent). Called after ``init_process_group``; usable by hand."""
    if _state["started"]:
        return
    env = _state["env"] or env or os.environ
    scratch = env.get(_names.ENV_SCRATCH_DIR)
    if not scratch:
        return
    _state["started"] = True
    sig, signame = _signum(env)
    out_dir = os.path.join(scratch, _names.FLIGHT_RECORDER_DIR)
    t = threading.Thread(target=_serve, args=(out_dir, sig, signame), name="hangkit-fr", daemon=True)
    t.start()
    _state["thread"] = t


def _wrap(mod):
    orig = getattr(mod, "init_process_group", None)
    if orig is None or getattr(orig, "_hangkit_fr", False):
        return
    import functools

    @functools.wraps(orig)
    def init_process_group(*a, **kw):
        r = orig(*a, **kw)
        try:
            start()
        except Exception:
            pass
        return r

    init_process_group._hangkit_fr = True
    mod.init_process_group = init_process_group


class _Loader:
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            _wrap(module)
        except Exception:
            pass

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _Finder:
    """Meta-path finder that only reacts to ``torch.distributed.distributed_c10d``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TARGET:
            return None
        for f in sys.meta_path:
            if f is self or not hasattr(f, "find_spec"):
                continue
            spec = f.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


def arm(env):
    """Arm the trigger for this rank (called by boot ``sitecustomize``; never raises).

    Does nothing when ``HANGKIT_MODE`` is off/absent, ``HANGKIT_SCRATCH_DIR`` is
    unset, or ``TORCH_FR_BUFFER_SIZE`` is ``0`` (Flight Recorder off).
    """
    try:
        if (env.get(_names.ENV_MODE) or "off") == "off" or not env.get(_names.ENV_SCRATCH_DIR):
            return
        if (env.get(_names.TORCH_FR_BUFFER_ENV) or "").strip() == "0":
            return
        _state["env"] = dict(env)
        mod = sys.modules.get(TARGET)
        if mod is not None:  # already imported (e.g. armed late): wrap it, and start if initialised
            _wrap(mod)
            dist = sys.modules.get("torch.distributed")
            if dist is not None and dist.is_initialized():
                start()
            return
        if _state["finder"] is None:
            _state["finder"] = _Finder()
            sys.meta_path.insert(0, _state["finder"])
    except Exception:
        pass
