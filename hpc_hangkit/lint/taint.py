"""Rank dependence of values inside one function.

Levels: ``0`` same on every rank (as far as the lint can tell), ``1`` rank-local (can
differ between ranks without naming the rank: file checks, clocks, random, per-rank data
sizes, ``torch.cuda`` state), ``2`` rank-dependent (computed from the rank: ``get_rank()``,
``comm.Get_rank()``, ``comm.rank``, ``RANK``/``SLURM_PROCID``... in the environment,
``is_main_process``-style attributes, a rank-named parameter, ``self.x`` set from one of
those in the class, a call of a tree function that returns one).

Flow-insensitive inside a function: a local name takes the highest level of anything
assigned to it. A name handed to a collective that makes it equal everywhere
(``all_reduce(flag)``, ``broadcast(t)``, ``x = comm.bcast(x)``) is *agreed*: level 0.
Stdlib only.
"""
import ast

from hpc_hangkit.lint import collectives as C
from hpc_hangkit.lint.model import dotted, qualify, walk_local

__all__ = ["Taint", "call_kind", "mentions_membership", "RANK_DEPENDENT", "RANK_LOCAL", "CLEAN"]

CLEAN, RANK_LOCAL, RANK_DEPENDENT = 0, 1, 2

#: collectives whose first (mpi4py buffer API: second) argument is equal on every rank afterwards
_AGREEING_ARG0 = {"all_reduce", "broadcast", "broadcast_object_list", "all_gather", "all_gather_object",
                  "all_gather_into_tensor", "Bcast", "ranks_agree"}
_AGREEING_ARG1 = {"Allreduce", "Allgather"}


def _data_name(expr):
    d = dotted(expr)
    return bool(d) and bool(C.DATAISH.search(d[-1]))


class Taint:
    """Levels of the values of function ``fn`` (an ``ast`` function node, or a module).

    ``mod``: its :class:`~hpc_hangkit.lint.model.ModuleFacts`; ``cls``: enclosing class name or
    None; ``project``: a :class:`~hpc_hangkit.lint.calls.Project` (for calls of tree functions
    and ``self`` attributes) or None.
    """

    def __init__(self, fn, mod, cls=None, project=None):
        self.fn = fn
        self.mod = mod
        self.cls = cls
        self.project = project
        self.env = {}
        self.agreed = set()
        self.assigned = set()
        self._run()

    # -------------------------------------------------------------- environment
    def _run(self):
        assigns = []
        local = self.mod.local.get(id(self.fn))
        for n in (local if local is not None else walk_local(self.fn)):
            if isinstance(n, ast.Assign):
                assigns.append((n.targets, n.value))
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and n.value is not None:
                assigns.append(([n.target], n.value))
            elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
                assigns.append(([n.target], n.iter))
            elif isinstance(n, ast.NamedExpr):
                assigns.append(([n.target], n.value))
            elif isinstance(n, ast.withitem) and n.optional_vars is not None:
                assigns.append(([n.optional_vars], n.context_expr))
            elif isinstance(n, ast.Call):
                self._agree_args(n)
        for targets, _ in assigns:
            for t in targets:
                self.assigned.update(_names(t))
        for _ in range(3):
            changed = False
            for targets, value in assigns:
                lv = self.level(value)
                if not lv:
                    continue
                for t in targets:
                    for name in _names(t):
                        if self.env.get(name, 0) < lv:
                            self.env[name] = lv
                            changed = True
            if not changed:
                break

    def _agree_args(self, call):
        kind, name = self.call_kind(call)
        if kind != "collective":
            return
        idx = 0 if name in _AGREEING_ARG0 else 1 if name in _AGREEING_ARG1 else None
        if idx is not None and len(call.args) > idx:
            d = dotted(call.args[idx])
            if d and len(d) == 1:
                self.agreed.add(d[0])

    # -------------------------------------------------------------- calls
    def call_kind(self, call):
        """:func:`call_kind` of ``call`` in this function's module."""
        return call_kind(self.mod, call)

    # -------------------------------------------------------------- levels
    def level(self, e):
        """0, 1 or 2 for expression ``e`` (see the module docstring)."""
        if e is None:
            return 0
        if isinstance(e, ast.Constant):
            return 0
        if isinstance(e, ast.Name):
            if e.id in self.agreed:
                return 0
            if e.id in C.RANK_NAMES and e.id not in self.assigned:
                return 2  # a parameter or global named like the rank; a local takes what it is given
            return self.env.get(e.id, 0)
        if isinstance(e, ast.Attribute):
            if e.attr in C.RANK_NAMES:
                return 2
            lv = 0
            if isinstance(e.value, ast.Name) and e.value.id == "self" and self.project is not None:
                lv = self.project.attr_level(self.mod, self.cls, e.attr)
            if e.attr == "shape" and _data_name(e.value):
                lv = max(lv, 1)
            return max(lv, self.level(e.value))
        if isinstance(e, ast.Call):
            return self._call_level(e)
        if isinstance(e, ast.Subscript):
            if self._is_environ(e.value) and self._rank_env_key(e.slice):
                return 2
            return max(self.level(e.value), self.level(e.slice))
        if isinstance(e, (ast.Lambda,)):
            return 0
        lv = 0
        for c in ast.iter_child_nodes(e):
            if isinstance(c, ast.expr):
                lv = max(lv, self.level(c))
                if lv == 2:
                    break
            elif isinstance(c, ast.comprehension):
                lv = max(lv, self.level(c.iter), max([self.level(x) for x in c.ifs] or [0]))
        return lv

    def test_level(self, e):
        """Level of a condition: as :meth:`level`, and the truth of per-rank data (``if batch:``,
        ``if not shard:``) is rank-local."""
        if mentions_membership(e):
            return 0
        lv = self.level(e)
        if lv < 2:
            inner = e.operand if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not) else e
            if isinstance(inner, (ast.Name, ast.Attribute)) and _data_name(inner):
                lv = max(lv, 1)
        return lv

    def iter_level(self, e):
        """Level of a loop's iterable (:meth:`level`). Iterating a data loader is not rank-local
        by its name alone: samplers of DDP / accelerate / Lightning give every rank as many
        batches; ``len(shard)``, ``os.listdir`` and the like are."""
        return self.level(e)

    def _is_environ(self, e):
        d = dotted(e)
        return bool(d) and d[-1] == "environ"

    @staticmethod
    def _rank_env_key(e):
        return isinstance(e, ast.Constant) and e.value in C.RANK_ENV

    def _call_level(self, call):
        f = call.func
        kind, name = self.call_kind(call)
        if kind == "collective":
            return 0
        parts = dotted(f)
        if name in C.RANK_CALLS:
            return 2
        if name in ("get", "getenv", "pop") and call.args and self._rank_env_key(call.args[0]):
            if name == "getenv" or (isinstance(f, ast.Attribute) and self._is_environ(f.value)):
                return 2
        q = qualify(self.mod, parts) if parts else None
        if q is not None and (q in C.LOCAL_CALLS or q.startswith(C.LOCAL_PREFIXES)):
            return 1
        if isinstance(f, ast.Attribute) and name in C.LOCAL_METHODS and q is None:
            return 1
        if name == "len" and call.args and _data_name(call.args[0]):
            return 1
        if isinstance(f, ast.Attribute) and name in ("numel", "size", "__len__") and _data_name(f.value):
            return 1
        lv = 0
        if self.project is not None:
            lv = self.project.return_level(self.mod, self.cls, call)
        if lv == 2:
            return 2
        if isinstance(f, ast.Attribute):
            lv = max(lv, self.level(f.value))
        for a in call.args:
            lv = max(lv, self.level(a))
        for k in call.keywords:
            lv = max(lv, self.level(k.value))
        return lv


