"""Frame classification: which thread is the main one, which frames are the user's, which
collective a chain is in, and the grouping key of a call chain.

Chains are tuples of :class:`hpc_hangkit.parse.model.Frame`, innermost first, as the
parsers (faulthandler, py-spy, tracebacks) produce them. Rules (docs/report.md):

- **Main thread by outermost frame**, not depth (:func:`main_thread`).
- **Grouping key**: file base name, line and last dotted part of the function of every
  Python frame (:func:`key_of`), so faulthandler (full paths, ``co_name``) and py-spy
  text (short paths, qualified names) of one position compare equal.
- **Position is what the user called** (:func:`position_key`): the innermost user frame
  (with its callers) plus the outermost distributed API frame below it; the frames inside
  that API are detail, not part of the position.
- **Collective**: the distributed API the user called (:func:`user_api`), else
  torch.distributed / deepspeed / horovod Python frames, mpi4py frames, c10d / gloo /
  NCCL / MPI native frames (:func:`collective_of`).
"""
import hashlib
import json
import re
import sys
from typing import List, Optional, Sequence, Tuple

from hpc_hangkit.parse.model import Frame, Sample, Thread, basename, frame, is_library_path

__all__ = ["is_library_frame", "user_frame", "user_api", "position_key", "inside_api", "collective_of", "in_backward",
           "main_thread", "is_startup", "canon",
           "key_of", "chain_id", "frames_json", "frames_from_json", "chain_rank", "better_frames",
           "format_frames"]

_THREAD_BOOT_FUNCS = frozenset(("_bootstrap", "_bootstrap_inner", "Thread._bootstrap",
                                "Thread._bootstrap_inner"))
_MAIN_OUTER_FUNCS = frozenset(("_run_module_as_main", "_run_code", "<module>"))
_COLLECTIVE_NATIVE = re.compile(r"(^c10d::|^gloo::|^PMPI_|^MPI_|^MPIR_|^ompi_|^ncclGroup|^nccl[A-Z]"
                                r"|^MPIDI_|^mca_coll)")
_TORCH_DIST = ("torch/distributed/", "torch\\distributed\\", "torch/nn/parallel/distributed.py",
               "deepspeed/comm/", "horovod/")
_TORCH_WRAPPERS = frozenset(("wrapper", "_exception_logger.<locals>.wrapper", "_time_logger.<locals>.wrapper"))


def is_library_frame(f: Frame) -> bool:
    """True for frames that are not the user's code: native frames, and Python frames whose
    file :func:`hpc_hangkit.parse.model.is_library_path` calls library code."""
    return f.native or is_library_path(f.file)


def user_frame(chain: Sequence[Frame]) -> Optional[Frame]:
    """The innermost frame of the user's code (outside torch/mpi4py/stdlib/site-packages).

    ``chain`` is innermost first. Falls back to the innermost Python frame when
    every frame is library code, and to None for an empty chain.
    """
    first_py = None
    framework_free = None
    for f in chain:
        if f.native:
            continue
        if first_py is None:
            first_py = f
        if not is_library_frame(f):
            return f
        if framework_free is None and not _is_framework(f):
            framework_free = f
    # the user's own code may be installed in site-packages: then the innermost frame
    # outside the frameworks (torch, mpi4py, numpy, stdlib, hpc_hangkit) stands for it
    return framework_free or first_py


def _is_framework(f: Frame) -> bool:
    p = f.file.replace("\\", "/")
    if p.startswith("<") or re.search(r"/lib/python\d[^/]*/(?!site-packages|dist-packages)", p):
        return True
    for top in ("torch", "mpi4py", "numpy", "hpc_hangkit", "threading.py", "concurrent", "importlib"):
        if "/%s/" % top in p or p.startswith(top + "/") or p.endswith("/" + top):
            return True
    return False


def _is_api_frame(f: Frame) -> bool:
    """A Python frame of a distributed API (torch.distributed, deepspeed.comm, horovod, DDP,
    mpi4py) that is not one of torch's logging wrappers."""
    if f.native:
        return False
    p = f.file
    if not (any(t in p for t in _TORCH_DIST) or p.startswith(("torch/distributed", "deepspeed/comm"))
            or "mpi4py" in p):
        return False
    return not (f.function in _TORCH_WRAPPERS or f.function.endswith(".wrapper"))


