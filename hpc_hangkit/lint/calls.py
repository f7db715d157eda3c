"""Interprocedural resolution inside the scanned tree.

:class:`Project` indexes every function of every scanned module (``pkg.mod.func``,
``pkg.mod.Class.method``) and resolves a call when it can: a module function by name,
an imported name or ``module.attr`` chain whose module is in the tree (re-exports
through ``__init__`` imports followed), a method through ``self`` (the class, then its
bases found in the tree). Anything else (a method of a local object, a callback, a
``getattr``) is not guessed. :meth:`Project.propagate` then marks every function that
reaches a collective through any chain of resolved calls, and every function whose
return value is rank-dependent. Stdlib only.
"""
import ast
import os
import re
from operator import itemgetter

from hpc_hangkit.lint import collectives as C
from hpc_hangkit.lint.model import FuncFacts, group_arg, own_group, rankish_word, defaults_of, dotted, module_name, names_of, nodes_of, functions_of, qualify, walk_local, wrapped_at, wrapper_at
from hpc_hangkit.lint.taint import Taint, agreed_operand, call_kind, collective_aliases, fake_backend, random_draw, single_process_returns
from hpc_hangkit.lint.taint import _AGREEING_ARG0, _AGREEING_ARG1, _RETURN_AGREES
from hpc_hangkit.lint.taint import _EQUAL_COUNT, PURE_BUILTINS
from hpc_hangkit.lint.taint import _first_and_last, _padding

__all__ = ["Project", "call_ref"]


def _method_ref(mod, cls, scope, parts):
    """The :func:`call_ref` of dotted call ``parts`` when it is a method of an object built
    from a class of the tree or an imported one (``ckpt = Checkpointer(d); ckpt.save()``,
    ``self.model = Model(...)`` then ``self.model.save()``), else None. Such a call binds the
    object to the method's ``self``: its first argument is the method's second parameter."""
    if len(parts) == 2 or (len(parts) == 3 and parts[0] == "self"):
        if parts[0] == "self":
            typ = mod.attr_types.get((cls, parts[1])) if cls else None
            if typ is None and cls and len(parts) == 3 and (cls, parts[1]) not in mod.collective_attrs:
                # `self.checkpointer.save()`: an attribute of no known class is the one it is
                # named after, as a parameter is
                typ = _guessed_class(mod, parts[1])
        else:
            ff = mod.funcs.get(scope)
            typ = ff.var_types.get(parts[0]) if ff is not None else None
        if typ is not None:
            return _method_of(_class_ref(mod, typ), parts[-1])
    return None


def _instance_call(mod, cls, scope, parts):
    """The call ref of ``Class.__call__`` when dotted call ``parts`` calls an object built from a
    tree class (``metric = SquadMetric(); metric(x)``; ``self._metric = SquadMetric()``, then
    ``self._metric(x)``): the class's own ``__call__`` (or a tree base's). An ``nn.Module``'s
    call runs its ``forward``, which is not followed: measured on the sixty-seven projects, the
    layers' forwards added 36 findings, all tensor-parallel collectives under batch-shape tests
    that the group's ranks share (docs/lint-measured.md, stop 40). None for anything else: a
    class not in the tree, a module wrapper (DDP, FSDP: read by the wrapper rules), a method of
    the same name."""
    if len(parts) == 1:
        ff = mod.funcs.get(scope)
        typ = ff.var_types.get(parts[0] + "()") if ff is not None else None
    elif parts[0] == "self" and cls and (cls, parts[1]) not in mod.collective_attrs and \
            cls + "." + parts[1] not in mod.funcs:
        typ = mod.attr_types.get((cls, parts[1]))
    else:
        return None
    if typ is None or typ.__class__ is tuple or typ.rsplit(".", 1)[-1] in C.WRAPPER_CLASSES:
        return None
    ref = _method_of(_class_ref(mod, typ), "__call__")
    return ref if ref is not None and not _dead_ref(mod, ref) else None


def _named_class(mod, ff, name, sites):
    """The class a receiver of no known type is named after, as a :func:`_class_ref`, or None
    (``self.driver`` of a class, with no class known from its assignments, too: :func:`_method_ref`):
    ``driver`` of ``def report(driver): driver.get_design_var_values()`` (or of ``driver =
    prob.driver``) is the module's own class ``Driver``, else ``Driver`` of the tree's module
    ``driver`` (the nearest file driver.py or package driver/) when one is linted
    (:func:`set_tree_names`). Only a parameter never assigned in the function, or a local
    assigned only an attribute of its own name; never ``self``/``cls`` or an imported name. The
    class is the receiver's words capitalized (``data_loader``: ``DataLoader``); when the module
    has no such class the call stays unresolved, as before. A parameter annotated with a class
    (``driver: WebDriver``, ``trainer: Trainer``) is of that class instead. The reference's kind is ``ncls`` (a class of the module) or ``nq``
    (qualified), resolved as ``cls`` and ``q`` are: a call through it is an edge of the call
    graph (what it reaches), but hands nothing on (:data:`_GUESSED`)."""
    if name in ("self", "cls") or name in mod.imports:
        return None
    if sites is None:
        if name not in ff.params:
            return None
    elif name in ff.params or not all(v.__class__ is ast.Attribute and v.attr == name for _, _, v in sites):
        return None
    if ff.node is not None and name in ff.params:
        ann = _annotation_of(ff, name)
        if ann is not None:
            # `driver: WebDriver`, `loader: DataLoader` (torch's), `trainer: Trainer`: the code
            # names the class, taken instead of the guess (and, as the guess, handed nothing)
            d = dotted(ann) if _guessed_class(mod, name) is not None else None
            ref = _class_ref(mod, ".".join(d)) if d else None
            if ref is None:
                return None
            return ("ncls",) + ref[1:] if ref[0] == "cls" else ("nq",) + ref[1:]
    return _guessed_class(mod, name)


def _guessed_class(mod, name):
    """The class receiver ``name`` is named after (:func:`_named_class`), or None."""
    camel = "".join(w[:1].upper() + w[1:] for w in name.split("_") if w)
    if not camel or camel == name:
        return None
    if camel in mod.bases:
        return ("ncls", mod.key, camel)
    if _TREE_NAMES is None or name not in _TREE_NAMES:
        return None
    return ("nq", name + "." + camel, mod.key)


def _built_method(mod, f):
    """The call ref of method ``f.attr`` when ``f`` (a call's function) is an attribute of an
    object built in the same expression (``Writer(path).append(row)``,
    ``Trainer.from_config(c).fit()``: :func:`_built_class`), else None. The object takes the
    method's ``self``, as in :func:`_method_ref`."""
    if f.__class__ is not ast.Attribute or f.value.__class__ is not _CALL:
        return None
    typ = _built_class(f.value)
    return _method_of(_class_ref(mod, typ), f.attr) if typ is not None else None


def _annotation_of(ff, name):
    """The annotation node of parameter ``name`` of function ``ff`` (its tree loaded), or None."""
    a = ff.node.args
    return next((x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg == name), None)


def _annotated_class(mod, ff, name):
    """The class parameter ``name`` of ``ff`` is annotated with (``checkpointer: Checkpointer``,
    ``Optional[Checkpointer]``, ``"Checkpointer"``), as a declared class reference (``acls`` or
    ``aq``: resolved as ``cls`` and ``q``, handed nothing as :data:`_GUESSED`), or None. The
    object a caller hands may be of any subclass: a call of its method reaches what any tree
    override reaches (:meth:`Project.overrides`)."""
    if ff.node is None:
        return None
    ann = _annotation_of(ff, name)
    if ann.__class__ is ast.Subscript and (dotted(ann.value) or [""])[-1] == "Optional":
        ann = ann.slice
    if ann.__class__ is ast.Constant and ann.value.__class__ is str and \
            all(p.isidentifier() for p in ann.value.split(".")):
        d = ann.value.split(".")
    else:
        d = dotted(ann) if ann is not None else None
    ref = _class_ref(mod, ".".join(d)) if d else None
    if ref is None or (ref[0] == "q" and _dead_ref(mod, ref)):
        return None
    return ("acls",) + ref[1:] if ref[0] == "cls" else ("aq",) + ref[1:]


def _class_ref(mod, typ):
    """A class named ``typ`` (dotted) in ``mod``: ``("cls", module key, class)`` for a class of
    the module, ``("q", qualified name, module key)`` for an imported one, or None. A ``typ``
    that is already such a reference (:func:`_named_class`) is itself."""
    if typ.__class__ is tuple:
        return typ
    if typ in mod.bases and typ not in mod.imports:
        return ("cls", mod.key, typ)
    q = qualify(mod, typ.split("."))
    return ("q", q, mod.key) if q is not None else None


def _method_of(cls_ref, meth):
    """The call ref of method ``meth`` of the class :func:`_class_ref` names, or None."""
    if cls_ref is None:
        return None
    if cls_ref[0] in ("cls", "ncls", "acls"):
        return cls_ref + (meth,)
    return (cls_ref[0] if cls_ref[0] in ("nq", "aq") else "q", cls_ref[1] + "." + meth, cls_ref[2])


def _first_arg(mod, ff, call):
    """The position of ``call``'s first positional argument among the callee's parameters as
    the facts count them (``self`` is bound separately for ``self.m()``, ``super().m()`` and
    constructors): 1 for a method of an object built from a class (:func:`_method_ref`),
    whose ``self`` the object takes; else 0."""
    f = call.func
    if f.__class__ is _NAME:
        return 1 if _instance_call(mod, ff.cls, ff.qualname, (f.id,)) is not None else 0
    if f.__class__ is not ast.Attribute:
        return 0
    if f.value.__class__ is _CALL:
        return 1 if _built_method(mod, f) is not None else 0
    parts = dotted(f)
    return 1 if parts and (_method_ref(mod, ff.cls, ff.qualname, parts) is not None or (
        len(parts) == 2 and _instance_call(mod, ff.cls, ff.qualname, parts) is not None)) else 0


#: calls that apply their first argument, a function, at once on this rank (``map(f, xs)``,
#: ``jax.tree_util.tree_map(sum_inplace, grads)``: netket's gradient all-reduce), by the last
#: part of their name
HIGHER_ORDER = {"map", "starmap", "tree_map", "tree_map_", "tree_map_only", "tree_map_with_path"}
#: the :func:`call_info` of a function applied by a higher-order call: its arguments unknown
_APPLIED = (0, (), (), False, True)


def applied_ref(mod, cls, scope, call):
    """The call ref of the function a higher-order call applies (:data:`HIGHER_ORDER`:
    ``tree_map(sum_inplace, g)`` -> ``sum_inplace``'s ref), or None. A plain name or an attribute
    chain (``self.reduce``) only; a lambda or a call's result is not followed."""
    f = call.func
    name = f.attr if f.__class__ is ast.Attribute else f.id if f.__class__ is _NAME else None
    if name not in HIGHER_ORDER or not call.args or call.args[0].__class__ not in (_NAME, ast.Attribute):
        return None
    return call_ref(mod, cls, scope, ast.Call(func=call.args[0], args=[], keywords=[]))


def made_ref(mod, cls, scope, call):
    """``("ret", factory ref, method)`` for ``x.method(...)`` in function ``scope`` of ``mod``
    when the local ``x`` holds what a tree function returns (``FuncFacts.made``: ``proxy =
    make_proxy()``), else None. :meth:`Project.resolve` follows it to the method of the class
    that function builds; nothing else reads it (what the call returns, what it is handed, how
    it is agreed are those of a call the lint cannot name)."""
    f = call.func
    if f.__class__ is not ast.Attribute or f.value.__class__ is not ast.Name:
        return None
    ff = mod.funcs.get(scope)
    made = ff.made if ff is not None else None
    ref = made.get(f.value.id) if made else None
    return ("ret", ref, f.attr) if ref is not None else None


def call_ref(mod, cls, scope, call):
    """A hashable reference to the callee of ``call`` in function ``scope`` (qualname) of
    module ``mod``, or None when it cannot name one: ``("q", qualified, module key)``,
    ``("self", module key, class, method)`` (also ``Class.method(self, ...)`` of a class of the
    module), ``("super", module key, class, method)`` (``super().method()``) or
    ``("local", module key, name, nested, sibling)``."""
    f = call.func
    parts = dotted(f)
    if not parts:
        if cls and isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call) and \
                isinstance(f.value.func, ast.Name) and f.value.func.id == "super":
            return ("super", mod.key, cls, f.attr)
        return _built_method(mod, f)
    if len(parts) <= 2:
        ref = _instance_call(mod, cls, scope, parts)
        if ref is not None:
            return ref
    if parts[0] == "self" and len(parts) == 2 and cls:
        return ("self", mod.key, cls, parts[1])
    ref = _method_ref(mod, cls, scope, parts)
    if ref is not None:
        return ref
    q = qualify(mod, parts)
    if q is not None:
        return ("q", q, mod.key)
    if len(parts) == 1:
        # a sibling is seen only from a function's scope: a method's bare name is a global,
        # never another method of its class (nor the method itself)
        outer = scope.rsplit(".", 1)[0] if "." in scope else ""
        return ("local", mod.key, parts[0], (scope + "." + parts[0]) if scope != "<module>" else None,
                (outer + "." + parts[0]) if outer in mod.funcs else None)
    if len(parts) == 2 and parts[0] in mod.bases:
        return ("cls", mod.key, parts[0], parts[1])
    return None


_NAME, _CALL, _RETURN, _ASSIGN = ast.Name, ast.Call, ast.Return, ast.Assign
#: the FuncFacts lists that :meth:`Project._facts` appends to, left as ``()`` when empty
_APPENDED = ("calls", "ret_calls", "arg_calls", "directs")
#: the kinds of a call reference whose class was guessed from the receiver's name
#: (:func:`_named_class`): which method runs is a guess, so what it is handed is not bound
_GUESSED = ("ncls", "nq", "acls", "aq")
#: the kinds of a call reference on an attribute whose class a constructor parameter's annotation
#: declares (:func:`_annotated_class`): the object handed in may be of any subclass
_DECLARED = ("acls", "aq")
#: the open parameters of a function whose every parameter comes from the tree's making
_NONE = frozenset()
#: the words classified so far (per process), and those that name what the taint reads
#: (rankish_word): a function's words are then matched by set operations, each distinct word
#: by the regular expressions once
_SEEN_WORDS = set()
_RANK_WORDS = set()


def _extra_rank():
    """The configured rank sources that rankish_word does not match, matched once per settings
    (each file's facts are built by a Project of their own)."""
    global _EXTRA_RANK
    names = C.RANK_NAMES | C.RANK_CALLS
    if _EXTRA_RANK is None or _EXTRA_RANK[0] != names:
        _EXTRA_RANK = (names, frozenset(n for n in names if not rankish_word(n)))
    return _EXTRA_RANK[1]


_EXTRA_RANK = None


def _closeness(a, b):
    """How many leading path components two module keys share (more: closer)."""
    n = 0
    for x, y in zip(a.split(os.sep), b.split(os.sep)):
        if x != y:
            break
        n += 1
    return n


