"""Per-module facts: source, module name, imports, functions, classes, ignore comments.

:func:`load_module` parses one file (stdlib ``ast``); the tree is kept only while the
module is being analysed (:attr:`ModuleFacts.tree`), so the whole installed ``torch``
fits in a few hundred MiB. Stdlib only.
"""
import ast
import os
import re

from hpc_hangkit.lint import collectives as C

__all__ = ["ModuleFacts", "FuncFacts", "module_name", "load_module", "dotted", "qualify", "walk_local", "scopes",
           "nodes_of", "names_of", "defaults_of",
           "parse_ignores", "functions_of", "enclosing_chain", "rankish_word", "size_of", "SIZE_METHODS"]

#: a function whose own words (:func:`scopes`: its names, attributes, parameters, short strings)
#: match none of these holds no rank-dependent or rank-local value by itself (what its
#: parameters, ``self`` attributes or callees carry is added later): its facts need no
#: :class:`~hpc_hangkit.lint.taint.Taint`. Every name the taint reads a level from by its own
#: spelling is covered, and little else (a quarter of torch's functions name ``size`` or
#: ``node`` without holding a rank-local value): the rank (``rank``, the environment's rank keys,
#: ``is_main``/``is_master``/... tests and their ``main_process`` spellings), the rank-local calls
#: of :data:`~hpc_hangkit.lint.collectives.LOCAL_CALLS` / ``LOCAL_PREFIXES`` / ``LOCAL_METHODS``
#: by their module or name (``time``, not ``timeout``; ``stat``, not ``state``; a name imported
#: under another spelling is checked apart), ``except`` handlers, local parts and samplers; per-rank
#: data names (:data:`~hpc_hangkit.lint.collectives.DATAISH`) are matched apart (:func:`rankish_word`);
#: sizes count with an emptiness test (:func:`size_of`; the words ``0`` and ``not`` of
#: :func:`scopes`). Rank names outside these are added from the tables (``Project._extra_rank``).
FUNC_RANKISH = re.compile(
    r"rank|RANK|PROCID|procid|proc_id|process_index|"
    r"is_main|main_process|is_local_main|is_master|is_leader|is_chief|is_primary|global_zero|local_zero|"
    r"is_first|exists|isfile|isdir|listdir|scandir|\b[ir]?glob\b|\bstat\b|\baccess\b|\bwalk\b|host|platform|disk_usage|"
    r"getsize|getmtime|psutil|iterdir|is_file|is_dir|\brand|random|\btime\b|perf_counter|monotonic|process_time|"
    r"time_ns|memory_allocated|memory_reserved|mem_get_info|to_local|"
    r"local_(tensor|data|items|rows)|my_|Sampler|split_dataset|except")


def rankish_word(w):
    """True when word ``w`` of a function (:func:`scopes`) names something the taint reads a
    level from by its spelling: :data:`FUNC_RANKISH`, or per-rank data by the names the taint
    reads it from (:data:`~hpc_hangkit.lint.collectives.DATAISH`, ``LOCAL_DATA_METHODS``,
    ``LOCAL_DATA_CALLS``: ``local_batch``, ``shard``, not ``batch_norm`` or ``upsample``), or a
    rank variable of the environment by its key (``RANK_ENV``: an environment read is rank-dependent
    only by a constant key, a string word of the function)."""
    return bool(FUNC_RANKISH.search(w) or C.DATAISH.search(w)) or w in C.LOCAL_DATA_METHODS or \
        w in C.LOCAL_DATA_CALLS or w in C.RANK_ENV


#: the methods whose answer is a size (:func:`size_of`)
SIZE_METHODS = {"numel", "nelement", "__len__", "count_nonzero"}


def size_of(e):
    """True for the size of an array or tensor: ``x.numel()``, ``x.shape[0]``, ``x.size(0)``,
    ``x.size``. ``len(x)`` is not: on real code it is mostly the length of a list every rank
    built alike (parameter groups, buckets), and it raised the false alarms on the measured
    projects (docs/lint-measured.md)."""
    if e.__class__ is ast.Call:
        f = e.func
        return f.__class__ is ast.Attribute and (f.attr in SIZE_METHODS or (f.attr == "size" and bool(e.args)))
    if e.__class__ is ast.Subscript and e.value.__class__ is ast.Attribute and e.value.attr == "shape":
        return True
    return e.__class__ is ast.Attribute and e.attr == "size"


_IGNORE = re.compile(r"#\s*hangkit:(.*)$")
#: what may follow ``# hangkit: ignore``: nothing (or another comment), or ``[CODES]``
_IGNORE_ALL = re.compile(r"^\s*ignore\s*(#.*)?$")
_IGNORE_CODES = re.compile(r"^\s*ignore\s*\[([^\]]*)\]\s*(#.*)?$")


#: the empty set every fact starts from (one object: an empty frozenset is not shared, 216 bytes each)
_NOTHING = frozenset()
#: the empty ``wrap_reach`` every function starts from (replaced, never changed in place)
_NO_REACH = {}