def mentions_membership(e):
    """True when condition ``e`` tests group membership (ranks outside a group skip its
    collectives by design) or ``use_local_synchronization``."""
    for n in ast.walk(e):
        name = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else None
        if name and C.MEMBERSHIP.search(name):
            return True
        if isinstance(n, ast.Compare) and len(n.comparators) == 1:
            c, op = n.comparators[0], n.ops[0]
            negative = (isinstance(c, ast.UnaryOp) and isinstance(c.op, ast.USub)) or (
                isinstance(c, ast.Constant) and c.value == 0 and isinstance(op, ast.Lt))
            # rank in a group is -1 (or < 0) on ranks outside it; LOCAL_RANK == -1: not launched
            # distributed at all (the same answer on every rank)
            if negative and any((isinstance(x, ast.Call) and (dotted(x.func) or [""])[-1] in C.RANK_CALLS | {"rank"})
                                or (isinstance(x, ast.Constant) and x.value in C.RANK_ENV)
                                or (isinstance(x, (ast.Name, ast.Attribute)) and (dotted(x) or [""])[-1]
                                    in C.RANK_NAMES) for x in ast.walk(n.left)):
                return True
    return False


def call_kind(mod, call):
    """``(kind, name)`` of a call in module ``mod``: kind ``"collective"`` / ``"p2p"`` / None,
    ``name`` its last identifier (``"all_reduce"``) or None."""
    f = call.func
    if isinstance(f, ast.Attribute):
        method = f.attr
        recv = dotted(f.value)
        if recv:
            receiver = recv[-1]
        else:
            receiver = f.value.attr if isinstance(f.value, ast.Attribute) else None
        parts = recv + [method] if recv else None
    elif isinstance(f, ast.Name):
        if f.id not in mod.imports:
            # a bare name that is not imported: a local function, not a library's collective
            return ("collective" if f.id in C.EXTRA_PLAIN else None), f.id
        return C.classify_call(mod.imports[f.id], f.id, None), f.id
    else:
        return None, None
    q = qualify(mod, parts) if parts else None
    return C.classify_call(q, method, receiver), method


def _names(target):
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for t in target.elts:
            yield from _names(t)
    elif isinstance(target, ast.Starred):
        yield from _names(target.value)
