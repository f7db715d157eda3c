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

Group creation is checked in too: ``new_group``, ``new_subgroups``,
``new_subgroups_by_enumeration``, ``split_group`` and ``init_device_mesh`` (all
present in torch 2.13; a name the loaded torch lacks is skipped, and
``init_device_mesh`` is wrapped both in ``torch.distributed`` and in
``torch.distributed.device_mesh``, where most code imports it from). Their label
names the call, a per-process count of creation calls and the argument every rank
must pass alike, e.g. ``torch.distributed.new_group make=1 ranks=[0, 1]``, with
`` local`` appended when ``use_local_synchronization`` is true. ``new_group``'s
ranks are shown sorted unless ``sort_ranks=False`` (torch sorts them too). An
argument longer than :data:`ARGS_SHOWN` characters is cut after its first items
and followed by ``...#<crc32 of the whole>``, so two long lists that differ after
the cut still differ. The roll call reads these labels (SAME_LINE_DIFFERENT_ARGS,
docs/report.md).

Not seen (see docs/agree.md): collectives issued from C++ (DDP's gradient
buckets, ``_broadcast_coalesced``, FSDP/c10d internals that call the C++
process group directly), functional collectives
(``torch.distributed._functional_collectives``), calls made through
``torch.distributed.distributed_c10d.<op>`` instead of the
``torch.distributed`` namespace, and references taken before the module
finished loading.
"""

import functools
import operator
import sys
import weakref
import zlib

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

# (group-creation function, the argument every rank must pass alike)
MAKERS = (
    ("new_group", "ranks"),
    ("new_subgroups", "group_size"),
    ("new_subgroups_by_enumeration", "ranks_per_subgroup_list"),
    ("split_group", "split_ranks"),
    ("init_device_mesh", "mesh_shape"),
)
#: the submodule that also exports init_device_mesh (``from torch.distributed.device_mesh import ...``)
MESH_MODULE = "device_mesh"
#: characters of a creation argument kept in the label (a 200-byte slot holds the rest of the label too)
ARGS_SHOWN = 64

_MARK = "_hangkit_original"

_finder = None
_checkpoint = None
_patched = []  # names wrapped in the loaded module (for tests and docs)

# Per-group counters: id(group) -> [display name, collective seq, p2p seq].
# The default group (passed as None or as the object) is "world".
_groups = {}
_refs = {}  # id(group) -> weakref (or the group) that clears its key
_caches = []  # every wrapper's {id(group): (counters, label format)}
_made = [0]  # group-creation calls of this process, all makers together


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
            owner, _, attr = name.rpartition(".")
            where = sys.modules.get(TARGET + "." + owner) if owner else mod
            fn = getattr(where, attr, None)
            orig = getattr(fn, _MARK, None)
            if orig is not None:
                setattr(where, attr, orig)
    del _patched[:]
    _made[0] = 0
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
    mesh = sys.modules.get(TARGET + "." + MESH_MODULE)
    for owner, prefix in ((mod, ""), (mesh, MESH_MODULE + ".")):
        for name, arg in MAKERS:
            fn = getattr(owner, name, None) if owner is not None else None
            if fn is None or not callable(fn) or getattr(fn, _MARK, None) is not None:
                continue
            if prefix and name != "init_device_mesh":
                continue
            try:
                params = list(inspect.signature(fn).parameters)
            except (TypeError, ValueError):
                params = []
            try:
                setattr(owner, name, _wrap_maker(name, fn, arg, params))
                _patched.append(prefix + name)
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


def _plain(value):
    """``value`` as plain Python for the label: sequences (nested too) as lists, integers as int."""
    if isinstance(value, (list, tuple, range)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    try:
        return operator.index(value)
    except TypeError:
        return value


def compact(value):
    """The label text of a creation argument: its ``repr`` as plain Python (:func:`_plain`),
    or, past :data:`ARGS_SHOWN` characters, its first whole items then ``...#<crc32>``
    (8 hex digits of the whole text)."""
    text = repr(_plain(value))
    if len(text) <= ARGS_SHOWN:
        return text
    cut = text.rfind(", ", 0, ARGS_SHOWN)
    head = text[:cut if cut > 0 else ARGS_SHOWN]
    return "%s, ...#%08x" % (head, zlib.crc32(text.encode("utf-8", "replace")) & 0xFFFFFFFF)


def _wrap_maker(name, fn, arg, params):
    """The check-in wrapper of the group-creation function ``fn`` (``torch.distributed.<name>``).

    ``arg``: the argument every rank must pass alike; ``params``: ``fn``'s parameter names
    (positions of ``arg``, ``use_local_synchronization`` and ``sort_ranks``; absent: keyword
    only). Label: ``torch.distributed.<name> make=<n> <arg>=<compact(value)>[ local]``.
    """
    head = "torch.distributed.%s make=%%d %s=%%s" % (name, arg)
    idx = {p: (params.index(p) if p in params else -1)
           for p in (arg, "use_local_synchronization", "sort_ranks")}

    def get(args, kwargs, p, default=None):
        i = idx[p]
        return args[i] if len(args) > i >= 0 else kwargs.get(p, default)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            value = get(args, kwargs, arg)
            if name == "new_group" and value is not None and get(args, kwargs, "sort_ranks", True) is not False:
                value = sorted(value)
            _made[0] += 1
            label = head % (_made[0], compact(value))
            if get(args, kwargs, "use_local_synchronization"):
                label += " local"
            _checkpoint(label)
        except Exception:
            pass
        return fn(*args, **kwargs)

    setattr(wrapper, _MARK, fn)
    return wrapper
