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
import bisect
import re

from hpc_hangkit.lint import collectives as C
from hpc_hangkit.lint.model import SIZE_METHODS as _SIZE_METHODS
from hpc_hangkit.lint.model import _NOT_CHILD, _params, defaults_of, dotted, header_exprs, names_of, nodes_of, qualify, walk_local
from hpc_hangkit.lint.model import size_of as _size_of

__all__ = ["Taint", "call_kind", "fake_backend", "mentions_membership", "single_process", "RANK_DEPENDENT", "RANK_LOCAL",
           "CLEAN"]

CLEAN, RANK_LOCAL, RANK_DEPENDENT = 0, 1, 2

_CONSTANT, _NAME, _ATTRIBUTE, _CALL, _SUBSCRIPT, _LAMBDA, _COMPARE, _BOOLOP, _COMPREHENSION, _EXPR = (
    ast.Constant, ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Lambda, ast.Compare, ast.BoolOp,
    ast.comprehension, ast.expr)
_IFEXP = ast.IfExp
#: expression class -> the fields that can hold a child node (:meth:`Taint.level`)
_EXPR_FIELDS = {}

#: collectives whose first (mpi4py buffer API: second) argument is equal on every rank afterwards
_AGREEING_ARG0 = {"all_reduce", "broadcast", "broadcast_object_list", "all_gather", "all_gather_object",
                  "all_gather_into_tensor", "Bcast", "ranks_agree"}
_AGREEING_ARG1 = {"Allreduce", "Allgather"}
#: the keywords of the argument those collectives make equal (torch's, mpi4py's)
_AGREED_KEYWORDS = {"tensor", "object_list", "tensor_list", "output_tensor", "buf", "recvbuf"}
#: collectives whose return value is the same on every rank: the pickle API of mpi4py and
#: Horovod (``comm.allgather``, ``hvd.allreduce``, ``comm.bcast``: never ``comm.gather``, which
#: returns on the root alone), Lightning's and accelerate's ``all_gather`` and
#: ``gather_for_metrics`` (torch's ``all_gather`` returns None: no value to size)
_RETURN_AGREES = {"allgather", "allreduce", "bcast", "all_gather", "gather_for_metrics", "broadcast_object",
                  "allgather_object"}
#: accelerate's functions and ``Accelerator`` methods that all-gather, all-reduce or broadcast
#: and return the result on every rank (its ``gather`` is an all-gather, unlike torch's)
_RETURN_AGREES_ACCELERATE = {"gather", "gather_object", "reduce", "broadcast"}
_ACCELERATOR = re.compile(r"(^|_)accelerator$", re.I)
#: factories whose new tensor or array has the shape their arguments give (``full``: its first)
_SIZED_FACTORIES = frozenset(("empty", "zeros", "ones", "full"))
#: packages whose arrays report their global shape on every rank (heat's ``DNDarray.shape``
#: is the all-reduced ``gshape``; this rank's part is ``lshape``/``larray``)
_GLOBAL_SHAPE_PACKAGES = frozenset(("heat",))
#: calls that combine their arguments without reading anything else (a value built from
#: values every rank shares is shared)
_COMBINE = {"concatenate", "array", "asarray", "vstack", "hstack", "stack", "list", "tuple", "sorted", "copy",
            "deepcopy", "cat"}
#: methods that change a container's size in place
_RESIZERS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "add", "discard", "popitem",
             "setdefault", "resize_", "squeeze_", "unsqueeze_"}