class FuncFacts:
    """One function (or ``<module>``, the module's top-level statements) as the call graph sees it.

    ``calls``: call references (see :func:`hpc_hangkit.lint.calls.call_ref`); ``direct``:
    the first collective called directly (its name) or None; ``marked``: decorated with
    ``@collective``; ``ret_level``/``ret_calls``: rank dependence of its return values
    (0 clean, 1 rank-local, 2 rank-dependent) and the calls whose value it returns;
    ``ret_direct``: the same level counting only what the returned values are computed from,
    not the rank branches they are assigned under (the severity's "names the rank");
    ``noreturn``: it never returns (an endless ``while True`` with no ``break``/``return``).
    ``witness``: after :func:`hpc_hangkit.lint.calls.propagate`, the collective it reaches
    (``"all_reduce"``) or None."""

    __slots__ = ("module", "path", "qualname", "cls", "line", "calls", "direct", "direct_line", "direct_groups", "marked",
                 "ret_level", "ret_calls", "noreturn", "witness", "via", "node", "params", "param_levels",
                 "arg_calls", "attr_params", "raises", "var_types", "ret_elems", "ret_params", "defaults",
                 "directs", "cond_ranges", "tested", "general", "ret_agreed", "ret_uniform", "agreed_attrs",
                 "ret_elem_trips", "ret_elem_held", "equal_count", "elem_args", "called", "p2p", "free_calls",
                 "uniform_params", "passes", "open_params", "ret_pad", "ret_fields", "agrees",
                 "ret_direct", "ret_none", "ret_none_params", "ret_empty", "ret_record", "dispatched", "rebinds", "keeps_none", "raise_at", "raise_line", "kwarg",
                 "forwards", "varpos", "ret_type", "made", "wrapped", "param_called", "hands_wrapped", "ret_through", "ret_wrapper", "local_calls", "wrap_reach", "assigned_params", "attr_plain", "hand_reach", "relays", "ret_args", "param_from", "param_none")

    def __init__(self, module, qualname, cls, line, node, path=None):
        self.module = module
        self.path = path
        self.qualname = qualname
        self.cls = cls
        self.line = line
        self.node = node
        self.calls = []
        self.direct = None
        self.direct_line = 0
        self.marked = False
        self.ret_level = 0
        self.ret_direct = 0
        #: level of whether its return value is None (:func:`hpc_hangkit.lint.calls._none_level`),
        #: and the parameters that decides it also reads; None: not known
        self.ret_none = None
        self.ret_none_params = _NOTHING
        #: the parameter whose emptiness every return tests (``return x.numel() == 0``): each call
        #: is read as that test of its argument (Taint.test_level); else None
        self.ret_empty = None
        #: field -> (level, parameters read) of the record the function builds and returns
        #: (:func:`hpc_hangkit.lint.calls._record_fields`), or None
        self.ret_record = None
        #: after propagation: its witness is reached through an override that only the class an
        #: annotation declares makes possible (Project.overrides): a configuration's choice
        self.dispatched = False
        self.ret_calls = []
        self.noreturn = False
        self.witness = None
        #: how the witness is reached: ``(line of the call or collective, callee FuncFacts or None)``
        self.via = None
        #: parameter names in order (``self`` included for methods)
        self.params = _params(node)
        #: parameter -> rank level handed to it by a caller in the tree (after propagation)
        self.param_levels = {}
        #: ``[(call ref, {param index or keyword: level})]``: calls that hand a rank level to a callee
        self.arg_calls = []
        #: ``(class, attr) -> {parameter names, call refs}``: ``self.attr = <expression of these>``
        self.attr_params = {}
        #: it raises outside any ``try`` of its own (a caller's rank branch that calls it may raise)
        self.raises = False
        #: local name -> dotted name of the tree class it is built from (``ckpt = Checkpointer(d)``);
        #: ``name + "()"`` -> the same, for a local called as a function that every binding
        #: builds from that class (``metric = Metric(); metric(x)``: its ``__call__``)
        self.var_types = {}
        #: None, or local name -> the call ref of the tree function whose return it holds
        #: (``proxy = make_proxy()``): its methods' calls are followed when that function's
        #: ``ret_type`` is known (:func:`hpc_hangkit.lint.calls.made_ref`)
        self.made = None
        #: None, or local name -> ``((line, wrapper class or None), ...)``, its plain assignments in
        #: line order, for a local some assignment builds a collective module wrapper (``model =
        #: DDP(net)``): calling it after such an assignment is the wrapper's forward
        #: (:meth:`wrapper_at`)
        self.wrapped = None
        #: None, or parameter -> ``(line, col)`` of its first call as a function (``model(x)``),
        #: for the parameters the function never assigns: a caller that binds one to a module
        #: wrapper makes that call its forward (:meth:`~hpc_hangkit.lint.calls.Project._bind_wrappers`)
        self.param_called = None
        #: ``[(call ref, param index or keyword, wrapper class)]``: a module wrapper handed to a
        #: tree call (``evaluate(model)`` after ``model = DDP(net)``, ``evaluate(self.model)``)
        self.hands_wrapped = ()
        #: the class of the object every return builds (``return Proxy(...)``), as a ref a method
        #: name completes: ``("cls", module key, class)`` or ``("q", qualified class, module key)``
        self.ret_type = None
        #: when every return is a tuple of one length: the rank level of each element, else None
        self.ret_elems = None
        #: parameter names the return values are computed from (directly or through locals)
        self.ret_params = _NOTHING
        #: parameter -> its default when that is a constant (``evaluate=False``); only for a
        #: function with :attr:`cond_ranges`
        self.defaults = {}
        #: every collective called directly: ``[(line, col, name)]``
        self.directs = []
        #: line -> the source of the process group a direct collective there is handed, where it
        #: names its group by itself (``gpc.get_group(ParallelMode.PARALLEL_1D)``, not a
        #: parameter or a local: :func:`own_group`), for a test in a caller; None: none
        self.direct_groups = None
        #: the parts of the body that run only when a test of the parameters holds (or does not):
        #: ``[((line, col), (end line, end col), test node, polarity)]``; polarity True: the part
        #: runs when the test is true (an ``if`` body), False: when it is false (the ``else``,
        #: the rest of a block after ``if test: return``)
        self.cond_ranges = ()
        #: the names the tests of :attr:`cond_ranges` read
        self.tested = _NOTHING
        #: tested parameter -> ``((call ref, argument position or keyword), ...)``: the parameters
        #: whose every assignment is ``p = f(..., p, ...)`` (``split = sanitize_axis(shape,
        #: split)``); a call's None for one holds at the tests only when each ``f`` keeps a None
        #: None (:attr:`keeps_none`)
        self.rebinds = ()
        #: the parameters that, when None, make every return it can reach return None (``return
        #: axis`` under ``if axis is None or ...:``): ``p = f(p)`` keeps a None ``p`` None
        self.keeps_none = _NOTHING
        #: where it raises outside a ``try`` of its own, ``((line, col), ...)``: only for a function
        #: with :attr:`cond_ranges` that :attr:`raises` (a specialised copy raises only where
        #: these are live)
        self.raise_at = ()
        #: the line of its first ``raise`` outside a ``try`` of its own (0: none), for messages
        self.raise_line = 0
        #: the name of its ``**kwargs`` parameter, or None
        a = getattr(node, "args", None)
        self.kwarg = a.kwarg.arg if a is not None and getattr(a, "kwarg", None) is not None else None
        #: it hands its ``**kwargs`` on to a tree call (``filter_stats(stats, **kwargs)``): a caller's
        #: keywords reach that call (:meth:`~hpc_hangkit.lint.calls.Project.specialized`)
        self.forwards = False
        #: ``(name of its *args parameter, number of its positional parameters)`` when it hands
        #: its ``*args`` and ``**kwargs`` on as they are (``def GPAW(*args, **kwargs): return
        #: AnyGPAW(*args, **kwargs)``): a caller's arguments beyond those positional parameters
        #: reach that call; else None
        self.varpos = None
        #: for a copy specialised to constant arguments: the function it was copied from, else None
        self.general = None
        #: its return value is agreed through a collective (``return bool(flag)`` after
        #: ``all_reduce(flag)``): True, or the refs of the tree calls whose value it returns
        #: (agreed when one of them is, after propagation), or False
        self.ret_agreed = False
        #: every value it returns is a constant or computed only from values agreed through a
        #: collective (``return flag`` where every assignment of ``flag`` is ``False`` or
        #: ``agreed.item() == 1``): what it returns does not depend on its arguments' rank;
        #: until :meth:`~hpc_hangkit.lint.calls.Project.propagate`, also the refs of the tree
        #: calls it returns when every other return value is (``return allreduce_or(done)``):
        #: True after it when each of them returns such values
        self.ret_uniform = False
        #: ``(class, attr) -> True or {refs}``: ``self.attr = <agreed value>`` in this function
        #: (the result of a collective, a local agreed through one, a tree call returning one)
        self.agreed_attrs = {}
        #: as :attr:`ret_elems`, the trip count's level of each element (a loader with a
        #: ``DistributedSampler``: 0 even when built with the rank)
        self.ret_elem_trips = None
        #: for each element of :attr:`ret_elems`: the call refs of the tree calls that the local
        #: returned there only ever holds (``run_canceled = synchronize_flag(...)`` ... ``return
        #: run_canceled, extra_steps``), or None; after propagation an element whose calls all
        #: return an agreed value is level 0 (``Project._agreed_elements``)
        self.ret_elem_held = None
        #: the call ref of the one tree call every return hands back as it is (``return
        #: get_dataloaders(...)``), else None: after propagation the function takes that
        #: callee's :attr:`ret_elems` and :attr:`ret_elem_trips` where its own are not known, and
        #: its :attr:`equal_count`
        self.ret_through = None
        #: the module wrapper class a return value builds (``return DDP(model)``), else None
        self.ret_wrapper = None
        #: ``[(line, col, local name)]``: calls of a local that, there, holds what a tree call
        #: returned (``model = ddp_wrap(model)``, then ``model(x)``), decided after propagation
        self.local_calls = ()
        #: parameter -> ``(line, callee FuncFacts or None, callee's parameter)``: the function
        #: reaches a module wrapper's forward when that parameter holds one, by calling it at
        #: ``line`` or handing it there to that callee's parameter (after propagation)
        self.wrap_reach = _NO_REACH
        #: the parameters the function assigns, of those it calls, hands on as they are or keeps
        #: in an attribute (the ones that may hold a module wrapper)
        self.assigned_params = _NOTHING
        #: ``[(attr, parameter or call ref)]``: ``self.attr = parameter`` as it is, or ``self.attr =
        #: f(...)`` of a tree function ``f`` where the module calls ``self.attr(...)`` (a method's)
        self.attr_plain = ()
        #: None, or ``{line: (callee FuncFacts, its parameter, wrapper class)}``: the calls
        #: that hand a module wrapper to a callee reaching its forward (after propagation)
        self.hand_reach = None
        #: every return hands back a loader that gives every rank as many items (a prepared
        #: loader, one with a distributed sampler): a loop over its value has a uniform trip count
        self.equal_count = False
        #: ``[(call ref, param index or keyword, [(tree call ref, element index)], level)]``:
        #: arguments that are elements of a tuple a tree call returned (``model, dl =
        #: get_problem(rank)`` then ``Wrapper(model)``), resolved after propagation
        self.elem_args = ()
        #: a call in the tree resolves to it (after propagation)
        self.called = False
        #: it calls a point-to-point operation directly (``send``/``recv``...)
        self.p2p = False
        #: a private helper with rank-named parameters: ``(their names, [(call ref, (levels,
        #: elem_args))])``, what its calls hand on when those parameters hold a value the same on
        #: every rank; else None
        self.free_calls = None
        #: rank-named parameters that every tree call binds to such a value (after propagation)
        self.uniform_params = _NOTHING
        #: ``[(call ref, param index or keyword, own parameter)]``: a parameter handed on as it is
        self.passes = ()
        #: ``((line, col, position among the call's arguments or keyword, own parameter), ...)``:
        #: a parameter with a constant default that the function never assigns, handed on as it
        #: is at the call at (line, col), so that a constant bound to it (a caller's, or its
        #: default) binds the callee's parameter too
        #: (:meth:`~hpc_hangkit.lint.calls.Project.specialized`)
        self.relays = ()
        #: ``(call, param index or keyword, source call, ...)``, flat, the calls as indices into
        #: :attr:`calls`: a tree call's result handed to a tree call, directly or through a local
        #: assigned only that
        #: (``d = get_log_dir(); run(d)``): after propagation the callee's parameter takes the
        #: source's None-ness level (:attr:`param_none`)
        self.ret_args = ()
        #: None, or parameter -> the level of its None-ness, from a call whose None-ness is
        #: rank-dependent that a caller hands it (:attr:`ret_args`, after propagation); read only
        #: by a test ``p is None`` / ``p is not None``
        self.param_none = None
        #: None, or parameter -> ``(path, line)`` of that call, for a finding's message
        self.param_from = None
        #: parameters that can hold data from outside the tree's making (after propagation:
        #: :meth:`~hpc_hangkit.lint.calls.Project._pass_through`; True: all of them, for a
        #: function no tree code calls); None before
        self.open_params = None
        #: every return hands back a local list padded to a count (:func:`~hpc_hangkit.lint.taint.
        #: _padded_lists`): ``(the count's level, the parameters it is computed from)``; else None
        self.ret_pad = None
        #: every return hands back a record (``SimpleNamespace(existing=xs, ...)``): ``{field:
        #: (trip level, [refs of the calls whose padded return it also holds])}``; else None
        self.ret_fields = None
        #: indices of the parameters it hands, as they are, to an agreeing collective
        #: (``dist.all_reduce(tensor)`` in a wrapper): the caller's argument there is agreed
        self.agrees = ()