class Project:
    """The scanned tree: modules by path (``ModuleFacts.key``), found by dotted name.

    Two files of one dotted name (two ``train.py`` scripts without ``__init__.py``) are both
    kept; an import of that name resolves to the one nearest the importing file (same
    directory first), so the result does not depend on the order the files were given in.
    A file is also found by the dotted names of its trailing path components
    (``src/pkg/context.py`` as ``pkg.context``: namespace packages, ``src`` layouts), after
    its own name."""

    def __init__(self):
        self.modules = {}
        self.funcs = {}
        self._names = {}
        self._aliases = {}
        self._cache = {}
        self._canon = {}
        #: (module key, class) -> the tree classes that name it as a base (:meth:`overrides`)
        self._subclasses = None
        self._flags = None
        #: (module key, attribute, receiver name lower-cased without ``_``) -> rank level of
        #: ``param.attr = ...`` in that module (another object's flag: ``trainer.should_stop =
        #: True``); read as ``self.attr`` in a class of the same module named like the receiver
        self.foreign = {}
        #: configured rank sources that :func:`~hpc_hangkit.lint.model.rankish_word` does not match
        self._extra_rank = None
        #: (module, its imported names of rank-local calls) for the module whose facts are built
        self._local_alias = None
        #: the saves of the module whose facts are built (:func:`_saved_attrs`), indexed on demand
        self._saved = None
        #: while a module's facts are built: its ``self.attr = call(...)`` assignments as
        #: ``(FuncFacts, attr, call)``, and the attributes it calls as ``self.attr(...)``
        self._attr_calls = self._self_called = None
        #: method name -> the tree's methods of that name (:meth:`agreed_method`), built on demand
        self._methods = None
        #: ``(path, line, module name, module key, installer)`` of each exception hook or exit
        #: handler of the tree that aborts the job (:func:`~hpc_hangkit.lint.model.abort_hook`)
        self._hooks = []
        self._hook = None

    # ------------------------------------------------------------ building
    def add(self, mod):
        """Index ``mod`` (a :class:`~hpc_hangkit.lint.model.ModuleFacts` with its tree) and
        compute its functions' facts (calls, direct collectives, return levels, ``self``
        attribute levels). The tree stays on ``mod``; drop it with ``mod.tree = None``.
        Adding a module of an already indexed path replaces it."""
        self.facts(mod)
        self.insert(mod)

    def insert(self, mod):
        """Index ``mod`` whose facts :meth:`facts` computed (here or in another process: the
        module needs no tree). Adding a module of an already indexed path replaces it."""
        old = self.modules.get(mod.key)
        if old is not None:
            self._names[old.name].remove(old)
            for ff in old.funcs.values():
                self.funcs.pop((old.key, ff.qualname), None)
        self.modules[mod.key] = mod
        self._hooks = [h for h in self._hooks if h[3] != mod.key] + [
            (mod.path, line, mod.name, mod.key, installer) for line, installer in mod.abort_hook]
        self._hook = None
        self._names.setdefault(mod.name, []).append(mod)
        for alias in _path_aliases(mod.key):
            if alias != mod.name:
                self._aliases.setdefault(alias, []).append(mod)
        self._cache = {}
        self._canon = {}
        self._methods = None
        self._subclasses = None
        self._flags = None
        for ff in mod.funcs.values():
            self.funcs[(mod.key, ff.qualname)] = ff

    def record_field(self, mod, cls, attr, field):
        """Rank level of ``self.<attr>.<field>`` in class ``cls`` of ``mod`` when every binding
        of ``self.<attr>`` in the class's methods (None aside) is a call of a tree function that
        builds a record (:attr:`~hpc_hangkit.lint.model.FuncFacts.ret_record`:
        ``TrainerRunConfig(**config)``): the level of that field's value there, with its
        callers' levels of the parameters it reads, rather than the level of the whole record
        (a record that also holds ``is_world_process_zero`` has a ``num_epochs`` the same on
        every rank). None when that is not known: another binding, a field the record does
        not set, a builder that calls a tree function whose return is rank-dependent."""
        refs = mod.attr_records.get((cls, attr))
        if not refs:
            return None
        lv = 0
        for ref in refs:
            ff = self.resolve(ref)
            got = ff.ret_record.get(field) if ff is not None and ff.ret_record else None
            if got is None:
                return None
            for c in ff.calls:
                callee = self.resolve(c[0])
                if callee is not None and callee is not ff and (callee.ret_level or callee.ret_record):
                    return None
            own, read = got
            lv = max(lv, own, max((ff.param_levels.get(p, 0) for p in read), default=0))
        return lv

    def flag_attr(self, name):
        """True when ``self.<name>`` is bound only to True or False in the tree's methods (a
        yes/no setting, read whatever its name: ``self.dynamic_num_samples = False``, later
        ``= True``), and at least once; from each module's ``attr_flags``, merged on the first
        call after an :meth:`insert`."""
        if self._flags is None:
            flags = {}
            for m in self.modules.values():
                for k, v in m.attr_flags.items():
                    flags[k] = flags.get(k, True) and v
            self._flags = flags
        return self._flags.get(name, False)

    def facts(self, mod):
        """Compute the facts of every function of ``mod`` (its tree loaded) into ``mod.funcs``,
        and another object's flags set in it into :attr:`foreign`. Needs nothing of the other
        modules (so files can be read in parallel, then :meth:`insert` ed in order)."""
        fns = []
        mod.funcs = {}
        mod.aliases = collective_aliases(mod)
        for qual, cls, node in functions_of(mod.tree):
            ff = FuncFacts(mod.key, qual, cls, getattr(node, "lineno", 1), node, mod.path)
            mod.funcs[qual] = ff
            fns.append(ff)
        self._attr_calls, self._self_called = [], set()
        for ff in fns:
            self._types(mod, ff)
        for ff, attr, call in self._attr_calls:
            # `self.model = ddp_wrap(net)` where the module calls `self.model(...)`: a wrapper
            # when the tree function returns one (:meth:`_bind_wrappers`)
            if attr in self._self_called:
                ref = call_ref(mod, ff.cls, ff.qualname, call)
                if ref is not None and ref[0] in ("q", "local") and not _dead_ref(mod, ref):
                    ff.attr_plain = list(ff.attr_plain) + [(attr, ref)]
        self._attr_calls = self._self_called = None
        self._saved = (mod, fns)
        for ff in fns:
            self._facts(mod, ff)
            if ff.wrapped is not None:
                _prune_pending(ff)
        self._saved = None
        # only a loader's attribute counts (a missing key reads as any other)
        mod.attr_counts = {k: v for k, v in mod.attr_counts.items() if v}

    def _types(self, mod, ff):
        """What objects are built from: ``x = TreeClass(...)`` (``var_types``), ``self.x =
        TreeClass(...)`` (``mod.attr_types``), ``self.x = DDP(model)`` (``mod.collective_attrs``)."""
        local = mod.local.get(id(ff.node))
        made = []
        receivers = set()
        # names called as functions or handed to a call, and the plain assignments of each local
        # (with the module wrapper it builds where the function names one)
        called = set()
        joined = set()
        plain = {}
        # the locals bound other than by `x = call(...)`
        other = set()
        words = mod.words.get(id(ff.node))
        wrapping = words is None or not words.isdisjoint(_WRAP_WORDS)
        for n in (local if local is not None else walk_local(ff.node)):
            if n.__class__ is _CALL:
                f = n.func
                if wrapping and n.args and n.args[0].__class__ is _NAME:
                    d = dotted(f)
                    if d and d[-1] in C.SHARDING_CALLS:
                        # `fully_shard(model)`: the module is sharded in place from here on
                        plain.setdefault(n.args[0].id, []).append((n.lineno, d[-1], n))
                if f.__class__ is ast.Attribute and f.value.__class__ is ast.Attribute and f.attr == "forward" and \
                        f.value.value.__class__ is _NAME and f.value.value.id == "self":
                    self._self_called.add(f.value.attr)
                if f.__class__ is ast.Attribute and f.value.__class__ is _NAME:
                    receivers.add(f.value.id)
                    if f.value.id == "self":
                        self._self_called.add(f.attr)
                    if f.attr == "forward":
                        called.add(f.value.id)
                    elif f.attr == "join" and wrapping:
                        joined.add(f.value.id)  # `with model.join():` uneven inputs by design
                elif wrapping and f.__class__ is _NAME and f.id == "Join" and n.args and \
                        n.args[0].__class__ in (ast.List, ast.Tuple):
                    joined.update(x.id for x in n.args[0].elts if x.__class__ is _NAME)
                elif f.__class__ is _NAME:
                    called.add(f.id)
                for a in n.args:
                    if a.__class__ is _NAME:
                        called.add(a.id)
                continue
            if n.__class__ is ast.AnnAssign and n.value is not None and n.target.__class__ is _NAME:
                # `model: nn.Module = DDP(net)`: a plain assignment of the local
                plain.setdefault(n.target.id, []).append((n.lineno, _wrapper_in(n.value) if wrapping else None,
                                                          n.value))
                continue
            if n.__class__ in _BINDERS and not (n.__class__ is _ASSIGN and len(n.targets) == 1 and
                                                n.targets[0].__class__ is _NAME and n.value.__class__ is _CALL):
                other |= _rebound((n,))
            if not isinstance(n, ast.Assign) or len(n.targets) != 1:
                continue
            t = n.targets[0]
            attr = _self_attr(t) if ff.cls else None
            if (attr is not None and "." not in attr) or (wrapping and t.__class__ is _NAME):
                w = _wrapper_in(n.value)
                if t.__class__ is _NAME:
                    plain.setdefault(t.id, []).append((n.lineno, w, n.value))
                elif w is not None:
                    mod.collective_attrs[(ff.cls, attr)] = w
                elif n.value.__class__ is _NAME and n.value.id in ff.params and n.value.id != "self":
                    # `self.model = model`: a wrapper a caller hands in (:meth:`_bind_wrappers`)
                    ff.attr_plain = list(ff.attr_plain) + [(attr, n.value.id)]
                    if attr is not None and "." not in attr:
                        typ = _annotated_class(mod, ff, n.value.id)
                        if typ is not None:
                            mod.attr_types.setdefault((ff.cls, attr), typ)
                elif n.value.__class__ is _CALL and t.__class__ is not _NAME:
                    self._attr_calls.append((ff, attr, n.value))
            elif t.__class__ is _NAME:
                plain.setdefault(t.id, []).append((n.lineno, None, n.value))
            if not isinstance(n.value, ast.Call):
                continue
            d = _built_class(n.value)
            if d is None:
                if t.__class__ is _NAME:
                    made.append((t.id, n.value))
                continue
            if isinstance(t, ast.Name):
                ff.var_types[t.id] = d
            elif attr is not None and "." not in attr:
                mod.attr_types.setdefault((ff.cls, attr), d)
        for name in called:
            # `metric = Metric()`, then `metric(x)`: its `__call__` (:func:`_instance_call`),
            # when that one assignment is the local's only binding
            if name in ff.var_types and len(plain.get(name, ())) == 1 and name not in other:
                ff.var_types[name + "()"] = ff.var_types[name]
        for name in receivers:
            if name not in ff.var_types:
                typ = _named_class(mod, ff, name, plain.get(name))
                if typ is not None:
                    ff.var_types[name] = typ
        wrapped = {}
        for name, sites in plain.items():
            if name in joined or (not any(w for _, w, _ in sites) and name not in called):
                continue
            out = []
            for line, w, value in sites:
                if w is None and name in called and value.__class__ is _CALL:
                    # `model = ddp_wrap(model)`: the wrapper a tree function returns, known
                    # after propagation (:meth:`Project._bind_wrappers`)
                    ref = call_ref(mod, ff.cls, ff.qualname, value)
                    if ref is not None and ref[0] in ("q", "local") and not _dead_ref(mod, ref):
                        w = ref
                out.append((line, w))
            if any(w for _, w in out):
                wrapped[name] = tuple(sorted(out, key=itemgetter(0)))
        if wrapped:
            ff.wrapped = wrapped
        for name, call in made:
            # `proxy = make_proxy(...)`, then `proxy.synchronize()`: typed when the tree function
            # called returns an object of one class (Project.resolve, after propagation)
            if name in receivers and name not in ff.var_types:
                ref = call_ref(mod, ff.cls, ff.qualname, call)
                if ref is not None and ref[0] in ("q", "local") and not _dead_ref(mod, ref):
                    if ff.made is None:
                        ff.made = {}
                    ff.made[name] = ref

    def _facts(self, mod, ff):
        node = ff.node
        for dec in getattr(node, "decorator_list", ()):
            d = dotted(dec.func if isinstance(dec, ast.Call) else dec)
            if d and (".".join(d) in C.MARK_DECORATORS or (qualify(mod, d) or "") in C.MARK_DECORATORS
                      or (d[-1] == "collective" and (qualify(mod, d) or "").startswith("hpc_hangkit"))):
                ff.marked = True
        if C.configured_method(mod.name, ff.qualname):
            ff.marked = True
        # no rank source in the function's own words: nothing here can return one by itself
        tainted = self._rankish(mod, ff)
        # built on the first read that needs it (many functions only call builtins and return
        # nothing): its levels depend only on the function's tree and the module's imports
        taint = None
        params = set(ff.params)
        rets = []
        handing = []
        has_return = bare = False
        relayed = []
        singles = None
        handed_calls = []
        agreed = set()
        attr_vals = []
        # the parameters and locals, for a collective's group (model.own_group), on the first one
        bound = None
        local = mod.local.get(id(node))
        words = mod.words.get(id(node))
        # `Trainer(DDP(net))`: a wrapper built in a call's arguments (:meth:`_hands_wrapped`)
        wrap_words = words is None or not words.isdisjoint(C.WRAPPER_CLASSES)
        for n in (local if local is not None else walk_local(node)):
            nt = n.__class__  # by identity: a parsed tree holds no subclasses
            if nt is _CALL:
                # a taint once built has asked every call's kind (:meth:`Taint.call_kind` remembers it)
                kind, name = taint.call_kind(n) if taint is not None else call_kind(mod, n)
                if kind is None and (ff.wrapped is not None or (ff.cls and mod.collective_attrs)):
                    w = wrapper_at(ff, n) or attr_state_dict(mod, ff.cls, n)
                    if w is not None:
                        kind, name = "collective", w
                held = _called_local(n) if kind is None and ff.wrapped is not None else None
                if held is not None:
                    w = wrapped_at(ff, held, n.lineno, True)
                    if w is not None and w.__class__ is not str:
                        # what a tree call returned: a wrapper or not, after propagation
                        ff.local_calls = list(ff.local_calls) + [(n.lineno, n.col_offset, held)]
                if kind == "collective":
                    ff.directs.append((n.lineno, n.col_offset, name))
                    g = group_arg(n)
                    if g is not None:
                        if bound is None:
                            bound = params | _assigned(local if local is not None else walk_local(node))
                        if own_group(g, bound):
                            if ff.direct_groups is None:
                                ff.direct_groups = {}
                            ff.direct_groups.setdefault(n.lineno, ast.unparse(g))
                    idx = 0 if name in _AGREEING_ARG0 else 1 if name in _AGREEING_ARG1 else None
                    a = agreed_operand(n.args[idx]) if idx is not None and len(n.args) > idx else None
                    if a.__class__ is _NAME:
                        agreed.add(a.id)
                    if ff.direct is None or n.lineno < ff.direct_line:
                        ff.direct, ff.direct_line = name, n.lineno
                elif kind is not None or not fake_backend(n):
                    if kind == "p2p":
                        mod.has_p2p = ff.p2p = True
                    held = _called_local(n) if kind is None else None
                    if held is not None and held in params:
                        if ff.param_called is None:
                            ff.param_called = {}
                        at = (n.lineno, n.col_offset)
                        if at < ff.param_called.get(held, at):
                            at = ff.param_called[held]
                        ff.param_called[held] = at
                    ref = call_ref(mod, ff.cls, ff.qualname, n)
                    guessed = ref is not None and ref[0] in _GUESSED
                    if ref is not None and (ff.wrapped or mod.collective_attrs or wrap_words) and (n.args or n.keywords) \
                            and not guessed:
                        self._hands_wrapped(mod, ff, n, ref)
                    if n.args:
                        # `tree_map(sum_inplace, g)`: an edge to the function it applies
                        applied = applied_ref(mod, ff.cls, ff.qualname, n)
                        if applied is not None and not _dead_ref(mod, applied):
                            ff.calls.append((applied, n.lineno, n.col_offset, _APPLIED))
                    if ref is not None:
                        ff.calls.append((ref, n.lineno, n.col_offset, None if guessed else call_info(mod, n)))
                        # what a call handed arguments passes on matters only for a tree callee
                        handed_on = bool(n.args or n.keywords) and not guessed
                        dead = handed_on and _dead_ref(mod, ref)
                        if params and handed_on and not dead:
                            # a parameter handed on as it is: what the callee's parameter holds
                            # comes from this function's callers (:meth:`_pass_through`)
                            for k, a in _call_args(mod, ff, n):
                                if a.__class__ is _NAME and a.id in params and a.id not in ("self", "cls"):
                                    if not ff.passes:
                                        ff.passes = []
                                    ff.passes.append((ref, k, a.id))
                            relayed += _params_handed_on(n, params)
                        if handed_on and not dead:
                            got, singles = _ret_args(mod, ff, n, singles, local, params)
                            if got:
                                at = len(ff.calls) - 1
                                handed_calls += [(at, k, src) for k, src in got]
                        if tainted and handed_on:
                            handing.append((n, ref))
                            if not dead:
                                if taint is None:
                                    taint = Taint(node, mod, ff.cls, None)
                                lv, elems = _handed(taint, mod, ff, n, ref)
                                if elems:
                                    ff.elem_args = list(ff.elem_args) + elems
                                if lv:
                                    ff.arg_calls.append((ref, lv))
                    elif ff.made:
                        # only as an edge of the call graph: what reaches a collective
                        ref = made_ref(mod, ff.cls, ff.qualname, n)
                        if ref is not None:
                            ff.calls.append((ref, n.lineno, n.col_offset, call_info(mod, n)))
            elif nt is _RETURN and n.value is not None:
                has_return = True
                rets.append(n.value)
                if n.value.__class__ is ast.Constant and n.value.value is None:
                    bare = True  # `return None`, as a bare `return`
            elif nt is _RETURN:
                has_return = bare = True
            elif nt is _ASSIGN and tainted and any(
                    isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in params
                    and t.value.id != "self" for t in n.targets):
                # `trainer.should_stop = True` under a rank-local test: the flag is another object's
                if taint is None:
                    taint = Taint(node, mod, ff.cls, None)
                lv = max(taint.level_at(n.value, n.lineno), taint.guard_level(n))
                for t in n.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and lv:
                        k = (mod.key, t.attr, t.value.id.replace("_", "").lower())
                        if lv > self.foreign.get(k, 0):
                            self.foreign[k] = lv
            elif (nt is ast.AugAssign or nt is ast.AnnAssign) and ff.cls:
                # `self.config: RunConfig = None`: a record's start, as a plain `= None`
                _bound_otherwise(mod, ff.cls, (n.target,), nt is ast.AnnAssign and (
                    n.value is None or (n.value.__class__ is ast.Constant and n.value.value is None)))
            elif nt is _ASSIGN and ff.cls:
                for t in n.targets:
                    key = _self_attr(t)
                    if key is None:
                        if t.__class__ is ast.Tuple or t.__class__ is ast.List:
                            _bound_otherwise(mod, ff.cls, t.elts)
                        continue
                    if "." not in key:
                        v = n.value
                        mod.attr_flags[key] = mod.attr_flags.get(key, True) and v.__class__ is ast.Constant and \
                            v.value.__class__ is bool
                        k = (ff.cls, key)
                        if mod.attr_draws.get(k, True):
                            shape = random_draw(v)
                            if shape is not None and shape and tainted:
                                if taint is None:
                                    taint = Taint(node, mod, ff.cls, None)
                                shape = shape if all(taint.level_at(a, n.lineno) == 0 for a in shape) else None
                            mod.attr_draws[k] = shape is not None
                        made = mod.attr_records.get(k, ())
                        if made is not False and not (v.__class__ is ast.Constant and v.value is None):
                            # `self.run_config = self._create_run_config(...)`: what it builds (Project.record_field)
                            ref = call_ref(mod, ff.cls, ff.qualname, v) if v.__class__ is _CALL else None
                            mod.attr_records[k] = made + (ref,) if ref is not None and ref[0] not in _GUESSED \
                                else False
                    attr_vals.append((key, n.value))
                    if "." not in key:
                        k = (ff.cls, key)
                        old = mod.attr_counts.get(k, True)
                        if old is not False and not _equal_count_value(n.value):
                            # `self._loader = self._setup_data(ds)`: as the tree helper's return
                            # (FuncFacts.equal_count, asked by Taint.trip_level)
                            ref = call_ref(mod, ff.cls, ff.qualname, n.value) if n.value.__class__ is _CALL else None
                            old = ((() if old is True else old) + (ref,)) if ref is not None and \
                                ref[0] not in _GUESSED else False
                        mod.attr_counts[k] = old
                    if tainted and not self._restored(ff.cls, key, n.value):
                        if taint is None:
                            taint = Taint(node, mod, ff.cls, None)
                        lv = max(taint.level_at(n.value, n.lineno), taint.guard_level(n))
                        if lv > mod.attr_levels.get((ff.cls, key), 0):
                            mod.attr_levels[(ff.cls, key)] = lv
                    used = set()
                    found = nodes_of(n.value)
                    # `first_stage() and last_stage()`: the group's size, not what the calls return
                    both = {id(c) for x in found if isinstance(x, ast.BoolOp) and isinstance(x.op, ast.And)
                            and _first_and_last(x.values) for c in x.values}
                    for x in found:
                        if isinstance(x, ast.Name) and x.id in params:
                            used.add(x.id)
                        elif isinstance(x, ast.Call) and id(x) not in both:
                            ref = call_ref(mod, ff.cls, ff.qualname, x)
                            if ref is not None:
                                used.add(ref)
                    if used:
                        ff.attr_params.setdefault((ff.cls, key), set()).update(used)
        if agreed and params & agreed:
            # a wrapper that hands a parameter as it is to an agreeing collective (`def
            # all_reduce(tensor, op): dist.all_reduce(tensor, op=...)`) agrees its caller's argument
            kept = agreed & params - _assigned(local if local is not None else walk_local(node))
            ff.agrees = tuple(i for i, p in enumerate(ff.params) if p in kept)
        if tainted and rets and taint is None:
            taint = Taint(node, mod, ff.cls, None)  # what the function returns is read below
        name = ff.qualname.rsplit(".", 1)[-1]
        ranked = [p for p in ff.params if p in C.RANK_NAMES] if name.startswith("_") and \
            not name.startswith("__") and handing else ()
        if ranked:
            # a private helper's rank-named parameter holds what its callers pass: what it hands
            # on when they all pass a value the same on every rank (:meth:`_hand_arguments`)
            free = Taint(node, mod, ff.cls, None, unbound=frozenset(ranked))
            ff.free_calls = (tuple(ranked), [(ref, _handed(free, mod, ff, n, ref)) for n, ref in handing])
        if rets and all(isinstance(r, ast.Tuple) and len(r.elts) == len(rets[0].elts) for r in rets) and \
                not any(isinstance(x, ast.Starred) for r in rets for x in r.elts):
            ff.ret_elems = [max(taint.level_at(r.elts[i], r.lineno) for r in rets) if taint is not None else 0
                            for i in range(len(rets[0].elts))]
            if taint is not None:
                trips = []
                for i in range(len(rets[0].elts)):
                    lv = 0
                    for r in rets:
                        taint._at = r.lineno
                        lv = max(lv, taint.trip_level(r.elts[i]))
                    trips.append(lv)
                taint._at = None
                ff.ret_elem_trips = trips
            if any(ff.ret_elems):
                nodes = local if local is not None else list(walk_local(node))
                held = []
                for i in range(len(rets[0].elts)):
                    refs = set()
                    for r in rets:
                        got = _held_refs(mod, ff, r.elts[i], nodes) if ff.ret_elems[i] else None
                        if got is None:
                            refs = None
                            break
                        refs |= got
                    held.append(frozenset(refs) if refs else None)
                if any(h is not None for h in held):
                    ff.ret_elem_held = held
        if rets and ff.qualname != "<module>":
            stmts = [x for x in (local if local is not None else walk_local(node)) if isinstance(x, ast.Return)]
            ff.equal_count = all(_equal_count_return(node, r) for r in stmts)
            if taint is not None and all(isinstance(r, ast.Name) for r in rets):
                _returned_lengths(mod, ff, taint, stmts, params, local if local is not None else walk_local(node))
        if rets and ff.qualname != "<module>":
            ff.ret_type = _returned_class(mod, ff, rets)
            ff.ret_wrapper = _returned_wrapper(ff, rets)
            if all(r.__class__ is _CALL for r in rets):
                refs = {call_ref(mod, ff.cls, ff.qualname, r) for r in rets}
                if len(refs) == 1 and None not in refs:
                    ref = refs.pop()
                    if not _dead_ref(mod, ref):
                        # the same object as the call's own ref (kept once in memory and pickles)
                        ff.ret_through = next((c[0] for c in ff.calls if c[0] == ref), ref)
        if rets and params:
            ff.ret_params = _flows_from(rets, local if local is not None else walk_local(node), params) or _NONE
        if rets or attr_vals:
            kept = rets
            if rets and (agreed or any(isinstance(r, ast.Call) for r in rets)):
                # a return in a single-process branch (`if world_size == 1: return [obj]`) runs
                # without other ranks: it says nothing about what they get back
                single = single_process_returns(node)
                if single:
                    stmts = [x for x in (local if local is not None else walk_local(node))
                             if isinstance(x, ast.Return) and x.value is not None]
                    kept = [x.value for x in stmts if id(x) not in single]
            self._agreement(mod, ff, kept, attr_vals, agreed, local if local is not None else walk_local(node),
                            taint)
        emptied = {taint.emptied_param(r) for r in rets} if taint is not None and rets and \
            ff.qualname != "<module>" else None
        if emptied and len(emptied) == 1 and None not in emptied:
            ff.ret_empty = emptied.pop()  # judged at each call (Taint.test_level), not here
        else:
            for r in rets:
                if taint is not None:
                    ff.ret_level = max(ff.ret_level, taint.return_level_at(r, r.lineno))
        if rets and not bare and taint is not None and ff.qualname != "<module>" and _falls_off(node.body):
            bare = True  # `if RANK == 0: return path`, then the end: None on the others
        if bare and taint is not None and ff.ret_level < 2 and ff.qualname != "<module>" and any(
                not (r.__class__ is ast.Constant and r.value is None) for r in rets):
            # `if rank != 0: return` before `return path`: a value on some ranks, None on the
            # others (algorithmic-efficiency's `get_log_dir`)
            got = _none_level(node, taint, params, local if local is not None else walk_local(node))
            if got is not None and got[0] > ff.ret_level:
                ff.ret_level = got[0]
        if ff.ret_level == 2:
            ff.ret_direct = max(taint.direct_value_level(r) for r in rets)
        if ff.ret_level and ff.qualname != "<module>":
            got = _none_level(node, taint, params, local if local is not None else walk_local(node))
            if got is not None:
                ff.ret_none, ff.ret_none_params = got
        for r in rets:
            for n in nodes_of(r):
                if isinstance(n, ast.Call):
                    ref = call_ref(mod, ff.cls, ff.qualname, n)
                    if ref is not None:
                        ff.ret_calls.append(ref)
        if len(rets) == 1 and not bare and ff.qualname != "<module>" and rets[0].__class__ is _CALL and \
                any(st.__class__ is _RETURN and st.value is rets[0] for st in node.body):
            fields = _record_fields(node, rets[0])
            if fields:
                nodes = local if local is not None else walk_local(node)
                at = rets[0].lineno
                ff.ret_record = {k: (taint.level_at(v, at) if taint is not None else 0,
                                     _flows_from([v], nodes, params) if params else _NONE)
                                 for k, v in fields.items()}
        if ff.kwarg is not None:
            va = node.args.vararg
            both = (va.arg, ff.kwarg) if va is not None else None
            ff.forwards = any(x[3] is not None and x[3][4] in (ff.kwarg, both) for x in ff.calls)
            if both is not None and any(x[3] is not None and x[3][4] == both for x in ff.calls):
                ff.varpos = (va.arg, len(node.args.posonlyargs) + len(node.args.args))
        if rets and ff.qualname != "<module>":
            kept = {r.id for r in rets if r.__class__ is _NAME and r.id in params} - {"self", "cls"}
            if kept:
                ff.keeps_none = _keeps_none(node, kept) or _NONE
        if ff.qualname != "<module>" and (ff.calls or ff.directs) and ff.params:
            # a parameter the function assigns (`if planner is None: planner = Default()`) no
            # longer holds what the call passed, unless only through a call that may keep it
            nodes = local if local is not None else walk_local(node)
            own = set(ff.params) - {"self", "cls"}
            fixed = own - _assigned(nodes)
            relays = tuple(r for r in relayed if r[3] in fixed)
            if len(fixed) < len(own):
                # asked only of a parameter that may hold a module wrapper (Project._bind_wrappers)
                asked = {m for _, _, m in ff.passes} | set(ff.param_called or ()) | \
                    {q for _, q in ff.attr_plain if q.__class__ is str}
                if asked & (own - fixed):
                    ff.assigned_params = frozenset(asked & (own - fixed))
            if ff.param_called:
                ff.param_called = {p: at for p, at in ff.param_called.items() if p in fixed} or None
            rebinds, early = {}, {}
            if len(fixed) < len(own):
                # only read by a subscript store (`shape[axis] = n`): still what the call passed
                fixed |= own - fixed - _rebound(nodes)
                rebinds = _rebinds(mod, ff, nodes, own - fixed)
                fixed.update(rebinds)
                early = _first_bound(nodes, own - fixed)
            ff.cond_ranges = _cond_ranges(node.body, fixed, early)
            defaults = defaults_of(node) if ff.cond_ranges or relays else None
            if relays:
                # only a parameter with a constant default is kept (a fifth of them on torch):
                # what most callers leave out, and the memory of the others' is not repaid
                relays = tuple(r for r in relays if r[3] in defaults)
            if ff.cond_ranges or relays:
                ff.defaults = defaults
                # a test may also read an assigned parameter: unknown there, never its default
                ff.tested = frozenset().union(*[names_of(t) - m for _, _, t, _, m in ff.cond_ranges]) & \
                    (fixed | set(early))
                ff.rebinds = {k: v for k, v in rebinds.items() if k in ff.tested} or ()
                if relays:
                    ff.relays = relays
                    ff.tested = ff.tested | {r[3] for r in relays}
        if ff.qualname != "<module>" and not has_return:
            ff.noreturn = any(_endless(n) for n in node.body)
        if ff.qualname != "<module>":
            words = mod.words.get(id(node))
            ff.raises = (words is None or "raise" in words) and _raises(node.body) and not _stub(node)
            if ff.raises:
                at = _raises(node.body, every=True)
                ff.raise_line = at[0][0] if at else 0
                if ff.cond_ranges:
                    ff.raise_at = at
        if ff.marked and ff.direct is None:
            ff.direct = ff.qualname.rsplit(".", 1)[-1] + "()"
            ff.direct_line = ff.line
        if handed_calls:
            ff.ret_args = _encode_handed(mod, ff, handed_calls)
        # an empty list costs 56 bytes and a fresh one on each unpickling, the empty tuple
        # nothing (most functions call no collective and hand no rank level on)
        for name in _APPENDED:
            if not getattr(ff, name):
                setattr(ff, name, ())

    def _hands_wrapped(self, mod, ff, call, ref):
        """Note in ``ff.hands_wrapped`` each argument of ``call`` (to ``ref``) that holds a
        collective module wrapper: a local (:func:`~hpc_hangkit.lint.model.wrapped_at`), a
        ``self`` attribute of this class built from one (``mod.collective_attrs``), or the
        wrapper's construction itself (``Trainer(DDP(net))``)."""
        for k, a in _call_args(mod, ff, call):
            w = _wrapper_arg(mod, ff, a, call.lineno, True)
            if w is not None and w.__class__ is not str:
                # a tree call's result, handed to a tree function: decided after propagation
                w = (a.id, call.lineno) if not _dead_ref(mod, ref) else None
            if w:
                if not ff.hands_wrapped:
                    ff.hands_wrapped = []
                ff.hands_wrapped.append((ref, k, w, call.lineno, call.col_offset))

    def _restored(self, cls, attr, value):
        """:func:`_restored` for the module whose facts are built (its saves indexed once, when
        a restore-shaped assignment first asks)."""
        if not ((isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and
                 value.func.attr == "get" and value.args) or isinstance(value, ast.Subscript)):
            return False
        if isinstance(self._saved, tuple):
            self._saved = _saved_attrs(*self._saved)
        return _restored(self._saved, cls, attr, value)

    def _rankish(self, mod, ff):
        """The code of function ``ff`` (its own scope: the words :func:`~hpc_hangkit.lint.model.scopes`
        collected) names something the taint reads a level from
        (:func:`~hpc_hangkit.lint.model.rankish_word`; a size with an emptiness test; a
        configured rank source; a name the module imports from a rank-local call or module
        under another spelling: ``from time import perf_counter as clock``, ``from random
        import choice``). Each distinct word is matched once per process."""
        node = ff.node
        words = mod.words.get(id(node))
        if words is None:
            return True
        if not words.isdisjoint(_RANK_WORDS) or "0" in words or "not" in words:
            return True  # `0` and `not`: an emptiness test (scopes spells them only for a size)
        # the words not matched before, up to the first that names a rank source
        for w in words - _SEEN_WORDS:
            _SEEN_WORDS.add(w)
            if rankish_word(w):
                _RANK_WORDS.add(w)
                return True
        if self._extra_rank is None:
            self._extra_rank = _extra_rank()
        if not words.isdisjoint(self._extra_rank):
            return True
        if self._local_alias is None or self._local_alias[0] is not mod:
            self._local_alias = (mod, frozenset(_local_aliases(mod)))
        return not words.isdisjoint(self._local_alias[1])

    def _agreement(self, mod, ff, rets, attr_vals, agreed, nodes, taint=None):
        """Which of ``ff``'s return values and ``self`` attribute assignments are agreed through
        a collective (:attr:`~hpc_hangkit.lint.model.FuncFacts.ret_agreed`, ``agreed_attrs``).
        ``taint`` (when built): an attribute assigned a tuple of locals, each of which holds
        at that line only values of one agreeing tree call (``self._result = (p, r)`` after
        ``p = broadcast(p)``, ``r = broadcast(r)``), is agreed when that call is."""
        deps = _deps(nodes) if agreed else {}
        params = set(ff.params) - agreed - {"self", "cls"}

        def agreed_value(e):
            # a collective's result, a tree call (decided after propagation), or computed from a
            # local handed to an agreeing collective
            e = _unnot(e)  # `not verdict`: as agreed as the verdict
            if agreed and e.__class__ is _CALL and e.func.__class__ is _NAME and e.func.id in PURE_BUILTINS and \
                    e.func.id not in mod.funcs and _agreed_expr(e, agreed, mod.imports):
                return True  # `any(flags)` of a gathered list
            inner = e.args[0] if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and \
                e.func.id in ("bool", "int", "float") and len(e.args) == 1 else e
            if isinstance(inner, ast.Call) and (dotted(inner.func) or [""])[-1] == "cast" and len(inner.args) == 2:
                inner = inner.args[1]  # `cast(list[T], got)`: the value as it is
            if isinstance(inner, ast.Call):
                if call_kind(mod, inner)[0] == "collective":
                    return True
                ref = call_ref(mod, ff.cls, ff.qualname, inner)
                if ref is not None:
                    return {ref}
            # a parameter returned by name may be the argument as it came, on a path that skips
            # the collective (`if group is not None: n = agreed(n)` ... `return n`)
            if agreed and _closure(e, deps) & agreed and not names_of(e) & params:
                return True
            return False
        if rets:
            got = [agreed_value(r) for r in rets]
            # every return is an agreeing collective's result (`return comm.bcast(data)`), or
            # constant or agreed
            fixed = [_returns_agreeing(mod, r) or (bool(agreed) and _uniform_return(_unnot(r), nodes, agreed,
                                                                                mod.imports))
                     for r in rets]
            # constants chosen by tests of agreed values only (`if total[0] > 0: return True`)
            chosen = all(g is True or isinstance(r, ast.Constant) for r, g in zip(rets, got)) and \
                _decided_by_agreed(ff.node, agreed)
            ff.ret_uniform = (True in got or chosen) and all(fixed)
            if not ff.ret_uniform:
                # a local that only ever holds what tree calls return (`flag = self._sync(f)` ...
                # `return flag`): as those calls returned directly
                bare = [_unnot(r) for r in rets]
                pend = [g if r.__class__ is _CALL else _held_refs(mod, ff, r, nodes) if g is False else None
                        for r, g in zip(bare, got)]
                if all(ok or isinstance(g, set) for g, ok in zip(pend, fixed)):
                    # the others are tree calls (`return allreduce_or(timed_out)`): decided after propagation
                    ff.ret_uniform = frozenset().union(*[g for g, ok in zip(pend, fixed) if not ok])
            if True in got:
                ff.ret_agreed = True
            else:
                refs = set().union(*[g for g in got if g])
                ff.ret_agreed = refs or False
        for key, value in attr_vals:
            got = _agreed_parts(value, taint, agreed_value)
            if got:
                old = ff.agreed_attrs.get((ff.cls, key))
                ff.agreed_attrs[(ff.cls, key)] = True if (got is True or old is True) else (old or set()) | got

    # ------------------------------------------------------------ resolution
    def module_named(self, name, origin=None):
        """The module of dotted ``name`` nearest module key ``origin`` (same directory first;
        ties by path), or None. Own dotted names win over path-suffix aliases."""
        for table in (self._names, self._aliases):
            cands = table.get(name)
            if cands:
                if len(cands) == 1:
                    return cands[0]
                if origin is None:
                    return min(cands, key=lambda m: m.key)
                return min(cands, key=lambda m: (-_closeness(m.key, origin), m.key))
        return None

    def resolve(self, ref):
        """The :class:`FuncFacts` a :func:`call_ref` names, or None."""
        if ref is None:
            return None
        hit = self._cache.get(ref, False)
        if hit is not False:
            return hit
        out = None
        if ref[0] in ("self", "cls", "ncls", "acls"):
            out = self._method(ref[1], ref[2], ref[3], 0)
        elif ref[0] == "super":
            out = self._method(ref[1], ref[2], ref[3], 0, skip_own=True)
        elif ref[0] == "ret":
            # a method of the object a tree function returns (`make_proxy().synchronize`)
            maker = self.resolve(ref[1])
            method = _method_of(maker.ret_type, ref[2]) if maker is not None else None
            out = self.resolve(method) if method is not None else None
        elif ref[0] == "local":
            _, key, name, nested, sibling = ref
            mod = self.modules.get(key)
            if mod is not None:
                for q in (nested, sibling, name):
                    if q and q in mod.funcs:
                        out = mod.funcs[q]
                        break
                else:
                    for star in mod.stars:
                        out = self._qualified(star + "." + name, key, 1)
                        if out is not None:
                            break
        else:
            out = self._qualified(ref[1], ref[2], 0)
        self._cache[ref] = out
        return out

    def _method(self, key, cls, meth, depth, skip_own=False):
        mod = self.modules.get(key)
        if mod is None:
            return None
        ff = None if skip_own else mod.funcs.get(cls + "." + meth)
        if ff is not None or depth > 4:
            return ff
        for base in mod.bases.get(cls, ()):
            parts = base.split(".")
            if len(parts) == 1 and base in mod.bases and base not in mod.imports:
                hit = self._method(key, base, meth, depth + 1)
            else:
                q = qualify(mod, parts)
                if q is None:
                    continue
                bmodname, _, bcls = q.rpartition(".")
                bmod = self._real_class_module(bmodname, bcls, key)
                hit = self._method(bmod.key, bcls, meth, depth + 1) if bmod is not None else None
            if hit is not None:
                return hit
        return None

    def _dispatch(self, ff, ref):
        """The override that a call ``ref`` of method ``ff`` reaches a collective through, when
        ``ff`` itself reaches none and the receiver's class only an annotation declares
        (:data:`_DECLARED`): the first by module and name of those that reach one; else None."""
        if ff is None or ff.witness or ref[0] not in _DECLARED:
            return None
        reaching = [o for o in self.overrides(ref) if o.witness]
        return min(reaching, key=lambda o: (o.module, o.qualname)) if reaching else None

    def dispatched(self, mod, cls, scope, call):
        """True when ``call`` reaches its collective only through an override's dispatch: the
        class of its receiver is only declared (:meth:`_dispatch`), or the function it calls
        reaches it so (``FuncFacts.dispatched``). Such a finding is a configuration's choice,
        reported at ``note`` level."""
        ref = call_ref(mod, cls, scope, call)
        if ref is None:
            ref = made_ref(mod, cls, scope, call)
        ff = self.resolve(ref)
        if self._dispatch(ff, ref) is not None:
            return True
        ff = self.callee(mod, cls, scope, call)
        return ff is not None and ff.dispatched

    def overrides(self, ref):
        """The tree methods that override the method a declared call ``ref`` names
        (:data:`_DECLARED`: ``("acls", module key, class, method)`` or ``("aq", qualified
        method, module key)``) in the subclasses of the declared class, at any depth (a list;
        empty where the class is not the tree's or no tree class derives from it)."""
        if ref[0] == "acls":
            start, meth = (ref[1], ref[2]), ref[3]
        else:
            q, _, meth = ref[1].rpartition(".")
            modname, _, cls = q.rpartition(".")
            mod = self._real_class_module(modname, cls, ref[2]) if modname else None
            if mod is None:
                return []
            start = (mod.key, cls)
        if self._subclasses is None:
            self._subclasses = {}
            for key, mod in self.modules.items():
                for cls, bases in mod.bases.items():
                    for base in bases:
                        got = self._base_class(mod, base)
                        if got is not None:
                            self._subclasses.setdefault(got, []).append((key, cls))
        out, seen = [], set()
        todo = [start]
        while todo:
            for key, cls in self._subclasses.get(todo.pop(), ()):
                if (key, cls) in seen:
                    continue
                seen.add((key, cls))
                o = self.modules[key].funcs.get(cls + "." + meth)
                if o is not None:
                    out.append(o)
                todo.append((key, cls))
        return out

    def _base_class(self, mod, base):
        """``(module key, class)`` of the tree class that base ``base`` (dotted, as written in
        ``mod``'s class statement) names, or None."""
        parts = base.split(".")
        if len(parts) == 1 and base in mod.bases and base not in mod.imports:
            return mod.key, base
        q = qualify(mod, parts)
        if q is None:
            return None
        bmodname, _, bcls = q.rpartition(".")
        bmod = self._real_class_module(bmodname, bcls, mod.key)
        return (bmod.key, bcls) if bmod is not None else None

    def _real_class_module(self, modname, cls, origin):
        for _ in range(4):
            mod = self.module_named(modname, origin)
            if mod is None:
                return None
            if cls in mod.bases:
                return mod
            q = mod.imports.get(cls)
            if not q:
                return None
            origin = mod.key
            modname, _, cls2 = q.rpartition(".")
            if cls2 != cls:
                return None
        return None

    def _split(self, q, origin):
        """``(module, rest)`` for the longest leading part of dotted ``q`` that names a tree
        module (nearest ``origin``), or ``(None, None)``."""
        parts = q.split(".")
        for i in range(len(parts), 0, -1):
            mod = self.module_named(".".join(parts[:i]), origin)
            if mod is not None:
                return mod, parts[i:]
        return None, None

    def _qualified(self, q, origin, depth):
        if depth > 5:
            return None
        mod, rest = self._split(q, origin)
        if mod is None or not rest:
            return None
        if rest[0] in mod.imports and ".".join(rest) not in mod.funcs:
            return self._qualified(".".join([mod.imports[rest[0]]] + rest[1:]), mod.key, depth + 1)
        hit = mod.funcs.get(".".join(rest))
        if hit is None and len(rest) == 1:
            for star in mod.stars:
                hit = self._qualified(star + "." + rest[0], mod.key, depth + 1)
                if hit is not None:
                    break
        if hit is None and len(rest) == 2 and rest[0] in mod.bases:
            hit = self._method(mod.key, rest[0], rest[1], 0)
        return hit

    def canonical(self, q, origin):
        """``(name, in_tree)``: dotted ``q`` (as module ``origin`` imports it) followed through
        the tree's re-exports (``mypkg.utils.dist.barrier`` -> ``torch.distributed.barrier``
        when ``mypkg/utils.py`` does ``import torch.distributed as dist``); ``in_tree`` when the
        name ends at something a tree module defines."""
        k = (q, origin)
        hit = self._canon.get(k)
        if hit is not None:
            return hit
        name, in_tree = q, False
        for _ in range(6):
            mod, rest = self._split(name, origin)
            if mod is None:
                break
            if rest and rest[0] in mod.imports and ".".join(rest) not in mod.funcs:
                name, origin = ".".join([mod.imports[rest[0]]] + rest[1:]), mod.key
                continue
            in_tree = True
            break
        self._canon[k] = (name, in_tree)
        return name, in_tree

    def classify_q(self, q, origin):
        """:func:`~hpc_hangkit.lint.collectives.classify_call` of a qualified call that is no
        tree function: through the tree's re-exports, and for a name from outside the tree by
        its method name when its receiver is named like a communicator (``from mylib import
        dist``; ``dist.barrier()``). ``"collective"``, ``"p2p"`` or None."""
        name, in_tree = self.canonical(q, origin)
        method = name.rsplit(".", 1)[-1]
        if in_tree:
            if C.is_configured(name):
                return C.classify_call(name, method, None)
            # an attribute of a tree module's variable (`mpi.comm.alltoall` with `comm =
            # MPI.COMM_WORLD` in mpi.py): by the method and the receiver's name
            parts = name.split(".")
            return C.classify_call(None, method, parts[-2]) if len(parts) > 2 else None
        kind = C.classify_call(name, method, None)
        if kind is None and "." in name and not name.startswith(C.COLLECTIVE_MODULES):
            recv = name.rsplit(".", 2)[-2]
            kind = C.classify_call(None, method, recv) if C.commish(recv) else None
        return kind

    def call_kind(self, mod, call):
        """``(kind, name)`` of ``call`` in ``mod`` as :func:`~hpc_hangkit.lint.taint.call_kind`,
        with the tree's re-exports and the out-of-tree fallback of :meth:`classify_q`."""
        kind, name = call_kind(mod, call)
        if kind is not None or fake_backend(call):
            return kind, name
        parts = dotted(call.func)
        q = qualify(mod, parts) if parts else None
        if q is None:
            if parts and len(parts) == 1:
                ff = self.resolve(call_ref(mod, None, "<module>", call))
                if ff is None and mod.stars:
                    for star in mod.stars:
                        k = self.classify_q(star + "." + parts[0], mod.key)
                        if k:
                            return k, name
            return None, name
        if self.resolve(("q", q, mod.key)) is not None:
            return None, name
        return self.classify_q(q, mod.key), name

    # ------------------------------------------------------------ propagation
    def propagate(self):
        """Fixpoints over the resolved call graph: ``witness`` (the collective a function
        reaches, or None, with ``via``: how) and ``ret_level`` (a function returning a
        rank-dependent value); rank levels handed to parameters (``param_levels``) and from
        them to ``self`` attributes. The result does not depend on the order of the modules:
        a function takes, among the callees nearest a collective, the smallest by name."""
        self._cache = {}  # resolutions made while modules were still being added
        self._bind_wrappers()
        self._through_elems()
        callers = {}
        ret_callers = {}
        self._spec = {}
        nodes = list(self.funcs.values())
        i = 0
        while i < len(nodes):  # copies specialised to constant arguments join as they are made
            ff = nodes[i]
            i += 1
            ff.witness = ff.direct
            ff.via = (ff.direct_line, None) if ff.direct else None
            ff.param_levels = {}
            ff.param_none = ff.param_from = None
            for ref, line, _col, info in ff.calls:
                callee = self.resolve(ref)
                if callee is not None:
                    callee.called = True
                    if ref[0] in _DECLARED:
                        # the object may be of any subclass: what an override reaches, it reaches
                        for o in self.overrides(ref):
                            callers.setdefault(id(o), []).append((ff, line, True))
                    callee = self.specialized(callee, ref, info, nodes)
                    callers.setdefault(id(callee), []).append((ff, line, False))
                elif ff.witness is None and ref[0] == "q" and self.classify_q(ref[1], ref[2]) == "collective":
                    ff.direct = ff.witness = ref[1].rsplit(".", 1)[-1]
                    ff.direct_line = line
                    ff.via = (line, None)
                elif ff.witness is None and ref[0] == "self" and self.wrapper(ref) is not None:
                    ff.direct = ff.witness = self.wrapper(ref)
                    ff.direct_line = line
                    ff.via = (line, None)
            for ref in ff.ret_calls:
                callee = self.resolve(ref)
                if callee is not None:
                    ret_callers.setdefault(id(callee), []).append(ff)
        frontier = [ff for ff in nodes if ff.witness]
        while frontier:
            best = {}
            for ff in frontier:
                for caller, line, through in callers.get(id(ff), ()):
                    if caller.witness is not None:
                        continue
                    # a path that no override's dispatch decides comes first
                    key = (through or ff.dispatched, ff.witness, ff.module, ff.qualname, line)
                    old = best.get(id(caller))
                    if old is None or key < old[0]:
                        best[id(caller)] = (key, caller, line, ff)
            frontier = []
            for key, caller, line, ff in best.values():
                caller.witness = ff.witness
                caller.via = (line, ff)
                caller.dispatched = key[0]
                frontier.append(caller)
        self._uniform_returns(nodes)
        for attr in ("ret_level", "ret_direct"):
            # a caller that returns a callee's result returns at least its level
            work = [ff for ff in self.funcs.values() if getattr(ff, attr)]
            while work:
                ff = work.pop()
                lvl = getattr(ff, attr)
                for caller in ret_callers.get(id(ff), ()):
                    if getattr(caller, attr) < lvl:
                        setattr(caller, attr, lvl)
                        work.append(caller)
        self._agree_attributes()
        # before the arguments are handed: an agreed element handed on is agreed there too
        self._agreed_elements()
        self._hand_arguments()
        self._pass_through()

    def _agreed_elements(self):
        """An element of a returned tuple that is a local only ever holding what tree calls
        return, each of which returns an agreed value (:attr:`~hpc_hangkit.lint.model.FuncFacts.ret_elem_held`,
        ``ret_agreed``), is the same on every rank: OLMo's ``return run_canceled, extra_steps``
        after ``run_canceled = synchronize_flag(should_cancel, device)``, whose broadcast the
        facts of the function could not know."""
        for ff in self.funcs.values():
            held = ff.ret_elem_held
            if held is None or ff.ret_elems is None:
                continue
            for i, refs in enumerate(held):
                if refs and all(getattr(self.resolve(r), "ret_agreed", None) is True for r in refs):
                    ff.ret_elems = list(ff.ret_elems)
                    ff.ret_elems[i] = 0
                    if ff.ret_elem_trips is not None and i < len(ff.ret_elem_trips):
                        ff.ret_elem_trips = list(ff.ret_elem_trips)
                        ff.ret_elem_trips[i] = 0

    def _bind_wrappers(self):
        """Where a collective module wrapper is called through a parameter. A function reaches
        the wrapper's forward through parameter ``p`` (``wrap_reach``) when it calls ``p``
        (``model(x)``) or hands ``p`` as it is to a function that does. A call that hands such a
        parameter a wrapper (``evaluate(model)`` after ``model = DDP(net)``; ``evaluate(self.model)``)
        reaches that forward: the call is a collective of its function (``direct``), and the
        rules read it at the call (:meth:`wrap_witness`): ``evaluate(model.module)`` elsewhere
        reaches nothing. A parameter so bound holds the wrapper where its function calls it,
        directly or through functions handing it on as it is."""
        for ff in self.funcs.values():
            if ff.wrapped is not None and any(w.__class__ is tuple for v in ff.wrapped.values() for _, w in v):
                self._returned_wrappers(ff)
        for ff in self.funcs.values():
            for attr, ref in ff.attr_plain:
                w = self._ret_wrapper(ref) if ref.__class__ is tuple else None
                if w is not None:
                    self.modules[ff.module].collective_attrs.setdefault((ff.cls, attr), w)
        hands = [ff for ff in self.funcs.values() if ff.hands_wrapped]
        if not hands:
            return
        edges, back = {}, {}
        for ff in self.funcs.values():
            for ref, k, mine in ff.passes:
                callee = self.resolve(ref)
                p = _bound_param(callee, ref, k) if callee is not None else None
                if p is not None:
                    edges.setdefault(id(ff), []).append((mine, callee, p))
                    back.setdefault(id(callee), []).append((p, ff, mine, ref))
        # what reaches a forward through which parameter: its own call, or a callee's
        work = []
        for ff in self.funcs.values():
            if ff.param_called:
                ff.wrap_reach = {p: (line, None, None) for p, (line, _col) in ff.param_called.items()}
                work.append(ff)
        while work:
            ff = work.pop()
            for p, caller, mine, ref in back.get(id(ff), ()):
                if p in ff.wrap_reach and mine not in caller.wrap_reach and mine not in ("self", "cls"):
                    line = min((x[1] for x in caller.calls if x[0] == ref), default=caller.line)
                    caller.wrap_reach = dict(caller.wrap_reach, **{mine: (line, ff, p)})
                    work.append(caller)
        bound = []
        for ff in hands:
            for ref, k, w, line, col in ff.hands_wrapped:
                if w.__class__ is tuple:
                    w = wrapped_at(ff, w[0], w[1])
                    if w is None:
                        continue
                callee, ctor = self.resolve(ref), 0
                if callee is None and ref[0] in ("q", "local"):
                    callee, ctor = self._constructor(ref), 1
                p = _bound_param(callee, ref, k, ctor) if callee is not None else None
                if p is None:
                    continue
                bound.append((callee, p, w))
                if p in callee.wrap_reach:
                    name = "forward of %s" % w
                    # the chain goes on into the callee (:meth:`chain`)
                    ff.hand_reach = dict(ff.hand_reach or {})
                    ff.hand_reach[line] = (callee, p, w)
                    ff.directs = sorted(list(ff.directs) + [(line, col, name)])
                    if ff.direct is None or line < ff.direct_line:
                        ff.direct, ff.direct_line = name, line
        seen = set()
        while bound:
            ff, p, w = bound.pop()
            if (id(ff), p) in seen:
                continue
            seen.add((id(ff), p))
            if p not in ff.assigned_params and p not in ("self", "cls") and wrapped_at(ff, p, 1, True) is None:
                ff.wrapped = dict(ff.wrapped or {}, **{p: ((0, w),)})
            for attr, q in ff.attr_plain:
                if q.__class__ is str and q == p and p not in ff.assigned_params:
                    mod = self.modules.get(ff.module)
                    if mod is not None:
                        mod.collective_attrs.setdefault((ff.cls, attr), w)
            for mine, callee, q in edges.get(id(ff), ()):
                if mine == p:
                    bound.append((callee, q, w))

    def wrap_witness(self, mod, ff, call, callee):
        """``("forward of DDP", ((path, line, what), ...))`` when ``call`` (in function ``ff`` of
        ``mod``, resolved to ``callee``) hands a collective module wrapper to a parameter through
        which ``callee`` reaches its forward (:meth:`_bind_wrappers`): the chain from the callee
        down to the call of the wrapper; else None."""
        if not callee.wrap_reach:
            return None
        ref = call_ref(mod, ff.cls, ff.qualname, call) or ("q",)
        for k, a in _call_args(mod, ff, call):
            p = _bound_param(callee, ref, k)
            if p is None or p not in callee.wrap_reach:
                continue
            w = _wrapper_arg(mod, ff, a, call.lineno)
            if not w:
                continue
            return "forward of %s" % w, tuple(_reach_chain(callee, p, w))
        return None

    def _returned_wrappers(self, ff):
        """Decide the locals of ``ff`` assigned what a tree call returns (``model =
        ddp_wrap(model, ctx)``): the wrapper class when the callee returns a module wrapper
        (:attr:`~hpc_hangkit.lint.model.FuncFacts.ret_wrapper`, through functions returning such
        a call as it is), else None; then the calls of those locals that are the wrapper's
        forward join ``ff``'s collectives."""
        wrapped = {}
        for name, sites in ff.wrapped.items():
            out = tuple((line, self._ret_wrapper(w) if w.__class__ is tuple else w) for line, w in sites)
            if any(w for _, w in out):
                wrapped[name] = out
        ff.wrapped = wrapped or None
        found = []
        for line, col, name in ff.local_calls:
            w = wrapped_at(ff, name, line)
            if w is not None:
                found.append((line, col, "forward of %s" % w))
        if found:
            ff.directs = sorted(list(ff.directs) + found)
            line, _, what = min(found)
            if ff.direct is None or line < ff.direct_line:
                ff.direct, ff.direct_line = what, line

    def _ret_wrapper(self, ref, depth=0):
        """The module wrapper class the tree function ``ref`` names returns, or None."""
        callee = self.resolve(ref)
        if callee is None:
            return None
        if callee.ret_wrapper is not None or callee.ret_through is None or depth > 4:
            return callee.ret_wrapper
        return self._ret_wrapper(callee.ret_through, depth + 1)

    def _through_elems(self):
        """A function that returns what one tree call returns (``def get_data_loader(...):
        return get_dataloaders(...)``) returns its tuple: it takes that callee's
        :attr:`~hpc_hangkit.lint.model.FuncFacts.ret_elems` and ``ret_elem_trips``, and its
        ``equal_count`` (a loader with a distributed sampler), through any chain of such
        functions."""
        pending = [ff for ff in self.funcs.values() if ff.ret_through is not None]
        changed = True
        while changed and pending:
            changed = False
            for ff in pending:
                callee = self.resolve(ff.ret_through)
                if callee is None or callee is ff:
                    continue
                if ff.ret_elems is None and callee.ret_elems is not None:
                    ff.ret_elems, ff.ret_elem_trips = callee.ret_elems, callee.ret_elem_trips
                    changed = True
                if callee.equal_count and not ff.equal_count:
                    ff.equal_count = changed = True

    def _uniform_returns(self, nodes):
        """Decide :attr:`~hpc_hangkit.lint.model.FuncFacts.ret_uniform` where it waits on tree
        calls: True when each of them resolves to a function that returns only constants and
        agreed values (through any chain of such wrappers), else False. Such a function returns
        nothing rank-dependent (``ret_level`` 0), whatever its arguments' levels."""
        pending = [ff for ff in nodes if ff.ret_uniform and ff.ret_uniform is not True]
        changed = True
        while changed:
            changed = False
            for ff in pending:
                if ff.ret_uniform is not True and all(
                        getattr(self.resolve(r), "ret_uniform", False) is True for r in ff.ret_uniform):
                    ff.ret_uniform = True
                    ff.ret_level = ff.ret_direct = 0
                    changed = True
        for ff in pending:
            if ff.ret_uniform is not True:
                ff.ret_uniform = False

    def _agree_attributes(self):
        """Resolve :attr:`~hpc_hangkit.lint.model.FuncFacts.ret_agreed` through tree calls
        (a function returning what an agreeing function returns), then mark the ``self``
        attributes assigned an agreed value (``ModuleFacts.attr_agreed``): such a flag is
        read as the same on every rank (``self.overflow = self.has_overflow()``, which
        all-reduces it), whatever else is assigned to it (an initial value, a checkpoint's)."""
        def agreed(v):
            return v is True or (bool(v) and any(getattr(self.resolve(r), "ret_agreed", None) is True for r in v))
        changed = True
        while changed:
            changed = False
            for ff in self.funcs.values():
                if ff.ret_agreed and ff.ret_agreed is not True and agreed(ff.ret_agreed):
                    ff.ret_agreed = True
                    changed = True
        for ff in self.funcs.values():
            if ff.agreed_attrs:
                mod = self.modules.get(ff.module)
                for key, v in ff.agreed_attrs.items():
                    if agreed(v):
                        mod.attr_agreed.add(key)

    def _hand_arguments(self):
        """Rank levels of arguments handed to tree functions and classes (``Trainer(args,
        dataset)`` with a rank-sharded dataset): into the callee's parameters, and from there
        into ``self`` attributes that ``__init__`` (or any method) builds from them."""
        self._bind_rank_params()
        for ff in list(self.funcs.values()):
            calls = ff.arg_calls
            if ff.elem_args:
                calls = list(calls)
                for ref, k, refs, fallback in ff.elem_args:
                    lv = 0
                    for r, i in refs:
                        src = self.resolve(r)
                        trips = src.ret_elem_trips if src is not None else None
                        lv = max(lv, trips[i] if trips is not None and i < len(trips) else fallback)
                    if lv:
                        calls.append((ref, {k: lv}))
            for ref, levels in calls:
                for k, lv in levels.items():
                    self._bind_level(ref, k, lv)
        # a value None on some ranks (``get_log_dir()``) handed on, and on through the
        # parameters that hand it on as they are: its None-ness, for a test ``if log_dir is not
        # None:`` in the callee
        work = []
        for ff in self.funcs.values():
            handed = ff.ret_args
            for x in range(0, len(handed), 3):
                i, k, j = handed[x:x + 3]
                src = self.resolve(ff.calls[j][0])
                if src is not None and src.ret_none:
                    got = self._bind_level(ff.calls[i][0], k, src.ret_none, "param_none")
                    if got is not None:
                        _note_from(got, (ff.path, ff.calls[j][1]))
                        work.append(got)
        while work:
            ff, p = work.pop()
            if p in ff.assigned_params:
                continue
            for ref, k, mine in ff.passes:
                if mine == p:
                    got = self._bind_level(ref, k, ff.param_none[p], "param_none")
                    if got is not None:
                        _note_from(got, ff.param_from.get(p) if ff.param_from else None)
                        work.append(got)
        for ff in self.funcs.values():
            if not ff.attr_params:
                continue
            mod = self.modules.get(ff.module)
            for key, used in ff.attr_params.items():
                lv = 0
                for p in used:
                    if isinstance(p, tuple):  # a call: its return level
                        callee = self.resolve(p)
                        lv = max(lv, callee.ret_level if callee is not None else 0)
                    else:
                        lv = max(lv, ff.param_levels.get(p, 0))
                if lv > mod.attr_levels.get(key, 0):
                    mod.attr_levels[key] = lv

    def _bind_level(self, ref, k, lv, field="param_levels"):
        """Raise the level of the parameter that argument ``k`` (a position or keyword) of a call
        to ``ref`` binds to at least ``lv``, in the callee's ``field`` (``param_levels``, or
        ``param_none``: its None-ness alone): ``(callee, parameter)`` when it rose, else None (no
        tree callee, no such parameter, or already as high)."""
        callee = self.resolve(ref)
        bound = 0
        if callee is None and ref[0] in ("q", "local"):
            callee = self._constructor(ref)
            bound = 1
        elif callee is not None and ref[0] in ("self", "super"):
            bound = 1
        if callee is None:
            return None
        if isinstance(k, int):
            i = k + bound
            if i >= len(callee.params):
                return None
            k = callee.params[i]
        elif k not in callee.params:
            return None
        levels = getattr(callee, field)
        if levels is None:
            levels = {}
            setattr(callee, field, levels)
        if lv > levels.get(k, 0):
            levels[k] = lv
            return callee, k
        return None

    def _pass_through(self):
        """Mark the parameters that can hold data from outside the tree's own making
        (:attr:`~hpc_hangkit.lint.model.FuncFacts.open_params`): every parameter of a function
        no tree code calls (an entry point), one a caller hands a rank level, and, through any
        chain of calls, one a caller binds to such a parameter of its own."""
        edges = {}
        work = []
        for ff in self.funcs.values():
            if not ff.called:
                ff.open_params = True
                work.append(ff)
            else:
                ff.open_params = {p for p, lv in ff.param_levels.items() if lv} or _NONE
                if ff.open_params:
                    work.append(ff)
            for ref, k, mine in ff.passes:
                callee = self.resolve(ref)
                if callee is None:
                    continue
                bound = 1 if ref[0] in ("self", "super") else 0
                p = callee.params[k + bound] if isinstance(k, int) and k + bound < len(callee.params) else k
                if p in callee.params:
                    edges.setdefault(id(ff), []).append((mine, callee, p))
        while work:
            ff = work.pop()
            for mine, callee, p in edges.get(id(ff), ()):
                if (ff.open_params is True or mine in ff.open_params) and callee.open_params is not True and \
                        p not in callee.open_params:
                    if callee.open_params is _NONE:
                        callee.open_params = set()
                    callee.open_params.add(p)
                    work.append(callee)

    def _bind_rank_params(self):
        """A private helper (``_add_peers(self, rank, peers)``) whose rank-named parameters every
        call in the tree binds to a value the same on every rank (``for rank in
        range(world_size): self._add_peers(rank, ...)``: each rank builds every rank's entry)
        reads them as that value: its own levels and what it hands on are those of
        :attr:`~hpc_hangkit.lint.model.FuncFacts.free_calls`. A helper no tree code calls, or
        one called without binding them, or with a rank-dependent value, keeps the rank."""
        helpers = {id(ff): ff for ff in self.funcs.values() if ff.free_calls is not None and ff.called}
        if not helpers:
            return
        bad = set()
        seen = set()
        for ff in self.funcs.values():
            handed = [(ref, k, lv) for ref, levels in ff.arg_calls for k, lv in levels.items() if lv]
            # a caller's own parameter handed on: what it holds is its callers' (maybe the rank)
            handed += [(ref, k, 2) for ref, k, _mine in ff.passes]
            for ref, k, lv in handed:
                callee = self.resolve(ref)
                if callee is None or id(callee) not in helpers:
                    continue
                bound = 1 if ref[0] in ("self", "super") else 0
                p = callee.params[k + bound] if isinstance(k, int) and k + bound < len(callee.params) else k
                if p in callee.free_calls[0]:
                    bad.add(id(callee))
            for ref, _line, _col, info in ff.calls:
                callee = self.resolve(ref)
                if callee is None or id(callee) not in helpers:
                    continue
                seen.add(id(callee))
                bound = 1 if ref[0] in ("self", "super") else 0
                npos, kws = (info[0], info[1]) if info is not None else (0, ())
                if info is not None and info[4]:
                    bad.add(id(callee))  # *args / **kwargs: what is bound is unknown
                    continue
                for p in callee.free_calls[0]:
                    i = callee.params.index(p) - bound
                    if not (0 <= i < npos or p in kws):
                        bad.add(id(callee))
        for key, ff in helpers.items():
            if key in bad or key not in seen:
                continue
            ranked, handed = ff.free_calls
            ff.uniform_params = frozenset(ranked)
            ff.arg_calls = [(ref, lv) for ref, (lv, _) in handed if lv]
            ff.elem_args = [e for _, (_, elems) in handed for e in elems]

    def _constructor(self, ref):
        """``Class.__init__`` when a ``q``/``local`` ref names a tree class, else None."""
        if ref[0] == "local":
            mod, cls = self.modules.get(ref[1]), ref[2]
        else:
            mod, rest = self._split(ref[1], ref[2])
            if mod is None or len(rest) != 1:
                return None
            cls = rest[0]
            if cls in mod.imports and cls not in mod.bases:
                name, _ = self.canonical(ref[1], ref[2])
                mod, rest = self._split(name, mod.key)
                if mod is None or len(rest) != 1:
                    return None
                cls = rest[0]
        if mod is None or cls not in mod.bases:
            return None
        return self._method(mod.key, cls, "__init__", 0)

    def wrapper(self, ref):
        """``"forward of DDP"`` when a ``("self", key, cls, attr)`` ref calls an attribute built
        from a collective module wrapper (:data:`~hpc_hangkit.lint.collectives.WRAPPER_CLASSES`)."""
        if ref is None or ref[0] != "self":
            return None
        mod = self.modules.get(ref[1])
        w = mod.collective_attrs.get((ref[2], ref[3])) if mod is not None else None
        return ("forward of %s" % w) if w else None

    # ------------------------------------------------------------ queries (Taint, rules)
    @property
    def abort_hook(self):
        """``(path, line)`` of the first exception hook or exit handler of the tree that aborts
        the job and is installed: at a module's top level (it runs on import), or by a function
        that some function of the tree calls (pyuvsim's ``mpi.start_mpi()``, PyFR's
        ``init_mpi()``); None when there is none. A function only offered to the project's users
        (ASE's ``register_parallel_cleanup_function``) installs nothing the lint can count on."""
        if self._hook is None:
            self._hook = ()
            called = None
            for path, line, name, key, installer in sorted(self._hooks, key=lambda h: (h[0], h[1])):
                if installer is not None:
                    if called is None:
                        called = {r[1] for ff in self.funcs.values() for r, _, _, _ in ff.calls if r[0] == "q"} | \
                                 {(r[1], r[2]) for ff in self.funcs.values() for r, _, _, _ in ff.calls
                                  if r[0] == "local"}
                    if name + "." + installer not in called and (key, installer) not in called:
                        continue
                self._hook = (path, line)
                break
        return self._hook or None

    def callee(self, mod, cls, scope, call):
        """The tree function ``call`` resolves to, or None; specialised to the call's constant
        arguments (:meth:`specialized`). A method of an attribute whose class a constructor
        parameter's annotation declares (:data:`_DECLARED`) that reaches no collective is, where
        a tree override of it reaches one, that override (the first by module and name)."""
        ref = call_ref(mod, cls, scope, call)
        if ref is None:
            ref = made_ref(mod, cls, scope, call)
        ff = self.resolve(ref)
        o = self._dispatch(ff, ref)
        if o is not None:
            return o
        if ff is None:
            ref = applied_ref(mod, cls, scope, call)
            ff = self.resolve(ref)
            return self.specialized(ff, ref, _APPLIED) if ff is not None else None
        return self.specialized(ff, ref, call_info(mod, call)) if ff is not None else None

    def specialized(self, ff, ref, info, new=None):
        """``ff`` as a call with ``info`` (:func:`call_info`) runs it: when constant arguments
        (or the defaults of parameters the call leaves out) make some of its calls and
        collectives unreachable (``load(args, evaluate=True)`` with the barriers under ``not
        evaluate``; ``state_dict()`` with the broadcast under ``if all_ranks:``), a copy of
        ``ff`` without them, made once per function and binding; else ``ff``. During
        :meth:`propagate` (``new``: the list of functions being propagated) the copy joins the
        fixpoint; afterwards its witness is taken from its remaining calls."""
        fwd = None
        if ff.forwards and not (info is not None and info[4]):
            # the keywords this call gives that no named parameter takes: what `**kwargs` holds;
            # and the positional arguments beyond the named ones: what `*args` holds
            first = ff.varpos[1] if ff.varpos is not None else None
            fwd = (tuple(k for k in info[1] if k not in ff.params),
                   tuple((k, v) for k, v in info[2] if isinstance(k, str) and k not in ff.params) +
                   tuple((k - first, v) for k, v in info[2] if isinstance(k, int) and first is not None
                         and k >= first),
                   max(0, info[0] - first) if first is not None else 0) \
                if info is not None else ((), (), 0)
        if not ff.cond_ranges and not ff.relays and fwd is None:
            return ff
        bound = 1 if (ff.cls and ff.params and ff.params[0] in ("self", "cls")
                      and not (info is not None and info[3])) else 0
        binding = _binding(ff, info, bound) if ff.cond_ranges or ff.relays else {}
        for k in [k for k in binding if k in ff.rebinds]:
            if binding[k] is not None or not all(self._rebind_keeps_none(r, key) for r, key in ff.rebinds[k]):
                del binding[k]
        if not binding and fwd is None:
            return ff
        key = (id(ff), tuple(sorted((k, type(v).__name__, repr(v)) for k, v in binding.items())),
               None if fwd is None else (fwd[0], tuple((k, type(v).__name__, repr(v)) for k, v in fwd[1]), fwd[2]))
        spec = self.__dict__.setdefault("_spec", {})
        hit = spec.get(key)
        if hit is not None:
            return hit
        dead = [(a, b) for a, b, test, pol, masked in ff.cond_ranges
                if _truth(test, {k: v for k, v in binding.items() if k not in masked} if masked else binding)
                is (not pol)] if binding else []
        relayed = self._relayed(ff, binding) if ff.relays and binding else None
        if not dead and not relayed and fwd is None:
            spec[key] = ff
            return ff

        def live(line, col):
            return not any(a <= (line, col) <= b for a, b in dead)
        c = FuncFacts.__new__(FuncFacts)
        for slot in FuncFacts.__slots__:
            setattr(c, slot, getattr(ff, slot))
        c.general = ff
        c.calls = [x for x in ff.calls if live(x[1], x[2])]
        if relayed:
            c.calls = [(r, line, col, relayed.get((line, col), inf) if inf is not _APPLIED else inf)
                       for r, line, col, inf in c.calls]
        if fwd is not None:
            hands = (ff.kwarg, (ff.varpos[0], ff.kwarg) if ff.varpos is not None else None)
            c.calls = [(r, line, col, _forwarded(inf, fwd) if inf is not None and inf[4] in hands else inf)
                       for r, line, col, inf in c.calls]
        c.directs = [x for x in ff.directs if live(x[0], x[1])]
        c.direct, c.direct_line = (min(c.directs)[2], min(c.directs)[0]) if c.directs else (None, 0)
        if ff.marked:
            c.direct, c.direct_line = ff.direct, ff.direct_line
        c.witness, c.via = c.direct, ((c.direct_line, None) if c.direct else None)
        if ff.raise_at:
            c.raises = any(live(*x) for x in ff.raise_at)
        spec[key] = c
        if new is not None:
            new.append(c)
            return c
        for r, line, _col, inf in c.calls:  # after propagation: one level down, as propagated
            if c.witness is not None:
                break
            callee = self.resolve(r)
            if callee is not None:
                callee = self.specialized(callee, r, inf)
                if callee.witness:
                    c.witness, c.via = callee.witness, (line, callee)
        return c

    def _relayed(self, ff, binding):
        """``{(line, col): call info}`` for the calls of ``ff`` that hand on a parameter bound
        to a constant in ``binding`` (:attr:`~hpc_hangkit.lint.model.FuncFacts.relays`), with
        that constant in the call's :func:`call_info`; only where it binds a parameter the
        callee's tests or relays read (``append(obj, gather=False)`` handing ``gather`` to
        ``_append``, whose gather runs only ``if gather:``). Empty when none does."""
        out = {}
        for line, col, k, p in ff.relays:
            if p not in binding:
                continue
            at = (line, col)
            ref = inf = None
            for r, l2, c2, i2 in ff.calls:
                if l2 == line and c2 == col and i2 is not _APPLIED and i2 is not None:
                    ref, inf = r, i2
                    break
            g = self.resolve(ref) if ref is not None else None
            if g is None or not g.tested:
                continue
            base = out.get(at, inf)
            new = _with_const(base, k, binding[p])
            b = 1 if (g.cls and g.params and g.params[0] in ("self", "cls") and not new[3]) else 0
            if _binding(g, new, b) != _binding(g, inf, b):
                out[at] = new
        return out

    def _rebind_keeps_none(self, ref, key):
        """True when the tree function ``ref`` resolves to returns None whenever its argument
        ``key`` (a position among the call's arguments, or a keyword) is None
        (:attr:`~hpc_hangkit.lint.model.FuncFacts.keeps_none`)."""
        g = self.resolve(ref)
        if g is None or not g.keeps_none:
            return False
        if isinstance(key, int):
            key += 1 if (g.cls and g.params and g.params[0] in ("self", "cls")) else 0
            if key >= len(g.params):
                return False
            key = g.params[key]
        return key in g.keeps_none

    def agreed_method(self, name):
        """True when the value of method ``name`` called on a receiver the lint cannot type is
        the same on every rank: some tree class implements ``name`` with a collective, and every
        tree implementation that reaches a collective returns an agreed value (its collective's
        result: Lightning's ``ParallelStrategy.reduce_boolean_decision`` all-reduces the decision
        and returns it; the single-process ``Strategy`` returns its argument and runs without
        other ranks). Meaningful after :meth:`propagate` (before it: False)."""
        if self._methods is None:
            self._methods = {}
            for ff in self.funcs.values():
                if ff.cls and ff.qualname == ff.cls + "." + ff.qualname.rsplit(".", 1)[-1]:
                    self._methods.setdefault(ff.qualname.rsplit(".", 1)[-1], []).append(ff)
        comm = [ff for ff in self._methods.get(name, ()) if ff.witness]
        return bool(comm) and all(ff.ret_agreed is True for ff in comm)

    def padded_return(self, ff):
        """The trip level of what tree function ``ff`` returns when it is a list padded to a count
        (:attr:`~hpc_hangkit.lint.model.FuncFacts.ret_pad`): the count's level, with what its
        callers hand the parameters it is computed from; None otherwise."""
        if ff.ret_pad is None:
            return None
        lv, used = ff.ret_pad
        return max([lv] + [ff.param_levels.get(p, 0) for p in used])

    def field_trip(self, ff, attr):
        """The trip level of field ``attr`` of the record tree function ``ff`` returns
        (:attr:`~hpc_hangkit.lint.model.FuncFacts.ret_fields`), or None when unknown."""
        got = (ff.ret_fields or {}).get(attr)
        if got is None:
            return None
        lv, refs = got
        for ref in refs:
            callee = self.resolve(ref)
            more = self.padded_return(callee) if callee is not None else None
            if more is None:
                return None
            lv = max(lv, more)
        return lv

    def return_level(self, mod, cls, call, direct=False):
        """Rank level of the value a call of a tree function returns (0 when unresolved);
        ``direct``: counting only what its returned values are computed from (``ret_direct``)."""
        ff = self.resolve(call_ref(mod, cls, "<module>", call))
        if ff is None:
            return 0
        return ff.ret_direct if direct else ff.ret_level

    def emptied_arg(self, mod, cls, call):
        """For a call of a tree function whose returns all test the emptiness of one parameter
        (``ret_empty``: ``def empty(x): return x.numel() == 0``), the argument node bound to that
        parameter; else None (not a tree function, no such return, or no argument bound to it)."""
        ref = call_ref(mod, cls, "<module>", call)
        ff = self.resolve(ref)
        if ff is None or ff.ret_empty is None:
            return None
        bound = 1 if ff.cls and ff.params and ff.params[0] in ("self", "cls") and ref[0] != "cls" else 0
        for i, a in enumerate(call.args):
            if isinstance(a, ast.Starred):
                return None
            if i + bound < len(ff.params) and ff.params[i + bound] == ff.ret_empty:
                return a
        for k in call.keywords:
            if k.arg == ff.ret_empty:
                return k.value
        return None

    def returning_args(self, mod, cls, call):
        """For a call of a tree function: the argument nodes whose parameters its return values
        are computed from (``dist_init(rank, ...)`` returning constants: none). None when the
        call does not resolve to a tree function."""
        ref = call_ref(mod, cls, "<module>", call)
        ff = self.resolve(ref)
        if ff is None:
            return None
        if ff.ret_uniform is True:
            return []  # it returns constants and agreed values only, whatever it is handed
        bound = 1 if ff.cls and ff.params and ff.params[0] in ("self", "cls") and ref[0] != "cls" else 0
        out = []
        for i, a in enumerate(call.args):
            if isinstance(a, ast.Starred):
                out.append(a.value)
            elif i + bound < len(ff.params) and ff.params[i + bound] in ff.ret_params:
                out.append(a)
        for k in call.keywords:
            # a keyword that names where logs go does not make the value rank-dependent here
            # either (fairseq's progress bar, wrapped in a logger's on the master only)
            if k.arg is None or (k.arg in ff.ret_params and not C.is_display_keyword(k.arg)):
                out.append(k.value)
        return out

    def none_level(self, mod, cls, call):
        """``(level, argument nodes)`` of whether a call of a tree function returns None: its
        ``ret_none`` and the arguments bound to the parameters that decide it; None when that is
        not known (not a tree function, or no ``ret_none``)."""
        ref = call_ref(mod, cls, "<module>", call)
        ff = self.resolve(ref)
        if ff is not None and ff.ret_none is None and not ff.ret_level:
            # what it returns is not rank-dependent by itself: nor is whether it is None, beyond
            # the arguments its return values are computed from
            return 0, list(self.returning_args(mod, cls, call) or ())
        if ff is None or ff.ret_none is None:
            return None
        bound = 1 if ff.cls and ff.params and ff.params[0] in ("self", "cls") and ref[0] != "cls" else 0
        out = []
        for i, a in enumerate(call.args):
            if isinstance(a, ast.Starred) or (i + bound < len(ff.params) and ff.params[i + bound] in ff.ret_none_params):
                out.append(a)
        for k in call.keywords:
            if k.arg is None or k.arg in ff.ret_none_params:
                out.append(k.value)
        return ff.ret_none, out

    def attr_level(self, mod, cls, attr):
        """Rank level of ``self.attr`` (``attr`` may be dotted: ``state.best``) in class ``cls``
        of ``mod`` (assignments in its methods, and its bases' in the same module)."""
        if not cls or (cls, attr) in mod.attr_agreed:
            return 0
        lv = mod.attr_levels.get((cls, attr), 0)
        if "." not in attr and self.foreign:
            # `trainer.should_stop = True` elsewhere in the module, read as self.should_stop in
            # class Trainer: the receiver's name says which class it is
            low = cls.lower()
            for (key, a, recv), flv in self.foreign.items():
                if key == mod.key and a == attr and recv and (recv in low or low in recv):
                    lv = max(lv, flv)
        for base in mod.bases.get(cls, ()):
            if base in mod.bases and base != cls:
                lv = max(lv, mod.attr_levels.get((base, attr), 0))
        return lv

    def chain(self, ff):
        """``[(path, line, what)]``: the calls from function ``ff`` down to the collective it
        reaches (``what``: ``"helper()"`` for a call, the collective's name last)."""
        out = []
        seen = set()
        while ff is not None and ff.via is not None and id(ff) not in seen:
            seen.add(id(ff))
            line, nxt = ff.via
            hand = ff.hand_reach.get(line) if nxt is None and ff.hand_reach else None
            if hand is not None:
                # a module wrapper handed at this line to a callee that calls it
                callee, p, w = hand
                out.append((ff.path, line, callee.qualname.rsplit(".", 1)[-1] + "()"))
                out.extend(_reach_chain(callee, p, w))
                break
            out.append((ff.path, line, (nxt.qualname.rsplit(".", 1)[-1] + "()") if nxt is not None
                        else ff.witness))
            ff = nxt
        return out