_DEFS_T = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _stored_names(e):
    """Names ``e`` binds (a target: a name, a tuple of them, a walrus)."""
    return {n.id for n in ast.walk(e) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _worse(a, b):
    """The join of two states of :meth:`Taint._back_agreed` (a path that ends adds nothing)."""
    order = ("dead", "ok", "in", "bad")
    if a == "dead":
        return b
    if b == "dead":
        return a
    return max(a, b, key=order.index)


def _mutates(st, name):
    """True when statement ``st`` calls a resizing method on local ``name`` (``name.append(x)``)."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _RESIZERS and
               isinstance(n.func.value, ast.Name) and n.func.value.id == name for n in ast.walk(st))


def _data_name(expr):
    """True when ``expr`` (a name or attribute chain) is named like per-rank data
    (:data:`~hpc_hangkit.lint.collectives.DATAISH`), and is not an attribute of a
    configuration object (``args.files``, ``self.args.streaming_partial_batch``:
    :data:`~hpc_hangkit.lint.collectives.CONFIG_RECEIVER`)."""
    d = dotted(expr)
    return bool(d) and bool(C.DATAISH.search(d[-1])) and not (len(d) > 1 and C.CONFIG_RECEIVER.search(d[-2]))


#: calls that hand on the items of their one argument as they are: a progress bar over them
#: (``tqdm(xs)``), or a copy (``list(xs)``)
_ITEMS_AS_THEY_ARE = {"tqdm", "trange", "list", "tuple", "iter"}


def _rewraps(target, value):
    """True for ``xs = tqdm(list(xs))``: a name assigned its own items, as they are, through
    the calls of :func:`_items`."""
    inner = _items(value)
    return inner is not value and isinstance(target, ast.Name) and isinstance(inner, ast.Name) and \
        inner.id == target.id


def _items(e):
    """``e`` without the calls around it that hand on its items as they are
    (:data:`_ITEMS_AS_THEY_ARE`, with one positional argument and display keywords only):
    ``tqdm.tqdm(list(reversed(xs)), desc=...)`` -> ``reversed(xs)``."""
    while isinstance(e, ast.Call) and len(e.args) == 1 and not isinstance(e.args[0], ast.Starred) and \
            (dotted(e.func) or [""])[-1] in _ITEMS_AS_THEY_ARE and \
            all(k.arg is not None and C.is_display_keyword(k.arg) for k in e.keywords):
        e = e.args[0]
    return e


class Taint:
    """Levels of the values of function ``fn`` (an ``ast`` function node, or a module).

    ``mod``: its :class:`~hpc_hangkit.lint.model.ModuleFacts`; ``cls``: enclosing class name or
    None; ``project``: a :class:`~hpc_hangkit.lint.calls.Project` (for calls of tree functions
    and ``self`` attributes) or None.
    """

    def __init__(self, fn, mod, cls=None, project=None, facts=None, unbound=frozenset()):
        self.fn = fn
        self.mod = mod
        self.cls = cls
        self.project = project
        self.env = {}
        self.agreed = set()
        #: locals handed to a tree function that answers with an agreed value of them
        #: (``reduce_mean(n)``): not agreed themselves, but their count is agreed (:meth:`_counted_here`)
        self.reduced = set()
        #: containers (dotted, as tuples) whose count is handed as it is to such a function
        #: (``reduce_mean(torch.tensor(len(pos_inds)))``)
        self.reduced_counts = set()
        self.assigned = set()
        #: id(assignment statement) -> the conditions of the branches it is under ([(kind, expr)])
        self.guards = {}
        #: ids of statements under a single-process branch (``if not dist.is_initialized():``)
        self.single = set()
        #: name -> the ``disable=`` expression of the progress bar assigned to it
        self.bars = {}
        #: name -> ``[(line, test)]``: its assignments under a rank-dependent branch (``if rank
        #: == 0: n = 4``) and the branch's test (:meth:`guard_reaching`)
        self.guarded_by = {}
        #: local name -> level of the trip count of what it holds (a prepared loader: 0 even when
        #: built from the rank)
        self.trip_env = {}
        #: name -> {line of an assignment: trip level of what it assigns}, as :attr:`sites`
        self.trip_sites = {}
        #: id of a name read inside a comprehension that binds it -> the binding pair of its
        #: generator (:func:`_comprehension_bindings`)
        self._comp_bind = None
        if facts is None and project is not None:
            facts = _facts_of(project, mod, fn)
        self.facts = facts
        #: rank-named parameters read as what the callers pass (level 0): ``unbound``, or the
        #: facts' ``uniform_params``
        self.unbound = unbound or (facts.uniform_params if facts is not None else frozenset())
        self.params = dict(facts.param_levels) if facts is not None else {}
        #: parameter -> level of its None-ness, handed by callers (``FuncFacts.param_none``)
        self._param_none = (facts.param_none or {}) if facts is not None else {}
        #: names indexed by every rank's number (``for i in range(world_size): xs[i]``), or None
        self._tables = None
        self._assigns = []
        #: id(condition) -> mentions_membership(condition), asked once per condition
        self._members = {}
        self._direct = False
        self._direct_env = None
        #: (first line, last line) of each loop of the body: an assignment later in the function
        #: reaches a use only inside a loop around both
        self.loops = []
        #: a ``for`` loop's (start, end) lines -> the names its target binds at each iteration
        self._loop_names = {}
        #: names declared ``global``/``nonlocal``: a later assignment persists between calls
        self.shared = set()
        #: local name -> {line of an assignment: its level} (levels above 0 only)
        self.sites = {}
        #: (name, line of an assignment) -> (its value's level, [(a branch condition's level,
        #: (first, last) line of the side of that ``if`` holding the assignment)]) where a
        #: condition raised the site's level: a read on that same side counts only the value
        self._site_conds = {}
        #: id(``if`` test) -> the (first, last) lines of its body and of its ``else`` (or None)
        self._sides = {}
        #: (local, line read at) -> :meth:`_built_alike`
        self._alike = {}
        #: the line a value is read at (:meth:`level_at`); None: anywhere in the function
        self._at = None
        self._fn_params = set()
        self._asking = set()
        #: id(call) -> call_kind (the function's tree lives as long as this object)
        self._kinds = {}
        #: (id(condition), line read at, env version) -> test_level, while the levels are built
        self._tests = None
        self._version = 0
        self._trips_due = False
        #: containers whose count the function agrees through a collective (:meth:`_counted_here`)
        self._counted = None
        #: local name -> :meth:`_gathered`, asked once per name
        self._gathers = {}
        #: local name -> the first line that hands it to a gathering collective as the data
        #: (:data:`_GATHERING`), for :meth:`test_level`; None when none does
        self._gathered_at = None
        #: ``(line, data argument)`` of each reducing collective (:data:`_REDUCING`), and, built
        #: from them on the first test read, local name -> the lines that reduce it
        #: (:meth:`_reduced_lines`) and the function's node list
        self._reductions = []
        self._reduced_at = self._reduced_nodes = None
        #: local name -> the calls that grow it and what controls them (:func:`_growth_sites`)
        self._growth = None
        self._resized = None
        #: name -> (line after which its length is decided, the count's level) for a list
        #: padded to an agreed count (:func:`_padded_lists`), built on the first trip count asked
        self._pads = None
        #: (start line -> block path of the statement, name -> [(line, block path)] of its plain
        #: assignments), built on the first read that asks (:func:`_dominance`)
        self._dom = None
        self._jump_lines = None
        #: the levels of the locals are final (trip counts can be asked)
        self._env_done = False
        self._run()

    # -------------------------------------------------------------- environment
    def _run(self):
        assigns = []
        comps = []
        local = self.mod.local.get(id(self.fn))
        body = getattr(self.fn, "body", None)
        if isinstance(body, list):
            self._scan_guards(body, ())
        for n in (local if local is not None else walk_local(self.fn)):
            if n.__class__ is _CALL:  # the commonest node, tested first
                self._agree_args(n)
            elif isinstance(n, ast.Assign):
                if id(n) in self.single:
                    continue
                conds = self.guards.get(id(n), ())
                if conds and len(n.targets) == 1 and _rewraps(n.targets[0], n.value):
                    # `if rank == 0: xs = tqdm(list(xs))`: the same items on every rank, a progress
                    # bar on some: the branch decides only the display
                    conds = ()
                for t in n.targets:
                    assigns.extend(_pairs(t, n.value, conds))
                if isinstance(n.value, ast.Call) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                    for k in n.value.keywords:
                        if k.arg == "disable":
                            self.bars[n.targets[0].id] = k.value
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and n.value is not None:
                if id(n) not in self.single:
                    assigns.append((n.target, n.value, self.guards.get(id(n), ()), None))
            elif isinstance(n, (ast.For, ast.AsyncFor)):
                assigns.extend(self._loop_pairs(n.target, n.iter))
            elif isinstance(n, ast.comprehension):
                comps.extend(self._loop_pairs(n.target, n.iter))
            elif isinstance(n, ast.NamedExpr):
                assigns.append((n.target, n.value, (), None))
            elif isinstance(n, ast.withitem) and n.optional_vars is not None:
                assigns.append((n.optional_vars, n.context_expr, (), None))
        # a comprehension's variable lives in the comprehension: it does not change a local of
        # the same name (`i` of `for i in range(n)` and of `[r for i in ranks]`), nor the
        # variable of another comprehension; a read of it takes its own generator's level
        if comps:
            self._comp_bind = _comprehension_bindings(local if local is not None else walk_local(self.fn),
                                                      self._loop_pairs)
        self._assigns = assigns
        for target, value, conds, part in assigns:
            self.assigned.update(_names(target))
        self._fn_params = set(_params(self.fn)) if isinstance(
            self.fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else set()
        #: parameters the callers hand a level, which the function assigns only by rebuilding
        #: them from themselves (:meth:`_rewrapped`); their trip counts too (:meth:`_trips`)
        self._rebuilt = {}
        for name, lv in self.params.items():
            if lv and name not in self.assigned:
                self.env[name] = lv
            elif lv and name in self._fn_params and self._rewrapped(name):
                # a parameter the function only rebuilds from itself (`xs = [f(x) for x in xs]`):
                # what the callers hand reaches its reads, as its value and its count
                self._rebuilt[name] = lv
                self.sites.setdefault(name, {})[0] = lv
                self.env[name] = max(self.env.get(name, 0), lv)
        # 0: a value with no line of its own (an `enumerate` start made here) reaches every read
        lines = [getattr(value, "lineno", 0) for _, value, _, _ in assigns]
        self._lines = lines
        for _ in range(3):
            changed = False
            for (target, value, conds, part), line in zip(assigns, lines):
                self._at = line or None
                lv = self.level(value) if part in (None, "element") else self._elem_level(value, part) \
                    if isinstance(part, int) else self._part_level(value, part)
                base, sided = lv, []
                if conds:
                    for kind, c in conds:
                        if lv == 2 and not sided:
                            break
                        clv = 1 if kind == "except" else self._cond_level(c)
                        side = self._side_of(c, line) if kind == "if" and clv > base else None
                        if side is not None:
                            sided.append((clv, side))
                        elif clv > base:
                            base = clv
                        lv = max(lv, clv)
                self._at = None
                if not lv:
                    continue
                if sided and max(c for c, _ in sided) > base:
                    for name in _names(target):
                        self._site_conds[(name, line)] = (base, sided)
                for name in _names(target):
                    site = self.sites.setdefault(name, {})
                    if site.get(line, 0) < lv:
                        site[line] = lv
                        changed = True
                        self._version += 1
                    if self.env.get(name, 0) < lv:
                        self.env[name] = lv
                        changed = True
                        self._version += 1
            if not changed:
                break
        self._trips_due = self._env_done = True
        if self.project is not None:
            # the rules read it (HK107); the facts (no project) do not
            for (target, value, conds, part), line in zip(assigns, lines):
                for kind, c in conds:
                    if kind == "if" and self._cond_level(c) == 2:
                        for name in _names(target):
                            self.guarded_by.setdefault(name, []).append((line, c))
                        break
        self._tests = None

    def _rewrapped(self, name):
        """True when every assignment of parameter ``name`` rebuilds it from itself, element by
        element: a comprehension over it (``xs = [x.detach() for x in xs]``), ``list(xs)``,
        ``tuple(xs)``, ``sorted(xs)``, or ``[xs]`` (one item wrapped). Other assignments
        (``a = factories.array(a)``, ``x = x or default``) make a new value whose level is its own."""
        for (target, value, _, part) in self._assigns:
            if name not in _names(target):
                continue
            if part is not None or target.__class__ is not _NAME:
                return False
            t = value.__class__
            if t in (ast.ListComp, ast.GeneratorExp, ast.SetComp):
                it = value.generators[0].iter
            elif t is _CALL and value.func.__class__ is _NAME and value.func.id in ("list", "tuple", "sorted") \
                    and len(value.args) == 1:
                it = value.args[0]
            elif t is ast.List and len(value.elts) == 1:
                it = value.elts[0]
            else:
                return False
            if not (it.__class__ is _NAME and it.id == name):
                return False
        return True

    def _trips(self):
        """Fill :attr:`trip_env` (on the first trip count asked: most functions' facts never ask)."""
        self._trips_due = False
        saved = self._at
        assigns, lines = self._assigns, self._lines
        for name, lv in (self._rebuilt if not self._direct else {}).items():
            # what the callers hand a rebuilt parameter (see __init__): its count as its value
            # (in direct mode the callers' levels are not read)
            self.trip_env[name] = max(self.trip_env.get(name, 0), lv)
            self.trip_sites.setdefault(name, {})[0] = lv
        for (target, value, conds, part), line in zip(assigns, lines):
            if part is None:
                self._at = line or None
                lv = self.trip_level(value)
                if conds:
                    for kind, c in conds:
                        lv = max(lv, 1 if kind == "except" else self._cond_level(c))
                self._at = None
            else:  # a loop's element, a part of an unpacked tuple: what the name holds
                lv = max([self.env.get(n, 0) for n in _names(target)] or [0])
                if lv and isinstance(part, int) and value.__class__ is _CALL:
                    # `paths, err = broadcast_object((paths, err))`: what this element holds
                    # here, not every value the name holds in the function
                    self._at = line or None
                    own = self._elem_level(value, part)
                    for kind, c in conds:
                        own = max(own, 1 if kind == "except" else self._cond_level(c))
                    self._at = None
                    lv = min(lv, own)
                if lv and isinstance(part, int):
                    # `train_dl, valid_dl = get_dataloaders(rank=rank)`: the element's own trip
                    # count (a loader with a distributed sampler: as many items on every rank)
                    lv = self._elem_trip(value, part, conds, lv, line)
            for name in _names(target):
                if lv > self.trip_env.get(name, 0):
                    self.trip_env[name] = lv
                if lv:
                    site = self.trip_sites.setdefault(name, {})
                    if lv > site.get(line, 0):
                        site[line] = lv
        self._tests = None
        self._at = saved

    def _cond_level(self, c):
        """:meth:`test_level` of branch condition ``c`` read at ``self._at``, remembered while
        the environment does not change (an assignment's conditions are read in every pass)."""
        if self._tests is None:
            self._tests = {}
        key = (id(c), self._at, self._version)
        got = self._tests.get(key)
        if got is None:
            got = self.test_level(c)
            if self._tests is not None:  # (a trip count asked on the way starts the memo again)
                self._tests[key] = got
        return got

    def _pair_level(self, pair):
        """Level of what a loop or comprehension pair ``(target, value, conds, part)`` gives its
        name (:meth:`_loop_pairs`)."""
        _, value, _, part = pair
        if part in (None, "element"):
            return self.level(value)
        return self._elem_level(value, part) if isinstance(part, int) else self._part_level(value, part)

    def _loop_pairs(self, target, it):
        """A loop's assignments: ``for i, x in enumerate(xs)`` gives ``i`` the iteration's
        number (the same on every rank in that iteration: how many iterations there are is the
        loop's trip count, checked apart) and ``x`` an element of ``xs``."""
        if isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(it, ast.Call) and \
                isinstance(it.func, ast.Name) and it.func.id == "enumerate" and \
                "enumerate" not in self.mod.imports and it.args and not isinstance(it.args[0], ast.Starred):
            start = it.args[1] if len(it.args) > 1 else next(
                (k.value for k in it.keywords if k.arg == "start"), ast.Constant(0))
            return [(target.elts[0], start, (), None), (target.elts[1], it.args[0], (), "element")]
        return [(target, it, (), "element")]

    def _flags(self):
        """This class's ``self`` flags that are true only with several processes
        (:func:`distributed_flags`)."""
        if self.cls is None or self.mod is None or not hasattr(self.mod, "flag_cache"):
            return ()
        return distributed_flags(self.mod, self.cls)

    def _scan_guards(self, stmts, conds):
        """Record the branch conditions each assignment statement is under (control
        dependence: ``if rank == 0: n = len(data)``), and the statements of single-process
        branches (they run only without other ranks: they contribute nothing)."""
        for i, st in enumerate(stmts):
            if isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                if conds:
                    self.guards[id(st)] = conds
            elif isinstance(st, (ast.Global, ast.Nonlocal)):
                self.shared.update(st.names)
            elif isinstance(st, ast.If):
                side = single_process(st.test, flags=self._flags())
                if side is not None:
                    self._mark_single(st.body if side == "body" else st.orelse)
                    self._scan_guards(st.orelse if side == "body" else st.body, conds)
                    continue
                c = conds + (("if", st.test),)
                self._sides[id(st.test)] = (_span(st.body), _span(st.orelse) if st.orelse else None)
                self._scan_guards(st.body, c)
                self._scan_guards(st.orelse, c)
                for _, _, b in _unboxed(st, stmts[max(0, i - 4):i]):
                    # the root's value, broadcast: the same on every rank whichever side runs
                    if conds:
                        self.guards[id(b)] = conds
                    else:
                        self.guards.pop(id(b), None)
            elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
                self._scan_guards(st.body, conds)
                for h in st.handlers:
                    cond = handler_condition(st, h)
                    self._scan_guards(h.body, conds if cond is None else conds + (cond,))
                self._scan_guards(st.orelse, conds)
                self._scan_guards(st.finalbody, conds)
            elif isinstance(st, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
                if not isinstance(st, (ast.With, ast.AsyncWith)):
                    self.loops.append((st.lineno, getattr(st, "end_lineno", None) or st.lineno))
                    if isinstance(st, (ast.For, ast.AsyncFor)):
                        self._loop_names[self.loops[-1]] = set(_names(st.target))
                self._scan_guards(st.body, conds)
                self._scan_guards(getattr(st, "orelse", []), conds)

    def _mark_single(self, stmts):
        stack = list(stmts)
        while stack:
            st = stack.pop()
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            self.single.add(id(st))
            for f in ("body", "orelse", "finalbody"):
                stack.extend(getattr(st, f, None) or [])
            for h in getattr(st, "handlers", None) or []:
                stack.extend(h.body)

    def direct_level(self, e):
        """The level of condition ``e`` counting only rank sources it names itself, or through a
        local assigned straight from one (``rank = dist.get_rank()``), or a tree function that
        returns one; not what reaches it through attributes set elsewhere, parameters handed by
        callers or merged values. A finding whose rank dependence is only inferred is reported
        at ``warning`` level (docs/lint.md, "Severity")."""
        return self._direct_mode(self.test_level, e)

    def direct_value_level(self, e):
        """:meth:`level` of value ``e`` as :meth:`direct_level` counts it (a tree function's
        return value: ``FuncFacts.ret_direct``)."""
        return self._direct_mode(self.level, e)

    def _direct_mode(self, ask, e):
        saved = self.env, self.params
        self._direct = True
        try:
            if self._direct_env is None:
                denv = {}
                for _ in range(2):
                    self.env, self.params = dict(denv), {}
                    for target, value, conds, part in self._assigns:
                        if part == "rank":
                            lv = 2
                        elif part is None:
                            lv = self.level(value)
                        else:
                            continue
                        if lv == 2:
                            for n in _names(target):
                                denv[n] = 2
                self._direct_env = denv
            self.env, self.params = self._direct_env, {}
            return ask(e)
        finally:
            self.env, self.params = saved
            self._direct = False

    def guard_level(self, stmt):
        """The highest level of the branch conditions ``stmt`` is under (0 when none); an
        ``except`` handler counts as rank-local."""
        lv = 0
        for kind, c in self.guards.get(id(stmt), ()):
            lv = max(lv, 1 if kind == "except" else self.test_level(c))
        return lv

    def _elem_level(self, call, i):
        callee = self.project.callee(self.mod, self.cls, "<module>", call) if self.project is not None else None
        if callee is not None and callee.ret_elems is not None and -len(callee.ret_elems) <= i < len(callee.ret_elems):
            return callee.ret_elems[i]
        return self.level(call)

    def _elem_trip(self, call, i, conds, lv, line):
        """The trip level of element ``i`` of the tuple that tree call ``call`` returns
        (:attr:`~hpc_hangkit.lint.model.FuncFacts.ret_elem_trips`), with the branch conditions
        ``conds`` of its assignment at ``line``; ``lv`` (the element's value level) when it is
        not known."""
        callee = self.project.callee(self.mod, self.cls, "<module>", call) if self.project is not None else None
        trips = callee.ret_elem_trips if callee is not None else None
        if trips is None or i >= len(trips):
            return lv
        got = trips[i]
        saved, self._at = self._at, line or None
        for kind, c in conds:
            got = max(got, 1 if kind == "except" else self._cond_level(c))
        self._at = saved
        return got

    def _part_level(self, call, part):
        """Level of one element of a tuple unpacked from a rank call: ``rank, world =
        get_rank_and_world_size()`` taints ``rank`` (``part`` "rank") and not ``world``
        (``part`` "other": only what the call's arguments carry)."""
        if part == "rank":
            return RANK_DEPENDENT
        lv = 0
        for a in call.args:
            lv = max(lv, self.level(a))
        return lv

    def _agree_args(self, call):
        kind, name = self.call_kind(call)
        if kind is None and self.project is not None and (call.args or call.keywords):
            # a tree wrapper that hands that parameter to an agreeing collective
            callee = self.project.callee(self.mod, self.cls, "<module>", call)
            if callee is not None and callee.agrees:
                bound = 1 if callee.cls and callee.params and callee.params[0] in ("self", "cls") else 0
                for i in callee.agrees:
                    a = call.args[i - bound] if 0 <= i - bound < len(call.args) else None
                    if isinstance(a, ast.Name):
                        self.agreed.add(a.id)
            elif callee is not None and callee.witness and callee.ret_agreed is True:
                # mmdetection's `reduce_mean(num_pos)`: a helper that answers with an agreed value
                # of what it is given (a copy, all-reduced); the local itself stays this rank's,
                # but what it counts is agreed (:meth:`_counted_here`), also a count handed
                # in place (`reduce_mean(torch.tensor(len(pos_inds)))`)
                for a in list(call.args) + [k.value for k in call.keywords]:
                    if a.__class__ is _NAME:
                        self.reduced.add(a.id)
                    else:
                        d = _count_of(a)
                        if d:
                            self.reduced_counts.add(d)
            return
        if kind != "collective":
            return
        if name in _REDUCING:
            a = call.args[0] if call.args else next(
                (k.value for k in call.keywords if k.arg in _GATHERED_KEYWORDS), None)
            if a is not None:
                self._reductions.append((call.lineno, a))
        if name in _GATHERING:
            a = call.args[1 if name in _GATHERING_ARG1 and len(call.args) > 1 else 0] if call.args else None
            if call.keywords and (a is None or (name in _GATHERING_ARG1 and len(call.args) == 1)):
                # `all_gather_object(object_list=out, obj=groups)`, `comm.allgather(sendobj=xs)`
                a = next((k.value for k in call.keywords if k.arg in _GATHERED_KEYWORDS), a)
            if a.__class__ is _NAME:
                if self._gathered_at is None:
                    self._gathered_at = {}
                if call.lineno < self._gathered_at.get(a.id, call.lineno + 1):
                    self._gathered_at[a.id] = call.lineno
        idx = 0 if name in _AGREEING_ARG0 else 1 if name in _AGREEING_ARG1 else None
        if idx is not None:
            a = call.args[idx] if len(call.args) > idx else next(
                (k.value for k in call.keywords if k.arg in _AGREED_KEYWORDS), None)
            a = agreed_operand(a)
            d = dotted(a) if a is not None else None
            if d and len(d) == 1:
                self.agreed.add(d[0])

    # -------------------------------------------------------------- calls
    def call_kind(self, call):
        """:func:`call_kind` of ``call`` in this function's module (through the tree's
        re-exports when a project is known); asked once per call (the levels are read in
        several passes)."""
        got = self._kinds.get(id(call))
        if got is None:
            if self.project is not None:
                got = self.project.call_kind(self.mod, call)
            else:
                got = call_kind(self.mod, call)
            self._kinds[id(call)] = got
        return got

    # -------------------------------------------------------------- levels
    def level(self, e):
        """0, 1 or 2 for expression ``e`` (see the module docstring)."""
        if e is None:
            return 0
        # the node's class by identity (a parsed tree holds no subclasses of these): the
        # commonest first, the hottest function of the lint
        t = e.__class__
        if t is _CONSTANT:
            return 0
        if t is _NAME:
            if self._comp_bind:
                pair = self._comp_bind.get(id(e))
                if pair is not None:
                    return self._pair_level(pair)
            if e.id in self.agreed:
                return 0
            if e.id in C.RANK_NAMES and e.id not in self.assigned:
                if e.id in self.unbound:
                    return self.params.get(e.id, 0)
                return 2  # a parameter or global named like the rank; a local takes what it is given
            if self._at is not None and e.id not in self.shared:
                sites = self.sites.get(e.id)
                if sites is not None:
                    return self._reaching(sites, e.id)
            return self.env.get(e.id, 0)
        if t is _ATTRIBUTE:
            if (e.attr in C.RANK_NAMES or C.is_rank_attr(e.attr)) and not _matrix_rank(e.value):
                return 2
            if e.attr in _WORLD_NAMES:
                return 0  # the number of processes is the same on every rank
            if e.attr in _BAR_COUNTERS and isinstance(e.value, ast.Name) and e.value.id in self.bars:
                # a progress bar disabled on some ranks never advances its counter there
                return self.level(self.bars[e.value.id])
            lv = 0
            field = None
            if self.project is not None and self.cls and not self._direct:
                d = dotted(e)
                if d and d[0] == "self" and len(d) <= 4:
                    lv = self.project.attr_level(self.mod, self.cls, ".".join(d[1:]))
                    if len(d) == 3:
                        # `self.run_config.num_epochs`: that field of the record, not the record
                        field = self.project.record_field(self.mod, self.cls, d[1], d[2])
            if e.attr == "shape" and _data_name(e.value):
                lv = max(lv, 1)
            if e.attr in _SHAPE_ATTRS and field is None:
                drawn = self._drawn_shape(e.value)
                if drawn is not None:
                    return drawn  # the shape of a random draw is the shape it was asked for
            return max(lv, self.level(e.value) if field is None else field)
        if t is _CALL:
            return self._call_level(e)
        if t is _SUBSCRIPT:
            if self._is_environ(e.value) and self._rank_env_key(e.slice):
                return 2
            s = e.slice
            k = -s.operand.value if s.__class__ is ast.UnaryOp and isinstance(s.op, ast.USub) and \
                s.operand.__class__ is _CONSTANT and s.operand.value.__class__ is int else \
                s.value if s.__class__ is _CONSTANT and s.value.__class__ is int else None
            if e.value.__class__ is _CALL and k is not None:
                # `get_node_setting()[1]`, `get_dist_setting()[-1]`: that element of the tuple a
                # tree function returns
                return self._elem_level(e.value, k)
            return max(self.level(e.value), self.level(e.slice))
        if t is _LAMBDA:
            return 0
        if t is _IFEXP:
            body = _items(e.body)
            if ast.dump(body) == ast.dump(_items(e.orelse)):
                # the same items on both sides, with a progress bar on some ranks
                # (`tqdm(xs) if rank == 0 else xs`): the test decides only the display
                return self.level(body)
        if t is _BOOLOP and isinstance(e.op, ast.And) and _first_and_last(e.values):
            return 0
        if t is _COMPARE and mode_test(e):
            return 0
        if t is _COMPARE and none_test(e):
            if isinstance(e.left, ast.Name):
                handed = self._handed_none(e.left.id)
                if handed:
                    # `if log_dir is not None:`, a parameter the callers hand a value None on
                    # some ranks (`get_log_dir()`)
                    return max(handed, self.level(e.left))
                lv = self._set_level(e.left.id)
                if lv is not None:
                    return lv
            elif self._launcher_test(e.left):
                return 0
        lv = 0
        # the children as ast.iter_child_nodes yields them, without its generators
        fields = _EXPR_FIELDS.get(t)
        if fields is None:
            fields = _EXPR_FIELDS[t] = tuple(f for f in t._fields if f not in _NOT_CHILD)
        for f in fields:
            v = getattr(e, f, None)
            for c in (v if v.__class__ is list else (v,)):
                if isinstance(c, _EXPR):
                    lv = max(lv, self.level(c))
                    if lv == 2:
                        return lv
                elif c.__class__ is _COMPREHENSION:
                    lv = max(lv, self.level(c.iter), max([self.level(x) for x in c.ifs] or [0]))
        return lv

    def _set_level(self, name):
        """Level of ``name is None`` when every assignment of the local ``name`` in this function
        constructs an object (a call of a capitalised name: a class, which never returns None):
        the test asks whether it was assigned, so only the branches it is assigned under count,
        not what the object was built from (``cdb = TorchBackend(backend, rank, world)`` then
        ``if cdb is None:``). None when that is not the case (any other assignment, a
        parameter the caller may hand None, an ``except`` handler)."""
        if name in self._fn_params or name not in self.assigned:
            return None
        if name in self._asking:
            return 0  # `if x is None: x = X()`: the test itself adds nothing
        self._asking.add(name)
        try:
            return self._set_level_of(name)
        finally:
            self._asking.discard(name)

    def _set_level_of(self, name):
        lv = 0
        for target, value, conds, part in self._assigns:
            if not (isinstance(target, ast.Name) and target.id == name):
                if name in _names(target):
                    return None
                continue
            if part is None and isinstance(value, ast.Constant):
                pass  # `x = None` first, a constant: only where it is assigned counts
            elif part is not None or not isinstance(value, ast.Call):
                return None
            elif not (dotted(value.func) or [""])[-1][:1].isupper():
                # a tree function whose None-ness is known: that level, with the arguments
                # that decide it (never above the value's own level)
                got = self.project.none_level(self.mod, self.cls, value) if self.project is not None else None
                if got is None:
                    return None
                none_lv = max([got[0]] + [self.level(a) for a in got[1]])
                lv = max(lv, min(none_lv, self.level(value)))
            for kind, c in conds:
                if kind == "except":
                    return None
                lv = max(lv, self.test_level(c))
        return lv

    def while_level(self, st):
        """:meth:`test_level` of ``while`` loop ``st``'s test, where a local it reads is agreed
        at the test: it comes in the same on every rank (assigned before the loop only constant
        or shared values, :meth:`_shared_value`) and, on every path through the body back to the
        test (its end, or a ``continue``), its last assignment is an agreeing collective's value
        or a shared one (OpenMDAO's `done = comm.bcast(done, root=0)` after the root alone set
        `done = True`). A side of an ``if`` that only a single process takes does not count."""
        lv = self.test_level(st.test)
        if not lv and self._param_none:
            # a parameter's handed None-ness, read on the first pass, before the body assigns it
            lv = self.test_level_at(st.test, st.lineno)
        if not lv:
            return lv
        names = {n.id for n in ast.walk(st.test) if isinstance(n, ast.Name)} - self.agreed
        fixed = set()
        for n in names:
            conts = []
            if self._enters_agreed(st, n) and all(
                    x != "bad" for x in [self._back_agreed(st.body, n, "in", conts)] + conts):
                fixed.add(n)
        if not fixed:
            return lv
        saved = self.agreed
        self.agreed = saved | fixed
        try:
            return self.test_level(st.test)
        finally:
            self.agreed = saved

    def _enters_agreed(self, loop, name):
        """True when local ``name`` comes into ``while`` loop ``loop`` the same on every rank:
        assigned before it, only shared values under tests every rank decides alike, and not
        after it within a loop that holds both."""
        if name in self._fn_params or name in self.shared:
            return False
        end = getattr(loop, "end_lineno", None) or loop.lineno
        before = False
        for (target, value, conds, part), line in zip(self._assigns, self._lines):
            if name not in _names(target) or loop.lineno <= line <= end:
                continue
            if line > end:
                if self._one_loop(line, loop.lineno):
                    return False
                continue
            if part is not None or not isinstance(target, ast.Name) or not self._shared_value(value, line) or \
                    any(kind == "except" or self.test_level(c) for kind, c in conds):
                return False
            before = True
        return before

    def _back_agreed(self, stmts, name, state, conts):
        """The state of local ``name`` after ``stmts`` on the paths that reach their end: "in"
        (as it came in), "ok" (last assigned a shared value), "bad", or "dead" (no path reaches
        the end); the state at each ``continue`` of the loop checked is added to ``conts``."""
        for st in stmts:
            if state == "dead":
                return state
            if id(st) in self.single or isinstance(st, _DEFS_T):
                continue
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    state = "ok" if st.value is not None and (self._returns_agreed(st.value) or
                                                              self._shared_value(st.value, st.lineno)) else "bad"
                elif any(name in _stored_names(t) for t in targets):
                    state = "bad"
            elif isinstance(st, ast.AugAssign):
                if name in _stored_names(st.target) and self.level(st.value):
                    state = "bad"
            elif isinstance(st, ast.If):
                got = [self._back_agreed(side, name, state, conts) for side in (st.body, st.orelse)]
                if self.test_level(st.test) and any(g not in (state, "dead") for g in got):
                    state = "bad"  # assigned on some ranks' side only: it parts the ranks
                else:
                    state = _worse(*got)
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                state = self._back_agreed(st.body, name, state, conts)
            elif isinstance(st, ast.Continue):
                conts.append(state)
                return "dead"
            elif isinstance(st, (ast.Break, ast.Return, ast.Raise)):
                return "dead"
            elif any(name in _stored_names(n) for n in ast.walk(st) if isinstance(n, ast.expr)) or \
                    (not isinstance(st, (ast.For, ast.AsyncFor, ast.While)) and
                     any(isinstance(n, ast.Continue) for n in ast.walk(st))):
                state = "bad"  # rebound in a nested loop, a try, a walrus; a continue in a try
            if isinstance(st, (ast.Expr, ast.Assign, ast.AugAssign)) and _mutates(st, name):
                state = "bad"
        return state

    def _nan_agreed(self, root, depth=0):
        """True when the loss a NaN test reads through local ``root`` is the same on every rank:
        agreed (:meth:`_agreed`), or a local of this function every assignment of which reads,
        by plain reads (``.mean()``, ``[0]``, another such local), what a collective returns
        alike on every rank (``accelerator.gather(loss).mean()``) or what a tree function
        answers agreed (``reduce_mean(loss.detach())``)."""
        if self._agreed(root):
            return True
        name = root.id
        if name not in self.assigned or name in self._fn_params or depth > 3:
            return False
        seen = False
        for (target, value, _, part) in self._assigns:
            if name not in _names(target):
                continue
            if part is not None:
                return False
            while True:
                if value.__class__ is _CALL:
                    if self._returns_agreed(value) or self._agreed_answer(value):
                        break
                    if value.func.__class__ is not _ATTRIBUTE:
                        return False
                    value = value.func.value  # `losses.mean()`: what it is a method of
                elif value.__class__ in (_ATTRIBUTE, _SUBSCRIPT):
                    value = value.value
                elif value.__class__ is _NAME and value.id != name and self._nan_agreed(value, depth + 1):
                    break  # `avg = losses.mean()` after `losses = accelerator.gather(loss)`
                else:
                    return False
            seen = True
        return seen

    def _agreed_answer(self, call):
        """True for a call of a tree function that reaches a collective and answers with an
        agreed value (``reduce_mean(x)``: an all-reduced copy)."""
        callee = self.project.callee(self.mod, self.cls, "<module>", call) if self.project is not None else None
        return callee is not None and bool(callee.witness) and (callee.ret_agreed is True or
                                                                callee.ret_uniform is True)

    def _agreed(self, e):
        """True for per-rank-named data that the code made equal on every rank: a local handed
        to an agreeing collective, a local only ever assigned what such a collective returns
        (:meth:`_gathered`), a ``self`` attribute only ever assigned such a value
        (deepspeed's ``self.batch = batch.tolist()`` after ``broadcast(batch, 0)``): its size
        agrees too."""
        if isinstance(e, ast.Name):
            return e.id in self.agreed or self._gathered(e.id)
        d = dotted(e)
        if d and d[0] == "self" and len(d) == 2 and self.cls and self.project is not None:
            return (self.cls, d[1]) in getattr(self.mod, "attr_agreed", ())
        return False

    def _returns_agreed(self, call):
        """True for a call of a collective whose return value is the same on every rank
        (:data:`_RETURN_AGREES`; accelerate's ``gather``/``reduce``/``broadcast`` as an
        ``accelerate`` import or a method of a receiver named ``accelerator``)."""
        if not isinstance(call, ast.Call):
            return False
        kind, name = self.call_kind(call)
        if kind != "collective":
            return False
        if name in _RETURN_AGREES:
            return True
        if name not in _RETURN_AGREES_ACCELERATE:
            return False
        f = call.func
        parts = dotted(f)
        q = qualify(self.mod, parts) if parts else None
        if q is not None:
            return q.split(".")[0] == "accelerate"
        if isinstance(f, ast.Attribute):
            d = dotted(f.value)
            return bool(d) and bool(_ACCELERATOR.search(d[-1]))
        return False

    def _gathered(self, name):
        """True for a local of this function (not a parameter, not global) whose every
        assignment is the value, or an element of the tuple, that a collective returns alike on
        every rank (:meth:`_returns_agreed`: ``agg = self.accelerator.gather(lengths)``): its
        size and truth are the same on every rank."""
        got = self._gathers.get(name)
        if got is None:
            got = False
            if name in self.assigned and name not in self._fn_params and name not in self.shared:
                got = True
                # assumed while its own assignments are read (`pool = pool[1:]`): each keeps
                # a value every rank shares when what it reads is shared
                self._gathers[name] = True
                seen = False
                for (target, value, conds, part), line in zip(self._assigns, self._lines):
                    if name not in _names(target):
                        continue
                    if not (part is None or type(part) is int):
                        got = False
                        break
                    if self._returns_agreed(value):
                        seen = True
                        continue
                    v = value.elts[part] if type(part) is int and isinstance(value, (ast.Tuple, ast.List)) and \
                        part < len(value.elts) else value
                    if (v is value and part is not None) or not self._shared_value(v, line) or \
                            not all(kind == "if" and self.test_level(t) == 0 for kind, t in conds):
                        got = False
                        break
                    # built from agreeing collectives' values (not only constants): gathered too
                    seen = seen or isinstance(v, (ast.Call, ast.Subscript))
                got = got and seen
                if got and name in self._resized_names():
                    got = False
            self._gathers[name] = got
        return got

    def _shared_value(self, value, line, depth=0):
        """True when ``value`` (assigned at ``line``) is the same on every rank: a constant, an
        empty literal, or a slice or combining call (``np.concatenate(parts)``, ``list(x)``) of
        locals whose every assignment reaching ``line`` is an agreeing collective's value
        (``parts = comm.bcast(parts)`` after ``parts = comm.gather(...)``) or such a value."""
        if isinstance(value, ast.Constant):
            return True
        if isinstance(value, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            return not any(isinstance(x, ast.expr) for x in ast.iter_child_nodes(value))  # empty
        if depth > 3:
            return False
        if isinstance(value, ast.Call):
            d = dotted(value.func)
            if not d or d[-1] not in _COMBINE or value.keywords:
                return False
            parts = value.args
        elif isinstance(value, ast.Subscript):
            parts = [value.value, value.slice]
        else:
            return False
        for e in parts:
            for n in ast.walk(e):
                if isinstance(n, (ast.Call, ast.Attribute, ast.Lambda, ast.NamedExpr)):
                    return False
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                    if self._gathers.get(n.id):
                        continue  # assumed for the local being decided, or decided shared
                    reaching = self._live_assigns(n.id, line)
                    if not reaching or n.id in self._fn_params or n.id in self.shared:
                        return False
                    for target, v, conds, part, ln in reaching:
                        if part is not None and (type(part) is not int or not isinstance(v, (ast.Tuple, ast.List))):
                            if type(part) is int and self._returns_agreed(v):
                                continue
                            return False
                        if type(part) is int:
                            v = v.elts[part] if part < len(v.elts) else None
                        if v is None or not (self._returns_agreed(v) or (ln != line and
                                                                       self._shared_value(v, ln, depth + 1))):
                            return False
        return True

    def _resized_names(self):
        """The locals this function changes the size of in place (``xs.append(x)``, ``del
        xs[i]``): such a list's size is not what a collective returned."""
        if self._resized is None:
            out = set()
            nodes = self.mod.local.get(id(self.fn))
            for n in (nodes if nodes is not None else walk_local(self.fn)):
                if n.__class__ is _CALL and isinstance(n.func, ast.Attribute) and \
                        n.func.attr in _RESIZERS and isinstance(n.func.value, ast.Name):
                    out.add(n.func.value.id)
                elif isinstance(n, ast.Delete):
                    for t in n.targets:
                        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                            out.add(t.value.id)
            self._resized = out
        return self._resized

    def _counted_here(self, e):
        """True for a container (``self.pending``, a local) whose count this function agrees
        through a collective: a local counted in a loop over it (``n += 1`` in ``for k, v in
        self.pending.items():``) or assigned ``len(it)`` is handed, directly or through what it
        is computed into (``t = torch.tensor(n)``), to an agreeing collective
        (``all_reduce(t, op=MIN)``). Agreeing a count is the code's own statement that the
        count can differ between ranks, so the container's size is rank-local here (sglang's
        ``if len(self.ongoing_write_through) == 0: return`` before that all_reduce)."""
        d = dotted(e)
        if not d or not (self.agreed or self.reduced or self.reduced_counts):
            return False
        if tuple(d) in self.reduced_counts:
            return True
        if self._counted is None:
            self._counted = _counted_containers(self.fn, self.agreed | self.reduced, self.mod.local.get(id(self.fn)))
        return tuple(d) in self._counted

    def _side_of(self, test, line):
        """The (first, last) lines of the side of the ``if`` with ``test`` that holds ``line``
        (None when neither does)."""
        sides = self._sides.get(id(test))
        if sides is None:
            return None
        for side in sides:
            if side is not None and side[0] <= line <= side[1]:
                return side
        return None

    def _reaching(self, sites, name=None, sided=True):
        """The highest level of the assignments in ``sites`` ({line: level}) that can reach a
        read at line ``self._at``: those before it, and those in a loop around both; less those
        that a plain assignment of ``name`` always replaces first (:meth:`_killed`). A read on
        the same side of an ``if`` as an assignment runs only where that side runs: the ``if``'s
        condition does not add to that assignment's level there."""
        at = self._at
        lv = 0
        for line, l in sites.items():
            if l > lv and self._may_reach(line, at) and \
                    not (name is not None and (self._killed(name, line, at) or self._apart(line, at, name))):
                got = self._site_conds.get((name, line)) if name is not None and sided else None
                if got is not None:
                    base, sided = got
                    l = max([base] + [c for c, (a, b) in sided if not (a <= at <= b and line < at)])
                lv = max(lv, l)
        return lv

    def reaching_values(self, name, at):
        """The values of the assignments of local ``name`` that can reach a read at line ``at``
        (as :meth:`_reaching` counts them); None when there are none, when one of them is not a
        plain ``name = value``, or when ``name`` is a parameter or a global."""
        if name in self._fn_params or name in self.shared:
            return None
        out = []
        for target, value, conds, part, line in self._assigns_reaching(name, at):
            if self._killed(name, line, at) or self._apart(line, at, name):
                continue
            if not (isinstance(target, ast.Name) and part is None):
                return None
            out.append(value)
        return out or None

    def flowing_values(self, name, at):
        """The values of every assignment of local ``name`` that can reach a read at line ``at``
        (as :meth:`reaching_values`), whatever its target: a tuple unpacked from a value gives
        that whole value (``logits, aux = model(x)``), an augmented assignment its operand.
        Empty for a parameter or a global."""
        if name in self._fn_params or name in self.shared:
            return []
        return [value for target, value, conds, part, line in self._assigns_reaching(name, at)
                if value is not None and not (self._killed(name, line, at) or self._apart(line, at, name))]

    def _one_loop(self, line, at):
        """True when a loop of the function holds both lines."""
        return any(a <= line <= b and a <= at <= b for a, b in self.loops)

    def _may_reach(self, line, at):
        """True when an assignment at ``line`` can reach a read at line ``at``: it stands before
        it, or a loop holds both (the next iteration's read)."""
        return line < at or self._one_loop(line, at)

    def _assigns_reaching(self, name, at):
        """``(target, value, conds, part, line)`` of each assignment of local ``name`` that can
        reach a read at line ``at`` (:meth:`_may_reach`), in the order of the function."""
        for (target, value, conds, part), line in zip(self._assigns, self._lines):
            if name in _names(target) and self._may_reach(line, at):
                yield target, value, conds, part, line

    def _apart(self, line, at, name=None):
        """True when the statement at ``line`` and the one at ``at`` stand in the two branches of
        one ``if``/``else`` (or two cases of one ``match``) and no loop holds both, or the
        innermost loop that holds both is a ``for`` that binds ``name`` at each iteration (what
        one iteration assigns never reaches the next one's read): one never runs after the other."""
        if self._one_loop(line, at) and not (name is not None and name in self._loop_names.get(
                self._inner_loop(line, at), ())):
            return False
        if self._dom is None:
            self._dom = _dominance(self.fn, self._flags(), self.mod.words.get(id(self.fn)))
        paths, _, owners = self._dom
        p, q = paths.get(line), paths.get(at)
        if p is None or q is None:
            return False
        for d in range(min(len(p), len(q))):
            if p[d] == q[d]:
                continue
            if p[d][0] == q[d][0] or d == 0:
                return False  # one block: the earlier statement runs before the later one
            a, b = owners.get(p[d][0]), owners.get(q[d][0])
            if a is None or b is None or a[0] is not b[0] or a[1] == b[1]:
                return False
            return isinstance(a[0], ast.If) or type(a[0]).__name__ == "Match"
        return False

    def _killed(self, name, line, at):
        """True when a plain assignment of ``name`` (``x = ...``) runs on every path from the
        assignment at ``line`` to a read by the statement that starts at line ``at``: it stands
        earlier in a block that holds that statement (so it runs before every such read), after
        ``line``, or, for an assignment later in a loop around both (the previous iteration's
        value), inside that loop."""
        if self._dom is None:
            self._dom = _dominance(self.fn, self._flags(), self.mod.words.get(id(self.fn)))
        paths, killers, _ = self._dom
        read = paths.get(at)
        if read is None:
            return False
        own = paths.get(line)
        for k, kpath in killers.get(name, ()):
            d = len(kpath) - 1
            if own is not None and line < k < at and len(own) > d and kpath[:-1] == own[:d] and \
                    own[d][0] == kpath[-1][0] and own[d][1] < kpath[-1][1] and not self._jumps(line, k):
                # later in a block that holds the assignment (`else: if leader: x = a` ... `x =
                # shared`): every path from it out of that block runs through the killer, but
                # an exception between them, caught by a `try` around both, skips it
                return True
            if k == line or k >= at or len(read) <= d or kpath[:-1] != read[:d] or \
                    read[d][0] != kpath[-1][0] or kpath[-1][1] >= read[d][1]:
                continue  # not earlier in a block that holds the read
            if line < k:
                return True
            if line > at:
                # the innermost loop around both carries the value to the next read: it must
                # hold the killer too
                inner = self._inner_loop(line, at)
                if inner is not None and inner[0] <= k:
                    return True
        return False

    def _jumps(self, a, b):
        """True when a ``break`` or ``continue`` of the function stands between lines ``a`` and
        ``b`` (it may leave a block before its later statements run), or a ``try`` body holds
        both (an exception between them leaves for a handler)."""
        if self._jump_lines is None:
            jumps, tries = [], []
            for n in ast.walk(self.fn):
                if n.__class__ in (ast.Break, ast.Continue):
                    jumps.append(n.lineno)
                elif isinstance(n, ast.Try) or type(n).__name__ == "TryStar":
                    if n.handlers:
                        tries.append((n.body[0].lineno, n.body[-1].end_lineno))
            self._jump_lines = (sorted(jumps), tries)
        jumps, tries = self._jump_lines
        i = bisect.bisect_right(jumps, a)
        return (i < len(jumps) and jumps[i] < b) or any(s <= a and b <= e for s, e in tries)

    def _inner_loop(self, line, at):
        """The (start, end) lines of the innermost loop that holds both lines, or None."""
        best = None
        for a, b in self.loops:
            if a <= line <= b and a <= at <= b and (best is None or a > best[0]):
                best = (a, b)
        return best

    def guard_reaching(self, name, at):
        """The test of the first rank-dependent branch under which ``name`` is assigned where
        that assignment can reach a read at line ``at`` (:meth:`_may_reach`, not replaced on the
        way: :meth:`_killed`), or None."""
        for line, test in self.guarded_by.get(name, ()):
            if self._may_reach(line, at) and not self._killed(name, line, at):
                return test
        return None

    def _read_at(self, how, e, line):
        """``how(e)`` with the reads of locals made at ``line`` (:attr:`_at`)."""
        saved = self._at
        self._at = line
        try:
            return how(e)
        finally:
            self._at = saved

    def origin(self, e, line, steps=3):
        """Where the rank dependence of ``e`` read at ``line`` comes from, for a finding's
        message: ``[(line, name, how)]``, for each local that ``e`` reads with a level above 0,
        the assignment of the highest level that reaches the read (the latest of those), ``how``
        ``"from"``; or, when that assignment's value is the same on every rank and the branch
        it stands under decides (``x = None`` under ``if rank == 0:``), that branch's test,
        ``how`` ``"under"``; then the same for the locals that value or test reads, at most
        ``steps`` in all. Empty when ``e`` reads no such local: it names its rank source
        itself (``rank``, a call)."""
        self.level_at(e, line)  # the levels of the assignments (:attr:`sites`) are computed
        out = []
        seen = set()
        todo = [(e, line)]
        while todo and len(out) < steps:
            expr, at = todo.pop(0)
            # `env.rank`: the attribute names the rank, not the object
            named = {id(x.value) for x in ast.walk(expr) if x.__class__ is _ATTRIBUTE and (
                x.attr in C.RANK_NAMES or C.is_rank_attr(x.attr))}
            for n in ast.walk(expr):
                if len(out) >= steps:
                    break
                if n.__class__ is not _NAME or n.id in seen or n.id in C.RANK_NAMES or id(n) in named:
                    continue
                sites = self.sites.get(n.id)
                if not sites:
                    _, deciding = self._grown(n.id, at) if n.id in self.assigned else (0, None)
                    if deciding is not None:
                        # `metrics` of `if len(metrics) > 0:`, appended to past a skip
                        seen.add(n.id)
                        out.append((deciding[1], n.id, "grows"))
                        todo.append(deciding)
                    continue
                best = None
                for _target, value, conds, _part, ln in self._assigns_reaching(n.id, at):
                    lv = sites.get(ln, 0)
                    if lv and (best is None or lv >= best[0]) and not self._killed(n.id, ln, at) \
                            and not self._apart(ln, at, n.id):
                        best = (lv, ln, value, conds)
                if best is None or not best[1]:
                    continue
                seen.add(n.id)
                lv, ln, value, conds = best
                if value is None or self.level_at(value, ln) < lv:
                    test = next((c for kind, c in reversed(conds) if kind == "if" and c is not None
                                 and self.test_level_at(c, ln) >= lv), None)
                    if test is not None:
                        out.append((test.lineno, n.id, "under"))
                        todo.append((test, test.lineno))
                        continue
                out.append((ln, n.id, "from"))
                if value is not None:
                    todo.append((value, ln))
        return out

    def level_at(self, e, line):
        """:meth:`level` of ``e`` read at ``line``: a local's assignments later in the function
        (outside any loop around both) do not count."""
        return self._read_at(self.level, e, line)

    def test_level_at(self, e, line):
        """:meth:`test_level` of condition ``e`` read at ``line`` (:meth:`level_at`)."""
        return self._read_at(self.test_level, e, line)

    def return_level_at(self, e, line):
        """:meth:`level_at` of returned value ``e``; a returned emptiness test of per-process
        data (``return self.buf.numel() == 0``, :func:`_emptiness`) is read as the condition it is
        (:meth:`test_level_at`): its callers test it as they would test it written inline (of
        a parameter: :meth:`emptied_param`)."""
        if _emptiness(e):
            return self._read_at(self.test_level, e, line)
        return self._read_at(self.level, e, line)

    def emptied_param(self, e):
        """The parameter whose emptiness ``e`` tests (``x.numel() == 0``, ``not x.shape[0]``, with
        ``x`` a parameter this function never rebinds), else None: returned, such a test is
        judged at each call, by the argument it is handed (:meth:`test_level`)."""
        if not _emptiness(e):
            return None
        x = _size_receiver(_sized(e))
        if x.__class__ is _NAME and x.id in self._fn_params and x.id not in self.assigned and \
                x.id not in C.RANK_NAMES:
            return x.id
        return None

    def test_level(self, e):
        """Level of a condition: as :meth:`level`, and the truth of per-rank data (``if batch:``,
        ``if not shard:``) is rank-local."""
        m = self._members.get(id(e))
        if m is None:
            m = self._members[id(e)] = mentions_membership(e)
        if m:
            return 0
        lv = self._truth_level(e)
        if lv < 2:
            inner = e.operand if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not) else e
            if isinstance(inner, (ast.Name, ast.Attribute)) and _data_name(inner) and not self._agreed(inner) and \
                    not self._switch(inner):
                lv = max(lv, 1)
            elif lv == 0 and _emptiness(inner) and not self._uniform_size(_size_receiver(_sized(inner))):
                lv = 1
            elif lv == 0 and inner.__class__ is _CALL and self.project is not None:
                # `if not empty(x):` with `def empty(x): return x.numel() == 0`: the same test
                a = self.project.emptied_arg(self.mod, self.cls, inner)
                if a is not None and not self._uniform_size(a):
                    lv = 1
            if lv == 0 and self._gathered_at is not None and self._at is not None:
                x = _truth_subject(inner)
                if x is not None and self._at < self._gathered_at.get(x.id, 0) and x.id not in self.agreed:
                    # `if groups: groups = comm.allgather(groups)`: a value gathered from every
                    # rank is one that differs between them, so its emptiness does too
                    lv = 1
            if lv == 0 and self._at is not None:
                x = _truth_subject(inner)
                if x is not None and x.id in self.assigned:
                    # `if len(metrics) > 0:` of a list appended to only where this rank's data says
                    lv = self._grown(x.id, self._at)[0]
            if lv == 0 and self._reductions and self._at is not None:
                x = _scalar_subject(inner)
                if x is not None and self._reduced_after(x.id, self._at):
                    # `if d_denom == 0: return` before `buf[1] = d_denom; all_reduce(buf)`: the
                    # code sums the value over the ranks because it differs between them
                    lv = 1
        return lv

    def _grown(self, name, at):
        """``(level, deciding)`` of the size of local ``name`` read at line ``at``, when ``name``
        is only ever bound to a new empty container (``[]``, ``list()``, ``{}``, ``set()``) and
        grows by ``append``/``extend``/``insert``/``add``: the highest level of what decides,
        before ``at``, whether or how often each of those calls runs (the tests of the ``if``
        blocks it is in, a test whose ``continue``/``break``/``return`` skips it, the trip counts
        of the loops around it; :func:`_growth_sites`), and the first of those at that level as
        ``(expression, line)`` (None at level 0). xtuner PR 1394: a micro-batch of padding only
        is skipped, so that rank's metrics list can stay empty, and the merge that all-reduces
        each metric runs only ``if len(all_mismatch_metrics) > 0``. ``(0, None)`` for any other
        local."""
        if self._growth is None:
            self._growth = _growth_sites(self.fn, self.mod)
        sites = self._growth.get(name)
        if not sites or (name, at) in self._asking:
            return 0, None
        self._asking.add((name, at))
        try:
            lv, deciding = 0, None
            for line, ctrl in sites:
                if line >= at:
                    continue
                for kind, e, ln in ctrl:
                    got = self._read_at(self.trip_level if kind == "for" else self.test_level, e, ln)
                    if got > lv:
                        lv, deciding = got, (e, ln)
                        if lv == 2:
                            return lv, deciding
            return lv, deciding
        finally:
            self._asking.discard((name, at))

    def _reduced_lines(self):
        """Local name -> the lines of the reducing collectives whose data it is as it is: the
        data argument itself (``comm.allreduce(count)``), an element of a buffer built inline
        (``all_reduce(torch.tensor([n, m]))``), or of the buffer a plain assignment builds or an
        item store fills before that line (``t = torch.tensor([n])``; ``t[1] = d_denom``)."""
        if self._reduced_at is None:
            self._reduced_at = {}
            own = self.assigned | self._fn_params
            nodes = self.mod.local.get(id(self.fn))
            nodes = self._reduced_nodes = list(nodes if nodes is not None else walk_local(self.fn))
            for line, a in self._reductions:
                fed = set()
                if a.__class__ is _NAME:
                    fed.add(a.id)
                    for n in nodes:
                        if n.__class__ is not ast.Assign or n.lineno >= line or len(n.targets) != 1:
                            continue
                        t = n.targets[0]
                        if (t.__class__ is _NAME and t.id == a.id) or (
                                t.__class__ is ast.Subscript and t.value.__class__ is _NAME and t.value.id == a.id):
                            fed |= _buffer_names(n.value)
                else:
                    fed |= _buffer_names(a)
                for x in fed & own:
                    self._reduced_at.setdefault(x, []).append(line)
        return self._reduced_at

    def _reduced_after(self, name, at):
        """True when a reducing collective after line ``at`` takes local ``name``'s value as
        the test at ``at`` reads it (no assignment of ``name`` stands between them), and that
        value is not one every rank holds already: reduced before the test too, or assigned
        (every assignment that reaches the test) a constant, the number of processes, a
        collective's answer, a value computed from agreed locals only, or the count of a
        module-level value (``len(CONFIGS)``)."""
        lines = self._reduced_lines().get(name)
        if not lines or any(r < at for r in lines):
            return False
        assigned = [line for (target, _, _, _), line in zip(self._assigns, self._lines) if name in _names(target)]
        if not any(at < r and not any(at < line < r for line in assigned) for r in lines):
            return False
        if any(isinstance(n, ast.AugAssign) and n.target.__class__ is _NAME and n.target.id == name
               for n in self._reduced_nodes):
            return True  # accumulated (`count += 1`): its own value, whatever it starts from
        values = self.reaching_values(name, at)
        return not (values and all(self._held_by_all(v) for v in values))

    def _held_by_all(self, v):
        """True for a value every rank computes alike (:meth:`_reduced_after`)."""
        if v.__class__ is ast.Constant or _is_world_size(v):
            return True
        if v.__class__ is _CALL:
            if self.call_kind(v)[0] == "collective":
                return True
            f = v.func
            if f.__class__ is _NAME and f.id == "len" and len(v.args) == 1 and v.args[0].__class__ is _NAME and \
                    v.args[0].id not in self.assigned and v.args[0].id not in self._fn_params:
                return True
        names = names_of(v) - PURE_BUILTINS
        return bool(names) and names <= self.agreed

    def _switch(self, e):
        """True for a parameter of this function whose default is ``True`` or ``False`` and
        that it never assigns (``def write(data, sep_files=False)``), or a ``self`` attribute the
        tree's methods bind only to True or False (``self.dynamic_num_samples = False``,
        :meth:`~hpc_hangkit.lint.calls.Project.flag_attr`): a switch, not data named like it, so
        its truth is not an emptiness test; what callers hand the parameter is read as any
        argument is."""
        if e.__class__ is ast.Attribute:
            return self.project is not None and e.value.__class__ is ast.Name and e.value.id == "self" and \
                self.project.flag_attr(e.attr)
        if not isinstance(e, ast.Name) or e.id in self.assigned:
            return False
        return isinstance(defaults_of(self.fn).get(e.id), bool)

    def _truth_level(self, e):
        """:meth:`level` of a condition, where a local name tested for its truth alone (``if
        not xs:``, ``a and not xs``) counts at most its trip level: the truth of a container is
        whether it is empty, a question about its length (a list padded to an agreed count)."""
        if isinstance(e, ast.BoolOp):
            return max(self._truth_level(v) for v in e.values)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            return self._truth_level(e.operand)
        lv = self.level(e)
        if lv and self._env_done and isinstance(e, ast.Name) and e.id in self.assigned:
            lv = min(lv, self.trip_level(e))
        if e.__class__ is ast.Name and e.id in self._param_none:
            # `if log_dir:`, a parameter the callers hand a value None on some ranks: false there
            lv = max(lv, self._handed_none(e.id))
        return lv

    def _handed_none(self, name):
        """Level of the None-ness that callers hand parameter ``name`` (``FuncFacts.param_none``),
        as read at ``self._at``: 0 in direct mode, and where the read may come after an
        assignment of the parameter (a read before every assignment in the function's text sees
        the handed value, on its first pass at least: `while p is not None: ...; p = q`)."""
        lv = self._param_none.get(name, 0)
        if not lv or self._direct:
            return 0
        if name in self.assigned:
            first = min((line for (target, _, _, _), line in zip(self._assigns, self._lines)
                         if name in _names(target)), default=0)
            if not first or self._at is None or self._at >= first:
                return 0
        return lv

    def iter_level_at(self, e, line):
        """:meth:`iter_level` of iterable ``e`` read at ``line`` (:meth:`level_at`)."""
        return self._read_at(self.iter_level, e, line)

    def iter_level(self, e):
        """Level of a loop's trip count over iterable ``e`` (:meth:`trip_level`). Iterating a
        data loader is not rank-local by its name alone: samplers of DDP / accelerate /
        Lightning give every rank as many batches; ``len(shard)``, ``os.listdir`` and the like are."""
        return self.trip_level(e)

    def _is_environ(self, e):
        d = dotted(e)
        return bool(d) and d[-1] == "environ"

    @staticmethod
    def _rank_env_key(e):
        return isinstance(e, ast.Constant) and e.value in C.RANK_ENV

    def _launcher_test(self, e):
        """True when ``e`` reads a rank variable of the environment with no default
        (``os.getenv("RANK")``, ``os.environ.get("LOCAL_RANK")``): whether it is None asks whether
        a launcher started this process, and a launcher sets it in every process of the job or
        in none."""
        if not (isinstance(e, ast.Call) and len(e.args) == 1 and not e.keywords and
                self._rank_env_key(e.args[0]) and isinstance(e.func, (ast.Name, ast.Attribute))):
            return False
        d = dotted(e.func) or []
        return bool(d) and (d[-1] == "getenv" or (d[-1] == "get" and isinstance(e.func, ast.Attribute) and
                                                   self._is_environ(e.func.value)))

    def _call_level(self, call):
        f = call.func
        kind, name = self.call_kind(call)
        if kind == "collective":
            return 0
        if name in _TYPE_CALLS and isinstance(f, ast.Name):
            return 0
        if name in _STATE_CALLS and isinstance(f, ast.Attribute):
            return 0  # whether the process group exists: the same answer on every rank
        if _is_dist_flag(call):
            # whether this is a distributed run (torchtune's `is_distributed()` reads RANK with a
            # default of -1): a launcher sets it in every process or in none
            return 0
        if name in _PLACE_CALLS:
            return self.level(f.value) if isinstance(f, ast.Attribute) and name != "device" else 0
        parts = dotted(f)
        if name is not None and C.is_rank_call(name):
            return 2
        if name in ("get", "getenv", "pop") and call.args and self._rank_env_key(call.args[0]):
            if name == "getenv" or (isinstance(f, ast.Attribute) and self._is_environ(f.value)):
                return 2
        q = qualify(self.mod, parts) if parts else None
        if q is not None and (q in C.LOCAL_CALLS or q.startswith(C.LOCAL_PREFIXES)):
            return 1
        if isinstance(f, ast.Attribute) and name in C.LOCAL_METHODS and q is None:
            return 1
        if (name in _SIZE_METHODS or name == "size") and isinstance(f, ast.Attribute) and \
                isinstance(f.value, ast.Subscript):
            table = self._table(f.value)
            if table is not None:
                return self.level(table)
        if name == "len" and call.args and isinstance(call.args[0], ast.Subscript):
            table = self._table(call.args[0])
            if table is not None:
                return self.level(table)
        if name == "len" and call.args and _data_name(call.args[0]) and not self._agreed(call.args[0]):
            return 1
        if name == "len" and len(call.args) == 1 and self._counted_here(call.args[0]):
            return max(1, self._args_level(call))  # rank-local at least, and what it counts
        if isinstance(f, ast.Attribute) and name in ("numel", "size", "__len__") and _data_name(f.value) and \
                not self._agreed(f.value):
            return 1
        if name in C.LOCAL_DATA_CALLS or (isinstance(f, ast.Attribute) and name in C.LOCAL_DATA_METHODS):
            return max(1, self._args_level(call))
        if name in _NAN_TESTS and (call.args or f.__class__ is _ATTRIBUTE):
            # `torch.isnan(loss)`, `math.isfinite(loss.item())`, `loss.isnan()`: a NaN or an
            # overflow comes from this rank's own data and numbers, unless the value was agreed
            x = call.args[0] if call.args else f.value
            loss, root = _nan_loss(x)
            if loss and (root is None or not self._nan_agreed(root)):
                return max(1, self.level(x))
        lv = 0
        through = None
        if self.project is not None:
            lv = self.project.return_level(self.mod, self.cls, call, self._direct)
            through = self.project.returning_args(self.mod, self.cls, call)
        if lv == 2:
            return 2
        if through is None and self.project is not None and isinstance(f, ast.Attribute) and \
                _commish(f.value) and self.project.agreed_method(f.attr):
            return 0  # a communicator's method that the tree implements as an agreeing collective
        if through is not None:
            # a tree function: only the arguments its return value is computed from count
            for a in through:
                lv = max(lv, self.level(a))
            return lv
        if isinstance(f, ast.Attribute):
            lv = max(lv, self.level(f.value))
        return max(lv, self._args_level(call))

    def elem_src(self, name, at):
        """``[(call, element index)]`` when every assignment of local ``name`` that reaches a
        read at line ``at`` unpacks an element of a tuple a call returns (``model, dl =
        get_problem(rank)``; ``model = cast(T, model)`` in between passes it on), else None."""
        out = []
        for target, value, conds, part, line in self._assigns_reaching(name, at):
            if type(part) is int and isinstance(target, ast.Name) and isinstance(value, ast.Call) and not conds:
                out.append((value, part))
            elif not (part is None and _is_cast_of(value, name)):
                return None
        return out or None

    def _table(self, sub):
        """For ``xs[i]`` where this function also reads ``xs`` at every rank's number (``for j in
        range(world_size): xs[j]...``): ``xs``, else None. Such a list holds every rank's entry
        on every rank, and the code sizes the other ranks' entries by this rank's (deepspeed's
        padded partitions): the size of this rank's entry is the size of any entry, the same on
        every rank, whatever the rank-dependent index."""
        if not isinstance(sub.value, ast.Name):
            return None
        if self._tables is None:
            self._tables = set()
            nodes = self.mod.local.get(id(self.fn))
            for n in (nodes if nodes is not None else walk_local(self.fn)):
                if isinstance(n, ast.For) and isinstance(n.target, ast.Name) and \
                        isinstance(n.iter, ast.Call) and isinstance(n.iter.func, ast.Name) and \
                        n.iter.func.id == "range" and len(n.iter.args) == 1 and _world_expr(n.iter.args[0]):
                    for x in ast.walk(n):
                        if isinstance(x, ast.Subscript) and isinstance(x.value, ast.Name) and \
                                isinstance(x.slice, ast.Name) and x.slice.id == n.target.id:
                            self._tables.add(x.value.id)
        return sub.value if sub.value.id in self._tables else None

    def _uniform_size(self, x):
        """True when every rank sees the same size of ``x``, the value an emptiness test sizes
        (:func:`_size_receiver`): a parameter that every call in the tree hands something with
        nothing rank-local in it (a buffer every rank builds alike), through any chain of helpers
        that hand it on as it is (its emptiness is judged where the value comes from; a parameter
        that can hold data from outside the tree, of a function no tree code calls, an entry
        point, directly or through such a chain, keeps the shape's rule); or a local only ever
        assigned what a collective returns alike on every rank (:meth:`_gathered`: the
        all-gathered lengths of every rank's completions)."""
        if x.__class__ is not _NAME:
            return False
        facts = self.facts
        if x.id in self._fn_params and x.id not in self.assigned and facts is not None and \
                facts.open_params is not None and facts.open_params is not True and \
                x.id not in facts.open_params and x.id not in C.RANK_NAMES:
            return True
        return self._gathered(x.id) or self._built_alike(x.id)

    def _built_alike(self, name):
        """True for a local (not a parameter, not global) whose every assignment reaching the read
        at :attr:`_at` is a new tensor or array that a factory (:data:`_SIZED_FACTORIES`:
        ``torch.empty(value.size, dtype=...)``) makes in a shape every rank reading it holds
        alike: constants, or read from a local
        that holds an agreed collective's value (:meth:`_gathered`) or is a loop's element of
        one (vLLM's ``broadcast_tensor_dict``: the receivers build each tensor from the
        metadata the source broadcast, then skip the empty ones as the source does); or an
        array of a package whose shape is the global one (:data:`_GLOBAL_SHAPE_PACKAGES`:
        ``clean = ht.array(local, is_split=x.split)``, ``clean.shape[0]``). A branch the
        assignment is under counts only where the read is not on the same side of it."""
        key = (name, self._at)
        got = self._alike.get(key)
        if got is not None:
            return got
        self._alike[key] = False  # while its own assignments are read
        got = False
        if name in self.assigned and name not in self._fn_params and name not in self.shared and \
                name not in self._resized_names() and self._at is not None:
            for target, value, conds, part, line in self._live_assigns(name, self._at):
                d = dotted(value.func) if part is None and target.__class__ is _NAME and \
                    value.__class__ is _CALL else None
                if d and self._same_side(conds, line) and (qualify(self.mod, d) or "").split(".")[0] in \
                        _GLOBAL_SHAPE_PACKAGES:
                    got = True  # `ht.array(local, is_split=0)`: its shape is the global one
                    continue
                if not d or d[-1] not in _SIZED_FACTORIES or not self._same_side(conds, line):
                    got = False
                    break
                shape = value.args[:1] if d[-1] == "full" else value.args
                shape = list(shape) + [k.value for k in value.keywords if k.arg in ("size", "shape")]
                got = bool(shape) and all(self._alike_operand(a) for a in shape)
                if not got:
                    break
        self._alike[key] = got
        return got

    def _same_side(self, conds, line):
        """True when each branch of ``conds`` (an assignment's at ``line``) is uniform, or is
        taken alike by every rank that reaches the read at :attr:`_at` (both on one side)."""
        for kind, c in conds:
            if kind == "if" and self._at is not None:
                sides = self._sides.get(id(c))
                if sides is not None and any(span is not None and span[0] <= line <= span[1] and
                                             span[0] <= self._at <= span[1] for span in sides):
                    continue
            if kind != "if" or self.test_level(c) != 0:
                return False
        return True

    def _alike_operand(self, e):
        """True for a shape argument every rank holds alike (:meth:`_built_alike`)."""
        if e.__class__ is ast.Constant:
            return True
        if e.__class__ is ast.Tuple or e.__class__ is ast.List:
            return all(self._alike_operand(x) for x in e.elts)
        while e.__class__ is ast.Attribute or e.__class__ is ast.Subscript:
            if e.__class__ is ast.Subscript and not self._alike_operand(e.slice):
                return False
            e = e.value
        if e.__class__ is not _NAME:
            return False
        if self._agreed_at(e.id, self._at):
            return True
        # `for key, value in metadata_list:` over an agreed local
        pairs = self._live_assigns(e.id, self._at)
        return bool(pairs) and e.id not in self._fn_params and all(
            part == "element" and value.__class__ is _NAME and self._agreed_at(value.id, line)
            for target, value, conds, part, line in pairs)

    def _drawn_shape(self, e):
        """Level of the shape of ``e`` when ``e`` is a random draw of a shape it was given
        (:func:`random_draw`): a local whose every assignment reaching the read is one (the level
        of the shape arguments there), or a ``self`` attribute that every binding in this class's
        module makes one (``ModuleFacts.attr_draws``: ``self.embed =
        nn.Parameter(scale * torch.randn((n, dim)))``, level 0); else None."""
        if e.__class__ is _NAME and e.id in self.assigned and e.id not in self._fn_params and \
                e.id not in self.shared and self._at is not None:
            live = self._live_assigns(e.id, self._at)
            lv = None if not live else 0
            for target, value, _conds, part, line in live:
                shape = random_draw(value) if part is None and target.__class__ is _NAME else None
                if shape is None:
                    return None
                lv = max([lv] + [self.level_at(a, line) for a in shape])
            return lv
        d = dotted(e) if e.__class__ is _ATTRIBUTE else None
        if d and len(d) == 2 and d[0] == "self" and self.cls and self.mod.attr_draws.get((self.cls, d[1])) is True:
            return 0
        return None

    def _live_assigns(self, name, at):
        """The assignments of local ``name`` that reach a read at line ``at`` and are not
        replaced before it (:meth:`_assigns_reaching`)."""
        return [r for r in self._assigns_reaching(name, at)
                if not (self._killed(name, r[4], at) or self._apart(r[4], at, name))]

    def _agreed_at(self, name, at):
        """True for a local that holds, at line ``at``, what a collective returns alike on every
        rank: :meth:`_gathered`, or each assignment reaching there is such a call's value or a
        tree function's agreed answer (:meth:`_agreed_answer`: ``metadata_list =
        self.broadcast_object(None, src=src)`` in the receivers' branch, where the source's own
        assignment does not reach)."""
        if name in self._fn_params or name in self.shared:
            return False
        if self._gathered(name):
            return True
        pairs = self._live_assigns(name, at)
        return bool(pairs) and all(part is None and (self._returns_agreed(value) or self._agreed_answer(value))
                                   for _, value, _, part, _ in pairs)

    def _args_level(self, call):
        lv = 0
        for a in call.args:
            lv = max(lv, self.level(a))
            if lv == 2:
                return lv
        for k in call.keywords:
            if not (k.arg and C.is_display_keyword(k.arg)) and not _is_flag(k.value):
                lv = max(lv, self.level(k.value))
        return lv

    def _field_trip(self, name, attr, defer=None):
        """Trip level of ``name.attr`` where local ``name`` holds a record built here with that
        field (``blocks = SimpleNamespace(existing=xs, ...)``: a call of a capitalised name, a
        class, with keyword ``attr``) or returned by a tree function whose every return is such
        a record (:meth:`~hpc_hangkit.lint.calls.Project.field_trip`), and the field's later
        assignments (``blocks.existing = f(blocks.existing)``): the highest trip level of what
        the field can hold at the read. None when some assignment of ``name`` is of another kind.
        ``defer`` (a list; the facts, without a project): a field assigned a call is left to the
        call's padded return (:meth:`~hpc_hangkit.lint.calls.Project.padded_return`), the call
        appended."""
        at = self._at
        sites = []
        top = self._top_lines()
        start = 0
        for (target, value, conds, part), line in zip(self._assigns, self._lines):
            if name not in _names(target):
                continue
            if not isinstance(target, ast.Name) or part is not None or not isinstance(value, ast.Call):
                return None
            if at is None or self._may_reach(line, at):
                sites.append((line, value))
                if at is not None and line < at and id(value) in top:
                    start = max(start, line)  # a top-level assignment replaces what came before
        sites = [(line, v) for line, v in sites if line >= start]
        if not sites:
            return None
        lv = 0
        saved = self._at
        try:
            for line, value in sites:
                kw = next((k.value for k in value.keywords if k.arg == attr), None)
                d = dotted(value.func)
                if kw is not None and d and d[-1][:1].isupper():
                    self._at = line or None
                    got = self.trip_level(kw)
                elif self.project is not None:
                    callee = self.project.callee(self.mod, self.cls, "<module>", value)
                    got = self.project.field_trip(callee, attr) if callee is not None else None
                else:
                    got = None
                if got is None:
                    return None
                lv = max(lv, got)
            nodes = self.mod.local.get(id(self.fn))
            for n in (nodes if nodes is not None else walk_local(self.fn)):
                if isinstance(n, ast.Assign) and any(
                        isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name)
                        and t.value.id == name for t in n.targets) and n.lineno > start and \
                        (saved is None or n.lineno < saved or any(a <= n.lineno <= b and a <= saved <= b
                                                                  for a, b in self.loops)):
                    if defer is not None and isinstance(n.value, ast.Call):
                        defer.append(n.value)
                        continue
                    self._at = n.lineno
                    lv = max(lv, self.trip_level(n.value))
        finally:
            self._at = saved
        return lv

    def _top_lines(self):
        """ids of the values of the function's top-level plain assignments (not under a branch
        or loop: each replaces what its name held)."""
        body = getattr(self.fn, "body", None)
        return {id(st.value) for st in body if isinstance(st, ast.Assign)} if isinstance(body, list) else set()

    def trip_level(self, e):
        """Level of a loop's trip count over iterable ``e``: a literal list or tuple has a fixed
        length whatever its values; ``range``/``enumerate``/``zip``/``reversed``/``sorted``/
        ``.items()``... count what they are given; anything else by its value's :meth:`level`."""
        if e.__class__ is _CONSTANT:
            # many arguments handed on (:func:`~hpc_hangkit.lint.calls._handed`): no trip
            # counts needed yet (they are the same whenever first asked: the levels are final)
            return 0
        if self._trips_due:
            self._trips()
        if self._comp_bind and isinstance(e, ast.Name) and id(e) in self._comp_bind:
            return self._pair_level(self._comp_bind[id(e)])  # an element's length: as its value
        if isinstance(e, ast.Name) and e.id in self.assigned and e.id not in self.agreed:
            if self._at is not None:
                if self._pads is None:
                    self._pads = _padded_lists(self.fn, self.mod)
                pad = self._pads.get(e.id)
                if pad is not None and pad[0] < self._at:
                    return self.level_at(pad[1], pad[0]) if pad[1] is not None else 0
                if e.id not in self.shared:
                    # as a value is read (:meth:`level`): only the assignments that can reach it
                    return self._reaching(self.trip_sites.get(e.id, {}), e.id, sided=False)
            return self.trip_env.get(e.id, 0)
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id in self.assigned and \
                e.value.id not in self._fn_params:
            lv = self._field_trip(e.value.id, e.attr)
            if lv is not None:
                return lv
        if e.__class__ is ast.Attribute and e.value.__class__ is ast.Name and e.value.id == "self" and self.cls:
            # `self.loader = DataLoader(ds, sampler=DistributedSampler(ds))`, and only so, or only
            # to what tree helpers that return such a loader return
            got = self.mod.attr_counts.get((self.cls, e.attr))
            if got is True or (got and self.project is not None and all(
                    c is not None and c.equal_count for c in map(self.project.resolve, got))):
                return 0
        if isinstance(e, (ast.List, ast.Tuple)):
            return max([self.level(x.value) for x in e.elts if isinstance(x, ast.Starred)] or [0])
        if isinstance(e, ast.Dict):
            return 0
        if isinstance(e, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
            lv = 0
            for g in e.generators:
                lv = max([lv, self.trip_level(g.iter)] + [self.test_level(x) for x in g.ifs])
            return lv
        if isinstance(e, ast.Call):
            f = e.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in _EQUAL_COUNT or any(k.arg in ("sampler", "batch_sampler") for k in e.keywords):
                return 0  # DistributedSampler & co. give every rank as many items
            if isinstance(f, ast.Name) and name in _COUNTING and name not in self.mod.imports and e.args:
                if name == "range":
                    return max(self.level(a) for a in e.args)
                return max(self.trip_level(a) for a in e.args if not isinstance(a, ast.Starred)) \
                    if any(not isinstance(a, ast.Starred) for a in e.args) else self.level(e)
            if isinstance(f, ast.Attribute) and name in ("items", "keys", "values") and not e.args:
                return self.trip_level(f.value)
            if self.project is not None:
                callee = self.project.callee(self.mod, self.cls, "<module>", e)
                if callee is not None and callee.equal_count:
                    return 0  # a helper that returns a prepared loader
                if callee is not None:
                    got = self.project.padded_return(callee)
                    if got is not None:
                        return got
        return self.level(e)

#: names and attributes that hold the number of processes (fluiddyn's `mpi.nb_proc` included)
_PROC_COUNTS = {"world_size", "WORLD_SIZE", "num_processes", "num_replicas", "nprocs", "n_procs", "nb_proc",
                "nb_procs", "num_procs", "mpi_size", "distributed_world_size"}
_WORLD_NAMES = _PROC_COUNTS | {"num_nodes"}
_EQUAL_COUNT = {"DistributedSampler", "ElasticDistributedSampler", "DistributedBatchSampler",
                # accelerate: a prepared loader gives every process as many batches (even_batches)
                "prepare_data_loader", "prepare", "skip_first_batches"}
#: calls whose answer is about a value's type or layout, the same on every rank
_TYPE_CALLS = {"hasattr", "isinstance", "issubclass", "callable", "type"}
#: methods that say whether the communication library is set up (any backend object's)
_STATE_CALLS = {"is_initialized", "Is_initialized", "Is_finalized"}


def agreed_operand(a):
    """The value an agreeing collective's operand ``a`` is: the tensor of an in-place op
    (`all_reduce(t.div_(n))`: ``div_`` answers with ``t``), else ``a`` itself (None stays None)."""
    while a.__class__ is _CALL and a.func.__class__ is _ATTRIBUTE and a.func.attr.endswith("_") and \
            not a.func.attr.startswith("_"):
        a = a.func.value
    return a
#: tests whether a number is NaN or infinite (torch, math, numpy; a function or a tensor's method)
_NAN_TESTS = {"isnan", "isinf", "isfinite", "isneginf", "isposinf"}
#: a name that says it holds a training loss (`loss`, `train_loss`, `losses`, `outputs.loss`)
_LOSS_NAME = re.compile(r"(^|_)loss(es)?($|_)", re.I)


def _nan_loss(e):
    """``(loss, root)`` for NaN test operand ``e`` read from a loss by plain reads (``loss``,
    ``loss.item()``, ``loss.detach().float()``, ``out.loss``, ``losses[0]``): whether a name on
    the way says loss, and the local it starts from (None when it starts elsewhere). A loss is
    this rank's own (its batch); a gradient norm or a solver's number usually is not (DDP has
    all-reduced the gradients; a solver computes it through collectives)."""
    loss = False
    while True:
        if e.__class__ is ast.Name:
            return loss or bool(_LOSS_NAME.search(e.id)), e
        if e.__class__ is _CALL and not e.args and e.func.__class__ is _ATTRIBUTE:
            e = e.func.value
        elif e.__class__ is _ATTRIBUTE:
            loss = loss or bool(_LOSS_NAME.search(e.attr))
            e = e.value
        elif e.__class__ is _SUBSCRIPT:
            e = e.value
        else:
            return loss, None
#: calls that place a value on a device: the device is rank-dependent, the content is not
_PLACE_CALLS = {"to", "cuda", "set_device", "device", "pin_memory", "to_empty"}
#: attributes of a progress bar that count what it displayed (tqdm's ``n``)
_BAR_COUNTERS = {"n", "last_print_n"}
_FLAG = re.compile(r"^(is_|rank_is_|has_|should_|use_|if_|on_)")


def _matrix_rank(receiver):
    """True when ``receiver`` of a ``.rank`` read names a low-rank adapter or decomposition
    (:data:`~hpc_hangkit.lint.collectives.MATRIX_RANK`: ``args.ds.lora``, ``peft_config``): its
    ``rank`` is a hyperparameter, the same on every process."""
    d = dotted(receiver)
    return bool(d) and bool(C.MATRIX_RANK.search(d[-1]))


def _is_flag(e):
    """True for a keyword value that is a yes/no switch (``create=rank_is_root``, ``disable=not
    is_main``, ``force=rank == 0``): it steers what a call does, not the size of what it returns."""
    if isinstance(e, (ast.Compare, ast.BoolOp)) or (isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not)):
        return True
    if isinstance(e, ast.Call):
        e = e.func
    d = dotted(e)
    return bool(d) and bool(_FLAG.match(d[-1]))


#: collectives that collect every rank's value of their data argument (the first; torch's
#: two-argument forms the second, :data:`_GATHERING_ARG1`): the code gathers it because it
#: differs between ranks
_GATHERING = {"allgather", "gather", "Allgather", "Gather", "Allgatherv", "Gatherv", "all_gather",
              "all_gather_object", "gather_object", "all_gather_into_tensor", "allgather_object"}
_GATHERING_ARG1 = {"all_gather", "all_gather_object", "all_gather_into_tensor"}
#: the keywords that name a gathering collective's data argument (torch's, mpi4py's)
_GATHERED_KEYWORDS = {"obj", "tensor", "input_tensor", "sendobj", "sendbuf"}


#: collectives that sum (or take the extreme of) every rank's value of their data argument
#: (the first): the code reduces it because it differs between ranks
_REDUCING = {"all_reduce", "allreduce", "Allreduce", "reduce", "Reduce", "Iallreduce", "all_reduce_coalesced"}


#: builtins whose answer is a function of their arguments alone, the same on every rank for
#: the same arguments (`any(flags)` of an all-gathered list); not `hash` or `id` (per process),
#: nor `set` (its order follows the process's string hashing)
PURE_BUILTINS = frozenset({"bool", "int", "float", "True", "False", "None", "any", "all", "sum", "max", "min",
                           "len", "abs", "round", "sorted", "tuple", "list"})
#: the calls that build a reduction's buffer from the values they are handed as they are
_BUFFER_CALLS = {"tensor", "as_tensor", "array", "asarray", "float", "int", "float64", "float32", "int64"}


def _buffer_names(v):
    """The local names that expression ``v`` holds as elements, as they are: ``n``, ``[n, m]``,
    ``torch.tensor([n, m])``, ``np.array([n])``; not a value computed from them (``sum(xs)``)."""
    if v.__class__ is _NAME:
        return {v.id}
    if isinstance(v, (ast.List, ast.Tuple)):
        out = set()
        for x in v.elts:
            out |= _buffer_names(x)
        return out
    if v.__class__ is _CALL and v.args:
        d = dotted(v.func)
        if d and d[-1] in _BUFFER_CALLS:
            return _buffer_names(v.args[0])
    return set()


def _scalar_subject(e):
    """The local name condition ``e`` tests against a number (``n == 0``, ``total > 0.5``,
    ``0 < n``) or by its truth (``n``; ``not`` already taken off), or None."""
    if e.__class__ is _NAME:
        return e
    if isinstance(e, ast.Compare) and len(e.ops) == 1 and not isinstance(e.ops[0], (ast.Is, ast.IsNot, ast.In,
                                                                                     ast.NotIn)):
        a, b = e.left, e.comparators[0]
        for x, c in ((a, b), (b, a)):
            if x.__class__ is _NAME and isinstance(c, ast.Constant) and isinstance(c.value, (int, float)) and \
                    not isinstance(c.value, bool):
                return x
    return None


def _truth_subject(e):
    """The local name whose emptiness condition ``e`` asks (``xs``, ``len(xs) == 0``, ``len(xs)
    > 0``, ``xs.numel() == 0``; ``not`` already taken off), or None."""
    if e.__class__ is _NAME:
        return e
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        e = e.operand
    elif isinstance(e, ast.Compare) and len(e.ops) == 1 and isinstance(e.comparators[0], ast.Constant) and \
            e.comparators[0].value in (0, 1) and not isinstance(e.comparators[0].value, bool):
        e = e.left
    else:
        return None
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "len" and len(e.args) == 1:
        x = e.args[0]
    elif _size_of(e):
        x = _size_receiver(e)
    else:
        return None
    return x if x.__class__ is _NAME else None


def _emptiness(e):
    """True for an explicit emptiness test of per-process data: ``x.numel() == 0``,
    ``len(x) == 0``, ``x.shape[0] == 0``, ``not len(x)``: how much of the data a process holds
    is the usual thing that differs between ranks."""
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        return _size_of(e.operand)
    if isinstance(e, ast.Compare) and len(e.ops) == 1:
        left, op, right = e.left, e.ops[0], e.comparators[0]
        if isinstance(right, ast.Constant) and right.value == 0 and isinstance(op, (ast.Eq, ast.NotEq, ast.Gt)):
            return _size_of(left)
        if isinstance(right, ast.Constant) and right.value == 1 and isinstance(op, (ast.Lt, ast.GtE)):
            return _size_of(left)
    return False


_WORLD_RE = re.compile(r"(^|_)(world_size|num_processes|nprocs|n_procs|num_replicas|WORLD_SIZE)$")


_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "AttributeError"}


def _optional_import(st, handler):
    """True for the fallback of an optional package, which every rank takes or none does (which
    packages and names are installed is the same on every rank; other exceptions only the rank
    that raised sees). Two forms:

    - ``try:`` holds one statement that imports or looks a name up in a module (``import x``,
      ``m = getattr(import_module("pkg"), name)(...)``) and the handler catches only
      ``ImportError``/``ModuleNotFoundError``/``AttributeError``;
    - ``try:`` holds imports and statements that cannot raise by themselves (:func:`_inert`:
      ``HAVE_X = True``, ``comm = MPI.COMM_WORLD``, ``size = comm.size``), at least one import,
      and the handler catches those errors or any (``Exception``, ``BaseException``, a bare
      ``except``): only the imports can fail (espnet's ``import torch`` probe, pySDC's
      ``from mpi4py import MPI`` / ``MPI_ready = True``)."""
    t = handler.type
    names = t.elts if isinstance(t, ast.Tuple) else [t] if t is not None else []
    caught = [(dotted(n) or [""])[-1] for n in names]
    only_import = bool(caught) and all(c in _IMPORT_ERRORS for c in caught)
    if only_import and len(st.body) == 1:
        b = st.body[0]
        if isinstance(b, ast.Assign):
            for x in ast.walk(b.value):
                if isinstance(x, ast.Call) and (dotted(x.func) or [""])[-1] in ("import_module", "__import__"):
                    return True
    if not (only_import or not caught or any(c in ("Exception", "BaseException") for c in caught)):
        return False
    imports = 0
    for b in st.body:
        if isinstance(b, (ast.Import, ast.ImportFrom)):
            imports += 1
        elif not _inert(b):
            return False
    return imports > 0


def _inert(st):
    """True for a statement that cannot raise by itself: ``pass``, a docstring, or a plain
    assignment to names of a constant, a name or an attribute of one (``ok = True``, ``size =
    comm.size``)."""
    if isinstance(st, ast.Pass) or (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant)):
        return True
    if not (isinstance(st, ast.Assign) and all(isinstance(t, ast.Name) for t in st.targets)):
        return False
    v = st.value
    return isinstance(v, ast.Constant) or dotted(v) is not None


