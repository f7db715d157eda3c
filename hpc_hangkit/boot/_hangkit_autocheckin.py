"""Automatic check-in for the Python-level torch.distributed collectives.

Stdlib-only, CPython >= 3.8 (this file is loaded by the boot ``sitecustomize``
in a user's interpreter, where hpc_hangkit may not be installed).

``arm(env)`` is called by the boot ``sitecustomize`` after the watchdog is
armed, when ``HANGKIT_AUTO_CHECKIN`` is true. It installs a ``sys.meta_path``
finder that waits for ``torch.distributed`` to be imported; when that module
has finished loading, the collectives in its namespace (``all_reduce``,
``broadcast``, ``barrier``, ``all_gather``, ``reduce_scatter``, ``all_to_all``,
``send``/``recv``, ``isend``/``irecv``, the ``*_object`` variants and their
relatives) are replaced by thin wrappers that call the watchdog's
``checkpoint(label)`` and then the original function. Processes that never
import torch pay one string comparison per import and nothing else.

The label names the op, a per-group sequence number and the group, e.g.
``torch.distributed.all_reduce seq=12 group=world`` or, for point-to-point
ops (counted separately, because only the two peers take part),
``torch.distributed.send p2p=3 group=world peer=2``. Ranks that issue the same
collectives in the same order carry the same ``seq`` at the same call, so a
rank whose heartbeat says ``seq=11`` while the others say ``seq=12`` is one
collective behind.

Not seen (see docs/agree.md): collectives issued from C++ (DDP's gradient
buckets, ``_broadcast_coalesced``, FSDP/c10d internals that call the C++
process group directly), functional collectives
(``torch.distributed._functional_collectives``), calls made through
``torch.distributed.distributed_c10d.<op>`` instead of the
``torch.distributed`` namespace, and references taken before the module
finished loading.
"""

import functools
import sys
import weakref

TARGET = "torch.distributed"

# (name, is point-to-point, name of the peer argument or None)
OPS = (
    ("all_reduce", False, None),
    ("all_reduce_coalesced", False, None),
    ("broadcast", False, "src"),
    ("barrier", False, None),
    ("monitored_barrier", False, None),
    ("all_gather", False, None),
    ("all_gather_into_tensor", False, None),
    ("all_gather_coalesced", False, None),
    ("reduce", False, "dst"),
    ("reduce_scatter", False, None),
    ("reduce_scatter_tensor", False, None),
    ("all_to_all", False, None),
    ("all_to_all_single", False, None),
    ("gather", False, "dst"),
    ("scatter", False, "src"),
    ("all_gather_object", False, None),
    ("broadcast_object_list", False, "src"),
    ("gather_object", False, "dst"),
    ("scatter_object_list", False, "src"),
    ("send", True, "dst"),
    ("recv", True, "src"),
    ("isend", True, "dst"),
    ("irecv", True, "src"),
    ("send_object_list", True, "dst"),
    ("recv_object_list", True, "src"),
    ("batch_isend_irecv", True, None),
)

_MARK = "_hangkit_original"

_finder = None
_checkpoint = None
_patched = []  # names wrapped in the loaded module (for tests and docs)

# Per-group counters: id(group) -> [display name, collective seq, p2p seq].
# The default group (passed as None or as the object) is "world".
_groups = {}
_refs = {}  # id(group) -> weakref (or the group) that clears its key
_caches = []  # every wrapper's {id(group): (counters, label format)}


def arm(env=None, checkpoint=None):
    """Install the lazy torch.distributed check-in hook (idempotent).

    ``env``: the environment mapping (unused beyond documentation; the caller
    has already decided that auto check-in is on). ``checkpoint``: the function
    to call with each label; default ``_hangkit_core.checkpoint`` from the boot
    directory. If ``torch.distributed`` is already imported it is wrapped at
    once; otherwise the wrapping happens when it is imported. Returns the
    number of functions wrapped so far (0 until torch.distributed loads).
    """
    global _finder, _checkpoint
    if checkpoint is None:
        import _hangkit_core  # the watchdog core, same directory

        checkpoint = _hangkit_core.checkpoint
    _checkpoint = checkpoint
    mod = sys.modules.get(TARGET)
    if mod is not None and getattr(mod, "__spec__", None) is not None and hasattr(mod, "is_available"):
        _patch(mod)
    elif _finder is None:
        _finder = _Finder()
        sys.meta_path.insert(0, _finder)
    return len(_patched)