def _handed(taint, mod, ff, call, ref):
    """``({param index or keyword: level}, [elem_args entries])`` that ``call`` (to tree
    function ``ref``) hands its callee (a position counted as :func:`_first_arg` says). What a
    callee can do with data is mostly iterate it: the trip-count level (a loader with a
    DistributedSampler: 0), as the values are at the call's line (not what is assigned later);
    an element of a tuple a tree call returns is resolved after propagation
    (:attr:`~hpc_hangkit.lint.model.FuncFacts.elem_args`). A yes/no keyword (``use_gpu=use_gpu``)
    is handed too: it does not size what a call returns (:meth:`Taint._args_level` leaves it
    out), but the callee may test it."""
    taint._at = call.lineno
    first = _first_arg(mod, ff, call) if call.args else 0
    handed = [(i + first, a) for i, a in enumerate(call.args) if not isinstance(a, ast.Starred)]
    handed += [(k.arg, k.value) for k in call.keywords
               if k.arg and not C.is_display_keyword(k.arg)]
    lv = {}
    elems = []
    for k, a in handed:
        got = taint.trip_level(a)
        src = taint.elem_src(a.id, call.lineno) if got and isinstance(a, ast.Name) else None
        refs = [(call_ref(mod, ff.cls, ff.qualname, c), i) for c, i in src or ()]
        if refs and all(r is not None for r, _ in refs):
            elems.append((ref, k, refs, got))
        elif got:
            lv[k] = got
    taint._at = None
    return lv, elems