_VIEWS = ("items", "keys", "values")


#: calls that make a count a number or tensor to agree (`torch.tensor(len(xs))`)
_COUNT_BOXES = {"tensor", "as_tensor", "array", "asarray", "full", "float", "int", "LongTensor", "FloatTensor"}


def _count_of(v):
    """The container (dotted, as a tuple) whose count value ``v`` is: ``len(xs)``,
    ``xs.numel()``, or one of them made a number or tensor (``torch.tensor(len(xs), ...)``,
    :data:`_COUNT_BOXES`); else None."""
    if v.__class__ is _CALL and v.args and (dotted(v.func) or [""])[-1] in _COUNT_BOXES:
        v = v.args[0]
    d = None
    if v.__class__ is _CALL and v.func.__class__ is _NAME and v.func.id == "len" and len(v.args) == 1:
        d = dotted(v.args[0])
    elif v.__class__ is _CALL and v.func.__class__ is _ATTRIBUTE and v.func.attr == "numel" and not v.args:
        d = dotted(v.func.value)
    return tuple(d) if d else None


def _counted_containers(fn, agreed, local=None):
    """The dotted names (tuples) of the containers whose count function ``fn`` hands to an
    agreeing collective (see :meth:`Taint._counted_here`); ``agreed``: the locals handed to
    one."""
    nodes = list(local if local is not None else walk_local(fn))
    counts = {}  # local name -> containers it counts
    for n in nodes:
        if isinstance(n, (ast.For, ast.AsyncFor)):
            # the containers the loop runs over: the longest names in its iterable, not the
            # functions it calls (`list(self.pending.items())` runs over `self.pending`)
            skip = {id(x.func) for x in ast.walk(n.iter) if isinstance(x, ast.Call)}
            inner = {id(x.value) for x in ast.walk(n.iter) if isinstance(x, ast.Attribute)}
            over = set()
            for x in ast.walk(n.iter):
                if id(x) in inner or not isinstance(x, (ast.Name, ast.Attribute)):
                    continue
                d = dotted(x)
                if id(x) in skip:
                    d = d[:-1] if d and d[-1] in _VIEWS else None
                if d:
                    over.add(tuple(d))
            if not over:
                continue
            for st in walk_local(n):
                if isinstance(st, ast.AugAssign) and isinstance(st.op, ast.Add) and \
                        isinstance(st.target, ast.Name) and isinstance(st.value, ast.Constant):
                    counts.setdefault(st.target.id, set()).update(over)
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            d = _count_of(n.value)
            if d:
                counts.setdefault(n.targets[0].id, set()).add(d)
    if not counts:
        return frozenset()
    deps = {}
    for n in nodes:
        if isinstance(n, ast.Assign):
            used = {x.id for x in ast.walk(n.value) if isinstance(x, ast.Name)}
            for t in n.targets:
                for x in ast.walk(t):
                    if isinstance(x, ast.Name):
                        deps.setdefault(x.id, set()).update(used)
    out = set()
    for name in agreed:
        seen, todo = set(), [name]
        while todo:
            x = todo.pop()
            if x in seen:
                continue
            seen.add(x)
            out.update(counts.get(x, ()))
            todo.extend(deps.get(x, ()))
    return frozenset(out)