def disarm():
    """Remove the import hook and restore the original functions (for tests)."""
    global _finder
    if _finder is not None:
        try:
            sys.meta_path.remove(_finder)
        except ValueError:
            pass
        _finder = None
    mod = sys.modules.get(TARGET)
    if mod is not None:
        for name in _patched:
            fn = getattr(mod, name, None)
            orig = getattr(fn, _MARK, None)
            if orig is not None:
                setattr(mod, name, orig)
    del _patched[:]
    _groups.clear()
    _refs.clear()
    for cache in _caches:
        cache.clear()


class _Finder(object):
    """Meta-path finder that only answers for torch.distributed.

    It asks the finders after it for the real spec and wraps its loader, so
    that the module is wrapped right after its own code ran. The module keeps
    its real loader (restored on ``__loader__`` and ``__spec__.loader``).
    """

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TARGET:
            return None
        spec = None
        for finder in list(sys.meta_path):
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            try:
                spec = find(fullname, path, target)
            except Exception:
                spec = None
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader)
        return spec

    def invalidate_caches(self):
        pass


class _PatchingLoader(object):
    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def create_module(self, spec):
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        global _finder
        try:
            self._inner.exec_module(module)
        finally:
            # the module must look untouched: its real loader, no wrapper
            try:
                module.__loader__ = self._inner
                if module.__spec__ is not None:
                    module.__spec__.loader = self._inner
            except Exception:
                pass
        # loaded: the hook has done its job
        if _finder is not None:
            try:
                sys.meta_path.remove(_finder)
            except ValueError:
                pass
            _finder = None
        _patch(module)


def _patch(mod):
    """Wrap the collectives found in ``mod``; failures never reach the user."""
    try:
        import inspect
    except Exception:  # pragma: no cover - stdlib
        return
    for name, p2p, peer in OPS:
        fn = getattr(mod, name, None)
        if fn is None or not callable(fn) or getattr(fn, _MARK, None) is not None:
            continue
        try:
            params = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = []
        gidx = params.index("group") if "group" in params else -1
        pidx = params.index(peer) if peer and peer in params else -1
        try:
            setattr(mod, name, _wrap(mod, name, fn, p2p, gidx, peer, pidx))
            _patched.append(name)
        except Exception:
            continue


def _group_entry(mod, group):
    """Counters ``[display name, seq, p2p seq]`` for ``group``, made on first sight.

    ``None`` and the default process group share the "world" counters. Keys
    are ``id(group)``; a weak reference removes the key (here and in every
    wrapper's label cache) when the group object dies, so an id is never
    reused while its key exists (a group that cannot be weakly referenced is
    kept alive instead).
    """
    world = _groups.get(id(None))
    if world is None:
        world = _groups[id(None)] = ["world", 0, 0]
    if group is None:
        return world
    key = id(group)
    entry = _groups.get(key)
    if entry is not None:
        return entry
    try:
        if group is mod.distributed_c10d._get_default_group():
            entry = world
    except Exception:
        pass
    if entry is None:
        try:
            name = str(group.group_name)
        except Exception:
            name = hex(id(group))
        entry = [name, 0, 0]
    try:
        _refs[key] = weakref.ref(group, lambda _r, k=key: _forget(k))
    except TypeError:
        _refs[key] = group
    _groups[key] = entry
    return entry


def _forget(key):
    _groups.pop(key, None)
    _refs.pop(key, None)
    for cache in _caches:
        cache.pop(key, None)


def _wrap(mod, name, fn, p2p, gidx, peer, pidx):
    """The check-in wrapper of ``fn`` (``torch.distributed.<name>``).

    ``gidx``/``pidx``: positional index of the ``group`` / peer argument
    (-1: keyword only). Per call: one dict lookup for the group's counters and
    precomputed label format, one increment, one ``%`` format, checkpoint.
    """
    slot = 2 if p2p else 1
    head = "torch.distributed.%s %s=" % (name, "p2p" if p2p else "seq")
    peer_word = (" peer=" if p2p else " %s=" % peer) if peer else None
    cache = {}  # id(group) -> (counters, label format)
    _caches.append(cache)

    def lookup(group):
        entry = _group_entry(mod, group)
        fmt = head.replace("%", "%%") + "%d group=" + entry[0].replace("%", "%%")
        got = cache[id(group)] = (entry, fmt)
        return got

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            group = args[gidx] if len(args) > gidx >= 0 else kwargs.get("group")
            got = cache.get(id(group))
            if got is None:
                got = lookup(group)
            entry = got[0]
            entry[slot] += 1
            label = got[1] % entry[slot]
            if peer_word is not None:
                who = args[pidx] if len(args) > pidx >= 0 else kwargs.get(peer)
                if who is not None:
                    label = label + peer_word + str(who)
            _checkpoint(label)
        except Exception:
            pass
        return fn(*args, **kwargs)

    setattr(wrapper, _MARK, fn)
    return wrapper