def _reach_chain(ff, p, w):
    """``[(path, line, what)]`` from function ``ff`` down to the call of module wrapper ``w``
    that its parameter ``p`` holds (:attr:`~hpc_hangkit.lint.model.FuncFacts.wrap_reach`)."""
    out = []
    while len(out) < 8:
        line, nxt, q = ff.wrap_reach[p]
        out.append((ff.path, line, ("%s()" % nxt.qualname.rsplit(".", 1)[-1]) if nxt is not None
                    else "forward of %s" % w))
        if nxt is None:
            break
        ff, p = nxt, q
    return out


def _falls_off(body):
    """True when statement list ``body`` can end without a ``return`` or ``raise`` (a function
    whose body does gives back None there): its last statement is neither, nor an ``if`` whose
    both sides cannot, nor a ``with`` whose body cannot."""
    if not body:
        return True
    last = body[-1]
    if last.__class__ in (ast.Return, ast.Raise):
        return False
    if last.__class__ is ast.If:
        return _falls_off(last.body) or _falls_off(last.orelse)
    if last.__class__ in (ast.With, ast.AsyncWith):
        return _falls_off(last.body)
    if last.__class__ is ast.While and last.test.__class__ is ast.Constant and last.test.value is True:
        return any(x.__class__ is ast.Break for x in ast.walk(last))
    return True