def _split_at_user(chain: Sequence[Frame]) -> Tuple[Tuple[Frame, ...], int, Optional[Frame]]:
    """``(python frames, index of the user frame in them, the API frame)``: the API frame is
    the outermost distributed API frame inward of the user frame (None without one, or when
    no frame is the user's: then the index is 0)."""
    py = tuple(f for f in chain if not f.native)
    u = user_frame(py)
    if u is None or is_library_frame(u) and _is_framework(u):
        return py, 0, None  # every frame is a framework's: nothing is "below the user"
    i = py.index(u)
    for f in reversed(py[:i]):
        if _is_api_frame(f):
            return py, i, f
    return py, i, None


def user_api(chain: Sequence[Frame]) -> Optional[Frame]:
    """The distributed API frame the user called: the outermost torch.distributed (also
    deepspeed.comm, horovod, DDP) or mpi4py Python frame inward of the innermost user frame
    (:func:`user_frame`), logging wrappers skipped. ``chain`` innermost first. None when the
    user frame calls no such API (or every frame is a framework's)."""
    return _split_at_user(chain)[2]


def position_key(chain: Sequence[Frame], depth: Optional[int] = None) -> tuple:
    """The grouping key of a position: ``(api, frames)``. With a distributed API below the
    user frame (:func:`user_api`): ``api`` is its ``(file base name, last dotted part of the
    function)`` and ``frames`` the :func:`key_of` of the user frame and its callers, so the
    frames inside the API (internal lines, its inner collectives and their sequence ids)
    never split a group. Otherwise ``api`` is None and ``frames`` the key of every Python
    frame. ``depth``: the raw innermost ``depth`` Python frames instead, internal ones
    included (``--depth``: grouping asked for by frame count), with ``api`` None."""
    if depth:
        return None, key_of([f for f in chain if not f.native][:depth])
    py, i, api = _split_at_user(chain)
    if api is None:
        return None, key_of(py)
    return (basename(api.file), api.function.rsplit(".", 1)[-1]), key_of(py[i:])


def inside_api(chain: Sequence[Frame]) -> Tuple[Frame, ...]:
    """The Python frames inward of the user frame when it calls a distributed API
    (:func:`user_api`), innermost first: the detail a position leaves out (``()`` otherwise)."""
    py, i, api = _split_at_user(chain)
    return py[:i] if api is not None else ()


def collective_of(chain: Sequence[Frame]) -> Optional[str]:
    """Name of the collective the chain is in, or None when no frame shows one.

    The API the user called (:func:`user_api`: ``broadcast_object_list``, not the
    ``broadcast`` it runs) when there is one. Otherwise torch.distributed: the innermost
    ``torch/distributed`` function that is not a logging wrapper (``all_reduce``,
    ``barrier``, ...). MPI: the mpi4py frame (``allreduce``, ``Barrier``) or the innermost
    ``PMPI_*``/``MPI_*`` native frame. c10d/gloo/NCCL native frames: ``c10d`` etc.
    """
    api = user_api(chain)
    if api is not None:
        return api.function.rsplit(".", 1)[-1]
    native_hit = None
    for f in chain:
        if f.native:
            if "mpi4py" in f.file and not f.function.startswith("0x") and not f.function.startswith("MPI_PyMPI"):
                return f.function
            if native_hit is None and _COLLECTIVE_NATIVE.match(f.function):
                native_hit = f.function.split("(")[0]
            continue
        p = f.file
        if any(t in p for t in _TORCH_DIST) or p.startswith(("torch/distributed", "deepspeed/comm")):
            if f.function in _TORCH_WRAPPERS or f.function.endswith(".wrapper"):
                continue
            return f.function.rsplit(".", 1)[-1]
        if "mpi4py" in p:
            return f.function.rsplit(".", 1)[-1]
    return native_hit


#: autograd's entry into its C++ engine: DDP's reducer issues its gradient all_reduce from there
_BACKWARD = (("autograd/graph.py", "_engine_run_backward"), ("autograd/__init__.py", "backward"),
             ("autograd/__init__.py", "grad"))


def in_backward(chain: Sequence[Frame]) -> bool:
    """Whether the chain (innermost first) stands in autograd's backward engine with no user
    frame inward of it: a rank of a DDP job waiting in the reducer's all_reduce shows this and
    no collective frame (the collective is issued from C++); so does a long backward."""
    for f in chain:
        if f.native:
            continue
        p = f.file.replace("\\", "/")
        if any(p.endswith(tail) and f.function.rsplit(".", 1)[-1] == fn for tail, fn in _BACKWARD):
            return True
        if not is_library_frame(f):
            return False
    return False