def _commish(e):
    """True for a receiver named like a communicator (``strategy``, ``self.strategy``,
    ``trainer.strategy``, ``comm``: :data:`~hpc_hangkit.lint.collectives.COMMISH`)."""
    d = dotted(e)
    return bool(d) and C.commish(d[-1])


_TYPE_ERRORS = {"TypeError", "NotImplementedError"}


def _length_probe(st, handler):
    """True for the fallback of a length probe: ``try:`` holds one statement whose value is
    ``len(x)`` or a comprehension of lengths (``n = len(x)``, ``return len(x)``,
    ``sizes = [len(d) for d in datasets]``) and the handler catches only ``TypeError``/
    ``NotImplementedError``: whether ``x``'s class has a ``__len__`` is a question about its
    type (like ``hasattr``), and every rank builds the same class, so every rank takes the
    handler or none does."""
    t = handler.type
    names = t.elts if isinstance(t, ast.Tuple) else [t] if t is not None else []
    if not names or any((dotted(n) or [""])[-1] not in _TYPE_ERRORS for n in names):
        return False
    if len(st.body) != 1 or not isinstance(st.body[0], (ast.Assign, ast.Return)):
        return False
    v = st.body[0].value
    if isinstance(v, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
        v = v.elt  # a list of lengths: `[len(d) for d in datasets]`
    return isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "len" and \
        len(v.args) == 1 and not v.keywords


def _first_and_last(values):
    """True when conjunction ``values`` holds a call named for the first member of a group and
    the same call named for its last (``is_pipeline_first_stage() and is_pipeline_last_stage()``,
    ``is_first_rank(g) and is_last_rank(g)``, the same arguments): a rank is both only when its
    group has one member, so the conjunction asks the group's size, not which rank this is."""
    firsts, lasts = set(), set()
    for v in values:
        if not isinstance(v, ast.Call):
            continue
        d = dotted(v.func)
        if not d or not any(w in ("first", "last") for w in d[-1].split("_")):
            continue
        args = ast.dump(ast.Tuple(elts=list(v.args) + [k.value for k in v.keywords], ctx=ast.Load())) + \
            repr([k.arg for k in v.keywords])
        words = d[-1].split("_")
        for w, into in (("first", firsts), ("last", lasts)):
            if w in words:
                into.add((tuple(d[:-1]), "_".join("*" if x == w else x for x in words), args))
    return bool(firsts & lasts)


def _span(stmts):
    """(first, last) line of a statement list."""
    return stmts[0].lineno, getattr(stmts[-1], "end_lineno", None) or stmts[-1].lineno


_COMPS = frozenset((ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp))


def _comprehension_bindings(nodes, pairs_of):
    """``{id of a Name read: binding pair}`` for the names a comprehension among ``nodes`` (a
    function's own nodes, outer before inner) binds and reads: in its element (key and value),
    its conditions and the later generators' iterables (an inner comprehension that binds the
    name again takes its reads). ``pairs_of(target, iterable)`` gives a generator's pairs
    (:meth:`Taint._loop_pairs`)."""
    out = {}
    for c in nodes:
        if c.__class__ not in _COMPS:
            continue
        bound = {}
        for i, g in enumerate(c.generators):
            if i:
                _bind_reads(g.iter, bound, out)
            for pair in pairs_of(g.target, g.iter):
                for name in _names(pair[0]):
                    bound[name] = pair
            for cond in g.ifs:
                _bind_reads(cond, bound, out)
        for part in ((c.key, c.value) if isinstance(c, ast.DictComp) else (c.elt,)):
            _bind_reads(part, bound, out)
    return out


def _bind_reads(e, bound, out):
    """Map each read of a name of ``bound`` in ``e`` (not inside a lambda or a nested
    comprehension, mapped when that one is) to its binding pair."""
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name):
            pair = bound.get(n.id)
            if pair is not None and isinstance(n.ctx, ast.Load):
                out[id(n)] = pair
            continue
        if isinstance(n, ast.Lambda):
            continue
        stack.extend(ast.iter_child_nodes(n))