def _note_from(bound, at):
    """Keep ``at`` (``(path, line)``) as where the parameter of ``bound`` (``(callee, parameter)``)
    got its level (:attr:`~hpc_hangkit.lint.model.FuncFacts.param_from`), unless one is kept."""
    callee, p = bound
    if at is None:
        return
    if callee.param_from is None:
        callee.param_from = {}
    callee.param_from.setdefault(p, at)


def _single_calls(nodes, params):
    """``{local name: call node}`` for each local that ``nodes`` bind exactly once, by a plain
    assignment of a call (``d = get_log_dir(...)``); parameters left out."""
    count, calls = {}, {}
    for n in nodes:
        if n.__class__ not in _BINDERS:
            continue
        for t in _targets(n):
            for name in ((t.id,) if t.__class__ is _NAME else names_of(t)):
                count[name] = count.get(name, 0) + 1
        if n.__class__ is _ASSIGN and len(n.targets) == 1 and n.targets[0].__class__ is _NAME and \
                n.value.__class__ is _CALL:
            calls[n.targets[0].id] = n.value
    return {k: v for k, v in calls.items() if count.get(k) == 1 and k not in params}


def _ret_args(mod, ff, call, singles, local, params):
    """``(handed, singles)``: ``[(position or keyword, source call node)]`` for each argument of
    ``call`` in function ``ff`` that is a call, or a local assigned only a call
    (:func:`_single_calls`: ``singles`` when already built, else built here from ``local``, the
    function's own nodes, or None); and ``singles`` as it is now."""
    out = []
    for k, a in _call_args(mod, ff, call):
        if a.__class__ is _CALL:
            out.append((k, a))
        elif a.__class__ is _NAME and a.id not in params:
            if singles is None:
                singles = _single_calls(local if local is not None else walk_local(ff.node), params)
            src = singles.get(a.id)
            if src is not None:
                out.append((k, src))
    return out, singles