def wrapper_at(ff, call):
    """What ``call`` (in function ``ff``) reaches on a local that holds a collective module
    wrapper there (:func:`wrapped_at`: ``model = DDP(net)``): ``"forward of DDP"`` for
    ``model(x)`` or ``model.forward(x)``, ``"state_dict of FSDP"`` for an FSDP's
    ``model.state_dict()`` (it gathers the full state); else None."""
    f = call.func
    if ff.wrapped is None:
        return None
    what = "forward"
    if f.__class__ is ast.Attribute and f.attr in ("forward", "state_dict"):
        what = f.attr
        f = f.value
    if f.__class__ is not ast.Name:
        return None
    w = wrapped_at(ff, f.id, call.lineno)
    if not w or (what == "state_dict" and w not in C.GATHERING_WRAPPERS):
        return None
    return "%s of %s" % (what, w)


def holds_wrapper(ff):
    """Function ``ff`` holds a collective module wrapper in a local or a parameter somewhere
    (after propagation): the rules read its calls of it, and what it hands on, even when it
    reaches no collective otherwise."""
    return ff.wrapped is not None and any(w.__class__ is str for v in ff.wrapped.values() for _, w in v)


def wrapped_at(ff, name, line, pending=False):
    """The wrapper class (``"DDP"``) that local ``name`` of function ``ff`` holds at ``line``:
    where its last plain assignment before that line builds one (a parameter some caller
    binds to one counts from line 0), else None. ``pending``: before propagation, the call
    ref of the tree call whose result it holds there may be returned instead (a class or
    None once :meth:`~hpc_hangkit.lint.calls.Project._bind_wrappers` has decided it)."""
    w = None
    for at, cls in (ff.wrapped or {}).get(name, ()):
        if at >= line:
            break
        w = cls
    return w if pending or w.__class__ is str else None