def _dominance(fn, flags=(), words=None):
    """``(paths, killers, owners)`` for function ``fn``: ``paths`` maps the first line of each statement
    (the outermost one starting there) to its block path, a tuple of ``(id of the enclosing
    statement list, index in it)`` from the body down; ``killers`` maps each name to the
    ``(line, block path)`` of its plain assignments (``x = ...``, ``x: T = ...``, a tuple of
    names), nested functions and classes left out. ``words``: the function's words
    (:func:`~hpc_hangkit.lint.model.scopes`), or None."""
    paths, killers, owners = {}, {}, {}
    body = getattr(fn, "body", None)
    if not isinstance(body, list):
        return paths, killers, owners
    sizes = world_locals(fn, words)
    stack = [(body, ())]
    while stack:
        stmts, prefix = stack.pop()
        for i, st in enumerate(stmts):
            path = prefix + ((id(stmts), i),)
            paths.setdefault(st.lineno, path)
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for n in _plain_names(st):
                killers.setdefault(n, []).append((st.lineno, path))
            if isinstance(st, (ast.For, ast.AsyncFor)):
                t = st.target
                if isinstance(t, (ast.Name, ast.Tuple, ast.List)) and all(
                        isinstance(x, ast.Name) for x in (t.elts if not isinstance(t, ast.Name) else [t])):
                    # each iteration binds the loop's names before its body: as an assignment
                    # at the top of the body, it replaces what an earlier iteration assigned
                    for n in _names(t):
                        killers.setdefault(n, []).append((st.lineno, path + ((id(st.body), -1),)))
                flag = _or_merge(st, stmts[:i])
                if flag is not None:
                    # the flag is or-ed with every rank's copy of itself: whatever this rank
                    # set before, after the loop it holds what every rank holds
                    killers.setdefault(flag, []).append((st.lineno, path))
            if isinstance(st, ast.If):
                side = single_process(st.test, sizes, flags)
                if side is not None:
                    # the other side runs only without other ranks: on every run that has them,
                    # a plain assignment at the top of this side runs before every read after
                    # the `if`, as if it stood here (`if ws > 1: x = broadcast(x, src=0)`)
                    multi = st.orelse if side == "body" else st.body
                    for b in multi:
                        if _leaves(b):
                            break
                        for n in _plain_names(b):
                            killers.setdefault(n, []).append((b.lineno, path))
                    for n, at in _block_unboxed(multi):
                        killers.setdefault(n, []).append((at, path))
            if isinstance(st, ast.If) and not st.orelse and _launched_test(st.test):
                # `if RANK != -1: ...; if RANK != 0: stop = box[0]`: without a launcher there
                # is one process, so the share inside counts after this `if`
                for n, at in _block_unboxed(st.body):
                    killers.setdefault(n, []).append((at, path))
            if isinstance(st, ast.If):
                for n, at, _ in _unboxed(st, stmts[max(0, i - 4):i]):
                    # `if rank != 0: stop = box[0]` after the root's `stop` was broadcast in
                    # `box`: after the `if` every rank holds the root's value, as if it stood here
                    killers.setdefault(n, []).append((at, path))
            if isinstance(st, ast.While) and _runs_once(stmts[i - 1] if i else None, st.test):
                # its body runs at least once: a plain assignment at its top level, before any
                # break or continue, runs before every read after the loop, as if it stood here
                for b in st.body:
                    if _leaves(b):
                        break
                    for n in _plain_names(b):
                        killers.setdefault(n, []).append((b.lineno, path))
            for f in ("body", "orelse", "finalbody"):
                sub = getattr(st, f, None)
                if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                    stack.append((sub, path))
                    owners[id(sub)] = (st, f)
            for h in getattr(st, "handlers", None) or ():
                stack.append((h.body, path))
            for k, c in enumerate(getattr(st, "cases", None) or ()):
                stack.append((c.body, path))
                owners[id(c.body)] = (st, k)
    return paths, killers, owners