def _encode_handed(mod, ff, handed):
    """:attr:`~hpc_hangkit.lint.model.FuncFacts.ret_args` of ``ff`` from ``[(index in ff.calls
    of the call, position or keyword, source call node)]``: a flat tuple ``(call index, key,
    source index, ...)`` whose sources are tree calls of ``ff.calls`` (not guessed, not dead).
    Indices into the calls the facts already hold, so an entry costs three references (the
    indices are mostly small, shared ints)."""
    at = {}
    for i, c in enumerate(ff.calls):
        if c[3] is not _APPLIED:
            at.setdefault((c[1], c[2]), i)
    out = []
    for i, k, src in handed:
        j = at.get((src.lineno, src.col_offset))
        if j is None:
            continue
        sref = ff.calls[j][0]
        if sref[0] not in _GUESSED and not _dead_ref(mod, sref):
            out += (i, k, j)
    return tuple(out)


def _params_handed_on(call, params):
    """``[(line, col, key, parameter)]`` for each of ``params`` that ``call`` hands on as it is,
    keyed as :func:`call_info` keys a constant argument (its position among the call's
    arguments, or its keyword); none after a ``*args``, where positions are unknown."""
    out = []
    for i, a in enumerate(call.args):
        if a.__class__ is ast.Starred:
            break
        if a.__class__ is _NAME and a.id in params and a.id not in ("self", "cls"):
            out.append((call.lineno, call.col_offset, i, a.id))
    for k in call.keywords:
        if k.arg and k.value.__class__ is _NAME and k.value.id in params and k.value.id not in ("self", "cls"):
            out.append((call.lineno, call.col_offset, k.arg, k.value.id))
    return out


def _call_args(mod, ff, call):
    """``[(position or keyword, argument node)]`` of ``call`` in function ``ff`` of ``mod``,
    positions counted as the callee's parameters after an explicit ``self`` (``Class.method(obj,
    ...)``: :func:`_first_arg`)."""
    first = _first_arg(mod, ff, call) if call.args else 0
    return [(i + first, a) for i, a in enumerate(call.args)] + [(k.arg, k.value) for k in call.keywords if k.arg]


def _wrapper_arg(mod, ff, a, line, pending=False):
    """The collective module wrapper class (``"DDP"``) that argument ``a`` of a call at ``line``
    in function ``ff`` holds: a local (:func:`~hpc_hangkit.lint.model.wrapped_at`; ``pending``:
    as it takes it), a ``self`` attribute of the class built from one (``mod.collective_attrs``),
    or the wrapper's construction itself (``Trainer(DDP(net))``); else None."""
    if a.__class__ is _NAME:
        return wrapped_at(ff, a.id, line, pending)
    if ff.cls and a.__class__ is ast.Attribute and a.value.__class__ is _NAME and a.value.id == "self":
        return mod.collective_attrs.get((ff.cls, a.attr))
    return _built_wrapper(a)


def _returned_wrapper(ff, rets):
    """The module wrapper class (``"DDP"``) that one of the return values ``rets`` of function
    ``ff`` builds (``return DDP(model, ...)``, either side of a conditional expression) or
    holds (``ddp = DDP(model)`` ... ``return ddp``), or None."""
    for r in rets:
        for v in ((r.body, r.orelse) if r.__class__ is ast.IfExp else (r,)):
            if v.__class__ is _CALL:
                if _built_wrapper(v):
                    return _built_wrapper(v)
            elif v.__class__ is _NAME and ff.wrapped is not None:
                w = wrapped_at(ff, v.id, getattr(r, "lineno", 0) + 1)
                if w is not None:
                    return w
    return None


_WRAP_WORDS = frozenset(C.WRAPPER_CLASSES | C.SHARDING_CALLS)


def attr_state_dict(mod, cls, call):
    """``"state_dict of FSDP"`` for ``self.model.state_dict()`` where ``self.model`` of class
    ``cls`` holds an FSDP wrapper (``mod.collective_attrs``): the full state is gathered over
    the group; else None."""
    f = call.func
    if not cls or f.__class__ is not ast.Attribute or f.attr != "state_dict":
        return None
    v = f.value
    if v.__class__ is ast.Attribute and v.value.__class__ is _NAME and v.value.id == "self":
        w = mod.collective_attrs.get((cls, v.attr))
        if w in C.GATHERING_WRAPPERS:
            return "state_dict of %s" % w
    return None


def _prune_pending(ff):
    """Drop from ``ff.wrapped`` the locals that only hold what tree calls returned (no wrapper
    built here) and that the function neither calls as a module nor hands to a tree function:
    nothing asks what they hold."""
    keep = {name for _, _, name in ff.local_calls} | \
        {w[0] for _, _, w, _, _ in ff.hands_wrapped if w.__class__ is tuple}
    kept = {name: sites for name, sites in ff.wrapped.items()
            if name in keep or any(w.__class__ is str for _, w in sites)}
    if kept:
        # a pending ref as the same object as the call's own ref in ``ff.calls``
        known = {c[0]: c[0] for c in ff.calls}
        kept = {name: tuple((line, known.get(w, w) if w.__class__ is tuple else w) for line, w in sites)
                for name, sites in kept.items()}
    ff.wrapped = kept or None


def _equal_count_value(e):
    """True for None or a call building a loader that gives every rank as many items (a
    ``sampler=``/``batch_sampler=`` argument, a ``DistributedSampler``, accelerate's prepared
    loader)."""
    if e.__class__ is ast.Constant:
        return e.value is None
    if e.__class__ is not _CALL:
        return False
    f = e.func
    name = f.id if f.__class__ is _NAME else f.attr if f.__class__ is ast.Attribute else None
    return name in _EQUAL_COUNT or any(k.arg in ("sampler", "batch_sampler") for k in e.keywords)


def _wrapper_in(e):
    """The collective module wrapper class (``"DDP"``) a call in expression ``e`` builds, or
    None."""
    w = None
    for x in ast.walk(e):
        w = _built_wrapper(x) or w
    return w


def _built_wrapper(e):
    """The collective module wrapper class (``"DDP"``) when ``e`` is a call that builds one
    (``DDP(net)``, ``nn.parallel.DistributedDataParallel(net)``), else None."""
    if e.__class__ is not _CALL:
        return None
    d = dotted(e.func)
    return d[-1] if d and d[-1] in C.WRAPPER_CLASSES else None


def _called_local(call):
    """The local that ``call`` calls as a module (``model(x)``, ``model.forward(x)``), or None."""
    f = call.func
    if f.__class__ is _NAME:
        return f.id
    if f.__class__ is ast.Attribute and f.attr == "forward" and f.value.__class__ is _NAME:
        return f.value.id
    return None


def _bound_param(callee, ref, k, ctor=0):
    """The parameter of ``callee`` that argument ``k`` (a position or keyword) of a call through
    ``ref`` binds, or None; ``ctor`` 1: the call builds ``callee``'s class (its ``__init__``)."""
    bound = 1 if ctor or ref[0] in ("self", "super") else 0
    p = callee.params[k + bound] if isinstance(k, int) and k + bound < len(callee.params) else k
    return p if p in callee.params else None


def _path_aliases(key):
    """The dotted names a module of normalized path ``key`` is also found by: its trailing path
    components (``src/pkg/context.py`` as ``context``, ``pkg.context``...)."""
    comps = key[:-3].split(os.sep) if key.endswith(".py") else key.split(os.sep)
    if comps[-1] == "__init__":
        comps = comps[:-1]
    return [".".join(comps[-k:]) for k in range(1, min(9, len(comps)))]


#: while :func:`hpc_hangkit.lint.lint_paths` runs: every dotted name a file being linted can be
#: found by (:func:`set_tree_names`), else None; and qualified name -> no leading part of it is one
_TREE_NAMES = None
_DEAD_Q = {}


def set_tree_names(paths):
    """Note the files of the tree about to be linted (None: forget them). A qualified call none
    of whose leading parts names one of them resolves to no tree function: its facts skip
    what only a tree callee would read (:func:`_dead_ref`)."""
    global _TREE_NAMES
    _DEAD_Q.clear()
    if paths is None:
        _TREE_NAMES = None
        return
    names = set()
    for p in paths:
        names.add(module_name(p))
        names.update(_path_aliases(os.path.normpath(os.path.abspath(p))))
    _TREE_NAMES = names


def _dead_ref(mod, ref):
    """True for a call ref of ``mod`` that no resolution can follow, so what the call is handed
    (its arguments' levels, the parameters handed on as they are) is dropped after propagation
    (:meth:`Project._hand_arguments`, :meth:`Project._pass_through`) and need not be computed: a
    ``local`` name with no function of the module by that name (nested, sibling or its own), no
    class of it and no ``*`` import to look in (a builtin: ``len(x)``); a qualified name none of
    whose leading parts is a module of the tree (:func:`set_tree_names`: ``os.path.join``)."""
    kind = ref[0]
    if kind == "local":
        return not mod.stars and ref[2] not in mod.bases and not (
            ref[2] in mod.funcs or (ref[3] and ref[3] in mod.funcs) or (ref[4] and ref[4] in mod.funcs))
    if kind == "q" and _TREE_NAMES is not None:
        q = ref[1]
        got = _DEAD_Q.get(q)
        if got is None:
            parts = q.split(".")
            got = _DEAD_Q[q] = not any(".".join(parts[:i]) in _TREE_NAMES for i in range(1, len(parts) + 1))
        return got
    return False


def _saved_attrs(mod, fns):
    """``{(class, key dump, attr)}``: ``state[K] = self.attr`` (or ``{K: self.attr}``) in a
    method of the class: what the class saves under key ``K``."""
    out = set()
    for ff in fns:
        if not ff.cls:
            continue
        local = mod.local.get(id(ff.node))
        for n in (local if local is not None else walk_local(ff.node)):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute):
                attr = _self_attr(n.value)
                if attr is not None:
                    for t in n.targets:
                        if isinstance(t, ast.Subscript):
                            out.add((ff.cls, ast.dump(t.slice), attr))
            elif isinstance(n, ast.Dict):
                for k, v in zip(n.keys, n.values):
                    attr = _self_attr(v) if k is not None and isinstance(v, ast.Attribute) else None
                    if attr is not None:
                        out.add((ff.cls, ast.dump(k), attr))
    return out


def _restored(saved, cls, attr, value):
    """True for ``self.attr = state.get(K, ...)`` / ``state[K]`` where the class saves
    ``self.attr`` under the same ``K`` (:func:`_saved_attrs`): a round trip through a
    checkpoint gives back what a rank saved from this attribute, so the restore adds nothing
    to the attribute's level (rank-indexed checkpoint lists included: each entry holds that
    attribute as its rank had it)."""
    if not saved:
        return False
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "get" and \
            value.args:
        key = value.args[0]
    elif isinstance(value, ast.Subscript):
        key = value.slice
    else:
        return False
    return (cls, ast.dump(key), attr) in saved


#: builtins whose answer is never None
_NEVER_NONE_CALLS = frozenset(("int", "float", "str", "bool", "len", "repr", "abs", "round", "isinstance",
                               "hasattr", "callable", "hash", "id", "ord", "chr", "format"))


def _never_none(e):
    """True for a value that is never None: a literal, a display, arithmetic, a comparison, a
    call of a capitalised name (a class: a constructor never returns None), of a builtin that
    answers with a number, string or bool (:data:`_NEVER_NONE_CALLS`), of a rank query
    (``dist.get_rank()``: a number on every rank)."""
    if isinstance(e, ast.Constant):
        return e.value is not None
    if isinstance(e, (ast.List, ast.Tuple, ast.Dict, ast.Set, ast.JoinedStr, ast.ListComp, ast.DictComp,
                      ast.SetComp, ast.BinOp, ast.Compare, ast.UnaryOp)):
        return True
    if isinstance(e, ast.Call):
        d = dotted(e.func)
        return bool(d) and (d[-1][:1].isupper() or d[-1] in C.RANK_CALLS or
                            (len(d) == 1 and d[0] in _NEVER_NONE_CALLS))
    return False


def _sets_first(body, name):
    """True when ``body`` assigns ``name`` a never-None value (:func:`_never_none`) in a plain
    top-level statement before any exit, and assigns it nothing after."""
    for i, st in enumerate(body):
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) and \
                st.targets[0].id == name and _never_none(st.value):
            return not any(name in _stored(x) for x in body[i + 1:])
        if name in _stored(st) or any(isinstance(x, (ast.Return, ast.Raise, ast.Break, ast.Continue))
                                      for x in ast.walk(st)):
            return False
    return False


def _stored(st):
    return {x.id for x in ast.walk(st) if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store)}


def _polar(test):
    """``(key, polarity)`` of an ``if`` test (``not c`` / ``==`` / ``!=`` folded), for telling
    two complementary tests apart."""
    pol = True
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, pol = test.operand, not pol
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.NotEq, ast.IsNot)):
        return (ast.dump(test.left), "eq", ast.dump(test.comparators[0])), not pol
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
        return (ast.dump(test.left), "eq", ast.dump(test.comparators[0])), pol
    return ast.dump(test), pol