def _params(node):
    a = getattr(node, "args", None)
    if a is None or not hasattr(a, "args"):
        return ()
    return tuple(x.arg for x in list(getattr(a, "posonlyargs", [])) + list(a.args) + list(a.kwonlyargs))


def defaults_of(node):
    """Parameter -> default, for the parameters whose default is a constant."""
    a = getattr(node, "args", None)
    if a is None or not hasattr(a, "args"):
        return {}
    out = {}
    pos = list(getattr(a, "posonlyargs", [])) + list(a.args)
    for arg, d in zip(pos[len(pos) - len(a.defaults):], a.defaults):
        if isinstance(d, ast.Constant):
            out[arg.arg] = d.value
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        if isinstance(d, ast.Constant):
            out[arg.arg] = d.value
    return out


class ModuleFacts:
    """One source file: ``path``, dotted ``name``, ``imports`` (local alias -> qualified name),
    ``key`` (the normalized absolute path: modules are told apart by it, two ``train.py`` of one
    name included), ``stars`` (modules imported with ``*``),
    ``funcs`` (qualname -> :class:`FuncFacts`; methods as ``Class.method``), ``bases``
    (class -> list of base qualified names), ``attr_levels`` ((class, attr) -> rank level of
    ``self.attr`` assignments), ``ignores`` (line -> set of codes, ``"*"`` for all), ``lines``."""

    __slots__ = ("path", "key", "name", "imports", "stars", "funcs", "bases", "attr_levels", "ignores", "bad_ignores", "lines",
                 "tree", "is_package", "has_p2p", "local", "attr_types", "collective_attrs",
                 "attr_agreed", "words", "comm_receivers", "flag_cache", "abort_hook", "aliases", "attr_counts",
                 "attr_flags", "attr_records", "attr_draws")

    def __init__(self, path, name, tree, text, is_package=False):
        self.path = path
        self.key = os.path.normpath(os.path.abspath(path))
        self.name = name
        self.stars = []
        self.tree = tree
        self.lines = text.splitlines()
        self.imports = {}
        self.funcs = {}
        self.bases = {}
        self.attr_levels = {}
        #: (class, attr) -> dotted name of the class ``self.attr`` is built from (``self.model = Model(...)``)
        self.attr_types = {}
        #: (class, attr) -> wrapper name, for ``self.attr = DDP(model)``: calling it is collective
        self.collective_attrs = {}
        #: (class, attr) -> True when every ``self.attr = ...`` of the class's methods in this module
        #: assigns None or a loader that gives every rank as many items (``DataLoader(ds,
        #: sampler=DistributedSampler(...))``): a loop over it has a uniform trip count; a tuple
        #: of call references when some assign what tree functions return instead (``self._setup_data(ds)``):
        #: so when each of them returns such a loader (``FuncFacts.equal_count``)
        self.attr_counts = {}
        #: attr -> True when every ``self.attr`` binding in this module's methods assigns True or
        #: False (a yes/no setting, whatever its name), False when one binds anything else
        self.attr_flags = {}
        #: (class, attr) -> True when every ``self.attr`` binding of the class's methods in this
        #: module is a random draw of a shape that is the same on every rank
        #: (:func:`~hpc_hangkit.lint.taint.random_draw`: ``nn.Parameter(scale * torch.randn((n,
        #: d)))``), False when one is anything else: its shape is uniform, its values are not
        self.attr_draws = {}
        #: (class, attr) -> the call refs every non-None binding of ``self.attr`` is a call of
        #: (``self.cfg = self._make_config()``), False when one is anything else
        self.attr_records = {}
        #: (class, attr) whose value some method agrees through a collective (after propagation)
        self.attr_agreed = set()
        #: class -> its ``self`` flags that are true only with several processes (built on demand)
        self.flag_cache = {}
        #: ``[(line, text)]``: ``# hangkit:`` comments that silence nothing (:func:`parse_ignores`)
        self.bad_ignores = []
        self.ignores = parse_ignores(self.lines, self.bad_ignores) if "hangkit" in text else {}
        self.is_package = is_package
        self.has_p2p = False
        #: id(function or module node) -> the nodes that run in its frame (see :func:`scopes`)
        self.local = {}
        #: id(scope) -> the words its code spells (:func:`scopes`)
        self.words = {}
        #: plain names the module calls a distinctive collective method on (:func:`comm_receivers`)
        self.comm_receivers = _NOTHING
        #: plain name -> ``(kind, name)`` of the collective method it is assigned (``Barrier =
        #: comm.Barrier``): calling the name calls it (:func:`~hpc_hangkit.lint.taint.collective_aliases`)
        self.aliases = {}
        #: where the module installs an exception hook or exit handler, when it also aborts the
        #: job (:func:`abort_hook`: ``((line, installer), ...)``)
        self.abort_hook = ()

    def line_text(self, line):
        """The stripped source text of 1-based ``line`` ('' when out of range)."""
        return self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""

    def code_text(self, line):
        """:meth:`line_text` without its trailing comment (:func:`code_of`): what a finding quotes."""
        return code_of(self.lines[line - 1]) if 0 < line <= len(self.lines) else ""

    def ignored(self, line, code):
        """True when ``# hangkit: ignore`` or ``# hangkit: ignore[...]`` naming ``code`` or a
        prefix of it (``HK1``) is on ``line``."""
        codes = self.ignores.get(line)
        return bool(codes) and ("*" in codes or any(code.startswith(c) for c in codes))