def _is_thread_boot(f: Frame) -> bool:
    return f.function in _THREAD_BOOT_FUNCS and basename(f.file) == "threading.py"


def _outermost_py(t: Thread) -> Optional[Frame]:
    for f in reversed(t.frames):
        if not f.native:
            return f
    return None


def main_thread(sample: Sample) -> Optional[Thread]:
    """The main thread of one dump, found by its OUTERMOST frame (not its depth).

    Score per thread: 3 if the outermost Python frame is a script's ``<module>``
    (not inside importlib) or runpy's ``_run_module_as_main``/``_run_code``; 0 if it
    is ``threading``'s ``_bootstrap`` (a helper thread); 1 otherwise. Ties go to
    the thread py-spy calls ``MainThread`` / faulthandler marks ``Current``
    (signals are sent to the main thread), then to the LAST block (CPython prints
    the main thread last). Threads with no Python frame never win. Returns None
    when no thread has a Python frame.
    """
    threads = sample.threads
    if len(threads) == 1:
        t = threads[0]
        return t if t.frames and not all(f.native for f in t.frames) else None
    best = None
    best_score = None
    n = len(threads)
    for i, t in enumerate(threads):
        outer = _outermost_py(t)
        if outer is None:
            continue
        if outer.function in _MAIN_OUTER_FUNCS and not outer.file.startswith("<frozen"):
            s = 3
        elif _is_thread_boot(outer):
            s = 0
        else:
            s = 1
        score = (s, 1 if t.name == "MainThread" else 0, 1 if t.current else 0, i if n > 1 else 0)
        if best_score is None or score > best_score:
            best, best_score = t, score
    return best


def is_startup(chain: Sequence[Frame]) -> bool:
    """True if the chain is inside an import in progress (``importlib._bootstrap``)."""
    for f in chain:
        if f.file.startswith("<frozen importlib") or (
                f.function in ("_find_and_load", "_call_with_frames_removed", "_load_unlocked")
                and "importlib" in f.file):
            return True
    return False


def canon(f: Frame) -> tuple:
    """``(file base name, line, last dotted part of the function)``: one frame as the grouping compares it."""
    return (basename(f.file), f.line, f.function.rsplit(".", 1)[-1])


def key_of(chain: Sequence[Frame]) -> tuple:
    """Grouping key: canonical Python frames, innermost first."""
    return tuple(canon(f) for f in chain if not f.native)


def chain_id(key: tuple) -> str:
    """The chain id of a grouping key (:func:`key_of`): 16 hex digits of its SHA-1, content-addressed
    so the same position gets the same id on every node."""
    return hashlib.sha1(repr(key).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def frames_json(chain: Sequence[Frame]) -> list:
    """A chain as node summaries store it: ``[[file, line, function, native], ...]``, innermost first."""
    return [[f.file, f.line, f.function, bool(f.native)] for f in chain]


def frames_from_json(data) -> Tuple[Frame, ...]:
    """The inverse of :func:`frames_json`; items that are not ``[file, line, function(, native)]`` are skipped."""
    out = []
    for item in data or ():
        try:
            out.append(frame(str(item[0]), int(item[1]), str(item[2]), bool(item[3]) if len(item) > 3 else False))
        except (TypeError, ValueError, IndexError):
            continue
    return tuple(out)


def chain_rank(fj: list) -> tuple:
    """Total order used to pick one representative chain deterministically: full paths
    (faulthandler, py-spy JSON) over py-spy text's short ones, then more frames, then the JSON."""
    py = [f for f in fj if not (len(f) > 3 and f[3])]
    return (sum(1 for f in py if str(f[0]).startswith("/")), sum(len(str(f[0])) for f in py),
            len(fj), json.dumps(fj))


def better_frames(a: list, b: list) -> bool:
    """True if frames ``a`` rank above ``b`` by :func:`chain_rank` (equal lists: False, cheaply)."""
    return a != b and chain_rank(a) > chain_rank(b)


def format_frames(chain: Sequence[Frame]) -> List[str]:
    """A chain as traceback-style lines (``  File "f", line N in fn``), for a fatal dump's exit traceback."""
    return ['  File "%s", line %d in %s' % (f.file, f.line, f.function) if not f.native
            else "  %s (%s)" % (f.function, f.file) for f in chain]