def _stable(test, assigned):
    """True when ``test`` reads only constants, names the function never assigns, and rank calls
    without arguments (the rank does not change between two tests)."""
    for x in ast.walk(test):
        if isinstance(x, ast.Call):
            d = dotted(x.func)
            if not (d and C.is_rank_call(d[-1]) and not x.args and not x.keywords):
                return False
        elif isinstance(x, ast.Name) and x.id in assigned:
            return False
        elif isinstance(x, (ast.Subscript, ast.Lambda, ast.NamedExpr, ast.Await)):
            return False
    return True


def _set_before(stmts, name, assigned):
    """True when the statements ``stmts`` (a block, up to a read of ``name``) end with ``name``
    set to a never-None value on every path that reaches their end: a plain assignment of one
    (``state = {...}``), an ``if``/``else`` whose
    branches both set it (:func:`_sets_first`), or two ``if`` statements with complementary
    stable tests (``if get_rank() == 0: x = S(p)`` ... ``if get_rank() != 0: x = S(p)``), and
    nothing assigns it after."""
    for i in range(len(stmts) - 1, -1, -1):
        st = stmts[i]
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) and \
                st.targets[0].id == name:
            return _never_none(st.value)  # the last plain assignment on the way: its value decides
        if isinstance(st, ast.If) and _sets_first(st.body, name):
            if st.orelse and _sets_first(st.orelse, name):
                return True
            if not st.orelse and _stable(st.test, assigned):
                key, pol = _polar(st.test)
                for j in range(i - 1, -1, -1):
                    other = stmts[j]
                    if isinstance(other, ast.If) and not other.orelse and _polar(other.test) == (key, not pol) \
                            and _sets_first(other.body, name):
                        return True
                    if name in _stored(other):
                        return False
            return False
        if name in _stored(st):
            return False
    return False


def _none_level(fn, taint, params, nodes):
    """``(level, parameters)`` of whether function ``fn`` returns None: the highest level of the
    ``if`` tests that hold a ``return`` and of the returned values whose None-ness is not fixed
    (a never-None value or None is fixed; so is a local set to a never-None value on every path
    to the return, :func:`_set_before`), and the parameters those read. None when a ``return``
    stands in a loop or an ``except`` handler (not worked out) or ``taint`` is None."""
    if taint is None:
        return None
    single = single_process_returns(fn)
    tests, values = [], []
    lv = 0
    stack = [(getattr(fn, "body", []), ())]
    while stack:
        stmts, ifs = stack.pop()
        for i, st in enumerate(stmts):
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(st, ast.Return):
                if id(st) in single:
                    continue
                tests.extend(ifs)
                v = st.value
                # `state if rank == 0 else {}`: each side on its own; the test only when the
                # sides differ in None-ness
                arms = [v.body, v.orelse] if isinstance(v, ast.IfExp) else [v]
                fixed = []
                for arm in arms:
                    if arm is None or (isinstance(arm, ast.Constant) and arm.value is None):
                        fixed.append("none")
                    elif _never_none(arm) or (isinstance(arm, ast.Name) and arm.id not in params and
                                              _set_before(stmts[:i], arm.id, taint.assigned)):
                        fixed.append("value")
                    else:
                        fixed.append(None)
                        values.append(arm)
                        lv = max(lv, taint.level_at(arm, st.lineno))
                if len(arms) == 2 and fixed[0] != fixed[1]:
                    tests.append(v.test)
                continue
            if isinstance(st, ast.If):
                stack.append((st.body, ifs + (st.test,)))
                stack.append((st.orelse, ifs + (st.test,)))
            elif isinstance(st, (ast.For, ast.AsyncFor, ast.While, ast.Try)) or type(st).__name__ in ("TryStar",
                                                                                                     "Match"):
                if any(isinstance(x, ast.Return) for x in ast.walk(st)):
                    return None
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                stack.append((st.body, ifs))
    seen = set()
    for t in tests:
        if id(t) not in seen:
            seen.add(id(t))
            lv = max(lv, taint.test_level_at(t, t.lineno))
    return lv, _flows_from(tests + values, nodes, params)


def _agreed_expr(e, agreed, imports=()):
    """A constant, or an expression whose local names are all in ``agreed`` (the locals handed
    to an agreeing collective): ``all_results.item() == 1``, ``bool(flag)``, ``cast(list[T], got)``
    (a type cast hands its second argument on as it is), ``torch.sum(torch.stack(got))`` (a
    function of an imported module, ``imports``: the module's import table, applied to them)."""
    skip = set()
    for x in ast.walk(e):
        if isinstance(x, ast.Call) and (dotted(x.func) or [""])[-1] == "cast" and len(x.args) == 2:
            skip.update(id(y) for y in ast.walk(x.func))
            skip.update(id(y) for y in ast.walk(x.args[0]))
        elif isinstance(x, ast.Call) and x.func.__class__ is ast.Attribute and x.args and \
                not C.is_rank_call(x.func.attr):
            # a function of a module applied to values (`torch.sum(torch.stack(got))`): its
            # answer is as agreed as they are; not one that answers by itself with this rank's
            # own (a rank, the clock, random numbers, a file check)
            d = dotted(x.func)
            if d and d[0] in imports:
                q = ".".join([imports[d[0]]] + d[1:])
                if q not in C.LOCAL_CALLS and not q.startswith(C.LOCAL_PREFIXES):
                    skip.add(id(x.func.value if len(d) == 2 else x.func))
                    for y in ast.walk(x.func):
                        if y.__class__ is _NAME:
                            skip.add(id(y))
    names = {x.id for x in ast.walk(e) if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Load)
             and id(x) not in skip}
    names -= PURE_BUILTINS
    return names <= agreed


#: class methods that, by the field's naming, hand back an object of their class (a singleton's
#: accessor, an alternative constructor)
_FACTORY = re.compile(r"^(instance|get_instance|getInstance|create|from_\w+)$")


def _built_class(value):
    """The dotted name (``"pkg.Proxy"``) of the class whose object expression ``value`` builds
    (``Proxy(...)``, ``Proxy.from_config(c)``), or None."""
    if value.__class__ is not _CALL:
        return None
    d = dotted(value.func)
    if d and len(d) > 1 and d[-2][:1].isupper() and _FACTORY.match(d[-1]):
        d = d[:-1]  # `Cls.instance()`, `Cls.from_config(c)`: an object of the class
    if not d or not d[-1][:1].isupper():
        return None
    return ".".join(d)


def _returned_class(mod, ff, rets):
    """:attr:`~hpc_hangkit.lint.model.FuncFacts.ret_type` of function ``ff`` whose return
    values are ``rets``: the class every one of them builds, directly or through a local
    typed by :meth:`Project._types`; None when they differ or one is something else."""
    typ = None
    for r in rets:
        got = _built_class(r)
        if got is None and r.__class__ is _NAME:
            got = ff.var_types.get(r.id)
        if got is None or (typ is not None and got != typ):
            return None
        typ = got
    return _class_ref(mod, typ)


def _returns_agreeing(mod, r):
    """True when return value ``r`` is the result of a collective that hands every rank the same
    value (``comm.bcast(x)``, ``comm.allgather(x)``: :data:`~hpc_hangkit.lint.taint._RETURN_AGREES`)."""
    if not isinstance(r, ast.Call):
        return False
    kind, name = call_kind(mod, r)
    return kind == "collective" and name in _RETURN_AGREES


def _decided_by_agreed(fn, agreed):
    """True when every statement of function ``fn`` that holds a ``return`` is an ``if`` whose
    test reads only locals in ``agreed`` (handed to an agreeing collective) and constants
    (``Allreduce(local, total, op=LOR)`` then ``if total[0] > 0: return True``): which return
    runs is the same on every rank."""
    if not agreed:
        return False
    stack = list(fn.body)
    while stack:
        st = stack.pop()
        if isinstance(st, ast.If):
            if any(isinstance(x, ast.Return) for x in _stmts_under(st)):
                if any(isinstance(x, (ast.Call, ast.NamedExpr)) for x in ast.walk(st.test)) or \
                        not names_of(st.test) <= agreed:
                    return False
                stack += st.body + st.orelse
        elif isinstance(st, _COMPOUND) and any(isinstance(x, ast.Return) for x in _stmts_under(st)):
            return False
    return True


_COMPOUND = (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try) + \
    ((ast.TryStar,) if hasattr(ast, "TryStar") else ()) + ((ast.Match,) if hasattr(ast, "Match") else ())


def _stmts_under(st):
    """The statements inside compound statement ``st`` (nested functions and classes not entered)."""
    out = []
    stack = [st]
    while stack:
        n = stack.pop()
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for c in getattr(n, field, ()) or ():
                if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue
                out.append(c)
                stack.append(c)
    return out


def _uniform_return(r, nodes, agreed, imports=()):
    """True when return value ``r`` is a constant or agreed expression (:func:`_agreed_expr`), or a
    local name every assignment of which (plain ``name = value``, nothing else) is one."""
    if _agreed_expr(r, agreed, imports):
        return True
    if not isinstance(r, ast.Name):
        return False
    found = False
    for n in nodes:
        if isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.withitem, ast.NamedExpr)):
            target = n.optional_vars if isinstance(n, ast.withitem) else n.target
            if target is not None and any(isinstance(x, ast.Name) and x.id == r.id for x in ast.walk(target)):
                return False
        elif isinstance(n, ast.Assign):
            hit = [t for t in n.targets if any(isinstance(x, ast.Name) and x.id == r.id for x in ast.walk(t))]
            if hit:
                if not (len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)) or \
                        not _agreed_expr(n.value, agreed, imports):
                    return False
                found = True
    return found


def _returned_lengths(mod, ff, taint, stmts, params, nodes):
    """Fill ``ff.ret_pad`` and ``ff.ret_fields`` (:class:`~hpc_hangkit.lint.model.FuncFacts`)
    for a function whose every return hands back a local name."""
    if any(r.value is None for r in stmts):
        return  # a bare return hands back None
    if not isinstance(nodes, list):
        nodes = list(nodes)
    # most functions pad nothing and return no record: ask the trip counts only when one may
    pads = [] if any(_padding(st) for st in ff.node.body) else None
    for r in (stmts if pads is not None else ()):
        taint._at = r.lineno
        taint.trip_level(r.value)  # fills the padded lists
        pad = (taint._pads or {}).get(r.value.id)
        if pad is None or pad[0] >= r.lineno:
            pads = None
            break
        pads.append((pad, r.lineno))
    taint._at = None
    if pads:
        deps = _deps(nodes)
        lv, used = 0, set()
        for (line, m), at in pads:
            if m is not None:
                lv = max(lv, taint.level_at(m, line))
                used |= _closure(m, deps) & params
        ff.ret_pad = (lv, frozenset(used))
    returned = {r.value.id for r in stmts}
    records = {}  # returned name -> the fields of the records built into it
    for n in nodes:
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and n.value.keywords:
            for t in n.targets:
                if isinstance(t, ast.Name) and t.id in returned:
                    d = dotted(n.value.func)
                    if d and d[-1][:1].isupper():
                        records.setdefault(t.id, set()).update(k.arg for k in n.value.keywords if k.arg)
    fields = None
    for r in stmts:
        names = records.get(r.value.id)
        if not names:
            return
        got = {}
        for attr in names:
            defer = []
            taint._at = r.lineno
            lv = taint._field_trip(r.value.id, attr, defer)
            taint._at = None
            refs = [call_ref(mod, ff.cls, ff.qualname, c) for c in defer]
            if lv is not None and None not in refs:
                got[attr] = (lv, refs)
        if fields is None:
            fields = got
        else:
            fields = {a: (max(v[0], got[a][0]), v[1] + got[a][1]) for a, v in fields.items() if a in got}
    ff.ret_fields = fields or None


def _equal_count_return(fn, ret):
    """True when return statement ``ret`` of function ``fn`` hands back a loader that gives
    every rank as many items: a call of :data:`~hpc_hangkit.lint.taint._EQUAL_COUNT`
    (``accelerator.prepare(dl)``) or one with a ``sampler=``, or a local whose last
    assignment before a top-level ``return`` is one (``dl = accelerator.prepare(dl)`` then
    ``return dl``: that assignment replaces what ``dl`` held)."""
    v = ret.value
    if isinstance(v, ast.Name) and any(st is ret for st in fn.body):
        last = None
        for st in fn.body[:[i for i, st in enumerate(fn.body) if st is ret][0]]:
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) and \
                    st.targets[0].id == v.id:
                last = st
            elif last is not None and v.id in _assigned(nodes_of(st)):
                last = None  # assigned again under a branch or loop after it
        if last is None:
            return False
        v = last.value
    if not isinstance(v, ast.Call):
        return False
    d = dotted(v.func)
    return bool(d) and (d[-1] in _EQUAL_COUNT or any(k.arg in ("sampler", "batch_sampler") for k in v.keywords))


def _local_aliases(mod):
    """The names ``mod`` imports that a rank-local call is made through where the call's own
    spelling does not say so: their targets are rank-local calls (``from time import
    perf_counter as clock``), under a rank-local prefix (``from random import choice``), or
    modules holding a rank-local call whose name after the module matches no word of
    :func:`~hpc_hangkit.lint.model.rankish_word` (``import platform as pf``: ``pf.node()``).
    ``import torch`` is not one: ``torch.rand(...)`` names ``rand`` itself."""
    global _LOCAL_PARENTS
    if _LOCAL_PARENTS is None or _LOCAL_PARENTS[0] != C.LOCAL_CALLS:
        # the modules (and their parents) of the rank-local calls that need their alias: `q` is
        # one when a call's name starts with `q.` and the rest names no rank-local word
        parents = set()
        for lc in C.LOCAL_CALLS:
            parts = lc.split(".")
            for k in range(1, len(parts)):
                if not any(rankish_word(w) for w in parts[k:]):
                    parents.add(".".join(parts[:k]))
        _LOCAL_PARENTS = (frozenset(C.LOCAL_CALLS), frozenset(parents))
    parents = _LOCAL_PARENTS[1]
    out = []
    for alias, q in mod.imports.items():
        if q in C.LOCAL_CALLS or q.startswith(C.LOCAL_PREFIXES) or (q + ".").startswith(C.LOCAL_PREFIXES) or \
                q in parents:
            out.append(alias)
    return out


#: (the rank-local calls, the modules whose alias :func:`_local_aliases` keeps)
_LOCAL_PARENTS = None


def call_info(mod, call):
    """What :meth:`Project.specialized` needs of a call: None for a call without arguments,
    else ``(number of positional arguments, keyword names, ((position or keyword, constant),
    ...), explicit self, unpacked)``; explicit self: ``Class.method(obj, ...)`` on a class of the
    module; unpacked: ``*args``/``**kwargs`` (the defaults are then unknown): the name of the
    mapping when the only unpacking is ``**name``; ``(args, kwargs)`` for ``f(*args, **kwargs)``
    (those two unpackings and named keywords only), else True."""
    f = call.func
    explicit = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in mod.bases
    if not call.args and not call.keywords and not explicit:
        return None
    consts = []
    unpacked = False
    for i, a in enumerate(call.args):
        if isinstance(a, ast.Starred):
            unpacked = True
        elif isinstance(a, ast.Constant):
            consts.append((i, a.value))
    names = []
    for k in call.keywords:
        if k.arg is None:
            # `**kwargs` alone: its name (a caller's keywords may be known); anything else: True
            unpacked = k.value.id if isinstance(k.value, ast.Name) and unpacked is False else True
            continue
        names.append(k.arg)
        if isinstance(k.value, ast.Constant):
            consts.append((k.arg, k.value.value))
    if unpacked is True and len(call.args) == 1 and isinstance(call.args[0].value if isinstance(
            call.args[0], ast.Starred) else None, ast.Name):
        stars = [k.value for k in call.keywords if k.arg is None]
        if len(stars) == 1 and isinstance(stars[0], ast.Name):
            unpacked = (call.args[0].value.id, stars[0].id)
    info = (len(call.args), tuple(names), tuple(consts), explicit, unpacked)
    return _INFOS.setdefault(info, info)  # one object per distinct shape: most calls share a few


def _forwarded(info, fwd):
    """:func:`call_info` of a call that hands on ``**kwargs`` (or ``*args, **kwargs``), with the
    caller's arguments ``fwd`` (``(keywords, ((keyword or position, constant), ...), number of
    positional arguments)``: those that no named parameter takes) in their place: a keyword the
    caller did not give is not in ``kwargs``, so the callee's parameter keeps its default."""
    npos, names, consts, explicit, unpacked = info
    if isinstance(unpacked, tuple):
        npos = npos - 1 + fwd[2]  # `*args` stands last among the positional arguments
        given = consts + fwd[1]
    else:
        given = consts + tuple(kv for kv in fwd[1] if isinstance(kv[0], str))
    names = names + tuple(k for k in fwd[0] if k not in names)
    consts = tuple(kv for i, kv in enumerate(given) if i < len(consts) or kv[0] not in names[:len(info[1])])
    info = (npos, names, consts, explicit, False)
    return _INFOS.setdefault(info, info)


def _with_const(info, key, value):
    """:func:`call_info` tuple ``info`` with argument ``key`` (a position or keyword) known to
    be the constant ``value``."""
    npos, names, consts, explicit, unpacked = info
    info = (npos, names, tuple(kv for kv in consts if kv[0] != key) + ((key, value),), explicit, unpacked)
    return _INFOS.setdefault(info, info)


#: interned :func:`call_info` tuples (the facts of a large tree hold hundreds of thousands of calls)
_INFOS = {}


def _binding(ff, info, bound):
    """Parameter -> constant value for a call of ``ff`` (:func:`call_info`), only parameters
    that the function's :attr:`~hpc_hangkit.lint.model.FuncFacts.cond_ranges` test."""
    tested = ff.tested
    out = {}
    if info is None:
        npos, names, consts, unpacked = 0, (), (), False
    else:
        npos, names, consts, _, unpacked = info
    if not unpacked:
        passed = set(names) | set(ff.params[bound:bound + npos])
        out = {k: v for k, v in ff.defaults.items() if k in tested and k not in passed}
    for k, v in consts:
        if isinstance(k, int):
            if k + bound >= len(ff.params):
                continue
            k = ff.params[k + bound]
        if k in tested:
            out[k] = v
    return out


#: the builtin classes a constant default can be tested against by name
_BUILTIN_TYPES = {"int": int, "float": float, "str": str, "bool": bool, "bytes": bytes, "complex": complex,
                  "tuple": tuple}
_CMP = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Is: lambda a, b: a is b,
        ast.IsNot: lambda a, b: a is not b, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_UNKNOWN = object()


def _value(e, b):
    if isinstance(e, ast.Constant):
        return e.value
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "isinstance" and \
            len(e.args) == 2 and not e.keywords:
        v = _value(e.args[0], b)
        if v is None:
            if not any(isinstance(x, (ast.Call, ast.Constant)) or
                       (isinstance(x, (ast.Name, ast.Attribute)) and (dotted(x) or [""])[-1] in ("object", "NoneType"))
                       for x in ast.walk(e.args[1])):
                return False  # None is an instance of no class named here
        elif v is not _UNKNOWN:
            kinds = e.args[1].elts if isinstance(e.args[1], ast.Tuple) else [e.args[1]]
            if kinds and all(isinstance(k, ast.Name) and k.id in _BUILTIN_TYPES for k in kinds):
                return isinstance(v, tuple(_BUILTIN_TYPES[k.id] for k in kinds))
        return _UNKNOWN
    if isinstance(e, ast.Name):
        return b.get(e.id, _UNKNOWN)
    if isinstance(e, (ast.Tuple, ast.List)):
        vals = [_value(x, b) for x in e.elts]
        return _UNKNOWN if any(v is _UNKNOWN for v in vals) else tuple(vals)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        t = _truth(e.operand, b)
        return _UNKNOWN if t is None else (not t)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        v = _value(e.operand, b)
        return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else _UNKNOWN
    if isinstance(e, ast.BoolOp) or isinstance(e, ast.Compare):
        t = _truth(e, b)
        return _UNKNOWN if t is None else t
    return _UNKNOWN