def code_of(text):
    """Source line ``text`` stripped, without a trailing ``# comment`` (a ``#`` inside a string
    literal on the line is kept; a line that ends inside a string is kept whole)."""
    quote = None
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if quote is not None:
            if ch == "\\":
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = None
                continue
        elif ch in "'\"":
            quote = text[i:i + 3] if text[i:i + 3] in ("'''", '"""') else ch
            i += len(quote)
            continue
        elif ch == "#":
            return text[:i].strip()
        i += 1
    return text.strip()


def _comments(lines):
    """``{line: comment text}`` of the ``#`` comments of source ``lines`` that mention
    hangkit, read by :mod:`tokenize`; None when the source does not tokenize (then each line
    is read as it is)."""
    import io
    import tokenize
    out = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
            if tok.type == tokenize.COMMENT and "hangkit" in tok.string:
                out[tok.start[0]] = tok.string
    except (tokenize.TokenError, SyntaxError):
        return None
    return out


def parse_ignores(lines, bad=None):
    """``{line: {codes}}`` for every ``# hangkit: ignore[HK101,HK2]`` comment (codes or code
    prefixes; ``{"*"}`` for a bare ``# hangkit: ignore``). A ``# hangkit:`` comment of another
    form (``ignore HK201``, ``ignored``, ``ignore[]``) silences nothing: its line and text are
    appended to list ``bad`` when one is given."""
    out = {}
    comments = _comments(lines)
    for i, text in enumerate(lines, 1):
        if "hangkit" not in text:
            continue
        if comments is not None:
            # the comment of the line, not `# hangkit:` written inside a string
            text = comments.get(i)
            if text is None:
                continue
        m = _IGNORE.search(text)
        if not m:
            continue
        rest = m.group(1)
        if _IGNORE_ALL.match(rest):
            out[i] = {"*"}
            continue
        c = _IGNORE_CODES.match(rest)
        codes = {x.strip().upper() for x in c.group(1).split(",") if x.strip()} if c else set()
        if codes:
            out[i] = codes
        elif bad is not None:
            bad.append((i, "# hangkit:" + rest.rstrip()))
    return out


def module_name(path):
    """Dotted module name of a file: its stem, prefixed by every enclosing directory that
    holds an ``__init__.py`` (``.../torch/distributed/utils.py`` -> ``torch.distributed.utils``)."""
    path = os.path.abspath(path)
    d, base = os.path.split(path)
    stem = base[:-3] if base.endswith(".py") else base
    parts = [] if stem == "__init__" else [stem]
    while os.path.isfile(os.path.join(d, "__init__.py")):
        d, pkg = os.path.split(d)
        parts.insert(0, pkg)
        if not pkg:
            break
    return ".".join(parts) or stem


def dotted(expr):
    """``a.b.c`` of a Name/Attribute chain as a list of names, or None (calls, subscripts...)."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        return parts[::-1]
    return None


def qualify(mod, parts):
    """The qualified name of a dotted chain when its first name is an import of ``mod``, else None."""
    if parts and parts[0] in mod.imports:
        return ".".join([mod.imports[parts[0]]] + parts[1:])
    return None


def header_exprs(st):
    """The expressions statement ``st`` evaluates itself, not those of the blocks it holds: an
    ``if``'s or ``while``'s test, a ``for``'s iterable, a ``with``'s context managers, a
    ``match``'s subject, nothing of a ``try``; any other statement is its own."""
    if isinstance(st, (ast.If, ast.While)):
        return [st.test]
    if isinstance(st, (ast.For, ast.AsyncFor)):
        return [st.iter]
    if isinstance(st, (ast.With, ast.AsyncWith)):
        return [i.context_expr for i in st.items]
    if isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
        return []
    if type(st).__name__ == "Match":
        return [st.subject]
    return [st]


#: keyword arguments that hand a collective its process group
GROUP_KEYWORDS = ("group", "process_group", "pg", "parallel_mode", "comm_group")