_GATHERS = {"all_gather", "all_gather_object", "allgather"}


def _positive(e, name):
    """True when ``e`` encodes the truth of local ``name`` as a value whose truth is the same
    (``1 if name else 0``, ``int(name)``, ``name``), through calls that hand a value on
    (``torch.tensor([...])``, ``device.tensor_to_device(...)``), and reads ``name`` nowhere else."""
    hits = [x for x in ast.walk(e) if isinstance(x, ast.Name) and x.id == name]
    if len(hits) != 1:
        return False
    for x in ast.walk(e):
        if isinstance(x, ast.IfExp) and isinstance(x.test, ast.Name) and x.test.id == name:
            return isinstance(x.body, ast.Constant) and bool(x.body.value) and \
                isinstance(x.orelse, ast.Constant) and not x.orelse.value
        if isinstance(x, ast.Call) and any(isinstance(a, ast.Name) and a.id == name for a in x.args):
            d = dotted(x.func) or [""]
            return d[-1] in ("int", "float", "bool") or len(x.args) == 1
        if isinstance(x, (ast.List, ast.Tuple)) and any(isinstance(a, ast.Name) and a.id == name for a in x.elts):
            return len(x.elts) == 1
    return False


def _truthy_test(test, name):
    """True for a test that holds exactly when the value of ``name`` is true (``e``, ``e > 0``,
    ``e >= 1``, ``e == 1``, ``e != 0``, ``bool(e)``) for values that are 0 or 1."""
    if isinstance(test, ast.Name):
        return test.id == name
    if isinstance(test, ast.Call) and (dotted(test.func) or [""])[-1] == "bool" and len(test.args) == 1:
        return _truthy_test(test.args[0], name)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) and \
            test.left.id == name and isinstance(test.comparators[0], ast.Constant):
        op, v = type(test.ops[0]), test.comparators[0].value
        return (op is ast.Gt and v == 0) or (op is ast.GtE and v == 1) or (op is ast.Eq and v == 1) or \
            (op is ast.NotEq and v == 0)
    return False


#: collectives that hand the root's object to every rank in their first argument
_BOXING = {"broadcast_object_list", "broadcast", "bcast", "Bcast"}


def _unboxed(st, before):
    """``[(name, line, statement)]`` for each plain ``name = box[k]`` (or ``a, b = box``) at
    the top of the side of ``if`` statement ``st`` that rank 0 does not take (``if rank !=
    0:``, or the ``else`` of ``if rank == 0:``) when one of the statements ``before`` it in the
    block broadcasts ``box`` from rank 0 (:data:`_BOXING`) and an earlier one builds ``box`` as
    a list whose element ``k`` holds ``name`` (``box = [stop if rank == 0 else None]``), and
    the other side assigns no such name: YOLOv5's early stop shared from rank 0."""
    if _leaves_root_out(st.test):
        side, other = st.body, st.orelse
    elif st.orelse and _root_only(st.test):
        side, other = st.orelse, st.body
    else:
        return []
    sent = None
    for j, b in enumerate(before):
        call = b.value if isinstance(b, (ast.Expr, ast.Assign)) else None
        if not (isinstance(call, ast.Call) and (dotted(call.func) or [""])[-1] in _BOXING):
            continue
        kw = {k.arg: k.value for k in call.keywords}
        box = call.args[0] if call.args else kw.get("object_list", kw.get("obj", kw.get("buf")))
        src = call.args[1] if len(call.args) > 1 else kw.get("src", kw.get("root"))
        if isinstance(box, ast.Name) and (src is None or (isinstance(src, ast.Constant) and src.value == 0)):
            sent = (j, box.id)
    if sent is None:
        return []
    elts = None
    for b in before[:sent[0]]:
        if isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.targets[0], ast.Name) and \
                b.targets[0].id == sent[1]:
            v = b.value.body if isinstance(b.value, ast.IfExp) else b.value
            elts = v.elts if isinstance(v, (ast.List, ast.Tuple)) else None
    if not elts:
        return []

    def holds(k, name):
        return 0 <= k < len(elts) and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(elts[k]))
    out = []
    for b in side:
        if not (isinstance(b, ast.Assign) and len(b.targets) == 1):
            continue
        t, v = b.targets[0], b.value
        if isinstance(t, ast.Name) and isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) and \
                v.value.id == sent[1] and isinstance(v.slice, ast.Constant) and isinstance(v.slice.value, int) and \
                holds(v.slice.value, t.id):
            out.append((t.id, b.lineno, b))
        elif isinstance(t, (ast.Tuple, ast.List)) and isinstance(v, ast.Name) and v.id == sent[1] and \
                all(isinstance(x, ast.Name) for x in t.elts) and len(t.elts) == len(elts):
            out.extend((x.id, b.lineno, b) for k, x in enumerate(t.elts) if holds(k, x.id))
    if out and other:
        mine = {n for n, _, _ in out}
        if any(mine & set(_plain_names(b)) for b in other):
            return []
    return out


def _block_unboxed(stmts):
    """``[(name, line)]`` of :func:`_unboxed` for each ``if`` at the top of block ``stmts``,
    up to its first statement that leaves the loop around it (:func:`_leaves`)."""
    out = []
    for k, b in enumerate(stmts):
        if _leaves(b):
            break
        if isinstance(b, ast.If):
            out.extend((n, at) for n, at, _ in _unboxed(b, stmts[max(0, k - 4):k]))
    return out


def _launched_test(test):
    """True for ``rank != -1``, ``rank >= 0`` or ``rank is not None`` (any case, ``LOCAL_RANK``
    too): true when a launcher started the job distributed, on every rank alike."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    op, c = test.ops[0], test.comparators[0]
    if not ((isinstance(op, ast.NotEq) and isinstance(c, ast.UnaryOp) and isinstance(c.op, ast.USub) and
             isinstance(c.operand, ast.Constant) and c.operand.value == 1) or
            (isinstance(op, ast.GtE) and isinstance(c, ast.Constant) and c.value == 0) or
            (isinstance(op, ast.IsNot) and isinstance(c, ast.Constant) and c.value is None)):
        return False
    d = dotted(test.left)
    return bool(d) and (d[-1].lower() in C.RANK_NAMES or d[-1].lower().endswith("_rank"))


def _leaves_root_out(test):
    """True for a test that rank 0 fails: ``rank != 0``, ``0 != rank``, ``rank > 0``, ``if
    rank:``, ``not rank == 0``, ``not is_main_process`` (a rank: a name or attribute named as
    :data:`~hpc_hangkit.lint.collectives.RANK_NAMES`, or a call of
    :data:`~hpc_hangkit.lint.collectives.RANK_CALLS`, ``dist.get_rank()``)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _root_only(test.operand)
    if _rank_expr(test):
        return True
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if _zero(right) and _rank_expr(left):
            return isinstance(op, (ast.NotEq, ast.Gt))
        if _zero(left) and _rank_expr(right):
            return isinstance(op, (ast.NotEq, ast.Lt))
    return False


def _root_only(test):
    """True for a test that only rank 0 passes: ``rank == 0``, ``0 == rank``, ``not rank``,
    ``is_main_process`` (:func:`_leaves_root_out`'s ranks)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _rank_expr(test.operand) or _leaves_root_out(test.operand)
    d = dotted(test.func if isinstance(test, ast.Call) else test)
    if d and d[-1] in ("is_main_process", "is_master", "is_global_zero", "is_rank_zero", "is_main"):
        return True
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        left, right = test.left, test.comparators[0]
        return (_zero(right) and _rank_expr(left)) or (_zero(left) and _rank_expr(right))
    return False


def _zero(e):
    return isinstance(e, ast.Constant) and e.value == 0 and not isinstance(e.value, bool)


def _rank_expr(e):
    """True for this process's rank spelled as a name, an attribute or a call (a number: not
    a main-process flag such as ``is_main_process``, which :data:`~hpc_hangkit.lint.collectives.RANK_NAMES`
    also holds)."""
    if isinstance(e, ast.Call):
        d = dotted(e.func)
        return bool(d) and d[-1] in C.RANK_CALLS and not e.args
    d = dotted(e)
    return bool(d) and d[-1].lower() in C.RANK_NAMES and not d[-1].startswith("is_")

def _or_merge(loop, before):
    """The flag ``f`` when ``loop`` runs over every rank's copy of it and sets it when any is
    true: an earlier statement of the block gathers ``t`` (``g = all_gather(t)``,
    ``all_gather_object(g, t)``), ``t``'s last assignment before encodes ``f`` (``t =
    tensor(1 if f else 0)``: :func:`_positive`), ``f`` is not assigned after it, and the loop
    (``for e in g:``, ``for i, e in enumerate(g):``) sets only ``f = True``, under a test that
    holds when ``e`` is true. After the loop ``f`` is true on every rank or on none (this
    rank's own entry is among them). None otherwise."""
    it, target = loop.iter, loop.target
    while isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in ("list", "enumerate") and \
            len(it.args) == 1:
        if it.func.id == "enumerate":
            if not (isinstance(target, ast.Tuple) and len(target.elts) == 2):
                return None
            target = target.elts[1]
        it = it.args[0]
    if not (isinstance(it, ast.Name) and isinstance(target, ast.Name)) or loop.orelse:
        return None
    flag = None
    for st in loop.body:
        for x in ast.walk(st):
            if isinstance(x, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and x is not st and \
                    not (isinstance(st, ast.If) and x in st.body):
                return None
        if isinstance(st, ast.If) and _truthy_test(st.test, target.id) and not st.orelse:
            for b in st.body:
                if isinstance(b, ast.Assign):
                    if not (len(b.targets) == 1 and isinstance(b.targets[0], ast.Name) and
                            isinstance(b.value, ast.Constant) and b.value.value is True) or \
                            (flag is not None and flag != b.targets[0].id):
                        return None
                    flag = b.targets[0].id
                elif not isinstance(b, ast.Expr):
                    return None
        elif not isinstance(st, ast.Expr):
            return None
    if flag is None:
        return None
    gathered = None
    for st in reversed(before):
        if flag in _assigned_names(st):
            return None
        call = st.value if isinstance(st, (ast.Assign, ast.Expr)) and isinstance(st.value, ast.Call) else None
        if call is not None and gathered is None and (dotted(call.func) or [""])[-1] in _GATHERS:
            a = [x for x in call.args if isinstance(x, ast.Name)]
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) and \
                    st.targets[0].id == it.id and len(call.args) == 1 and len(a) == 1:
                gathered = a[0].id
            elif isinstance(st, ast.Expr) and len(call.args) == 2 and len(a) == 2 and a[0].id == it.id:
                gathered = a[1].id
            continue
        if gathered is not None and isinstance(st, ast.Assign) and len(st.targets) == 1 and \
                isinstance(st.targets[0], ast.Name) and st.targets[0].id == gathered:
            return flag if _positive(st.value, flag) else None
        if (gathered is None and it.id in _assigned_names(st)) or \
                (gathered is not None and gathered in _assigned_names(st)):
            return None  # (the gathered list allocated before the gather fills it is no change)
    return None


def _assigned_names(st):
    out = set()
    for x in ast.walk(st):
        if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store):
            out.add(x.id)
    return out