def _truth(e, b):
    """True, False, or None (unknown) for test ``e`` with the names of ``b`` bound to constants."""
    if isinstance(e, ast.BoolOp):
        ts = [_truth(v, b) for v in e.values]
        decisive = isinstance(e.op, ast.Or)
        if decisive in ts:
            return decisive
        return None if None in ts else (not decisive)
    if isinstance(e, ast.Compare):
        if len(e.ops) != 1 or type(e.ops[0]) not in _CMP:
            return None
        left, right = _value(e.left, b), _value(e.comparators[0], b)
        if left is _UNKNOWN or right is _UNKNOWN:
            return None
        try:
            return bool(_CMP[type(e.ops[0])](left, right))
        except TypeError:
            return None
    v = _value(e, b)
    if v is _UNKNOWN:
        return None
    try:
        return bool(v)
    except Exception:
        return None


def _arg_key(call, name):
    """The position (int) or keyword of the one plain argument ``name`` of ``call``, else None
    (passed twice, not at all, or after ``*args``)."""
    keys = []
    for i, a in enumerate(call.args):
        if isinstance(a, ast.Starred):
            return None
        if isinstance(a, ast.Name) and a.id == name:
            keys.append(i)
    keys += [k.arg for k in call.keywords if k.arg is not None and isinstance(k.value, ast.Name)
             and k.value.id == name]
    return keys[0] if len(keys) == 1 else None


def _rebinds(mod, ff, nodes, params):
    """:attr:`~hpc_hangkit.lint.model.FuncFacts.rebinds` candidates: parameter -> ``((call ref,
    argument key), ...)`` for those of ``params`` whose every assignment among ``nodes`` is
    ``p = f(..., p, ...)`` with ``f`` a call the tree may resolve."""
    out, spoiled = {}, set()
    for n in nodes:
        if n.__class__ is ast.Assign and len(n.targets) == 1 and n.targets[0].__class__ is _NAME and \
                n.targets[0].id in params:
            p = n.targets[0].id
            key = _arg_key(n.value, p) if isinstance(n.value, ast.Call) else None
            ref = call_ref(mod, ff.cls, ff.qualname, n.value) if key is not None else None
            if ref is None or (isinstance(n.value.func, ast.Attribute) and isinstance(n.value.func.value, ast.Name)
                               and n.value.func.value.id in mod.bases):
                spoiled.add(p)
            else:
                out.setdefault(p, []).append((ref, key))
        elif n.__class__ in _BINDERS:
            spoiled.update(_rebound((n,)) & params)
    return {p: tuple(v) for p, v in out.items() if p not in spoiled}


def _targets(n):
    """The target expressions of binding node ``n`` (one of :data:`_BINDERS`)."""
    if isinstance(n, ast.Assign):
        return list(n.targets)
    if isinstance(n, ast.withitem):
        return [n.optional_vars] if n.optional_vars is not None else []
    return [n.target]


def _unnot(e):
    """``e`` without a leading ``not`` (the negation of a value is as agreed as the value), and
    a conditional expression whose two sides are one value in two forms without that choice
    (``t if is_tensor else t.item()``: OLMo-core's ``all_reduce_value``)."""
    while True:
        if e.__class__ is ast.UnaryOp and e.op.__class__ is ast.Not:
            e = e.operand
        elif e.__class__ is ast.IfExp and ast.dump(_unconverted(e.body)) == ast.dump(_unconverted(e.orelse)):
            e = _unconverted(e.body)
        else:
            return e


#: methods and builtins that hand back their receiver's (argument's) value in another form
_CONVERSIONS = frozenset(("item", "tolist", "cpu", "numpy", "int", "float", "bool"))


def _unconverted(e):
    """``e`` without the conversions around it (:data:`_CONVERSIONS`: ``t.item()``, ``int(n)``)."""
    while e.__class__ is _CALL and not e.keywords:
        f = e.func
        if f.__class__ is ast.Attribute and f.attr in _CONVERSIONS and not e.args:
            e = f.value
        elif f.__class__ is _NAME and f.id in _CONVERSIONS and len(e.args) == 1:
            e = e.args[0]
        else:
            break
    return e


def _held_refs(mod, ff, e, nodes):
    """The call refs of the tree calls that local ``e`` (a name) holds: a set when every binding
    of it among ``nodes`` is a plain ``e = call(...)`` of a tree function, or ``e = <constant>``
    in the function's own body before all of those (a starting value every rank sets:
    ``flag = False``), and one at least a call; else None."""
    if e.__class__ is not _NAME or e.id in ff.params:
        return None
    refs = set()
    starts, calls = [], []
    top = {id(st) for st in getattr(ff.node, "body", ())}
    for n in nodes:
        if n.__class__ not in _BINDERS or e.id not in _rebound((n,)):
            continue
        plain = n.__class__ is _ASSIGN and len(n.targets) == 1 and n.targets[0].__class__ is _NAME
        if plain and n.value.__class__ is ast.Constant and id(n) in top:
            starts.append(n.lineno)
            continue
        if not (plain and n.value.__class__ is _CALL):
            return None
        ref = call_ref(mod, ff.cls, ff.qualname, n.value)
        if ref is None or _dead_ref(mod, ref):
            return None
        refs.add(ref)
        calls.append(n.lineno)
    if not refs or (starts and max(starts) > min(calls)):
        return None
    return refs


def _rebound(nodes):
    """The names that ``nodes`` bind (as :func:`_assigned`, without the names a subscript or
    attribute target only reads: ``shape[axis] = n`` binds no name)."""
    out = set()
    for n in nodes:
        if n.__class__ not in _BINDERS:
            continue
        todo = _targets(n)
        while todo:
            t = todo.pop()
            if t.__class__ is _NAME:
                out.add(t.id)
            elif isinstance(t, (ast.Tuple, ast.List)):
                todo.extend(t.elts)
            elif isinstance(t, ast.Starred):
                todo.append(t.value)
    return out


_BINDERS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.comprehension, ast.NamedExpr,
            ast.withitem)


class _Leak(Exception):
    """A return that may give something other than None (:func:`_keeps_none`)."""


def _keeps_none(fn, params):
    """The parameters among ``params`` for which ``fn``, called with that parameter None (the
    others unknown), returns None at every return it can reach or raises (``sanitize_axis(shape,
    axis)``: ``if axis is None or 0 <= axis < n: return axis``). Tests are decided where the
    known values decide them (:func:`_truth`), both sides taken otherwise; a loop, ``with`` or
    ``try`` forgets what it assigns and its returns count wherever they are."""
    out = set()
    for p in params:
        try:
            _none_walk(fn.body, {p: None})
        except _Leak:
            continue
        except RecursionError:
            continue
        out.add(p)
    return frozenset(out)


def _none_walk(stmts, env):
    """The known values after ``stmts`` from ``env`` (name -> constant), or None when no path
    falls through; raises :class:`_Leak` at a reachable return of anything but None."""
    for st in stmts:
        t = st.__class__
        if t is ast.Return:
            if st.value is not None and _value(st.value, env) is not None:
                raise _Leak
            return None
        if t is ast.Raise:
            return None
        if t is ast.If:
            truth = _truth(st.test, env)
            for x in ast.walk(st.test):
                if x.__class__ is ast.NamedExpr:
                    env.pop(x.target.id, None)
            a = _none_walk(st.body, dict(env)) if truth is not False else None
            b = _none_walk(st.orelse, dict(env)) if truth is not True else None
            if a is None or b is None:
                env = a if b is None else b
                if env is None:
                    return None
            else:
                env = {k: v for k, v in a.items() if k in b and type(b[k]) is type(v) and b[k] == v}
            continue
        if t in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            env.pop(st.name, None)
            continue
        if t is ast.Assign and len(st.targets) == 1 and st.targets[0].__class__ is _NAME:
            v = _value(st.value, env)
            env.pop(st.targets[0].id, None)
            for x in ast.walk(st.value):
                if x.__class__ is ast.NamedExpr:
                    env.pop(x.target.id, None)
            if v is not _UNKNOWN:
                env[st.targets[0].id] = v
            continue
        for k in _assigned(list(ast.walk(st))) | {x.id for x in ast.walk(st) if isinstance(x, ast.Name)
                                                  and isinstance(x.ctx, ast.Del)}:
            env.pop(k, None)
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for sub in getattr(st, field, None) or ():
                block = sub.body if isinstance(sub, (ast.ExceptHandler, ast.match_case)) else None
                if block is not None:
                    _none_walk(block, dict(env))
            sub = getattr(st, field, None)
            if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                _none_walk(sub, dict(env))
    return env


def _end(stmts):
    last = stmts[-1]
    return (getattr(last, "end_lineno", last.lineno), getattr(last, "end_col_offset", 0) or 0)


def _assigned(nodes):
    """The names assigned anywhere among ``nodes`` (targets of assignments, loops, ``:=``, ``with ... as``)."""
    out = set()
    for n in nodes:
        if n.__class__ not in _BINDERS:
            continue
        for t in _targets(n):
            if t.__class__ is _NAME:  # the common target, without a walk
                out.add(t.id)
            else:
                out.update(names_of(t))
    return out


def _cond_ranges(body, params, early=None):
    """:attr:`~hpc_hangkit.lint.model.FuncFacts.cond_ranges` of a function body: ``if`` tests
    that name a parameter of ``params`` (nested functions not entered), or one of ``early``
    (parameter -> the first line that binds it) in a test outside any loop that ends before
    that line: it runs before the parameter is bound again. Each range ends with the names
    its test reads that hold something else there (``masked``)."""
    if not params and not early:
        return ()
    out = []
    _cond_block(body, params, early or {}, False, out)
    return tuple(out)


def _cond_block(stmts, params, early, in_loop, out):
    for i, st in enumerate(stmts):
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(st, ast.If):
            read = names_of(st.test)
            end = getattr(st.test, "end_lineno", st.test.lineno)
            masked = frozenset(p for p in early if p in read and (in_loop or end >= early[p])) or _NONE
            if not params.isdisjoint(read) or any(p in read and p not in masked for p in early):
                out.append(((st.body[0].lineno, st.body[0].col_offset), _end(st.body), st.test, True, masked))
                if st.orelse:
                    out.append(((st.orelse[0].lineno, st.orelse[0].col_offset), _end(st.orelse), st.test, False,
                                masked))
                elif isinstance(st.body[-1], (ast.Return, ast.Raise)) and i + 1 < len(stmts):
                    rest = stmts[i + 1:]
                    out.append(((rest[0].lineno, rest[0].col_offset), _end(rest), st.test, False, masked))
        loop = in_loop or isinstance(st, (ast.For, ast.AsyncFor, ast.While))
        for field in ("body", "orelse", "finalbody"):
            sub = getattr(st, field, None)
            if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                _cond_block(sub, params, early, loop, out)
        for h in getattr(st, "handlers", None) or ():
            _cond_block(h.body, params, early, loop, out)


def _first_bound(nodes, names):
    """Name -> the first line among ``nodes`` that binds it (:func:`_rebound`'s targets), for
    ``names``."""
    out = {}
    for n in nodes:
        if n.__class__ in _BINDERS:
            for t in _targets(n):
                for x in ast.walk(t):
                    if x.__class__ is _NAME and x.id in names and isinstance(x.ctx, ast.Store):
                        if x.lineno < out.get(x.id, x.lineno + 1):
                            out[x.id] = x.lineno
    return out


def _bound_otherwise(mod, cls, targets, none=False):
    """Note in ``mod.attr_flags`` that each ``self.x`` of ``targets`` (of class ``cls``) is
    bound to something other than True or False (an unpacking, an augmented or annotated
    assignment), and in ``mod.attr_records`` that it holds no record only; ``none``: an
    annotated assignment of None (or of nothing), which leaves the records as they are."""
    for t in targets:
        key = _self_attr(t)
        if key is not None and "." not in key:
            mod.attr_flags[key] = False
            if not none:
                mod.attr_records[(cls, key)] = False


def _stub(fn):
    """True for a method that only stands for its overrides: its body (its docstring aside) is
    ``raise NotImplementedError`` (an ``@abstractmethod``'s, most often). A call of it runs an
    override (or fails alike on every rank, a program with no override), so its raise is not
    one a rank takes apart from the others."""
    body = fn.body[1:] if fn.body and fn.body[0].__class__ is ast.Expr and \
        fn.body[0].value.__class__ is ast.Constant and fn.body[0].value.value.__class__ is str else fn.body
    if len(body) != 1 or body[0].__class__ is not ast.Raise or body[0].exc is None:
        return False
    exc = body[0].exc.func if body[0].exc.__class__ is _CALL else body[0].exc
    return (dotted(exc) or [""])[-1] == "NotImplementedError"


def _record_fields(fn, r):
    """``{field: value expression}`` when ``r``, the only return of function ``fn`` and one
    of its top-level statements' value, builds a record: a call of a capitalised name (a
    class) with keywords only, each ``field=value`` or ``**d`` of a local that ``fn`` assigns
    once, at its top level, a dict literal with string keys, and never changes, hands on or
    rebinds after (pytorch-accelerated's ``return TrainerRunConfig(**config)``); else None."""
    if r.__class__ is not _CALL or r.args:
        return None
    d = dotted(r.func)
    if not d or not d[-1][:1].isupper():
        return None
    fields = {}
    for k in r.keywords:
        if k.arg is not None:
            fields[k.arg] = k.value
            continue
        if k.value.__class__ is not _NAME:
            return None
        lit = _dict_local(fn, k.value.id, r)
        if lit is None:
            return None
        fields.update(lit)
    return fields or None


def _dict_local(fn, name, r):
    """The ``{key: value}`` of the one top-level ``name = {...}`` of function ``fn`` (string
    keys), when nothing else in ``fn`` binds, stores into, calls a method of or hands on
    ``name`` (``r``, the record call that unpacks it, aside); else None."""
    lit = None
    for st in fn.body:
        if st.__class__ is _ASSIGN and len(st.targets) == 1 and st.targets[0].__class__ is _NAME and \
                st.targets[0].id == name:
            if lit is not None or st.value.__class__ is not ast.Dict or not all(
                    k.__class__ is ast.Constant and k.value.__class__ is str for k in st.value.keys):
                return None
            lit = st
    if lit is None:
        return None
    for n in ast.walk(fn):
        if n.__class__ is _NAME and n.id == name and n.ctx.__class__ is not ast.Load and n is not lit.targets[0]:
            return None  # bound again (a loop, `global`, a nested assignment)
        if n.__class__ is ast.Subscript and n.ctx.__class__ is not ast.Load and n.value.__class__ is _NAME and \
                n.value.id == name:
            return None  # `config["x"] = ...`, `del config["x"]`
        if n.__class__ is _CALL and n is not r:
            f = n.func
            if f.__class__ is ast.Attribute and f.value.__class__ is _NAME and f.value.id == name:
                return None  # `config.update(...)`
            if any(a.__class__ is _NAME and a.id == name for a in n.args) or any(
                    k.value.__class__ is _NAME and k.value.id == name for k in n.keywords):
                return None  # handed to a call that may change it
        if n.__class__ is ast.AugAssign and n.target.__class__ is _NAME and n.target.id == name:
            return None
    return dict(zip((k.value for k in lit.value.keys), lit.value.values))


def _self_attr(t):
    """``"x"`` for a ``self.x`` target, ``"a.b"`` for ``self.a.b``, else None."""
    parts = dotted(t) if isinstance(t, ast.Attribute) else None
    if parts and parts[0] == "self" and 2 <= len(parts) <= 4:
        return ".".join(parts[1:])
    return None


def _deps(nodes):
    """Local name -> the names its assigned values (and loop iterables) are computed from."""
    deps = {}
    for n in nodes:
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and getattr(n, "value", None) is not None:
            used = names_of(n.value)
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                for x in names_of(t):
                    deps.setdefault(x, set()).update(used)
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
            used = names_of(n.iter)
            for x in names_of(n.target):
                deps.setdefault(x, set()).update(used)
    return deps


def _agreed_parts(e, taint, agreed_value, depth=0):
    """:meth:`Project._agreement`'s verdict on an attribute's value ``e``: ``agreed_value(e)``,
    or for a tuple of locals, each holding at that line only agreed values (``taint``'s
    :meth:`~hpc_hangkit.lint.taint.Taint.reaching_values`): True, or the one tree call they all
    come from (its agreement is decided after propagation); False otherwise."""
    if depth > 2:
        return False
    if isinstance(e, ast.Tuple) and e.elts and depth == 0:
        parts = [_agreed_parts(x, taint, agreed_value, depth + 1) for x in e.elts]
    elif isinstance(e, ast.Name) and taint is not None and depth > 0:
        vals = taint.reaching_values(e.id, e.lineno)
        if not vals:
            return False
        parts = [agreed_value(v) for v in vals]
    else:
        return agreed_value(e)
    if not all(parts):
        return False
    refs = set().union(*[g for g in parts if g is not True])
    if not refs:
        return True
    return refs if len(refs) == 1 else False


def _closure(e, deps):
    """The names expression ``e`` is computed from, through the locals of ``deps``."""
    seen = set()
    todo = list(names_of(e))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(deps.get(name, ()))
    return seen


def _flows_from(rets, nodes, params):
    """The parameters (names in ``params``) that the return expressions ``rets`` are computed
    from, through assignments to locals (flow-insensitive). Only the values of the locals the
    returns reach are read."""
    vals = {}
    for n in nodes:
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and getattr(n, "value", None) is not None:
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                for x in ((t.id,) if t.__class__ is _NAME else names_of(t)):
                    vals.setdefault(x, []).append(n.value)
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
            for x in names_of(n.target):
                vals.setdefault(x, []).append(n.iter)
    seen = set()
    todo = [x for r in rets for x in names_of(r)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for v in vals.get(name, ()):
            todo.extend(names_of(v))
    return frozenset(seen & set(params))


def _raises(body, every=False):
    """True when ``body`` raises outside the body of a ``try`` of its own (nested functions not
    entered): a raise in a handler (``except CalledProcessError as e: raise CompilationError``),
    an ``else`` or a ``finally`` leaves the function; ``every``: the ``(line, col)`` of each
    such ``raise`` instead."""
    stack = list(body)
    out = []
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Raise):
            if not every:
                return True
            out.append((n.lineno, n.col_offset))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(n, ast.Try) or type(n).__name__ == "TryStar":
            for h in n.handlers:
                stack.extend(h.body)
            stack.extend(n.orelse)
            stack.extend(n.finalbody)
            continue
        if isinstance(n, ast.stmt):
            stack.extend(c for c in ast.iter_child_nodes(n) if isinstance(c, ast.stmt))
    return tuple(sorted(out)) if every else False


def _endless(st):
    """``while True:`` (or ``while 1:``) with no ``break`` of its own."""
    if not (isinstance(st, ast.While) and isinstance(st.test, ast.Constant) and st.test.value):
        return False
    stack = list(st.body)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Break):
            return False
        if isinstance(n, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef,
                          ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(n))
    return True
