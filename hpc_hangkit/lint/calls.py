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

from hpc_hangkit.lint import collectives as C
from hpc_hangkit.lint.model import FuncFacts, dotted, functions_of, qualify, walk_local
from hpc_hangkit.lint.taint import Taint, call_kind

__all__ = ["Project", "call_ref"]


def call_ref(mod, cls, scope, call):
    """A hashable reference to the callee of ``call`` in function ``scope`` (qualname) of
    module ``mod``, or None when it cannot name one: ``("q", qualified)`` or
    ``("self", module, class, method)``."""
    f = call.func
    parts = dotted(f)
    if not parts:
        return None
    if parts[0] == "self" and len(parts) == 2 and cls:
        return ("self", mod.name, cls, parts[1])
    q = qualify(mod, parts)
    if q is not None:
        return ("q", q)
    if len(parts) == 1:
        inner = scope.rsplit(".", 1)[0] + "." if "." in scope else ""
        return ("local", mod.name, parts[0], (scope + "." + parts[0]) if scope != "<module>" else None,
                (inner + parts[0]) if inner else None)
    return None


class Project:
    """The scanned tree: modules by dotted name, functions by qualified name."""

    def __init__(self):
        self.modules = {}
        self.funcs = {}
        self._cache = {}

    # ------------------------------------------------------------ building
    def add(self, mod):
        """Index ``mod`` (a :class:`~hpc_hangkit.lint.model.ModuleFacts` with its tree) and
        compute its functions' facts (calls, direct collectives, return levels, ``self``
        attribute levels). The tree stays on ``mod``; drop it with ``mod.tree = None``."""
        self.modules[mod.name] = mod
        fns = []
        for qual, cls, node in functions_of(mod.tree):
            ff = FuncFacts(mod.name, qual, cls, getattr(node, "lineno", 1), node)
            mod.funcs[qual] = ff
            self.funcs[mod.name + "." + qual] = ff
            fns.append(ff)
        for ff in fns:
            self._facts(mod, ff)

    def _facts(self, mod, ff):
        node = ff.node
        for dec in getattr(node, "decorator_list", ()):
            d = dotted(dec.func if isinstance(dec, ast.Call) else dec)
            if d and (".".join(d) in C.MARK_DECORATORS or (qualify(mod, d) or "") in C.MARK_DECORATORS
                      or (d[-1] == "collective" and (qualify(mod, d) or "").startswith("hpc_hangkit"))):
                ff.marked = True
        # no rank source anywhere in the module: nothing here can return one by itself
        taint = Taint(node, mod, ff.cls, self) if mod.rankish else None
        rets = []
        has_return = False
        local = mod.local.get(id(node))
        for n in (local if local is not None else walk_local(node)):
            if isinstance(n, ast.Call):
                kind, name = call_kind(mod, n)
                if kind == "collective":
                    if ff.direct is None:
                        ff.direct = name
                else:
                    if kind == "p2p":
                        mod.has_p2p = True
                    ref = call_ref(mod, ff.cls, ff.qualname, n)
                    if ref is not None:
                        ff.calls.append(ref)
            elif isinstance(n, ast.Return) and n.value is not None:
                has_return = True
                rets.append(n.value)
            elif isinstance(n, ast.Return):
                has_return = True
            elif isinstance(n, ast.Assign) and ff.cls and taint is not None:
                for t in n.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        lv = taint.level(n.value)
                        if lv > mod.attr_levels.get((ff.cls, t.attr), 0):
                            mod.attr_levels[(ff.cls, t.attr)] = lv
        for r in rets:
            if taint is not None:
                ff.ret_level = max(ff.ret_level, taint.level(r))
            for n in ast.walk(r):
                if isinstance(n, ast.Call):
                    ref = call_ref(mod, ff.cls, ff.qualname, n)
                    if ref is not None:
                        ff.ret_calls.append(ref)
        if ff.qualname != "<module>" and not has_return:
            ff.noreturn = any(_endless(n) for n in node.body)
        if ff.marked and ff.direct is None:
            ff.direct = ff.qualname.rsplit(".", 1)[-1] + "()"

    # ------------------------------------------------------------ resolution
    def resolve(self, ref):
        """The :class:`FuncFacts` a :func:`call_ref` names, or None."""
        if ref is None:
            return None
        hit = self._cache.get(ref, False)
        if hit is not False:
            return hit
        out = None
        if ref[0] == "self":
            out = self._method(ref[1], ref[2], ref[3], 0)
        elif ref[0] == "local":
            _, modname, name, nested, sibling = ref
            for q in (nested, sibling, name):
                if q and (modname + "." + q) in self.funcs:
                    out = self.funcs[modname + "." + q]
                    break
        else:
            out = self._qualified(ref[1], 0)
        self._cache[ref] = out
        return out

    def _method(self, modname, cls, meth, depth):
        ff = self.funcs.get("%s.%s.%s" % (modname, cls, meth))
        if ff is not None or depth > 4:
            return ff
        mod = self.modules.get(modname)
        for base in (mod.bases.get(cls, ()) if mod else ()):
            parts = base.split(".")
            q = qualify(mod, parts)
            if q is None and len(parts) == 1 and base in mod.bases:
                q = modname + "." + base
            if q is None:
                continue
            bmod, _, bcls = q.rpartition(".")
            bmod = self._real_class_module(bmod, bcls)
            if bmod is not None:
                hit = self._method(bmod, bcls, meth, depth + 1)
                if hit is not None:
                    return hit
        return None

    def _real_class_module(self, modname, cls):
        for _ in range(4):
            mod = self.modules.get(modname)
            if mod is None:
                return None
            if cls in mod.bases:
                return modname
            q = mod.imports.get(cls)
            if not q:
                return None
            modname, _, cls2 = q.rpartition(".")
            if cls2 != cls:
                return None
        return None

    def _qualified(self, q, depth):
        if q in self.funcs:
            return self.funcs[q]
        if depth > 4:
            return None
        parts = q.split(".")
        for i in range(len(parts) - 1, 0, -1):
            modname = ".".join(parts[:i])
            mod = self.modules.get(modname)
            if mod is None:
                continue
            rest = parts[i:]
            if rest[0] in mod.imports:
                return self._qualified(".".join([mod.imports[rest[0]]] + rest[1:]), depth + 1)
            return self.funcs.get(modname + "." + ".".join(rest))
        return None

    # ------------------------------------------------------------ propagation
    def propagate(self):
        """Fixpoints over the resolved call graph: ``witness`` (the collective a function
        reaches, or None) and ``ret_level`` (a function returning a rank-dependent value)."""
        self._cache = {}  # resolutions made while modules were still being added
        callers = {}
        ret_callers = {}
        work = []
        for key, ff in self.funcs.items():
            ff.witness = ff.direct
            if ff.witness:
                work.append(ff)
            for ref in ff.calls:
                callee = self.resolve(ref)
                if callee is not None:
                    callers.setdefault(id(callee), []).append(ff)
            for ref in ff.ret_calls:
                callee = self.resolve(ref)
                if callee is not None:
                    ret_callers.setdefault(id(callee), []).append(ff)
        while work:
            ff = work.pop()
            for caller in callers.get(id(ff), ()):
                if caller.witness is None:
                    caller.witness = ff.witness
                    work.append(caller)
        work = [ff for ff in self.funcs.values() if ff.ret_level]
        while work:
            ff = work.pop()
            for caller in ret_callers.get(id(ff), ()):
                if caller.ret_level < ff.ret_level:
                    caller.ret_level = ff.ret_level
                    work.append(caller)

    # ------------------------------------------------------------ queries (Taint, rules)
    def callee(self, mod, cls, scope, call):
        """The tree function ``call`` resolves to, or None."""
        return self.resolve(call_ref(mod, cls, scope, call))

    def return_level(self, mod, cls, call):
        """Rank level of the value a call of a tree function returns (0 when unresolved)."""
        ff = self.resolve(call_ref(mod, cls, "<module>", call))
        return ff.ret_level if ff is not None else 0

    def attr_level(self, mod, cls, attr):
        """Rank level of ``self.attr`` in class ``cls`` of ``mod`` (assignments in its methods)."""
        if not cls:
            return 0
        return mod.attr_levels.get((cls, attr), 0)


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