def group_arg(call):
    """The process group or parallel mode ``call`` is handed, other than the world
    (``group=self.tp_group``, ``gpc.get_group(ParallelMode.TENSOR)``, a mode or a ``*_group``
    name among the arguments of a wrapper), or None."""
    for k in call.keywords:
        if k.arg in GROUP_KEYWORDS:
            if (isinstance(k.value, ast.Constant) and k.value.value is None) or \
                    (dotted(k.value) or [""])[-1] in ("WORLD", "COMM_WORLD"):
                return None
            return k.value
    for a in call.args:
        d = dotted(a) or (dotted(a.func) if isinstance(a, ast.Call) else None) or []
        if d and (d[-1].endswith(("_group", "_pg", "parallel_mode")) or "ParallelMode" in d or
                  d[-1] in ("get_group", "get_process_group")):
            return a
    return None


def own_group(group, bound):
    """True when process-group expression ``group`` names its group by itself: it reads no
    name of ``bound`` (the parameters and locals of its function: what a caller or the body
    decides), ``self`` aside."""
    return not any(n.__class__ is _NAME and n.id in bound and n.id not in ("self", "cls") for n in ast.walk(group))


_AST = ast.AST
_NAME = ast.Name


def nodes_of(node):
    """Every node under ``node``, itself included, as a list (what ``ast.walk`` yields, in
    another order and without the load/store context leaves, at well under half its cost:
    no generators)."""
    out = []
    stack = [node]
    pop, push, add = stack.pop, stack.append, out.append
    fields_of = _CHILD_FIELDS
    while stack:
        n = pop()
        add(n)
        fields = fields_of.get(n.__class__)
        # the fields that can hold a node (no load/store contexts, no identifiers)
        for f in (fields if fields is not None else _child_fields(n.__class__)):
            v = getattr(n, f, None)
            if v.__class__ is list:
                for c in v:
                    if isinstance(c, _AST):
                        push(c)
            elif isinstance(v, _AST):
                push(v)
    return out


def names_of(node):
    """The identifiers of every ``ast.Name`` under ``node`` (itself included), as a set."""
    out = set()
    stack = [node]
    pop, push = stack.pop, stack.append
    fields_of = _CHILD_FIELDS
    while stack:
        n = pop()
        if n.__class__ is _NAME:
            out.add(n.id)
            continue
        fields = fields_of.get(n.__class__)
        for f in (fields if fields is not None else _child_fields(n.__class__)):
            v = getattr(n, f, None)
            if v.__class__ is list:
                for c in v:
                    if isinstance(c, _AST):
                        push(c)
            elif isinstance(v, _AST):
                push(v)
    return out