def _plain_names(st):
    """The names a plain assignment statement (``x = ...``, ``x: T = ...``, a tuple of names)
    assigns; () for any other statement."""
    if isinstance(st, ast.Assign) or (isinstance(st, ast.AnnAssign) and st.value is not None):
        out = []
        for t in (st.targets if isinstance(st, ast.Assign) else [st.target]):
            if isinstance(t, (ast.Name, ast.Tuple, ast.List)) and all(
                    isinstance(x, ast.Name) for x in (t.elts if not isinstance(t, ast.Name) else [t])):
                out.extend(_names(t))
        return out
    return ()


def _runs_once(prev, test):
    """True when a ``while test:`` loop whose previous statement is ``prev`` enters its body at
    least once: ``while True:``, or ``done = False`` then ``while not done:`` (``go = True``
    then ``while go:``)."""
    if isinstance(test, ast.Constant) and test.value is True:
        return True
    want = True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, want = test.operand, False
    return isinstance(test, ast.Name) and isinstance(prev, ast.Assign) and len(prev.targets) == 1 and \
        isinstance(prev.targets[0], ast.Name) and prev.targets[0].id == test.id and \
        isinstance(prev.value, ast.Constant) and prev.value.value is want


def _leaves(st):
    """True when statement ``st`` holds a ``break`` or ``continue`` of the loop around it (not
    of a loop nested in it), or a nested function or class."""
    stack = [st]
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Break, ast.Continue, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return True
        if isinstance(n, (ast.For, ast.AsyncFor, ast.While)) and n is not st:
            stack.extend(n.orelse)
            continue
        stack.extend(c for c in ast.iter_child_nodes(n) if isinstance(c, ast.stmt) or isinstance(c, ast.excepthandler))
    return False


_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear"}


#: the calls that grow a container by one or more items
_GROWERS = {"append", "extend", "insert", "add", "appendleft"}
#: the empty containers a grown local starts as
_EMPTY_MAKERS = {"list", "dict", "set", "deque", "OrderedDict", "defaultdict"}


def _growth_sites(fn, mod):
    """``{name: [(line, control)]}`` for each local of function ``fn`` bound only to new empty
    containers (:data:`_EMPTY_MAKERS`, ``[]``, ``{}``) that a call grows
    (:data:`_GROWERS`, ``name.append(x)``): each growing call's line, and ``control``: what
    decides whether or how often it runs, as ``(kind, expression, line)``: ``("if", test,
    line)`` for each ``if`` it is in and each ``if`` before it in an enclosing block whose body
    leaves that block (``continue``, ``break``, ``return``, ``raise``), ``("for", iterable,
    line)`` and ``("if", test, line)`` for each enclosing ``for`` and ``while``."""
    empty, other = set(), set()
    nodes = mod.local.get(id(fn))
    for n in (nodes if nodes is not None else walk_local(fn)):
        if n.__class__ is ast.Assign or n.__class__ is ast.AnnAssign or n.__class__ is ast.AugAssign:
            targets = n.targets if n.__class__ is ast.Assign else [n.target]
            v = n.value
            is_empty = n.__class__ is not ast.AugAssign and v is not None and (
                (isinstance(v, (ast.List, ast.Dict, ast.Set)) and not getattr(v, "elts", None) and
                 not getattr(v, "keys", None)) or
                (v.__class__ is _CALL and not v.args and not v.keywords and (dotted(v.func) or [""])[-1] in _EMPTY_MAKERS))
            for t in targets:
                for x in _names(t):
                    (empty if is_empty and t.__class__ is _NAME else other).add(x)
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension, ast.withitem, ast.NamedExpr)):
            t = n.optional_vars if n.__class__ is ast.withitem else n.target
            if t is not None:
                other.update(_names(t))
    names = empty - other - set(_params(fn) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else ())
    out = {}
    if not names:
        return out

    def visit(stmts, ctrl):
        ctrl = list(ctrl)
        for st in stmts:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for x in header_exprs(st):
                for c in ast.walk(x):
                    if c.__class__ is _CALL and c.func.__class__ is _ATTRIBUTE and c.func.attr in _GROWERS and \
                            c.func.value.__class__ is _NAME and c.func.value.id in names:
                        out.setdefault(c.func.value.id, []).append((c.lineno, tuple(ctrl)))
            if isinstance(st, ast.If):
                visit(st.body, ctrl + [("if", st.test, st.lineno)])
                visit(st.orelse, ctrl + [("if", st.test, st.lineno)])
                if st.body and isinstance(st.body[-1], (ast.Continue, ast.Break, ast.Return, ast.Raise)):
                    ctrl.append(("if", st.test, st.lineno))  # the rest of the block runs only past it
            elif isinstance(st, (ast.For, ast.AsyncFor)):
                inner = ctrl + [("for", st.iter, st.lineno)]
                visit(st.body, inner)
                visit(st.orelse, inner)
            elif isinstance(st, ast.While):
                inner = ctrl + [("if", st.test, st.lineno)]
                visit(st.body, inner)
                visit(st.orelse, inner)
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                visit(st.body, ctrl)
            elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
                visit(st.body, ctrl)
                for h in st.handlers:
                    visit(h.body, ctrl)
                visit(st.orelse, ctrl)
                visit(st.finalbody, ctrl)
    visit(getattr(fn, "body", []), [])
    return out


#: attributes that read a tensor's or array's shape, not its values
_SHAPE_ATTRS = {"shape", "ndim"}
#: calls that draw random values in the shape they are given (torch, numpy's ``random``)
_DRAWS = {"randn", "rand", "randint", "normal", "uniform", "standard_normal", "random", "random_sample"}


def random_draw(e):
    """The shape arguments (a list of expressions, maybe empty) of ``e`` when it is a new random
    tensor or array of a given shape, maybe scaled or wrapped as a parameter
    (``torch.randn(n, d)``, ``scale * torch.randn((n, d))``, ``nn.Parameter(torch.rand(n))``,
    ``np.random.normal(0, 1, size=(n,))``); else None. Its values differ between ranks, its
    shape does not, unless the arguments do."""
    while True:
        if e.__class__ is ast.BinOp and isinstance(e.op, (ast.Mult, ast.Div, ast.Add, ast.Sub)):
            left, right = random_draw(e.left), random_draw(e.right)
            if (left is None) == (right is None):
                return None
            return left if left is not None else right
        if e.__class__ is not _CALL:
            return None
        d = dotted(e.func) or [""]
        if d[-1] == "Parameter" and len(e.args) == 1:
            e = e.args[0]
            continue
        break
    if d[-1] not in _DRAWS or (len(d) > 1 and d[-2] not in ("torch", "random")):
        return None
    sized = [k.value for k in e.keywords if k.arg in ("size", "shape")]
    if d[-1] in ("randn", "rand"):
        return list(e.args) + sized
    if d[-1] == "randint":
        return (list(e.args[2:3]) + sized) or None
    return sized or None


def _padding(st):
    """``(name, m)`` for a statement that pads list ``name`` to ``m`` items: ``xs += [c] * (m -
    len(xs))`` or ``xs.extend([c] * (m - len(xs)))`` (either operand order); else None."""
    if isinstance(st, ast.AugAssign) and isinstance(st.op, ast.Add) and isinstance(st.target, ast.Name):
        name, v = st.target.id, st.value
    elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Attribute) \
            and st.value.func.attr == "extend" and isinstance(st.value.func.value, ast.Name) and \
            len(st.value.args) == 1:
        name, v = st.value.func.value.id, st.value.args[0]
    else:
        return None
    if not (isinstance(v, ast.BinOp) and isinstance(v.op, ast.Mult)):
        return None
    lst, gap = (v.left, v.right) if isinstance(v.left, ast.List) else (v.right, v.left)
    if not (isinstance(lst, ast.List) and len(lst.elts) == 1 and isinstance(gap, ast.BinOp) and
            isinstance(gap.op, ast.Sub) and _is_len_of(gap.right, name)):
        return None
    return name, gap.left


def _is_len_of(e, name):
    return isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "len" and \
        len(e.args) == 1 and isinstance(e.args[0], ast.Name) and e.args[0].id == name


def _mentions_len_of(e, name):
    return any(_is_len_of(x, name) for x in ast.walk(e))


def _changes(nodes, name):
    """True when one of ``nodes`` rebinds or resizes list ``name``."""
    for n in nodes:
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.Delete)):
            targets = n.targets if isinstance(n, (ast.Assign, ast.Delete)) else [n.target]
            for t in targets:
                base = t.value if isinstance(t, ast.Subscript) else t
                if isinstance(base, ast.Name) and base.id == name or name in _names(t):
                    return True
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _MUTATORS and \
                isinstance(n.func.value, ast.Name) and n.func.value.id == name:
            return True
    return False


def _padded_lists(fn, mod):
    """``{name: (line, m or None)}`` for each local list the function pads to a count at its top
    level (:func:`_padding`, not under a branch or loop) and never changes after: its length from
    the end of that ``line`` on is the count ``m`` on every rank where the padding cannot fall
    short, that is when

    - ``m`` is a count agreed through a collective that sums or takes the maximum of the list's
      own length on every rank (:func:`_max_of_len`; the value is None: agreed), or
    - the list was cut to ``m`` just before (``xs = ys[:m]``: the value is ``m``, whose level
      the length takes).

    Padding to a count that is not agreed (a local maximum, a minimum over ranks) decides
    nothing: that list keeps its trip count."""
    body = getattr(fn, "body", None)
    if not isinstance(body, list):
        return {}
    out = {}
    for i, st in enumerate(body):
        got = _padding(st)
        if got is None:
            continue
        name, m = got
        if _changes([x for later in body[i + 1:] for x in ast.walk(later)], name):
            continue
        prev = None
        for before in body[:i]:
            if _changes(ast.walk(before), name):
                prev = before
        cut = prev is not None and isinstance(prev, ast.Assign) and len(prev.targets) == 1 and \
            isinstance(prev.targets[0], ast.Name) and isinstance(prev.value, ast.Subscript) and \
            isinstance(prev.value.slice, ast.Slice) and prev.value.slice.lower is None and \
            prev.value.slice.step is None and prev.value.slice.upper is not None and \
            ast.dump(prev.value.slice.upper) == ast.dump(m)
        if cut:
            out[name] = (getattr(st, "end_lineno", st.lineno), m)
        elif _max_of_len(fn, mod, m, name):
            out[name] = (getattr(st, "end_lineno", st.lineno), None)
    return out


def _growing_op(call, pos):
    """True when collective ``call`` reduces with SUM (the default) or MAX (``op=`` or its
    positional argument ``pos``): the result is at least every rank's own count."""
    op = next((k.value for k in call.keywords if k.arg == "op"), None)
    if op is None and len(call.args) > pos:
        op = call.args[pos]
    if op is None:
        return True
    if isinstance(op, ast.Constant):
        return str(op.value).lower() in ("max", "sum")
    d = dotted(op)
    return bool(d) and d[-1].upper() in ("MAX", "SUM")


def _reductions(nodes, mod):
    """``(tensors, values)``: the locals handed to a torch-style ``all_reduce(t, op=MAX/SUM)``
    (``{t}``) and the value-returning ``allreduce(x, op=MAX/SUM)`` calls (mpi4py) among ``nodes``."""
    tensors, values = set(), []
    for n in nodes:
        if isinstance(n, ast.Call):
            kind, name = call_kind(mod, n)
            if kind != "collective" or not n.args:
                continue
            if name == "all_reduce" and isinstance(n.args[0], ast.Name) and _growing_op(n, 1):
                tensors.add(n.args[0].id)
            elif name == "allreduce" and _growing_op(n, 1):
                values.append(n)
    return tensors, values


def _reduced_from(nodes, mod, ok):
    """The locals among ``nodes`` that hold a SUM/MAX reduction over ranks of a value ``ok``
    accepts (a tensor built from it and all-reduced, or an ``allreduce`` of it), and the
    value-returning reductions of such a value."""
    tensors, values = _reductions(nodes, mod)
    held = set()
    for n in nodes:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and \
                n.targets[0].id in tensors and ok(n.value):
            held.add(n.targets[0].id)
    # a tensor also assigned from something else is not held
    for n in nodes:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in held for t in n.targets) and \
                not ok(n.value):
            held -= {t.id for t in n.targets if isinstance(t, ast.Name)}
    return held, [v for v in values if ok(v.args[0])]


def _reads_only(e, names, calls=()):
    """True when expression ``e`` reads no local but ``names`` (``t.item()``, ``int(t[0])``) or is
    one of ``calls``."""
    if any(e is c for c in calls):
        return True
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("int", "max") and \
            len(e.args) == 1:
        return _reads_only(e.args[0], names, calls)
    used = {x.id for x in ast.walk(e) if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Load)}
    return bool(used) and used <= names and not any(isinstance(x, ast.Call) and not (
        isinstance(x.func, ast.Attribute) and x.func.attr in ("item", "tolist")) for x in ast.walk(e))


def _max_of_len(fn, mod, m, name):
    """True when ``m`` is a local every assignment of which holds a SUM/MAX reduction over ranks
    of ``len(name)``: in this function (``t = torch.tensor([len(xs)])``, ``all_reduce(t,
    op=MAX)``, ``m = t.item()``; ``m = comm.allreduce(len(xs), op=MPI.MAX)``) or through a
    function of the module, nested or not, that returns such a reduction of its parameter
    (``m = get_world_max(len(xs))``)."""
    if not isinstance(m, ast.Name):
        return False
    nodes = list(walk_local(fn))
    held, values = _reduced_from(nodes, mod, lambda v: _mentions_len_of(v, name))
    sites = [n for n in nodes if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr))
             and m.id in {x for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) for x in _names(t)}]
    if not sites:
        return False
    for n in sites:
        if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)):
            return False
        v = n.value
        if _reads_only(v, held, values):
            continue
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and _max_reducer(fn, mod, v, name):
            continue
        return False
    return True


def _max_reducer(fn, mod, call, name):
    """True when ``call`` hands ``len(name)`` to a function of the module (nested in ``fn`` or at
    the module's top level) that returns a SUM/MAX reduction over ranks of that parameter."""
    target = call.func.id
    defs = [x for x in ast.walk(fn) if isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef)) and x.name == target]
    if not defs:
        defs = [x for x in getattr(mod.tree, "body", ()) if isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef))
                and x.name == target]
    if len(defs) != 1:
        return False
    g = defs[0]
    params = _params(g)
    handed = [p for p, a in zip(params, call.args) if _mentions_len_of(a, name)]
    if len(handed) != 1 or len(call.args) != 1 and call.keywords:
        return False
    p = handed[0]
    nodes = list(walk_local(g))
    held, values = _reduced_from(nodes, mod, lambda v: p in {x.id for x in ast.walk(v) if isinstance(x, ast.Name)})
    rets = [n for n in nodes if isinstance(n, ast.Return)]
    return bool(rets) and all(r.value is not None and _reads_only(r.value, held, values) for r in rets)


_FORMAT_ERRORS = {"KeyError", "IndexError", "LookupError", "ValueError", "TypeError", "AttributeError"}


def _format_probe(st, handler):
    """The formatting expression when ``try:`` holds one statement whose value formats a string
    from plain values (``return s.format(*args, **kwargs)``, ``'%s' % x``: no other call in it)
    and the handler catches only the errors formatting raises (``KeyError``, ``IndexError``,
    ``ValueError``, ``TypeError``, ``AttributeError``): whether it raises is a function of the
    string and its arguments, so the handler is taken where they say (the expression is the
    handler's condition), not by the rank that happened to raise. None otherwise."""
    t = handler.type
    names = t.elts if isinstance(t, ast.Tuple) else [t] if t is not None else []
    if not names or any((dotted(n) or [""])[-1] not in _FORMAT_ERRORS for n in names):
        return None
    if len(st.body) != 1 or not isinstance(st.body[0], (ast.Assign, ast.Return, ast.Expr)):
        return None
    v = st.body[0].value
    if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in ("format", "format_map"):
        inner = [v.func.value] + list(v.args) + [k.value for k in v.keywords]
    elif isinstance(v, ast.BinOp) and isinstance(v.op, ast.Mod) and isinstance(v.left, ast.Constant) and \
            isinstance(v.left.value, str):
        inner = [v.right]
    else:
        return None
    for e in inner:
        for x in ast.walk(e):
            if isinstance(x, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr, ast.Lambda)) or \
                    isinstance(x, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                return None
    return v


_TYPE_QUESTIONS = {"TypeError", "AttributeError", "NotImplementedError"}


def _type_probe(st, handler):
    """What decides the handler of ``try`` statement ``st`` when it catches only the errors of a
    type question (``TypeError``, ``AttributeError``, ``NotImplementedError``) and its body only
    computes (assignments, expressions, returns, ``if`` and ``raise`` statements, no loop, no
    ``with``, no nested ``try``): whether it raises is a question about the types of what it
    reads (an object without ``.dtype``, a class a mapping does not know), answered by the same
    code from the same inputs on every rank, so the handler is taken where those inputs say.
    Returns the body's expressions as one tuple (the handler's condition; kept on the handler,
    one node per handler), or None. A body that reads the node's state (a file, the clock, the
    environment: :data:`_NODE_STATE`) is no type question, nor is ``OSError`` or
    ``RuntimeError``."""
    got = getattr(handler, "_hk_probe", False)
    if got is not False:
        return got
    handler._hk_probe = probe = _type_probe_of(st, handler)
    return probe


def _type_probe_of(st, handler):
    t = handler.type
    names = t.elts if isinstance(t, ast.Tuple) else [t] if t is not None else []
    if not names or any((dotted(n) or [""])[-1] not in _TYPE_QUESTIONS for n in names):
        return None
    exprs = []
    todo = list(st.body)
    while todo:
        b = todo.pop()
        if isinstance(b, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return)):
            if b.value is not None:
                exprs.append(b.value)
        elif isinstance(b, ast.If):
            exprs.append(b.test)
            todo.extend(b.body)
            todo.extend(b.orelse)
        elif isinstance(b, ast.Raise):
            if b.exc is not None:
                exprs.append(b.exc)
        elif not isinstance(b, ast.Pass):
            return None
    if not exprs:
        return None
    for e in exprs:
        for x in ast.walk(e):
            if isinstance(x, (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr, ast.Lambda)):
                return None
            if isinstance(x, ast.Call):
                d = dotted(x.func) or [""]
                if _NODE_STATE.match(d[-1]) or d[-1] in C.LOCAL_METHODS or ".".join(d) in C.LOCAL_CALLS:
                    return None  # what it reads comes from the node, not from the probe's inputs
            elif isinstance(x, ast.Attribute) and x.attr == "environ":
                return None
    if len(exprs) == 1:
        return exprs[0]
    exprs.sort(key=lambda e: (e.lineno, e.col_offset))
    return ast.copy_location(ast.Tuple(elts=exprs, ctx=ast.Load()), exprs[0])


#: calls that read the node's state (files, sockets, the clock, the environment): a type error in
#: what they return is not a question about the probe's inputs alone
_NODE_STATE = re.compile(r"^(open|read\w*|load\w*|recv\w*|urlopen|request|fetch\w*|getenv|input|"
                         r"stat|lstat|listdir|scandir|walk|glob|iglob|exists|is_?file|is_?dir|time\w*|"
                         r"perf_counter|monotonic|rand\w*|urandom|query\w*|download\w*|getaddrinfo)$")


def handler_condition(st, handler):
    """What decides whether ``except`` handler ``handler`` of ``try`` statement ``st`` runs, as a
    branch condition: None when every rank takes it or none does (:func:`_uniform_handler`),
    ``("if", expression)`` when its inputs decide it (:func:`_format_probe`,
    :func:`_type_probe`), else ``("except", None)``: the ranks that raised (rank-local)."""
    if _uniform_handler(st, handler):
        return None
    probe = _format_probe(st, handler)
    if probe is None:
        probe = _type_probe(st, handler)
    return ("if", probe) if probe is not None else ("except", None)


def _uniform_handler(st, handler):
    """True for an ``except`` handler that every rank takes or none does (:func:`_optional_import`,
    :func:`_length_probe`)."""
    return _optional_import(st, handler) or _length_probe(st, handler)


def _is_cast_of(e, name):
    """True for ``cast(T, name)`` / ``typing.cast(T, name)``: the same object."""
    if not (isinstance(e, ast.Call) and len(e.args) == 2 and isinstance(e.args[1], ast.Name)
            and e.args[1].id == name):
        return False
    d = dotted(e.func)
    return bool(d) and d[-1] == "cast"


def _world_expr(e):
    """True for an expression that names the number of processes (``world_size``,
    ``dp_world_size``, ``self.world_size``, ``dist.get_world_size(...)``, ``comm.Get_size()``)."""
    if isinstance(e, ast.Call):
        d = dotted(e.func)
        return bool(d) and d[-1] in ("get_world_size", "Get_size")
    d = dotted(e)
    return bool(d) and bool(_WORLD_RE.search(d[-1]))


def _sized(e):
    """The size that emptiness test ``e`` (:func:`_emptiness`) compares: ``x.numel()`` of
    ``x.numel() == 0`` and of ``not x.numel()``."""
    if isinstance(e, ast.UnaryOp):
        return e.operand
    if isinstance(e, ast.Compare):
        return e.left
    return e


def _size_receiver(e):
    """The value whose size ``e`` (:func:`_size_of`) reads: ``x`` of ``x.numel()``,
    ``x.size().numel()``, ``x.shape[0]``, ``x.size(0)``."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute):
        e = e.func.value
    elif isinstance(e, ast.Subscript):
        e = e.value
    if isinstance(e, ast.Attribute) and e.attr in ("shape", "size"):
        e = e.value
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "size" and not e.args:
        e = e.func.value
    return e


_COUNTING = {"range", "enumerate", "zip", "reversed", "sorted", "list", "tuple", "iter"}


def _facts_of(project, mod, fn):
    for ff in getattr(mod, "funcs", {}).values():
        if ff.node is fn:
            return ff
    return None


def _pairs(target, value, conds):
    """``(target, value, conds, part)`` for one assignment: a tuple target takes a tuple value
    element by element; a tuple unpacked from a rank call (``rank, world =
    get_rank_and_world_size()``) taints only its rank part (a name that says rank, else the
    first)."""
    if isinstance(target, (ast.Tuple, ast.List)) and not any(isinstance(t, ast.Starred) for t in target.elts):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) and \
                not any(isinstance(v, ast.Starred) for v in value.elts):
            out = []
            for t, v in zip(target.elts, value.elts):
                out.extend(_pairs(t, v, conds))
            return out
        if isinstance(value, ast.Call) and len(target.elts) > 1:
            f = value.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name and C.is_rank_call(name) and ("_and_" in name or name in ("get_dist_info",)):
                names = [t.id if isinstance(t, ast.Name) else None for t in target.elts]
                said = [i for i, n in enumerate(names) if n and (n in C.RANK_NAMES or "rank" in n.lower()
                                                                  or C.is_rank_call(n))]
                rank_idx = set(said) if said else {0}
                return [(t, value, conds, "rank" if i in rank_idx else "other") for i, t in enumerate(target.elts)]
            # `model, loader = get_problem(rank, ...)`: each name takes its element's level when
            # the callee is a tree function that returns tuples (else the call's level)
            return [(t, value, conds, i) for i, t in enumerate(target.elts)]
    return [(target, value, conds, None)]


def single_process(test, sizes=(), flags=()):
    """Which part of ``if test:`` runs only when there is one process: ``"body"`` for ``not
    dist.is_initialized()``, ``world_size == 1``, ``get_world_size() < 2``, ``not
    args.distributed``; ``"orelse"`` for their opposites; None otherwise. ``sizes``: local
    names that hold the number of processes (:func:`world_locals`: ``ws > 1``); ``flags``:
    dotted names (tuples) of flags true only with several processes (:func:`distributed_flags`)."""
    neg = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    inner = test.operand if neg else test
    if flags and isinstance(inner, (ast.Name, ast.Attribute)) and tuple(dotted(inner) or ()) in flags:
        return "body" if neg else "orelse"
    if _is_dist_flag(inner):
        return "body" if neg else "orelse"
    if isinstance(inner, ast.BoolOp):
        # `dist.is_available() and dist.is_initialized()`: else is single-process; negated
        # (`not (dist.is_available() and dist.is_initialized())`), the other way round
        side = None
        if isinstance(inner.op, ast.And) and all(_is_dist_flag(v) or _is_available(v) for v in inner.values):
            side = "orelse"
        elif isinstance(inner.op, ast.Or) and all(isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not)
                                                  and (_is_dist_flag(v.operand) or _is_available(v.operand))
                                                  for v in inner.values):
            side = "body"
        if side is not None and neg:
            side = "body" if side == "orelse" else "orelse"
        return side
    if isinstance(inner, ast.Compare) and len(inner.ops) == 1 and not neg and \
            isinstance(inner.ops[0], (ast.Is, ast.IsNot)) and _none(inner.comparators[0]) and \
            _MPI_COMM.search((dotted(inner.left) or [""])[-1]):
        # an MPI communicator that is None: run without MPI (toast's `if comm is None:`), one
        # process; a torch group of None is the world's, so only communicator names count
        return "body" if isinstance(inner.ops[0], ast.Is) else "orelse"
    if isinstance(inner, ast.Compare) and len(inner.ops) == 1 and not neg:
        left, op, right = inner.left, inner.ops[0], inner.comparators[0]
        if not ((_is_world_size(left) or (isinstance(left, ast.Name) and left.id in sizes)) and
                isinstance(right, ast.Constant) and isinstance(right.value, int)):
            return None
        v = right.value
        if (isinstance(op, ast.Eq) and v == 1) or (isinstance(op, ast.Lt) and v == 2) or \
                (isinstance(op, ast.LtE) and v == 1):
            return "body"
        if (isinstance(op, (ast.NotEq, ast.Gt)) and v == 1) or (isinstance(op, ast.GtE) and v == 2):
            return "orelse"
    return None


#: the name of an MPI communicator (not a torch process group, whose None is the world's)
_MPI_COMM = re.compile(r"^(comm|mpicomm|mpi_comm|comm_world|world_comm|\w+_comm)$")


def _none(e):
    return isinstance(e, ast.Constant) and e.value is None


def distributed_flags(mod, cls):
    """The ``self`` flags of class ``cls`` of module ``mod`` that are true only when there are
    several processes, as dotted tuples (``("self", "use_mpi")``): every assignment in the
    class's methods is ``False``/``None``, ``True`` on the side of a test that runs with other
    ranks (``if self.mpi_size > 1: self.use_mpi = True``: :func:`single_process`), or such a
    test's value (``self.parallel = comm.size > 1``). Where such a flag is false there is one
    process (ultranest's ``if self.use_mpi: n = comm.bcast(n)``)."""
    got = mod.flag_cache.get(cls)
    if got is None:
        ok, trues = {}, set()
        for ff in mod.funcs.values():
            if ff.cls == cls and ff.node is not None and ff.node is not mod.tree:
                _flag_assigns(ff.node.body, False, ok, trues)
        got = mod.flag_cache[cls] = frozenset(("self", a) for a in trues if ok.get(a))
    return got


def _flag_assigns(stmts, multi, ok, trues):
    """Record in ``ok`` (attr -> every assignment fits) and ``trues`` (attrs set true) the
    ``self`` attribute assignments of ``stmts``; ``multi``: they run only with other ranks."""
    for st in stmts:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            for t in targets:
                for x in ast.walk(t):
                    if not (isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name) and x.value.id == "self"):
                        continue
                    v = st.value if x is t and not isinstance(st, ast.AugAssign) else None
                    fits = v is not None and (
                        (isinstance(v, ast.Constant) and v.value in (False, None)) or
                        (isinstance(v, ast.Constant) and v.value is True and multi) or
                        single_process(v) == "orelse")
                    ok[x.attr] = ok.get(x.attr, True) and fits
                    if fits and not (isinstance(v, ast.Constant) and v.value in (False, None)):
                        trues.add(x.attr)
        if isinstance(st, ast.If):
            side = single_process(st.test)
            _flag_assigns(st.body, multi or side == "orelse", ok, trues)
            _flag_assigns(st.orelse, multi or side == "body", ok, trues)
            continue
        for f in ("body", "orelse", "finalbody"):
            _flag_assigns(getattr(st, f, None) or [], multi, ok, trues)
        for h in getattr(st, "handlers", None) or ():
            _flag_assigns(h.body, multi, ok, trues)


def world_locals(fn, words=None):
    """The local names of function ``fn`` whose every assignment is a plain ``x =
    <...>.get_world_size(...)`` (or ``Get_size()``): they hold the number of processes, the
    same on every rank (``ws = idist.get_world_size()``). ``words``: the function's words
    (:func:`~hpc_hangkit.lint.model.scopes`): none of those calls named, none is looked for."""
    if words is not None and words.isdisjoint(_WORLD_SIZE_CALLS):
        return frozenset()
    good, bad = set(), set()
    for n in walk_local(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and \
                _is_world_size(n.value) and isinstance(n.value, ast.Call):
            good.add(n.targets[0].id)
        elif isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr,
                            ast.withitem, ast.comprehension)):
            bad.update(_assigned_names(n))
    return frozenset(good - bad - set(_params(fn)))


def single_process_returns(fn):
    """Ids of the ``return`` statements of function ``fn`` that stand in a single-process branch
    (:func:`single_process`: ``if world_size == 1: return [obj]``): they run only without other
    ranks, so they say nothing about what the other ranks get back."""
    out = set()
    stack = [(st, False) for st in getattr(fn, "body", ())]
    while stack:
        st, single = stack.pop()
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(st, ast.Return):
            if single:
                out.add(id(st))
            continue
        if isinstance(st, ast.If):
            side = single_process(st.test)
            stack.extend((x, single or side == "body") for x in st.body)
            stack.extend((x, single or side == "orelse") for x in st.orelse)
            continue
        for f in ("body", "orelse", "finalbody"):
            stack.extend((x, single) for x in getattr(st, f, None) or ())
        for h in getattr(st, "handlers", None) or ():
            stack.extend((x, single) for x in h.body)
        for c in getattr(st, "cases", None) or ():
            stack.extend((x, single) for x in c.body)
    return out


def _is_available(e):
    if isinstance(e, ast.Call):
        d = dotted(e.func)
        return bool(d) and d[-1] == "is_available" and len(d) > 1 and d[-2] in ("dist", "distributed")
    return False


def _is_dist_flag(e):
    if isinstance(e, ast.Call):
        d = dotted(e.func)
        return bool(d) and (d[-1] in ("is_initialized", "is_distributed", "Is_initialized", "more_than_one_process")
                            or d[-1].endswith("dist_avail_and_initialized"))
    d = dotted(e)
    return bool(d) and d[-1] in ("distributed", "is_distributed", "use_distributed", "ddp", "use_ddp")


#: the calls whose answer is the number of processes
_WORLD_SIZE_CALLS = frozenset(("get_world_size", "Get_size", "get_mpi_size"))


def _is_world_size(e):
    if isinstance(e, ast.Call):
        d = dotted(e.func)
        return bool(d) and d[-1] in _WORLD_SIZE_CALLS
    if isinstance(e, ast.Name):
        return e.id in _PROC_COUNTS or e.id == "size"
    d = dotted(e)
    return bool(d) and d[-1] in _PROC_COUNTS


def mentions_membership(e):
    """True when condition ``e`` tests group membership (ranks outside a group skip its
    collectives by design) or ``use_local_synchronization``."""
    for n in nodes_of(e):
        name = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else None
        if name and C.MEMBERSHIP.search(name):
            return True
        if isinstance(n, ast.Compare) and len(n.comparators) == 1:
            c, op = n.comparators[0], n.ops[0]
            if isinstance(op, (ast.In, ast.NotIn)) and not (isinstance(c, (ast.List, ast.Tuple, ast.Set)) and all(
                    isinstance(x, ast.Constant) or (isinstance(x, ast.UnaryOp) and isinstance(x.operand, ast.Constant))
                    for x in c.elts)):
                d = dotted(n.left) or (dotted(n.left.func) if isinstance(n.left, ast.Call) else None)
                if d and (d[-1] in C.RANK_NAMES or d[-1] in C.RANK_CALLS or d[-1].endswith("_rank")):
                    # `get_rank() in ranks`, `rank in [self.src, self.dest]`: members of a
                    # subgroup run its collectives (a literal `rank in (-1, 0)` picks ranks instead)
                    return True
            if mode_test(n):
                return True
    return False


_NONE_OPS = (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)


def none_test(n):
    """True when comparison ``n`` is ``x is None`` or ``x is not None`` (or ``x == None``,
    ``x != None``)."""
    return len(n.ops) == 1 and n.ops[0].__class__ in _NONE_OPS and \
        n.comparators[0].__class__ is ast.Constant and n.comparators[0].value is None


def none_read_names(test):
    """The local names whose None-ness condition ``test`` reads: ``x`` of each ``x is None`` /
    ``x is not None`` in it, and a name tested for its truth alone (``if x:``, ``not x``, an
    operand of ``and``/``or``): a value that is None on some ranks is false there only."""
    out = set()
    for n in ast.walk(test):
        if n.__class__ is ast.Compare and none_test(n) and n.left.__class__ is ast.Name:
            out.add(n.left.id)
    todo = [test]
    while todo:
        e = todo.pop()
        if e.__class__ is ast.Name:
            out.add(e.id)
        elif e.__class__ is ast.BoolOp:
            todo.extend(e.values)
        elif e.__class__ is ast.UnaryOp and e.op.__class__ is ast.Not:
            todo.append(e.operand)
    return out


def mode_test(n):
    """True when comparison ``n`` asks which mode the job runs in, the same on every rank, not
    which rank this is: ``rank is None`` (the caller chose no rank), ``LOCAL_RANK == -1`` or
    ``int(os.environ.get("RANK", -1)) != -1`` (launched distributed or not), a group rank ``< 0``
    (outside the group). Its value stored in a local (nanoGPT's `ddp = int(os.environ.get('RANK',
    -1)) != -1`) is as uniform as the test."""
    if n.__class__ is not _COMPARE or len(n.comparators) != 1:
        return False
    c, op = n.comparators[0], n.ops[0]
    if none_test(n):
        d = dotted(n.left)
        if d and (d[-1] in C.RANK_NAMES or d[-1].endswith("_rank")):
            return True  # `rank is None`: which mode the caller chose, the same on every rank
    negative = (isinstance(c, ast.UnaryOp) and isinstance(c.op, ast.USub)) or (
        isinstance(c, ast.Constant) and c.value == 0 and isinstance(op, (ast.Lt, ast.GtE)))
    # rank in a group is -1 (or < 0) on ranks outside it; LOCAL_RANK == -1 (or not >= 0): not launched
    # distributed at all (the same answer on every rank)
    return negative and any((isinstance(x, ast.Call) and (dotted(x.func) or [""])[-1] in C.RANK_CALLS | {"rank"})
                            or (isinstance(x, ast.Constant) and x.value in C.RANK_ENV)
                            or (isinstance(x, (ast.Name, ast.Attribute)) and (dotted(x) or [""])[-1]
                                in C.RANK_NAMES) for x in nodes_of(n.left))


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
            # a bare name that is not imported: a local function, not a library's collective,
            # unless the module binds it to a collective method (`Barrier = comm.Barrier`)
            if f.id in C.EXTRA_PLAIN:
                return "collective", f.id
            return mod.aliases.get(f.id) or (None, f.id)
        return C.classify_call(mod.imports[f.id], f.id, None), f.id
    else:
        return None, None
    q = qualify(mod, parts) if parts else None
    kind = C.classify_call(q, method, receiver)
    if kind is None and q is None and method in C.GENERIC and recv and len(recv) == 1 and recv[0] in mod.comm_receivers:
        kind = "collective"  # `_model.broadcast()` where the module calls `_model.all_reduce()`
    if kind is None and method in C.SYNC_LOG_METHODS and any(
            k.arg == "sync_dist" and not (isinstance(k.value, ast.Constant) and not k.value.value)
            for k in call.keywords):
        kind = "collective"  # Lightning's self.log(..., sync_dist=True) reduces across processes
    if kind == "collective" and fake_backend(call):
        kind = None
    return kind, method


def collective_aliases(mod):
    """``{name: (kind, method)}`` for each plain name that ``mod`` assigns a collective or
    point-to-point method, bound to its receiver (``Barrier = comm.Barrier``; struphy calls
    ``Barrier()`` under ``if rank < 32:``), as :func:`call_kind` reads ``receiver.method(...)``.
    Needs the module's scopes (:attr:`~hpc_hangkit.lint.model.ModuleFacts.words`): scopes whose
    words name no collective are not scanned."""
    out = {}
    for sid, ws in mod.words.items():
        if ws.isdisjoint(C.DISTINCT) and ws.isdisjoint(C.GENERIC) and ws.isdisjoint(C.P2P_ALL):
            continue
        for n in mod.local.get(sid, ()):
            if n.__class__ is ast.Assign and len(n.targets) == 1 and n.targets[0].__class__ is _NAME and \
                    n.value.__class__ is _ATTRIBUTE:
                kind, name = call_kind(mod, ast.Call(func=n.value, args=[], keywords=[]))
                if kind is not None:
                    out[n.targets[0].id] = (kind, name)
    return out


def fake_backend(call):
    """True when ``call`` is ``init_process_group`` given the constant backend ``"fake"``
    (positionally or as ``backend=``): torch's fake backend makes an in-process store and waits
    for no other process."""
    f = call.func
    if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)) != "init_process_group":
        return False
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "backend"), None)
    return isinstance(arg, ast.Constant) and arg.value == "fake"


def _names(target):
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for t in target.elts:
            yield from _names(t)
    elif isinstance(target, ast.Starred):
        yield from _names(target.value)