def walk_local(node):
    """Every node under ``node`` (itself excluded) that runs in its frame: nested function,
    lambda and class bodies are not entered."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(n))


_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPARE_T = ast.Compare
_NUMBER_T = (int, float)
_FUNC_T = frozenset(_FUNCS)
_OPAQUE_T = frozenset((ast.Lambda, ast.ClassDef))
_IMPORT_T = frozenset((ast.Import, ast.ImportFrom))
#: node types the facts and the taint read from a scope's list (everything else is only walked through)
KEPT = frozenset((ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.comprehension,
                  ast.NamedExpr, ast.withitem, ast.Call, ast.Return,
                  ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp))
#: leaves never worth a visit: contexts, operators, names, constants
_LEAF_T = frozenset([ast.Load, ast.Store, ast.Del, ast.Name, ast.Constant, ast.alias, ast.arg] +
                    [c for c in vars(ast).values() if isinstance(c, type) and issubclass(
                        c, (ast.operator, ast.unaryop, ast.cmpop, ast.boolop))])


#: fields that never hold a node worth a visit (identifiers, numbers, flags, the load/store
#: context): :func:`scopes` does not read them
_NOT_CHILD = frozenset(("ctx", "id", "attr", "arg", "module", "level", "is_async", "simple", "conversion",
                        "kind", "type_comment", "tag", "rest", "kwd_attrs"))
#: node class -> the fields :func:`scopes` reads
_CHILD_FIELDS = {}


def _child_fields(cls):
    got = _CHILD_FIELDS[cls] = tuple(f for f in cls._fields if f not in _NOT_CHILD)
    return got


#: what :func:`scopes` does with a child node of a class (one lookup instead of several
#: tests): skip it (no node, or a leaf without a word), note its word, walk into it
_SKIP, _NODE, _KEPT, _NAME_A, _CONST, _ARG, _NOT_A, _ATTR, _FUNC_A, _OPAQUE, _IMPORT, _HANDLER, _RAISE = (
    "skip", "node", "kept", "name", "const", "arg", "not", "attr", "func", "opaque", "import", "handler", "raise")
_WORD_OF = {_ARG: None, _NOT_A: "not", _HANDLER: "except", _RAISE: "raise"}
#: node class -> its action (filled on first sight)
_ACTION = {}


def _action(cls):
    if cls is ast.Name:
        a = _NAME_A
    elif cls is ast.Constant:
        a = _CONST
    elif cls is ast.arg:
        a = _ARG
    elif cls is ast.Not:
        a = _NOT_A
    elif cls in _LEAF_T or not issubclass(cls, ast.AST):
        a = _SKIP
    elif cls in _FUNC_T:
        a = _FUNC_A
    elif cls in _OPAQUE_T:
        a = _OPAQUE
    elif cls is ast.Attribute:
        a = _ATTR
    elif cls is ast.ExceptHandler:
        a = _HANDLER
    elif cls is ast.Raise:
        a = _RAISE
    elif cls in KEPT:
        a = _KEPT
    elif cls in _IMPORT_T:
        a = _IMPORT
    else:
        a = _NODE
    _ACTION[cls] = a
    return a


def scopes(tree):
    """One pass over ``tree``: ``({id(scope): [nodes]}, [import nodes], {id(scope): {words}})``
    where a scope is the module or a function, and its nodes are those :func:`walk_local`
    yields for it that are of a type in :data:`KEPT` (a nested function's body belongs to its
    own scope; lambda and class bodies to no scope, their methods to their own). Its words are
    what the taint can read a level from by spelling: names, attributes, parameters, short
    string constants, ``"except"`` for a handler that binds or leaves (:func:`_handler_acts`),
    ``"raise"`` for a raise, ``"not"`` and ``"0"`` (a ``not`` of a size, :func:`size_of`, or a
    size compared with a constant 0 or 1: the makings of an emptiness test)."""
    local = {id(tree): []}
    words = {id(tree): set()}
    imports = []
    # the stack holds nodes of the scope being walked; a tuple enters a nested scope (its node,
    # list, words) or, below that scope's nodes, leaves it (None, the outer list and words)
    sink, ws = local[id(tree)], words[id(tree)]
    stack = [tree]
    pop, push = stack.pop, stack.append
    fields_of, act_of = _CHILD_FIELDS, _ACTION
    while stack:
        node = pop()
        if node.__class__ is tuple:
            node, inner_sink, inner_ws = node
            if node is None:
                sink, ws = inner_sink, inner_ws
                continue
            push((None, sink, ws))
            sink, ws = inner_sink, inner_ws
        fields = fields_of.get(node.__class__)
        for name in (fields if fields is not None else _child_fields(node.__class__)):
            v = getattr(node, name, None)
            if v is None:
                continue
            for c in (v if v.__class__ is list else (v,)):
                a = act_of.get(c.__class__)
                if a is None:
                    a = _action(c.__class__)
                # the commonest first: names, attributes, calls
                if a is _NAME_A:
                    if ws is not None:
                        ws.add(c.id)
                elif a is _ATTR:
                    if ws is not None:
                        ws.add(c.attr)
                    push(c)
                elif a is _KEPT:
                    if sink is not None:
                        sink.append(c)
                    push(c)
                elif a is _NODE:
                    push(c)
                elif a is _CONST:
                    if ws is not None:
                        x = c.value
                        if x.__class__ is str:
                            if len(x) < 40:
                                ws.add(x)
                        elif (x == 0 or x == 1) and node.__class__ is _COMPARE_T and x.__class__ in _NUMBER_T and \
                                size_of(node.left):
                            ws.add("0")  # a size compared with 0 or 1, not `x.size(0)` or `xs[1]`
                elif a is _SKIP:
                    continue
                elif a is _FUNC_A:
                    own = local[id(c)] = []
                    push((c, own, words.setdefault(id(c), set())))
                elif a is _OPAQUE:
                    push((c, None, None))
                elif a is _IMPORT:
                    imports.append(c)
                    push(c)
                elif ws is not None and a in _WORD_OF:
                    # an argument's name, a `not` of a size, a handler that sets or leaves, a raise
                    if (a is not _NOT_A or size_of(node.operand)) and (a is not _HANDLER or _handler_acts(c)):
                        ws.add(c.arg if a is _ARG else _WORD_OF[a])
                    if a is _HANDLER or a is _RAISE:
                        push(c)
                elif a is _HANDLER or a is _RAISE:
                    push(c)
    return local, imports, words


#: what a statement in an ``except`` handler does that the taint gives the handler's level to
_HANDLER_ACTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr, ast.For, ast.AsyncFor, ast.With,
                 ast.AsyncWith, ast.Return, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom, ast.comprehension)


def _handler_acts(handler):
    """True when ``except`` handler ``handler`` binds a name, returns, yields or leaves a loop:
    what the taint reads a rank-local level onto (``except OSError: ok = False``); a handler
    that only logs, passes or raises again gives the function no rank-local value."""
    return any(isinstance(n, _HANDLER_ACTS) for st in handler.body for n in ast.walk(st))


def _resolve_relative(modname, is_package, level, target):
    base = modname.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _imports(mod, nodes):
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    mod.imports[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    mod.imports[top] = top
        elif isinstance(node, ast.ImportFrom):
            src = node.module or ""
            if node.level:
                src = _resolve_relative(mod.name, mod.is_package, node.level, node.module)
            for a in node.names:
                if a.name != "*":
                    mod.imports[a.asname or a.name] = (src + "." + a.name) if src else a.name
                elif src:
                    mod.stars.append(src)


def functions_of(tree):
    """``[(qualname, class name or None, node)]`` of a module's functions and methods (nested
    functions by their own name under the enclosing one: ``outer.inner``), plus
    ``("<module>", None, tree)`` for the top-level statements."""
    out = [("<module>", None, tree)]
    _visit(tree.body, "", None, out)
    return out


def _visit(body, prefix, cls, out):
    # a module-level function, not a recursive closure: a closure that calls itself is a
    # reference cycle, and it would keep the whole tree alive until the cyclic collector runs
    for n in body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            q = prefix + n.name
            out.append((q, cls, n))
            _visit(n.body, q + ".", cls, out)
        elif isinstance(n, ast.ClassDef):
            _visit(n.body, prefix + n.name + ".", n.name if not prefix else None, out)
        elif isinstance(n, (ast.If, ast.Try, ast.With)):
            _visit(getattr(n, "body", []) + getattr(n, "orelse", []) + getattr(n, "finalbody", []),
                   prefix, cls, out)


def decode_source(raw):
    """The text of a Python source file's bytes ``raw``, in Python's encoding for it (a BOM or a
    ``# coding:`` line, else UTF-8), without a BOM. Raises ``ValueError`` for bytes that are not
    in that encoding (Python would refuse to import them), ``SyntaxError`` for a coding line
    naming no encoding."""
    import io
    import tokenize
    try:
        enc, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        text = raw.decode(enc)
    except (UnicodeDecodeError, LookupError) as e:
        raise ValueError("not readable as Python source: %s" % e)
    return text[1:] if text.startswith("\ufeff") else text


def load_module(path, text=None, name=None):
    """Parse ``path`` into a :class:`ModuleFacts` (tree kept; ``asyncio.to_thread(f, *args)``
    and ``run_in_executor(ex, f, *args)`` already rewritten into ``f(*args)``, :func:`_unthread`).
    Raises ``SyntaxError``, ``ValueError`` (null bytes; text that is not in the file's encoding,
    :func:`decode_source`) or ``OSError`` (unreadable); ``text`` skips the read."""
    if text is None:
        with open(path, "rb") as f:
            text = decode_source(f.read())
    tree = ast.parse(text, filename=path)
    if "to_thread" in text or "run_in_executor" in text:
        _unthread(tree)
    mod = ModuleFacts(path, name or module_name(path), tree, text,
                      is_package=os.path.basename(path) == "__init__.py")
    mod.local, imports, mod.words = scopes(tree)
    _imports(mod, imports)
    mod.comm_receivers = comm_receivers(mod)
    if ("excepthook" in text or "atexit" in text) and (".Abort(" in text or ".abort(" in text):
        mod.abort_hook = abort_hook(tree)
    defs = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            mod.bases[node.name] = [".".join(d) for d in (dotted(b) for b in node.bases) if d]
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and \
                isinstance(node.value, ast.Name) and node.value.id in defs and node.targets[0].id not in defs and \
                node.targets[0].id not in mod.imports:
            # `share = share_mpi`: another name of the module's own function, as an import is
            mod.imports[node.targets[0].id] = mod.name + "." + node.value.id
    return mod


#: calls that run their function argument (by position: 0, or 1 after the executor) in a
#: worker thread on the arguments after it, and give back what it returns
_THREADED = {"to_thread": 0, "run_in_executor": 1}


def _unthread(tree):
    """Rewrite, in place, each ``asyncio.to_thread(f, *args, **kw)`` and
    ``loop.run_in_executor(executor, f, *args)`` of ``tree`` into the call ``f(*args, **kw)``
    (its line and column kept): the function runs on this rank, on those arguments, and its
    result is what the ``await`` gives back (a collective run that way is one, and agrees
    what it agrees). Only a plain name or attribute chain as ``f``."""
    for n in ast.walk(tree):
        if n.__class__ is not ast.Call:
            continue
        f = n.func
        name = f.attr if f.__class__ is ast.Attribute else f.id if f.__class__ is ast.Name else None
        i = _THREADED.get(name)
        if i is None or len(n.args) <= i or n.args[i].__class__ not in (ast.Name, ast.Attribute) or \
                any(a.__class__ is ast.Starred for a in n.args[:i + 1]):
            continue
        n.func, n.args = n.args[i], n.args[i + 1:]
        if i:
            n.keywords = []  # run_in_executor takes no keywords for the function


def abort_hook(tree):
    """Where a module that also aborts the job installs a hook that runs on an exception no
    caller catches: ``((line, installer), ...)`` for each ``sys.excepthook = ...`` and
    ``atexit.register(...)`` (also as a decorator); ``installer`` is the name of the module's
    top-level function that installs it, None at module level (it runs on import), ``"<class>"``
    in a class (no call of the tree is counted as installing it). Empty unless
    the module calls a communicator's ``Abort`` (pyuvsim's hook calls ``mpi_comm.Abort(1)``;
    PyFR's exit handler aborts after an uncaught exception) or a wrapper's ``abort`` on a
    receiver named like a communicator (GPAW's exit handler calls ``world.abort(42)`` when
    ``sys.last_type`` is set). Such an exception ends every rank of the job there."""
    from hpc_hangkit.lint import collectives as C
    sites = []
    aborts = False
    for top in tree.body:
        installer = top.name if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)) else \
            "<class>" if isinstance(top, ast.ClassDef) else None
        for n in ast.walk(top):
            if isinstance(n, ast.Assign) and any(dotted(t) == ["sys", "excepthook"] for t in n.targets):
                sites.append((n.lineno, installer))
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                if n.func.attr == "Abort":
                    aborts = True
                elif n.func.attr == "abort":
                    d = dotted(n.func.value)
                    aborts = aborts or bool(d and C.COMMISH.search(d[-1]))
                elif dotted(n.func) == ["atexit", "register"]:
                    sites.append((n.lineno, installer))
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    any(dotted(d) == ["atexit", "register"] for d in n.decorator_list):
                sites.append((n.lineno, None if n is top else installer))
    return tuple(sorted(set(sites), key=lambda s: s[0])) if aborts else ()


def comm_receivers(mod):
    """The plain names (not ``self``/``cls``, not imported) on which ``mod`` calls a collective
    method of a distinctive name (``_model.all_reduce(...)``, :data:`~hpc_hangkit.lint.collectives.DISTINCT`):
    such a receiver is a communicator by the code's own use, as a name like ``comm`` is by its
    spelling, so its generic collective methods (``_model.broadcast``, ``_model.barrier``) are
    collectives too. Scopes whose words name no such method are not scanned."""
    from hpc_hangkit.lint import collectives as C
    out = set()
    for sid, ws in mod.words.items():
        if ws.isdisjoint(C.DISTINCT):
            continue
        for n in mod.local.get(sid, ()):
            if n.__class__ is ast.Call:
                f = n.func
                if f.__class__ is ast.Attribute and f.attr in C.DISTINCT and f.value.__class__ is ast.Name and \
                        f.value.id not in ("self", "cls") and f.value.id not in mod.imports:
                    out.add(f.value.id)
    return frozenset(out)


def enclosing_chain(fn_node, line):
    """The compound statements of ``fn_node``'s own body that contain ``line``, outermost
    first, each as ``(node, field)`` where ``field`` is the part holding the line
    (``"body"``, ``"orelse"``, ``"handlers"``, ``"finalbody"``); then the innermost simple
    statement as ``(stmt, None)``. Empty when the line is not in the function's body."""
    chain = []
    body = fn_node.body
    while True:
        hit = None
        for st in body:
            end = getattr(st, "end_lineno", st.lineno)
            if st.lineno <= line <= end:
                hit = st
                break
        if hit is None:
            return chain
        if isinstance(hit, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return chain
        sub = None
        for field in ("body", "orelse", "handlers", "finalbody"):
            stmts = getattr(hit, field, None)
            if not stmts or not isinstance(stmts, list):
                continue
            if field == "handlers":
                for h in stmts:
                    if h.lineno <= line <= getattr(h, "end_lineno", h.lineno):
                        sub = (field, h.body)
            elif stmts[0].lineno <= line <= getattr(stmts[-1], "end_lineno", stmts[-1].lineno):
                sub = (field, stmts)
            if sub:
                break
        if sub is None:
            chain.append((hit, None))
            return chain
        chain.append((hit, sub[0]))
        body = sub[1]
