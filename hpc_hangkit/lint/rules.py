"""The HK rules: collectives that only some ranks reach.

Codes are stable (docs/lint.md has a wrong/right example for each). ``HK1xx``: the
deciding value is rank-dependent (severity ``error``); ``HK2xx``: it is rank-local,
it can differ between ranks without naming the rank (severity ``warning``).
Every finding names two lines: the collective and the branch that decides who reaches
it (``related_line``). Stdlib only.
"""
import ast
import copy
import os
import re
from typing import NamedTuple

from hpc_hangkit.lint import collectives as C
from hpc_hangkit.lint.model import code_of, dotted, group_arg, header_exprs, holds_wrapper, qualify, walk_local, wrapper_at
from hpc_hangkit.lint.calls import attr_state_dict, call_ref
from hpc_hangkit.lint.taint import Taint, handler_condition, mentions_membership, none_read_names

__all__ = ["RULES", "Finding", "check_module", "merge_by_branch", "severity_of"]

#: code -> (short name, one-line description)
RULES = {
    "HK101": ("collective-under-rank-condition",
              "a collective reached only when a rank-dependent condition holds"),
    "HK102": ("collective-after-rank-exit",
              "a collective after a rank-dependent early exit (return, continue, break, sys.exit) "
              "in the same function"),
    "HK103": ("rank-raise-before-collective",
              "a rank-dependent raise before a collective, with no abort on that path"),
    "HK104": ("rank-dependent-group-creation",
              "process-group creation (new_group, new_subgroups, init_device_mesh) with rank-dependent arguments "
              "and no use_local_synchronization=True"),
    "HK105": ("collective-in-rank-loop",
              "a collective inside a loop whose trip count is rank-dependent"),
    "HK106": ("symmetric-blocking-send",
              "every rank does a blocking send to a rank-computed peer before its receive"),
    "HK107": ("root-only-buffer-size",
              "every rank reaches a reduction, but its buffer is built under a rank-dependent branch "
              "(its size can differ between ranks)"),
    "HK201": ("collective-under-local-condition",
              "a collective reached only when a rank-local condition holds (file checks, clocks, random, "
              "per-rank data, torch.cuda state, an except handler)"),
    "HK202": ("collective-after-local-exit",
              "a collective after a rank-local early exit in the same function"),
    "HK203": ("local-raise-before-collective",
              "a rank-local raise before a collective, with no abort on that path"),
    "HK205": ("collective-in-local-loop",
              "a collective inside a loop whose trip count depends on rank-local data"),
}


#: the levels of a finding, the most certain first (SARIF's ``error``, ``warning``, ``note``)
LEVELS = ("error", "warning", "note")


def severity_of(code):
    """The default level of a code: ``"error"`` for HK1xx, ``"warning"`` for HK2xx (a finding
    whose rank dependence is only inferred is reported at ``warning``, one whose rank test is
    relative to a process group at ``note``: :attr:`Finding.severity`)."""
    return "error" if code.startswith("HK1") else "warning"


class Finding(NamedTuple):
    """One finding: ``code``, ``path``, ``line``/``col`` (1-based line, 1-based column) of the
    collective (or of the call of the helper that reaches it), ``message``,
    ``related_line``/``related_text`` (the branch that decides), ``function`` (qualified
    name), ``severity``; ``chain``: for a collective reached through helpers, each call on
    the way and the collective last, as ``(path, line, text, what, col)``; ``also``: the
    other collectives (or helper calls) of the function that the same line decides the same
    way, as ``(line, col, text, what)``: one finding per deciding line, not one per collective
    (:func:`merge_by_branch`); ``what``: the collective or helper call as the message names it
    (``"barrier"``, ``"sync() (reaches all_reduce)"``)."""

    code: str
    path: str
    line: int
    col: int
    message: str
    related_line: int
    related_text: str
    function: str
    chain: tuple = ()
    #: the rank dependence is inferred (through attributes, parameters, merged values), not named
    #: by the deciding line itself: reported at ``warning`` level whatever the code
    inferred: bool = False
    #: the deciding line names a rank, but the collective runs on a process group (an MPI
    #: ``Split``, a ``group=``) or the test reads the rank within a group: whether the ranks
    #: of the group all take the same side depends on which ranks it holds, which the lint
    #: cannot see. Reported at ``note`` level (measured: 97 of 99 such findings on the
    #: forty-three projects were false alarms; docs/lint.md, "Severity")
    group: bool = False
    #: a raise before the collective in a tree that installs an exception hook or exit handler
    #: that aborts the job: uncaught, the raise ends every rank; only a caller that catches it
    #: and goes on leaves the others waiting. Reported at ``note`` level (measured: the nine
    #: such `error` findings of pyuvsim, PyFR's, and GPAW's nine were false alarms; docs/lint-measured.md)
    hooked: bool = False
    #: the collective is reached only through an override of a method whose receiver's class an
    #: annotation declares (``checkpointer: Checkpointer``): which subclass runs is the
    #: configuration's choice. Reported at ``note`` level (measured on the sixty-seven
    #: projects: docs/lint-measured.md, stop 44)
    dispatched: bool = False
    also: tuple = ()
    what: str = ""
    #: where the deciding test's locals got their rank dependence: ``((line, name, text, how,
    #: path), ...)``, ``how`` ``"from"`` (``pg`` from ``pg = env.process_group``), ``"under"`` (the
    #: branch a local is set under: ``store`` is set under ``if rank == 0:``) or ``"handed"`` (a
    #: parameter a caller, at ``path``, binds to a call's value that is None on some ranks)
    origin: tuple = ()

    @property
    def severity(self):
        """``"error"``, ``"warning"`` or ``"note"`` (:data:`LEVELS`)."""
        if self.group or self.hooked or self.dispatched:
            return "note"
        return "warning" if self.inferred else severity_of(self.code)

    @property
    def collective(self):
        """``(path, line)`` of the collective itself (the end of the chain, else the finding's line)."""
        if self.chain:
            return self.chain[-1][0], self.chain[-1][1]
        return self.path, self.line

    def collective_at(self):
        """Where the collective itself is, as a dict ``{path, line, col, text, what}``: the
        end of the chain for a collective reached through helpers (``text``: that line's
        source, ``what``: its name), else the finding's own place (``text`` and ``what`` None)."""
        if self.chain:
            path, line, text, what, col = self.chain[-1]
            return {"path": path, "line": line, "col": col, "text": text, "what": what}
        return {"path": self.path, "line": self.line, "col": self.col, "text": None, "what": None}

    def related(self):
        """The lines that explain the finding, as dicts ``{path, line, text, role}``: the branch
        (``role`` "branch"), the assignments its test's rank dependence comes from (``"origin"``,
        ``what``: the local's name), then each call on the way (``"call"``) and the collective
        (``"collective"``) when it is reached through helpers, then each other collective or
        helper call the same branch decides (``"also"``, in this file)."""
        out = [{"path": self.path, "line": self.related_line, "text": self.related_text, "role": "branch"}]
        for line, name, text, _how, path in self.origin:
            out.append({"path": path, "line": line, "text": text, "role": "origin", "what": name})
        for i, (path, line, text, what, _col) in enumerate(self.chain):
            out.append({"path": path, "line": line, "text": text,
                        "role": "collective" if i == len(self.chain) - 1 else "call", "what": what})
        for line, _col, text, what in self.also:
            out.append({"path": self.path, "line": line, "text": text, "role": "also", "what": what})
        return out

    def places(self):
        """``[(line, col)]`` of every collective (or helper call) the finding reports in its
        file: its own place, then each of :attr:`also`."""
        return [(self.line, self.col)] + [(line, col) for line, col, _, _ in self.also]

    def to_dict(self):
        """JSON form: ``related`` is the list of :meth:`related` (the branch first);
        ``collective``: :meth:`collective_at` (where to land for the collective itself)."""
        return {"code": self.code, "rule": RULES[self.code][0], "severity": self.severity, "path": self.path,
                "line": self.line, "col": self.col, "message": self.message, "function": self.function,
                "related": self.related(), "collective": self.collective_at()}

    def sort_key(self):
        return (self.path, self.line, self.col, self.code, self.message)


class _Guard:
    __slots__ = ("line", "level", "kind", "skip", "direct")

    def __init__(self, line, level, kind, skip=frozenset(), direct=True):
        self.line, self.level, self.kind, self.skip, self.direct = line, level, kind, skip, direct


class _Exit:
    __slots__ = ("line", "level", "kind", "loop", "abort", "direct", "sides", "note")

    def __init__(self, line, level, kind, loop, abort, direct=True, sides=(), note=""):
        self.line, self.level, self.kind, self.loop, self.abort = line, level, kind, loop, abort
        self.direct = direct
        #: the sides of the enclosing fixed tests the exit stands on (:func:`_side`)
        self.sides = sides
        #: where a helper's raise is, for an exit that is a helper's call (``"; its raise: f.py:12"``)
        self.note = note


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
#: exits that still run the ``finally:`` block of the ``try`` they leave
_FINALLY_RUNS = ("raise", "return", "continue", "break")
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
#: the most ways through a branch and the rest of its block that :meth:`_Walker.ways` compares
_MAX_WAYS = 64
#: the most tests after a branch that both its sides reach, whose decisions it compares them under
_MAX_SHARED = 6


#: the words that name an axis of a parallel layout
_AXES = {"tensor", "pipeline", "data", "expert", "context", "sequence", "dp", "tp", "pp", "ep", "cp", "sp",
         "embedding", "position", "stage"}


def _local_values(fn, name):
    """``([values], other)``: the values of the plain assignments ``name = value`` in function
    ``fn``'s own body, and whether ``name`` is also bound another way (``+=``, a loop, ``with
    ... as``, ``:=``)."""
    vals, other = [], False
    for n in walk_local(fn):
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
            vals.append(n.value)
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For, ast.withitem, ast.NamedExpr)):
            t = n.optional_vars if isinstance(n, ast.withitem) else n.target
            if t is not None and name in {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}:
                other = True
    return vals, other


def _words(e):
    """The lower-case words of the names in expression ``e`` (split at ``_`` and ``.``)."""
    out = []
    for n in ast.walk(e):
        x = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None
        if x:
            out.extend(w for w in x.lower().split("_") if w)
    return out


#: the words that name the model-parallel group, and the axes it holds
_MODEL = {"model", "mp"}
_MODEL_HOLDS = {"tensor", "tp", "pipeline", "pp", "stage"}
#: a rank call named for one axis of a parallel layout (its answer is a place within a group)
_AXIS_WORDS = re.compile(r"parallel|pipeline|tensor|data_|expert|stage|_dp_|_tp_|_pp_|_ep_|^dp_|^tp_|^pp_|^ep_", re.I)
#: the MPI calls that make a communicator of some of the ranks
_SPLITS = {"Split", "Split_type", "Create_group", "Create"}
#: the calls that answer a communicator's size
_SIZE_CALLS = {"Get_size", "size", "get_world_size"}


def _without(e, parts):
    """A copy of expression ``e`` with each of its nodes whose id is in ``parts`` replaced by a
    constant (``e`` itself is left as it is: the walk and the taint keep reading it)."""
    cp = copy.deepcopy(e)
    swap = {id(c) for o, c in zip(ast.walk(e), ast.walk(cp)) if id(o) in parts}

    class _Fixed(ast.NodeTransformer):
        def visit(self, node):
            if id(node) in swap:
                return ast.copy_location(ast.Constant(2), node)
            return self.generic_visit(node)
    return _Fixed().visit(cp)


def _rank_reads(test):
    """``[(node, receiver as dotted parts or None)]`` for each read of a communicator's rank in
    expression ``test``: ``X.rank`` (also as the callee of ``X.rank()``) and ``X.Get_rank()``."""
    out = []
    for n in ast.walk(test):
        if isinstance(n, ast.Attribute) and n.attr == "rank":
            out.append((n, dotted(n.value)))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "Get_rank" and \
                not n.args:
            out.append((n, dotted(n.func.value)))
    return out


def _sub_comm(parts):
    """True for a dotted name that holds a communicator of part of the job by its spelling:
    ``gd.comm``, ``self.kd.comm``, ``kpt_comm``; not a bare ``comm`` nor ``self.comm`` (often
    the whole job's), nor anything that names the world."""
    if any("world" in p.lower() for p in parts) or list(parts) in (["comm"], ["self", "comm"]):
        return False
    last = parts[-1].lower()
    return last.endswith("_comm") or (last == "comm" and len(parts) >= 2)


def _cond_contexts(exprs):
    """``{id(call): ((test, holds, owner), ...)}`` for each call of ``exprs`` (not inside a
    lambda) that runs only when tests decide so, outermost first: in a branch of a conditional
    expression (``f() if c else g()``: ``c`` holds for ``f()``, not for ``g()``), or after an
    operand of ``and`` (that operand holds) or ``or`` (it does not); ``owner`` is the
    ``IfExp``/``BoolOp``. Calls that always run are left out."""
    out = {}
    stack = [(e, ()) for e in exprs]
    while stack:
        n, ctx = stack.pop()
        if isinstance(n, _DEFS):
            continue
        if ctx and isinstance(n, ast.Call):
            out[id(n)] = ctx
        if isinstance(n, ast.IfExp):
            stack += [(n.test, ctx), (n.body, ctx + ((n.test, True, n),)), (n.orelse, ctx + ((n.test, False, n),))]
        elif isinstance(n, ast.BoolOp):
            holds = isinstance(n.op, ast.And)
            for v in n.values:
                stack.append((v, ctx))
                ctx = ctx + ((v, holds, n),)
        else:
            stack += [(c, ctx) for c in ast.iter_child_nodes(n)]
    return out


#: the wrapper a witness names as running its forward (``"forward of DDP"``, ``"loss() (reaches
#: forward of FSDP)"``)
_FORWARD_OF = re.compile(r"forward of (\w+)")


def _from_forward(walker, e, line, depth=0, seen=None):
    """The module wrapper (``"DDP"``) whose forward value ``e`` (read at ``line`` of the
    walker's function) is computed from: a call in it that reaches a wrapper's forward
    (``model(x)`` on a local, parameter or ``self`` attribute that holds one, or a tree
    function that runs one: ``self.compute_loss(batch)``), or a local whose assignments that
    reach ``line`` (:meth:`~hpc_hangkit.lint.taint.Taint.flowing_values`: also a tuple
    unpacked, ``logits, aux = model(x)``, and the local rebuilt from itself, ``loss = loss /
    accum``) are such values, six steps deep; else None."""
    if seen is None:
        seen = set()
    names = []
    for n in ast.walk(e):
        if n.__class__ is ast.Call:
            f = n.func
            if f.__class__ is ast.Attribute and f.attr == "backward":
                continue
            m = _FORWARD_OF.search(walker.witness(n) or "")
            if m:
                return m.group(1)
        elif n.__class__ is ast.Name and (n.id, line) not in seen:
            seen.add((n.id, line))
            names.append(n.id)
    if depth >= 6:
        return None
    for name in names:
        for value in walker.taint.flowing_values(name, line):
            w = _from_forward(walker, value, value.lineno, depth + 1, seen)
            if w:
                return w
    return None


def _no_sync(e):
    """True when expression ``e`` calls a ``no_sync()`` method (a wrapper's context that turns
    off its gradient reduction)."""
    return any(n.__class__ is ast.Call and n.func.__class__ is ast.Attribute and n.func.attr == "no_sync"
               for n in ast.walk(e))


def _no_sync_calls(fn):
    """Ids of the calls of function ``fn`` that run inside a ``with`` block which turns off
    a wrapper's gradient reduction: ``with model.no_sync():``, or a ``with ExitStack() as
    stack:`` whose block enters one (``stack.enter_context(m.no_sync())``, also in a loop)."""
    out = set()
    for st in walk_local(fn):
        if not isinstance(st, (ast.With, ast.AsyncWith)):
            continue
        if any(_no_sync(i.context_expr) for i in st.items) or any(
                n.__class__ is ast.Call and n.func.__class__ is ast.Attribute and n.func.attr == "enter_context"
                and any(_no_sync(a) for a in n.args) for n in _unconditional(st.body)):
            for b in st.body:
                out.update(id(n) for n in ast.walk(b) if n.__class__ is ast.Call)
    return out


def _unconditional(stmts):
    """The nodes of statements ``stmts`` that run whenever the block runs (a loop's body
    counted, as NeMo's loop over the DDP modules): not those under an ``if``, a ``try``'s
    handlers or a nested function."""
    todo = list(stmts)
    while todo:
        st = todo.pop()
        if isinstance(st, (ast.If, ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(st, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            todo.extend(st.body)
            continue
        yield from ast.walk(st)


def _calls_in(exprs):
    out = []
    for e in exprs:
        if isinstance(e, ast.Call):
            out.append(e)
        for n in walk_local(e):
            if isinstance(n, ast.Call):
                out.append(n)
    out.sort(key=lambda c: (c.lineno, c.col_offset))
    return out


class _Walker:
    def __init__(self, project, mod, ff, out, fixed=None):
        """``fixed``: class name -> :meth:`_fixed_attrs` of that class, shared by the walkers
        of one module (each class's methods walked once, not once per method that reaches a
        collective)."""
        self.project = project
        self.mod = mod
        self.ff = ff
        self.out = out
        self.taint = Taint(ff.node, mod, ff.cls, project, facts=ff)
        self.exits = []
        self.seen = set()
        #: line -> the test (or a loop's iterable) of the statement that starts there, built on
        #: the first finding (:meth:`_origin`)
        self._tests = None
        self._straights = {}
        #: a call's id -> the ids of the calls in other handlers of its ``try`` that stand for
        #: the same collectives (:meth:`_try_alternatives`)
        self._alts = {}
        #: id of a ``try`` statement -> what :meth:`_try_alternatives` made of it
        self._tries = {}
        #: inside a membership / use_local_synchronization branch: its early exits are by design
        self.members_only = 0
        #: the sides of the enclosing ``if`` tests of fixed values (:func:`_side`) the walk is on
        self.sides = ()
        self._fixed = fixed if fixed is not None else {}
        #: ids of the calls under `no_sync()`, and each backward call's answer by id, built on
        #: the first `.backward(...)` asked about (:meth:`_backward`)
        self._quiet = self._backwards = None
        #: ids of the ``if`` statements of a ``try`` body and its ``finally`` block that pair up
        #: (:meth:`paired_ifs`)
        self.paired = frozenset()
        #: how many ``try`` bodies with handlers the walk is in (a helper's raise is caught there)
        self.in_try = 0
        #: the enclosing tests of a rank against a constant, as ``(key, op, value, side)``
        #: (:func:`_rank_compare`): which ranks can be here
        self.rank_path = ()
        #: receiver (dotted, as a tuple) -> whether only a ``Split`` ever makes it (:meth:`_on_subgroup`)
        self._subgroups = {}

    # ---------------------------------------------------------------- calls
    def witness(self, call):
        """What a call reaches: ``"all_reduce"`` / ``"helper() -> all_reduce"`` or None."""
        kind, name = self.taint.call_kind(call)
        if kind == "collective":
            return name
        if kind == "p2p":
            return None
        callee = self.project.callee(self.mod, self.ff.cls, self.ff.qualname, call)
        if callee is None:
            return self.project.wrapper(call_ref(self.mod, self.ff.cls, self.ff.qualname, call)) or \
                wrapper_at(self.ff, call) or attr_state_dict(self.mod, self.ff.cls, call) or \
                self._backward(call)
        if callee.witness:
            short = callee.qualname.rsplit(".", 1)[-1]
            if callee.witness == short + "()":
                return callee.witness
            d = dotted(call.func) if short == "__call__" else None
            if d and d[-1] != short:
                # an object called (`self._metric(x)`): its class's `__call__` runs
                return "%s() (%s, reaches %s)" % (d[-1], ".".join(callee.qualname.rsplit(".", 2)[-2:]),
                                                  callee.witness)
            return "%s() (reaches %s)" % (short, callee.witness)
        got = self.project.wrap_witness(self.mod, self.ff, call, callee)
        if got is not None:
            return "%s() (reaches %s)" % (callee.qualname.rsplit(".", 1)[-1], got[0])
        return None

    def _backward(self, call):
        """``"backward of DDP"`` for autograd's backward (``loss.backward()``,
        ``scaler.scale(loss).backward()``, ``torch.autograd.backward(loss)``) of a value computed
        from what a module wrapper's forward returned (:func:`_from_forward`): the wrapper's
        hooks reduce the gradients over the group during that backward, so a rank that skips
        it leaves the others there. Not inside a ``with model.no_sync():`` block (gradient
        accumulation: no reduction then)."""
        f = call.func
        if f.__class__ is not ast.Attribute or f.attr != "backward":
            return None
        d = dotted(f)
        if d and tuple(d[-2:]) == ("autograd", "backward"):
            if not call.args:
                return None
            value = call.args[0]
        else:
            value = f.value
        if self._quiet is None:
            self._quiet, self._backwards = _no_sync_calls(self.ff.node), {}
        if id(call) in self._quiet:
            return None
        if id(call) not in self._backwards:
            w = _from_forward(self, value, call.lineno)
            self._backwards[id(call)] = "backward of " + w if w else None
        return self._backwards[id(call)]

    def _own_group_size(self, st, rest=()):
        """True when ``if`` statement ``st`` tests the size of a communicator (``comm.size > 1``,
        ``comm.Get_size()``) and is no longer rank-dependent without those sizes, and every
        collective its branches reach is a method of that same communicator, with no early exit
        in them: a group's size is the same on each of its members, and only they take part in
        its collectives (heat's `if leave_comm.size > 1: leave_comm.bcast(...)` after
        ``leave_comm = comm.Split(rank // k, rank)``). An early exit is allowed from a test in
        the function's own body whose every later collective (``rest``: the statements after
        it) is also a method of that communicator: its members all leave or all stay (GPAW's
        ``if comm.size == 1: return self`` before ``comm.broadcast(...)``)."""
        sizes = {}
        for n in ast.walk(st.test):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _SIZE_CALLS \
                    and not n.args and not n.keywords:
                recv = dotted(n.func.value)
            elif isinstance(n, ast.Attribute) and n.attr == "size":
                recv = dotted(n.value)
            else:
                continue
            if recv:
                sizes[id(n)] = tuple(recv)
        groups = set(sizes.values())
        if len(groups) != 1:
            return False
        exits = self.exits_of(st.body)[0] | self.exits_of(st.orelse)[0]
        if exits and (exits - {"return"} or not any(st is x for x in getattr(self.ff.node, "body", ()))):
            return False
        stmts = st.body + st.orelse + (list(rest) if exits else [])
        calls = _calls_in([x for x in stmts if not isinstance(x, _DEFS)])
        witnessed = [c for c in calls if self.witness(c)]
        if not witnessed or any(not (isinstance(c.func, ast.Attribute) and tuple(dotted(c.func.value) or ()) in groups)
                                for c in witnessed):
            return False

        return self.taint.test_level_at(_without(st.test, sizes), st.lineno) == 0

    def chain(self, call):
        """``((path, line, text, what), ...)`` from a helper's call down to its collective."""
        callee = self.project.callee(self.mod, self.ff.cls, self.ff.qualname, call)
        if callee is None or self.taint.call_kind(call)[0] == "collective":
            return ()
        if callee.witness:
            steps = self.project.chain(callee)
        else:
            got = self.project.wrap_witness(self.mod, self.ff, call, callee)
            if got is None:
                return ()
            steps = got[1]
        out = []
        for path, line, what in steps:
            raw = _line_text(self.project, path, line, self.mod)
            name = what.split("(", 1)[0].rsplit(" ", 1)[-1]
            at = raw.find(name + "(") if name else -1
            while at > 0 and (raw[at - 1].isalnum() or raw[at - 1] in "_."):
                at -= 1  # the call's start, its receiver included (`dist.all_reduce(`), as a finding's col
            col = (at if at >= 0 else len(raw) - len(raw.lstrip())) + 1
            out.append((path, line, code_of(raw), what, col))
        return tuple(out)

    def sigs(self, stmts):
        """``[(what, id of the call)]``: the collectives ``stmts`` reach, in source order; a call
        of a function of this module that reaches its collectives on every call, in a straight
        line (:meth:`_straight`), stands for them, one entry each (so that `asyncio.run(serve())`,
        whose coroutine broadcasts and then waits in a barrier, matches the other side's
        `bcast` and `Barrier`)."""
        out = []
        for st in stmts:
            if isinstance(st, _DEFS):
                continue
            alt = self._try_alternatives(st) if isinstance(st, ast.Try) else None
            if alt is not None:
                out.extend(((n.lineno, n.col_offset, k), w, i) for k, (w, i, n) in enumerate(alt))
                continue
            for n in ([st] + list(walk_local(st))):
                if isinstance(n, ast.Call):
                    w = self.witness(n)
                    if w:
                        seq = None
                        if self.taint.call_kind(n)[0] != "collective":
                            callee = self.project.callee(self.mod, self.ff.cls, self.ff.qualname, n)
                            seq = self._straight(callee) if callee is not None else None
                        for k, name in enumerate(seq or (w,)):
                            out.append(((n.lineno, n.col_offset, k), name, id(n)))
        out.sort(key=lambda x: x[0])
        return [(w, i) for _, w, i in out]

    def _try_alternatives(self, st):
        """For a ``try`` statement ``st`` whose body reaches no collective and cannot leave the
        function: ``[(what, id, call)]`` of its ``else`` block, then of its ``finally`` block,
        when the ``else`` and every handler reach the same collectives in the same order (cobaya's
        root: ``try: result = func() / except: share_mpi(); raise / else: share_mpi([result])``
        reaches one ``bcast`` either way); the handlers' calls are kept in :attr:`_alts` as the
        same collectives (:meth:`_alts_of`). Else None: every call counts, as written."""
        key = id(st)
        if key not in self._tries:
            self._tries[key] = self._try_alternatives_of(st)
        return self._tries[key]

    def _try_alternatives_of(self, st):
        if not st.handlers or self.sigs(st.body) or \
                self.exits_of(st.body)[0] & {"return", "exit", "continue", "break"}:
            return None
        arms = [self.sigs(st.orelse)] + [self.sigs(h.body) for h in st.handlers]
        if not arms[0] or any([w for w, _ in a] != [w for w, _ in arms[0]] for a in arms[1:]):
            return None
        calls = {id(n): n for n in ast.walk(st) if isinstance(n, ast.Call)}
        for k, (_, i) in enumerate(arms[0]):
            self._alts.setdefault(i, set()).update(a[k][1] for a in arms[1:])
        # the `finally` block runs after either, once
        return [(w, i, calls[i]) for w, i in arms[0] + self.sigs(st.finalbody)]

    def _alts_of(self, ids):
        """``ids`` (a frozenset of call ids matched by the other side) with the calls that
        :meth:`_try_alternatives` keeps as the same collectives as one of them."""
        extra = [j for i in ids for j in self._alts.get(i, ())]
        return ids | frozenset(extra) if extra else ids

    def _straight(self, ff, depth=0):
        """The names of the collectives function ``ff`` of this module reaches on every call, in
        order, when each is reached in a straight line: not under a test, in a loop or a ``try``,
        nor after a ``return`` (``with`` blocks are run once), directly or through functions of
        this module that are straight themselves; else None (also past three calls deep)."""
        key = id(ff)
        if key in self._straights:
            return self._straights[key]
        self._straights[key] = None  # a recursive call is not straight
        out = []
        ok = ff.module == self.mod.key and ff.node is not None and depth <= 3 and \
            self._straight_block(ff, ff.node.body, out, depth)
        self._straights[key] = got = tuple(out) if ok and out else None
        return got

    def _straight_block(self, ff, stmts, out, depth):
        for st in stmts:
            if isinstance(st, _DEFS):
                continue
            if isinstance(st, (ast.With, ast.AsyncWith)):
                heads = [x for item in st.items for x in ast.walk(item.context_expr) if isinstance(x, ast.Call)]
                if not self._straight_calls(ff, heads, out, depth) or \
                        not self._straight_block(ff, st.body, out, depth):
                    return False
                continue
            calls = [n for n in ([st] + list(walk_local(st))) if isinstance(n, ast.Call)]
            if isinstance(st, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.Raise)) or \
                    type(st).__name__ in ("Match", "TryStar"):
                if any(self._reaches(ff, n) for n in calls):
                    return False
                if isinstance(st, ast.Raise):
                    return True
                continue
            calls.sort(key=lambda n: (n.lineno, n.col_offset))
            if not self._straight_calls(ff, calls, out, depth):
                return False
            if isinstance(st, ast.Return):
                return True
        return True

    def _reaches(self, ff, call):
        if self.project.call_kind(self.mod, call)[0] == "collective":
            return True
        callee = self.project.callee(self.mod, ff.cls, ff.qualname, call)
        return callee is not None and bool(callee.witness)

    def _straight_calls(self, ff, calls, out, depth):
        for n in calls:
            kind, name = self.project.call_kind(self.mod, n)
            if kind == "collective":
                out.append(name)
                continue
            callee = self.project.callee(self.mod, ff.cls, ff.qualname, n)
            if callee is not None and callee.witness:
                seq = self._straight(callee, depth + 1)
                if seq is None:
                    return False
                out.extend(seq)
        return True

    def _emit(self, code, node, what, line, detail, direct=True, note="", hooked=False):
        if id(node) in self.seen:
            return
        self.seen.add(id(node))
        on_group = False
        if code.startswith("HK1") and isinstance(node, ast.Call):
            group = self._group_of(node)
            if group is None and self.taint.call_kind(node)[0] != "collective":
                at, _ = self._helper_collective(node)
                group = self._group_of(at) if at is not None else self._remote_group(node)
            if (self._on_subgroup(node) and not self._tests_own_rank(node, line)) or \
                    (group is not None and self._group_relative_test(line, group)) or \
                    self._other_comm_rank(node, line):
                on_group = True
        chain = self.chain(node) if isinstance(node, ast.Call) else ()
        dispatched = bool(chain) and self.project.dispatched(self.mod, self.ff.cls, self.ff.qualname, node)
        origin = self._origin(line)
        msg = "%s %s (line %d: `%s`%s%s)" % (what, detail, line, self.mod.code_text(line), "".join(
            "; `%s` %s line %d: `%s`" % (name, "from" if how == "from" else "is set under" if how == "under"
                                         else "grows only as decided at", ln, text)
            if how != "handed" else "; `%s` is handed, through the callers, the value of `%s` at %s:%d, None on some ranks" % (
                name, text, os.path.basename(path), ln)
            for ln, name, text, how, path in origin), note)
        if chain:
            msg += "; the collective: " + " -> ".join(
                "%s at %s:%d" % (w, os.path.basename(p), ln) for p, ln, _, w, _ in chain)
        if dispatched:
            msg += "; only a subclass's override reaches it, and an annotation declares the class: " \
                   "which class runs is the caller's or the configuration's choice"
        self.out.append(Finding(code, self.mod.path, node.lineno, node.col_offset + 1, msg,
                                line, self.mod.code_text(line), self.ff.qualname, chain,
                                inferred=code.startswith("HK1") and not direct, group=on_group,
                                hooked=hooked, dispatched=dispatched, what=what, origin=origin))

    def _origin(self, line):
        """``[(line, name, how)]``: where the locals that the test at ``line`` reads got their rank
        dependence (:meth:`~hpc_hangkit.lint.taint.Taint.origin`); empty for a line that starts
        no ``if``/``while``/``for`` of this function, or whose test names its source itself."""
        if self._tests is None:
            self._tests = {}
            for n in walk_local(self.ff.node):
                if isinstance(n, (ast.If, ast.While)):
                    self._tests.setdefault(n.lineno, n.test)
                elif isinstance(n, (ast.For, ast.AsyncFor)):
                    self._tests.setdefault(n.lineno, n.iter)
        e = self._tests.get(line)
        if e is None:
            return ()
        out = [(ln, name, self.mod.code_text(ln), how, self.mod.path) for ln, name, how in self.taint.origin(e, line)]
        handed = self.ff.param_from
        if handed:
            named = {o[1] for o in out}
            # only a None test reads what was handed (`Taint._param_none`)
            for name in sorted(none_read_names(e) & set(handed) - named):
                path, ln = handed[name]
                out.append((ln, name, code_of(_line_text(self.project, path, ln, self.mod)), "handed", path))
        return tuple(out)

    def _on_subgroup(self, call):
        """True when ``call`` runs on a communicator that an MPI ``Split`` (``Split_type``,
        ``Create_group``, ``Create``) made: its receiver or its ``comm=`` argument is a local
        or a ``self`` attribute that only ever holds such a communicator. Which ranks are its
        members, and whether they all take the same side of the rank test, is the split's
        color's business (a master/worker split, `comm_active = comm.Split(active)` under
        `while active:`): the finding is reported at ``note`` level (measured: 16 such
        `error` findings in nbodykit and pySDC, all false alarms)."""
        if self._split_operand(call, self.ff):
            return True
        if self.taint.call_kind(call)[0] == "collective":
            return False
        at, where = self._helper_collective(call)
        return at is not None and isinstance(at.func, ast.Attribute) and self._split_operand(at, where)

    def _helper_collective(self, call):
        """``(collective call node, its function's facts)`` that helper call ``call`` reaches,
        when that function is of this module and class (its tree is loaded: a nested helper,
        a method), else ``(None, None)``."""
        callee = self._chain_end(call)
        if callee is None or callee.path != self.ff.path or callee.cls != self.ff.cls:
            return None, None
        home = callee.general or callee  # a copy specialised to constant arguments has no tree
        if home.node is None:
            return None, None
        line = callee.via[0]
        at = next((n for n in walk_local(home.node) if isinstance(n, ast.Call) and n.lineno == line), None)
        return at, home

    def _tests_own_rank(self, call, line):
        """True when the test at ``line`` reads this rank's number in the communicator
        ``call`` runs on (``if sub.Get_rank() == 0: sub.Barrier()``): the members of that group
        do take different sides."""
        test = self._test_at(line)
        recv = dotted(call.func.value) if isinstance(call.func, ast.Attribute) else None
        if test is None or not recv:
            return False
        return any(d == recv for _, d in _rank_reads(test))

    def _split_operand(self, at, where):
        """True when call ``at`` (in function ``where``) runs on a communicator that only a
        ``Split`` makes (:meth:`_made_by_split`): its receiver, when it is a collective, or its
        ``comm=`` argument."""
        cands = [at.func.value] if isinstance(at.func, ast.Attribute) and (
            where is not self.ff or self.taint.call_kind(at)[0] == "collective") else []
        cands += [k.value for k in at.keywords if k.arg in ("comm", "communicator")]
        for e in cands:
            d = dotted(e)
            if not d or len(d) > 2 or (len(d) == 2 and d[0] != "self"):
                continue
            key = (where.qualname,) + tuple(d) if len(d) == 1 else tuple(d)
            got = self._subgroups.get(key)
            if got is None:
                got = self._subgroups[key] = self._made_by_split(tuple(d), where)
            if got:
                return True
        return False

    def _test_at(self, line):
        """The test of the ``if``/``while`` (or the iterable of the ``for``) of this function
        that starts at ``line``, or None."""
        for n in walk_local(self.ff.node):
            if n.lineno == line if hasattr(n, "lineno") else False:
                if isinstance(n, (ast.If, ast.While)):
                    return n.test
                if isinstance(n, (ast.For, ast.AsyncFor)):
                    return n.iter
        return None

    def _group_of(self, call):
        """:func:`~hpc_hangkit.lint.model.group_arg` of ``call``."""
        return group_arg(call)

    def _chain_end(self, call):
        """The facts of the function at the end of the chain from helper call ``call`` to the
        collective it reaches (the one that calls the collective itself, ``via`` its line), or
        None."""
        callee = self.project.callee(self.mod, self.ff.cls, self.ff.qualname, call)
        seen = set()
        while callee is not None and callee.via is not None and callee.via[1] is not None and \
                id(callee) not in seen:
            seen.add(id(callee))
            callee = callee.via[1]
        return callee if callee is not None and callee.via is not None else None

    def _remote_group(self, call):
        """The process group of the collective that helper call ``call`` reaches at the end of
        its chain, in any module, where that collective names its group by itself
        (:attr:`~hpc_hangkit.lint.model.FuncFacts.direct_groups`), parsed; else None."""
        callee = self._chain_end(call)
        if callee is None:
            return None
        home = callee.general or callee
        text = (home.direct_groups or {}).get(callee.via[0])
        return ast.parse(text, mode="eval").body if text is not None else None

    def _other_comm_rank(self, call, line):
        """True when the rank-dependent test at ``line`` reads only this rank's number in
        sub-communicators (``gd.comm.rank``, ``kpt_comm.rank``, ``self.kd.comm.Get_rank()``) other
        than the one the collective runs on (``kpt_comm.gather(...)``, directly or in a helper
        of this class), and no process-wide rank: the MPI counterpart of
        :meth:`_group_relative_test`. Which ranks share a place in another communicator is the
        layout's business (GPAW's k-point, band and domain communicators are the axes of one
        Cartesian split: the members of one all share their rank in the others)."""
        test = self._test_at(line)
        if test is None:
            return False
        at = call
        if self.taint.call_kind(call)[0] != "collective":
            at, _ = self._helper_collective(call)
            if at is None:
                return False
        recv = dotted(at.func.value) if isinstance(at.func, ast.Attribute) else None
        if not recv or not _sub_comm(recv):
            return False
        reads = {}
        for n, d in _rank_reads(test):
            if not d or not _sub_comm(d) or d == recv:
                return False
            reads[id(n)] = d
        return bool(reads) and self.taint.test_level_at(_without(test, reads), line) == 0

    def _group_relative_test(self, line, group):
        """True when the rank-dependent test at ``line`` reads only this rank's place within a
        named group or mesh axis other than ``group`` (the collective's): a rank call given a
        group (`dist.get_rank(self.dp_group)`, `gpc.get_local_rank(ParallelMode.X)`,
        `mesh.coordinate(axis)`), a call or attribute named for an axis
        (`get_tensor_model_parallel_rank()`, `is_first_stage()`, `self.pp_group_rank`), directly
        or through locals assigned one, and no process-wide rank.
        The members of a group on another axis share that place, so whether they all take the
        same side is the layout's business (colossalai's 2D/3D layers, Megatron-Core's
        pipeline stages); a rank in the collective's own group keeps the finding an error."""
        gtexts = {ast.dump(x) for x in ast.walk(group) if isinstance(x, ast.expr)}
        gwords = set(_words(group))
        if isinstance(group, ast.Name):
            for v in _local_values(self.ff.node, group.id)[0]:
                gwords.update(_words(v))
                gtexts.update(ast.dump(x) for x in ast.walk(v) if isinstance(x, ast.expr))
        if gwords & _MODEL and not gwords & _MODEL_HOLDS:
            # the model-parallel group (not `tensor_model_parallel`): it holds the tensor and
            # pipeline axes
            gwords |= _MODEL_HOLDS
        test = self._test_at(line)
        if test is None:
            return False
        rel = glob = 0
        todo, seen = [test], set()
        while todo:
            for n in ast.walk(todo.pop()):
                if isinstance(n, ast.Call):
                    name = (dotted(n.func) or [""])[-1]
                    if "stage" in name.lower() and name.startswith("is_") or name == "coordinate" or \
                            C.is_rank_call(name):
                        given = list(n.args) + [k.value for k in n.keywords]
                        if given:
                            if any(ast.dump(a) in gtexts for a in given):
                                glob += 1  # this rank's place in the collective's own group
                            else:
                                rel += 1
                        elif _AXIS_WORDS.search(name) or "stage" in name.lower():
                            if set(w for w in name.lower().split("_") if w) & gwords & _AXES:
                                glob += 1
                            else:
                                rel += 1
                        else:
                            glob += 1
                elif isinstance(n, ast.Attribute) and (n.attr in C.RANK_NAMES or C.is_rank_attr(n.attr) or
                                                       n.attr.lower().endswith("_rank")):
                    # `self.pp_group_rank`: this rank's place on the axis its name says
                    axes = set(w for w in n.attr.lower().split("_") if w) & _AXES
                    if axes:
                        if axes & gwords:
                            glob += 1
                        else:
                            rel += 1
                    elif n.attr in C.RANK_NAMES or C.is_rank_attr(n.attr):
                        glob += 1
                elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in seen:
                    seen.add(n.id)
                    vals = _local_values(self.ff.node, n.id)[0]
                    if vals:
                        todo.extend(vals)
                    elif n.id in C.RANK_NAMES:
                        glob += 1
        return rel > 0 and glob == 0

    def _made_by_split(self, key, ff, depth=0):
        """True when every value ``key`` (a local, or ``("self", attr)``) is assigned is a
        ``Split``-like call (:data:`_SPLITS`) with a color that is not a constant, None, or a
        local that only ever holds those, and at least one is such a call."""
        vals = []
        if len(key) == 1:
            vals, other = _local_values(ff.node, key[0])
            if other or key[0] in ff.params:
                return False
        else:
            for other in self.mod.funcs.values():
                if other.cls != ff.cls or other.node is None:
                    continue
                for n in walk_local(other.node):
                    if isinstance(n, ast.Assign) and any(
                            isinstance(t, ast.Attribute) and t.attr == key[1] and isinstance(t.value, ast.Name)
                            and t.value.id == "self" for t in n.targets):
                        vals.append(n.value)
        split = False
        for v in vals:
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in _SPLITS and \
                    (v.args or v.keywords) and not all(isinstance(a, ast.Constant) for a in v.args[:1]):
                split = True
            elif isinstance(v, ast.Constant) and v.value is None:
                continue
            elif isinstance(v, ast.Name) and len(key) == 1 and depth < 3 and v.id != key[0] and \
                    self._made_by_split((v.id,), ff, depth + 1):
                split = True
            else:
                return False
        return split

    def call(self, call, guards, loops):
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
        if name in C.GROUP_CREATE and not any(isinstance(lp, (ast.For, ast.AsyncFor)) for lp in loops):
            # inside a `for` every rank usually creates every group in turn (the right way)
            self.group_create(call)
        w = self.witness(call)
        if not w:
            return
        if w.rsplit(" ", 1)[-1].rstrip(")").rstrip("(") in C.ABORTS or name in C.ABORTS:
            return  # tearing the group down ends the job's collectives; it is how a hang is avoided
        # the innermost of the most certain guards: a rank test around a file check is the
        # rank test's finding (the file check only narrows which of rank 0's runs reach it)
        top = max((g.level for g in guards if g.level and id(call) not in g.skip), default=0)
        for g in reversed(guards):
            if not g.level or g.level != top or id(call) in g.skip:
                continue
            dep = g.level == 2
            if g.kind == "loop":
                self._emit("HK105" if dep else "HK205", call, w,
                           g.line, "runs once per iteration of a loop whose trip count is %s"
                           % ("rank-dependent" if dep else "rank-local"), g.direct)
            elif g.kind == "except":
                if name in C.ABORTS:
                    return  # tearing the group down on an error is the cure, not the hang
                self._emit("HK101" if dep else "HK201", call, w, g.line,
                           "runs only on ranks that raised, in this except handler")
            elif g.kind == "gate":
                self._emit("HK101", call, w, g.line,
                           "is reached only on the ranks that the function's decorator runs it on", g.direct)
            else:
                self._emit("HK101" if dep else "HK201", call, w, g.line,
                           "is reached only on ranks where the %s condition is %s"
                           % ("rank-dependent" if dep else "rank-local", "true" if g.kind == "if" else "false"),
                           g.direct)
            return
        for e in reversed(self.exits):
            if e.loop is not None and e.loop not in loops:
                continue
            if e.sides and _exclusive(e.sides, self.sides):
                # the exit stands where a fixed test holds and this call where it does not: the
                # ranks that leave would not reach it anyway (`if store is None: raise` ...
                # `if store is not None: all_gather(...)`)
                continue
            dep = e.level == 2
            if e.kind == "raise":
                if e.abort:
                    continue
                # pytest catches what a test raises and goes on: no hook fires in a test module
                hook = None if _pytest_module(self.mod.path) else self.project.abort_hook
                self._emit("HK103" if dep else "HK203", call, w, e.line,
                           "comes after a %s raise with no abort: the ranks that raise leave the others waiting"
                           % ("rank-dependent" if dep else "rank-local"), e.direct,
                           e.note + ("; but the hook at %s:%d aborts the job on an exception no "
                                     "caller catches" % (os.path.basename(hook[0]), hook[1]) if hook else ""),
                           hooked=bool(hook))
            else:
                self._emit("HK102" if dep else "HK202", call, w, e.line,
                           "comes after a %s early %s: the ranks that leave never reach it"
                           % ("rank-dependent" if dep else "rank-local", e.kind), e.direct)
            return
        if name in _SIZE_MUST_MATCH and call.args and isinstance(call.args[0], ast.Name):
            test = self.taint.guard_reaching(call.args[0].id, call.lineno)
            if test is not None and call.args[0].id not in self.taint.agreed and \
                    not self._scaled_alike(test, call.args[0].id):
                self._emit("HK107", call, w, test.lineno,
                           "gets `%s`, built under a rank-dependent branch: every rank must hand it a buffer "
                           "of the same size" % call.args[0].id, self.taint.direct_level(test) == 2)

    def _scaled_alike(self, test, name):
        """True when the ``if`` whose test is ``test`` assigns ``name`` last on both of its sides,
        from values that differ only in the numbers of their outermost arithmetic (``x * 0.25``
        on the root, ``x * 0.5`` elsewhere): a scalar factor leaves the buffer's size as it is."""
        st = next((n for n in walk_local(self.ff.node) if isinstance(n, ast.If) and n.test is test), None)
        if st is None or not st.orelse:
            return False
        vals = []
        for side in (st.body, st.orelse):
            last = side[-1]
            if not (isinstance(last, ast.Assign) and len(last.targets) == 1 and
                    isinstance(last.targets[0], ast.Name) and last.targets[0].id == name):
                return False
            vals.append(last.value)
        return isinstance(vals[0], ast.BinOp) and _unscaled(vals[0]) == _unscaled(vals[1])

    def group_create(self, call):
        for k in call.keywords:
            if k.arg == "use_local_synchronization" and isinstance(k.value, ast.Constant) and k.value.value:
                return
        vals = list(call.args) + [k.value for k in call.keywords]
        if any(self.taint.level(v) == 2 for v in vals):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id
            self._emit("HK104", call, name, call.lineno,
                       "gets rank-dependent arguments without use_local_synchronization=True: every rank of "
                       "the parent group must call it with the same ranks",
                       any(self.taint.direct_level(v) == 2 for v in vals))

    # ---------------------------------------------------------------- a helper's raise
    def helper_raise(self, call):
        """``(path, line)`` of a ``raise`` of the tree function ``call`` calls that stands under
        a test of the rank in that function (``if rank >= len(payloads): raise IndexError``),
        outside any ``try`` of its own and any single-process branch; None when there is none
        (or the function is not in the tree). Each function is read once."""
        callee = self.project.callee(self.mod, self.ff.cls, self.ff.qualname, call)
        if callee is None or not callee.raises:
            return None
        home = callee.general or callee
        if home.node is None:
            return None
        cache = self.project.__dict__.setdefault("_helper_raises", {})
        if id(home) not in cache:
            cache[id(home)] = self._rank_raise_in(home)
        return cache[id(home)]

    def _rank_raise_in(self, ff):
        mod = self.project.modules.get(os.path.normpath(os.path.abspath(ff.path))) if ff.path != self.mod.path \
            else self.mod
        if mod is None:
            return None
        # a module function, not a closure: a recursive closure is a reference cycle, and the
        # lint runs with the cyclic collector off
        line = _rank_raise_line(ff.node.body, False, Taint(ff.node, mod, ff.cls, self.project, facts=ff))
        return (ff.path, line) if line else None

    # ---------------------------------------------------------------- ways through
    def arms_agree(self, st, rest, end):
        """Whether the two sides of ``if`` statement ``st``, each followed by ``rest`` (the
        statements after it in its block, which ends the way ``end`` says: "return",
        "continue", "fall"), reach the same collectives in the same order and leave the same
        way (:meth:`ways`), whatever the tests after ``st`` that both sides reach decide:
        ``"one"`` when each side then has one way through and they are the same (every rank
        does the same, whichever side it takes), ``"many"`` when both have the same set of
        several ways (which one a rank takes is decided by tests inside the sides, which must
        then agree across the ranks: sglang's `broadcast_pyobj`, whose root tests its data's
        length and the others the broadcast size), else None (also when there are too many
        ways to compare)."""
        rc = _rank_compare(st.test)
        paths = [self.rank_path + ((rc + (side,),) if rc is not None else ()) for side in (True, False)]
        a = self.ways(list(st.body) + list(rest), end, paths[0])
        b = self.ways(list(st.orelse) + list(rest), end, paths[1]) if a is not None else None
        if b is None:
            return None
        # a test after `st` that both sides reach decides alike for both; one only one side
        # reaches is that side's own choice
        shared = sorted({t for _, _, d in a for t, _ in d} & {t for _, _, d in b for t, _ in d})
        if len(shared) > _MAX_SHARED:
            return None
        many = False
        for bits in range(1 << len(shared)):
            pick = {t: bool(bits >> k & 1) for k, t in enumerate(shared)}
            sides = [{(seq, how) for seq, how, d in ways if all(pick.get(t, v) == v for t, v in d)}
                     for ways in (a, b)]
            if sides[0] != sides[1]:
                return None
            many = many or len(sides[0]) > 1
        return "many" if many else "one"

    def ways(self, stmts, end="fall", path=()):
        """The ways through ``stmts``, as a set of ``(collectives, how it ends, decisions)``:
        the names of the collectives reached, in order (a loop, ``try`` or ``match`` that
        reaches one or leaves the function counts as one element, itself); "return",
        "raise@LINE", "exit", "continue", "break" or ``end`` for a way that runs off the end;
        the sides taken of the ``if`` tests on the way whose sides differ, as ``(id of the
        test, bool)``.
        None for more than :data:`_MAX_WAYS` ways. ``path``: the rank tests around
        (:attr:`rank_path`): a test they decide takes only its decided side."""
        got = self._ways(stmts, path)
        if got is None:
            return None
        return {(seq, how or end, d) for seq, how, d in got}

    def _ways(self, stmts, path=()):
        cur = {((), None, ())}
        for st in stmts:
            live = [w for w in cur if w[1] is None]
            if not live:
                break
            step = self._stmt_ways(st, path)
            if step is None:
                return None
            cur = {w for w in cur if w[1] is not None} | \
                {(seq + s, how, d + d2) for seq, _, d in live for s, how, d2 in step}
            if len(cur) > _MAX_WAYS:
                return None
        return cur

    def _stmt_ways(self, st, path=()):
        if isinstance(st, _DEFS):
            return {((), None, ())}
        head, how = [], None
        for call in _calls_in(header_exprs(st)):
            w = self.witness(call)
            if w:
                head.append(w)
            if self._ends_process(call):
                how = "exit"
        head = tuple(head)
        if how:
            return {(head, how, ())}
        raises = set()
        if self._stmt_calls([st]) and any(c.raises for c in [self.project.callee(
                self.mod, self.ff.cls, self.ff.qualname, st.value)] if c is not None):
            # a helper called as a statement raises (as in exits_of); a raise is told apart by its
            # line: two raises are two errors, which need not come on the same ranks
            raises = {(head, "raise@%d" % st.lineno, ())}
        if isinstance(st, ast.If):
            rc = _rank_compare(st.test)
            took = _decided(rc, path) if rc is not None else None
            if took is not None:
                got = self._ways(st.body if took else st.orelse, path)
                return None if got is None else {(head + seq, h, d) for seq, h, d in got}
            arms = [self._ways(arm, path + ((rc + (side,),) if rc is not None else ()))
                    for side, arm in ((True, st.body), (False, st.orelse))]
            if None in arms:
                return None
            if {w[:2] for w in arms[0]} == {w[:2] for w in arms[1]}:
                return {(head + seq, h, d) for arm in arms for seq, h, d in arm}
            return {(head + seq, h, ((id(st.test), side),) + d)
                    for side, arm in zip((True, False), arms) for seq, h, d in arm}
        if isinstance(st, (ast.With, ast.AsyncWith)):
            got = self._ways(st.body, path)
            return None if got is None else {(head + seq, h, d) for seq, h, d in got}
        if isinstance(st, _LOOPS) or isinstance(st, ast.Try) or type(st).__name__ in ("TryStar", "Match"):
            inner = [x for x in ast.iter_child_nodes(st) if isinstance(x, ast.stmt)] + \
                [c for h in getattr(st, "handlers", ()) for c in h.body] + \
                [c for case in getattr(st, "cases", ()) for c in case.body]
            if self.sigs(inner) or self.exits_of(inner)[0] & {"return", "raise", "exit"}:
                return {(head + ("%s@%d" % (type(st).__name__, st.lineno),), None, ())}
            return {(head, None, ())}
        if isinstance(st, ast.Return):
            return {(head, "return", ())} | raises
        if isinstance(st, ast.Raise):
            return {(head, "raise@%d" % st.lineno, ())}
        if isinstance(st, (ast.Continue, ast.Break)):
            return {(head, "continue" if isinstance(st, ast.Continue) else "break", ())}
        return {(head, None, ())} | raises

    def _ends_process(self, call):
        """True when ``call`` ends the process (``sys.exit``, ``os._exit``, a helper that always does)."""
        parts = dotted(call.func)
        if parts and (qualify(self.mod, parts) or ".".join(parts)) in C.EXITS:
            return True
        callee = self.project.callee(self.mod, self.ff.cls, self.ff.qualname, call)
        return callee is not None and callee.noreturn

    def _fixed_attrs(self):
        """The ``self.x`` of this method's class that only its ``__init__`` assigns (settings
        fixed for the object's life: Lightning's ``self._state_dict_type``), as ``"self.x"``
        strings; built once per class of the module. Empty outside a class, or for a class without
        ``__init__`` here."""
        cls = self.ff.cls
        got = self._fixed.get(cls)
        if got is None:
            init, other = set(), set()
            for ff in self.mod.funcs.values() if cls else ():
                if ff.cls != cls or ff.node is None or not ff.qualname.startswith(cls + "."):
                    continue
                into = init if ff.qualname == cls + ".__init__" else other
                for n in walk_local(ff.node):
                    if isinstance(n, ast.Attribute) and isinstance(n.ctx, (ast.Store, ast.Del)) and \
                            isinstance(n.value, ast.Name) and n.value.id == "self":
                        into.add("self." + n.attr)
            got = self._fixed[cls] = frozenset(init - other)
        return got

    def _through(self, stmts, before):
        """The early exits that matter after block ``stmts`` (just walked; ``before``: the exits
        before it): where no path through the block goes on after it, the function-leaving exits
        made inside it are dropped, for every rank that entered the block leaves it anyway (a
        raise on a bad rank, then `return`, in a branch the others skip)."""
        if not stmts or not self._never_falls_through(stmts):
            return self.exits
        return [e for e in self.exits if e in before or e.loop is not None]

    def _never_falls_through(self, stmts):
        """True when no path through block ``stmts`` goes on after it: one of its statements
        returns, raises, ends the process, or is an ``if`` both of whose sides never fall through
        (a ``break`` or ``continue`` in it still goes on after the loop)."""
        for st in stmts:
            if isinstance(st, (ast.Return, ast.Raise)):
                return True
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and self._ends_process(st.value):
                return True
            if isinstance(st, ast.If) and st.orelse and self._never_falls_through(st.body) and \
                    self._never_falls_through(st.orelse):
                return True
            if isinstance(st, (ast.With, ast.AsyncWith)) and self._never_falls_through(st.body):
                return True
        return False

    # ---------------------------------------------------------------- exits
    def exits_of(self, stmts):
        """``{kind: abort}`` for the early exits a branch takes (kinds: return, raise, continue,
        break, exit); ``abort`` True when the branch also calls an abort."""
        kinds = set()
        abort = False
        helpers = None
        stack = [(st, False, False) for st in stmts]
        while stack:
            n, in_loop, in_try = stack.pop()
            if isinstance(n, _DEFS) or id(n) in self.taint.single:
                continue  # a single-process branch leaves no other rank waiting
            if isinstance(n, ast.Return):
                kinds.add("return")
            elif isinstance(n, ast.Raise):
                if in_try != "all":
                    kinds.add("raise")
            elif isinstance(n, (ast.Continue, ast.Break)) and not in_loop:
                kinds.add("continue" if isinstance(n, ast.Continue) else "break")
            elif isinstance(n, ast.Call):
                parts = dotted(n.func)
                if parts and parts[-1] in C.ABORTS:
                    abort = True
                if self._ends_process(n):
                    kinds.add("exit")
                callee = self.project.callee(self.mod, self.ff.cls, self.ff.qualname, n)
                if callee is not None and callee.raises and not in_try:
                    if helpers is None:
                        helpers = {id(c) for c in self._block_calls(stmts)}
                    if id(n) in helpers:
                        kinds.add("raise")  # a helper the branch calls as a statement raises: the branch does
            if isinstance(n, _LOOPS):
                stack.extend((c, True, in_try) for c in n.body)
                stack.extend((c, in_loop, in_try) for c in n.orelse)
                stack.append((n.test if isinstance(n, ast.While) else n.iter, in_loop, in_try))
                continue
            if isinstance(n, ast.Try) and n.handlers:
                # "all": a handler takes every exception, the body's raises stay in the try
                stack.extend((c, in_loop, "all" if in_try == "all" or _catches_all(n) else True) for c in n.body)
                for c in n.handlers + n.orelse + n.finalbody:
                    stack.append((c, in_loop, in_try))
                continue
            stack.extend((c, in_loop, in_try) for c in ast.iter_child_nodes(n))
        return kinds, abort

    def _raise_note(self, stmts):
        """``"; its raise: f.py:12"`` when branch ``stmts`` raises only through a helper it calls
        (no ``raise`` of its own): where the helper's raise is; ``"; its raise: line 205"`` when
        its first raise stands deeper in the branch than its own statements (under tests of
        its own, lines below the branch's test); else ``""``."""
        own = [n for st in stmts for n in ast.walk(st) if isinstance(n, ast.Raise)]
        if own:
            if any(isinstance(st, ast.Raise) for st in stmts):
                return ""
            return "; its raise: line %d" % min(n.lineno for n in own)
        # the helper calls exits_of counts: a statement's own call, or its whole assigned value
        for n in self._block_calls(stmts):
            callee = self.project.callee(self.mod, self.ff.cls, self.ff.qualname, n)
            if callee is not None and callee.raises and callee.raise_line:
                return "; its raise: %s:%d" % (os.path.basename(callee.path), callee.raise_line)
        return ""

    @staticmethod
    def _stmt_calls(stmts):
        """Ids of the calls that are a statement of ``stmts`` or its whole assigned value
        (``helper(x)``, ``y = helper(x)``), not calls nested in arguments."""
        return {id(c) for c in map(_own_call, stmts) if c is not None}

    @staticmethod
    def _block_calls(stmts):
        """The calls that are a statement of ``stmts`` or its whole assigned value, also in the
        blocks of its compound statements (``with progress(): if not ld: _run(cc)``), in the
        order of the source; not calls nested in arguments nor in nested functions."""
        out = []
        stack = list(reversed(stmts))
        while stack:
            st = stack.pop()
            if isinstance(st, _DEFS):
                continue
            v = _own_call(st)
            if v is not None:
                out.append(v)
            inner = []
            for field in ("body", "handlers", "orelse", "finalbody"):
                for x in getattr(st, field, ()):
                    inner.extend(x.body if isinstance(x, ast.ExceptHandler) else (x,))
            stack.extend(reversed(inner))
        return out

    # ---------------------------------------------------------------- statements
    def walk(self):
        body = self.ff.node.body
        self.block(body, self._gate(), (), "return")

    def _gate(self):
        """``(guard,)`` when the function is decorated to run only on some ranks
        (``@rank_zero_only``, ``@accelerator.on_main_process``: :data:`RANK_GATES`), with the
        decorator's line as the branch; else ``()``."""
        for dec in getattr(self.ff.node, "decorator_list", ()):
            d = dotted(dec.func if isinstance(dec, ast.Call) else dec)
            if d and d[-1] in C.RANK_GATES:
                return (_Guard(dec.lineno, 2, "gate"),)
        return ()

    def block(self, stmts, guards, loops, end="fall"):
        outer = self.paired
        # the pairs inside the same test's blocks are read when those blocks are
        self.paired = pairs = self.paired_ifs(stmts) | outer
        try:
            for i, st in enumerate(stmts):
                if id(st) in pairs:
                    # `if not c: X()` ... `if c: X()`: every rank reaches X once (main-process-first)
                    g = _Guard(st.lineno, 0, "if")
                    for sub in st.body:
                        self.stmt(sub, guards + (g,), loops)
                    continue
                self.stmt(st, guards, loops, stmts[i + 1:], end)
        finally:
            self.paired = outer
        self.p2p(stmts, guards)

    def paired_ifs(self, stmts):
        """Ids of ``if`` statements (no ``else``) of one block whose tests are ``c`` and ``not c``
        and whose bodies reach the same collectives."""
        seen = {}
        out = set()
        ranked = []
        # the ifs of the block, with those in the bodies of the block's ifs that test the same
        # rank-independent condition (`if is_dist():` before a `yield` and after it): each paired
        # only with one under the same test
        flat = []
        todo = list(reversed(stmts))
        while todo:
            st = todo.pop()
            if isinstance(st, ast.If) and not st.orelse and self.taint.test_level_at(st.test, st.lineno) == 0 and \
                    any(isinstance(x, ast.If) for x in st.body):
                flat.extend((ast.dump(st.test), x) for x in st.body)
            elif isinstance(st, ast.Try) and st.finalbody:
                # `if not main: barrier()`, then `try: yield` `finally: if main: barrier()`: the
                # finally block runs after the body on every rank, as the block's next statements
                flat.append((None, st))
                todo.extend(reversed(st.finalbody))
            else:
                flat.append((None, st))
        for under, st in flat:
            if not isinstance(st, ast.If) or st.orelse:
                continue
            t = st.test
            neg = isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not)
            key = (under, ast.dump(t.operand if neg else t))
            other = seen.get((key, not neg))
            if other is not None and [w for w, _ in self.sigs(other.body)] == [w for w, _ in self.sigs(st.body)] \
                    and self.sigs(st.body):
                out.update((id(other), id(st)))
            seen[(key, neg)] = st
            # `if rank not in [-1, 0]: barrier()` ... `if rank == 0: barrier()`: the other ranks
            # wait first, rank 0 last (main-process-first), told apart by the test's sense
            pol = self._polarity(t)
            if pol is not None and id(st) not in out and self.taint.test_level(t) == 2:
                sig = [w for w, _ in self.sigs(st.body)]
                if sig:
                    for other, opol, osig, ounder in ranked:
                        if opol == -pol and osig == sig and ounder == under and id(other) not in out:
                            out.update((id(other), id(st)))
                            break
                    else:
                        ranked.append((st, pol, sig, under))
        return out

    def expr_guards(self, ctx, line):
        """The guards of a call that an expression evaluates only when tests hold (``ctx`` of
        :func:`_cond_contexts`), read at ``line``: one per rank-dependent or rank-local test,
        the call skipped where both branches of a conditional expression reach the same
        collectives in the same order."""
        out = ()
        for test, holds, owner in ctx:
            # a bare name as an operand of `and`/`or` is a switch more often than a container:
            # its value's level, not the emptiness its name suggests (`self.dynamic_num_samples
            # and any(gather_object(...))`)
            bare = test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else test
            lv = self.taint.level_at(test, line) if isinstance(owner, ast.BoolOp) and \
                isinstance(bare, (ast.Name, ast.Attribute)) else self.taint.test_level_at(test, line)
            if not lv:
                continue
            skip = frozenset()
            if isinstance(owner, ast.IfExp):
                sides = [[(w, id(c)) for c in _calls_in([x]) for w in (self.witness(c),) if w]
                         for x in (owner.body, owner.orelse)]
                skip = frozenset().union(*_matched(*sides))
            direct = lv < 2 or self.taint.direct_level(test) == 2
            out += (_Guard(line, lv, "if" if holds else "else", skip, direct),)
        return out

    def _polarity(self, t):
        """+1 for a test that holds on the chosen rank(s) (``rank == 0``, ``is_main``, ``rank in
        (-1, 0)``), -1 for one that holds on the others (``rank != 0``, ``not is_main``), None
        when the lint cannot tell."""
        if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not):
            p = self._polarity(t.operand)
            return -p if p is not None else None
        if isinstance(t, ast.BoolOp) and isinstance(t.op, ast.And):
            for v in t.values:
                if self.taint.level(v) == 2:
                    return self._polarity(v)
            return None
        if isinstance(t, ast.Compare) and len(t.ops) == 1:
            op = t.ops[0]
            if isinstance(op, (ast.Eq, ast.In, ast.Is, ast.Lt, ast.LtE)):
                return 1
            if isinstance(op, (ast.NotEq, ast.NotIn, ast.IsNot, ast.Gt, ast.GtE)):
                return -1
            return None
        if isinstance(t, (ast.Name, ast.Attribute, ast.Call)):
            return 1
        return None

    def stmt(self, st, guards, loops, rest=(), end="fall"):
        if isinstance(st, _DEFS):
            return
        exprs = header_exprs(st)
        conds = None
        for call in _calls_in(exprs):
            if conds is None:
                conds = _cond_contexts(exprs)
            ctx = conds.get(id(call))
            self.call(call, guards + self.expr_guards(ctx, st.lineno) if ctx else guards, loops)
        if not self.in_try and not self.members_only and self._stmt_calls([st]):
            got = self.helper_raise(st.value)
            if got is not None:
                # the helper raises on some ranks only: as if its test and raise stood here
                self.exits.append(_Exit(st.lineno, 2, "raise", None, False, False, self.sides,
                                        "; its raise: %s:%d" % (os.path.basename(got[0]), got[1])))
        if isinstance(st, ast.If):
            lv = self.taint.test_level_at(st.test, st.lineno)
            if lv and self._own_group_size(st, rest):
                lv = 0
            rc = _rank_compare(st.test)
            if lv and rc is not None and _decided(rc, self.rank_path) is not None:
                lv = 0  # every rank that has peers and can be here takes the same side
            before = list(self.exits)
            same_exit = False
            if lv:
                a, b = self.sigs(st.body), self.sigs(st.orelse)
                skip_a, skip_b = _matched(a, b)
                agree = self.arms_agree(st, rest, end)
                if agree:
                    # both sides reach the same collectives in the same order and leave the same
                    # way (one way through each: nothing of this test is left to report; several:
                    # what the other side does not match by name and order, at warning level)
                    same_exit = True
                    if agree == "one":
                        skip_a, skip_b = frozenset(i for _, i in a), frozenset(i for _, i in b)
                    elif not st.orelse:
                        skip_a = _matched(a, self.sigs(rest))[0]
                if a and not st.orelse and "return" in self.exits_of(st.body)[0]:
                    # `if c: X(); return` then X() below: every path reaches X once
                    cont = self.sigs(rest)
                    if [w for w, _ in a] == [w for w, _ in cont]:
                        same_exit = True
                        skip_a = frozenset(i for _, i in a)
                skip_a, skip_b = self._alts_of(skip_a), self._alts_of(skip_b)
                direct = (lv < 2 or self.taint.direct_level(st.test) == 2) and agree != "many"
                ga = _Guard(st.lineno, lv, "if", skip_a, direct)
                gb = _Guard(st.lineno, lv, "else", skip_b, direct)
            else:
                ga = gb = None
            members = mentions_membership(st.test)
            self.members_only += members
            side = _side(st.test, self.taint.assigned, self._fixed_attrs)
            outer = self.sides
            # the body runs where every conjunct of an `and` holds, the `else` where every
            # disjunct of an `or` fails: each fixed one is a side too
            body_sides = _part_sides(st.test, ast.And, True, self.taint.assigned, self._fixed_attrs)
            else_sides = _part_sides(st.test, ast.Or, False, self.taint.assigned, self._fixed_attrs)
            if side is not None or body_sides:
                self.sides = outer + ((side,) if side is not None else ()) + body_sides
            outer_path = self.rank_path
            if rc is not None:
                self.rank_path = outer_path + (rc + (True,),)
            self.block(st.body, guards + ((ga,) if ga else ()), loops)
            self.members_only -= members
            after_body = self._through(st.body, before)
            self.exits = list(before)
            if side is not None or else_sides:
                self.sides = outer + (((side[0], not side[1]),) if side is not None else ()) + else_sides
            if rc is not None:
                self.rank_path = outer_path + (rc + (False,),)
            self.block(st.orelse, guards + ((gb,) if gb else ()), loops)
            self.exits = self._through(st.orelse, before)
            self.rank_path = outer_path
            self.sides = outer
            merged = after_body + [e for e in self.exits if e not in after_body]
            self.exits = merged
            if lv and not self.members_only:
                ka, abort_a = self.exits_of(st.body)
                kb, abort_b = self.exits_of(st.orelse)
                for kinds, other, abort, pol in ((ka, kb, abort_a, True), (kb, ka, abort_b, False)):
                    for kind in sorted(kinds - other):
                        if same_exit and (kind == "return" or agree):
                            continue
                        loop = loops[-1] if kind in ("continue", "break") and loops else None
                        sides = outer + (((side[0], side[1] == pol),) if side is not None else ()) + \
                            (body_sides if pol else else_sides)
                        note = self._raise_note(st.body if pol else st.orelse) if kind == "raise" else ""
                        self.exits.append(_Exit(st.lineno, lv, kind, loop, abort, ga.direct, sides, note))
                if "raise" in ka & kb and not (abort_a or abort_b):
                    tests_a, tests_b = _raise_tests(st.body), _raise_tests(st.orelse)
                    if tests_a and tests_b and tests_a != tests_b:
                        # each side raises only under tests of its own (rank 0 checks its argument
                        # is a trial, the others that theirs is None): where they disagree, some
                        # ranks raise and the others go on; a warning, since whether the tests
                        # agree is not known
                        self.exits.append(_Exit(st.lineno, lv, "raise", None, False, False, outer,
                                                "; each side raises under tests of its own"))
        elif isinstance(st, _LOOPS):
            if isinstance(st, ast.While):
                lv = self.taint.while_level(st)
            else:
                lv = self.taint.iter_level_at(st.iter, st.lineno)
            direct = lv < 2 or self.taint.direct_level(st.test if isinstance(st, ast.While) else st.iter) == 2
            g = (_Guard(st.lineno, lv, "loop", direct=direct),) if lv else ()
            self.block(st.body, guards + g, loops + (st,), "continue")
            breaks = [e for e in self.exits if e.loop is st and e.kind == "break"]
            if breaks:
                # a rank-dependent break ends the loop on some ranks: the others run the
                # collectives before it once more, in the next iteration
                e = breaks[0]
                for call in _calls_in([x for x in st.body if getattr(x, "lineno", 0) < e.line
                                       and not isinstance(x, _DEFS)]):
                    w = self.witness(call)
                    if w:
                        dep = e.level == 2
                        self._emit("HK102" if dep else "HK202", call, w, e.line,
                                   "runs again in the next iteration on the ranks that do not take the %s break "
                                   "below it" % ("rank-dependent" if dep else "rank-local"), e.direct)
            self.exits = [e for e in self.exits if e.loop is not st]
            self.block(st.orelse, guards, loops)
        elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
            before_try = list(self.exits)
            self.in_try += bool(st.handlers)
            if st.finalbody:
                # `try: if not main: barrier(); yield` `finally: if main: barrier()`: the finally
                # block runs on every rank after the body, so the two halves pair up as in one block
                self.paired = self.paired | self.paired_ifs(list(st.body) + list(st.finalbody))
            self.block(st.body, guards, loops)
            self.in_try -= bool(st.handlers)
            if _catches_all(st):
                # `except Exception as e: error = e`: a rank that raises in the body goes on
                # after the try with the others
                self.exits = [e for e in self.exits if e in before_try or e.kind != "raise"]
            # the handlers and the `else` reach the same collectives: the ranks that raised meet
            # the others in them (cobaya's root shares the result or the failure)
            same = st.handlers and isinstance(st, ast.Try) and self._try_alternatives(st) is not None
            # the `else` block runs only where no handler did: the handlers' exits are not before it
            after_body = list(self.exits)
            self.block(st.orelse, guards, loops)
            from_else = [e for e in self.exits if e not in after_body]
            self.exits = after_body
            # nor does one handler run after another: their exits stand after the `try`
            from_handlers = []
            for h in st.handlers:
                cond = handler_condition(st, h)
                lv = 0 if cond is None else 1 if cond[1] is None else \
                    self.taint.test_level_at(cond[1], st.body[0].lineno)
                self.block(h.body, guards + ((_Guard(h.lineno, lv, "except"),) if lv and not same else ()), loops)
                self.exits = after_body
                if self.members_only or not lv:
                    continue
                kinds, abort = self.exits_of(h.body)
                if abort:
                    continue
                for kind in sorted(kinds & {"return", "continue", "break", "exit"}):
                    loop = loops[-1] if kind in ("continue", "break") and loops else None
                    from_handlers.append(_Exit(h.lineno, lv, kind, loop, False, sides=self.sides))
                if same and "raise" in kinds:
                    # a handler that shares its failure with the others and raises: the ranks
                    # that raised skip what follows the `try` (cobaya's root, then a Barrier)
                    from_handlers.append(_Exit(h.lineno, lv, "raise", None, False, sides=self.sides))
            self.exits = self.exits + from_handlers + from_else
            if st.finalbody:
                # a rank that raises or returns in the try runs the finally block too: those exits
                # skip only what comes after the try statement
                left = [e for e in self.exits if e not in before_try and e.kind in _FINALLY_RUNS]
                self.exits = [e for e in self.exits if e not in left]
                self.block(st.finalbody, guards, loops)
                self.exits += [e for e in left if e not in self.exits]
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            self.block(st.body, guards, loops)
        elif type(st).__name__ == "Match":
            lv = self.taint.level(st.subject)
            for case in st.cases:
                self.block(case.body, guards + ((_Guard(st.lineno, lv, "if"),) if lv else ()), loops)

    # ---------------------------------------------------------------- point-to-point
    def p2p(self, stmts, guards):
        if any(g.level for g in guards):
            return  # inside a rank branch: the even/odd pattern that orders send and recv
        send = None
        for st in stmts:
            if isinstance(st, _DEFS) or not isinstance(st, (ast.Expr, ast.Assign, ast.AnnAssign)):
                continue
            for call in _calls_in([st]):
                kind, name = self.taint.call_kind(call)
                if kind != "p2p":
                    continue
                if send is None and name in C.P2P_SEND and self._peer_level(call, name) == 2:
                    send = (call, name)
                elif send is not None and name in C.P2P_RECV:
                    scall, sname = send
                    self._emit("HK106", scall, "blocking %s to a rank-computed peer" % sname, call.lineno,
                               "comes before the blocking receive that every rank also does")
                    return

    def _peer_level(self, call, name):
        for k in call.keywords:
            if k.arg in ("dst", "dest", "group_dst"):
                return self.taint.level(k.value)
        return self.taint.level(call.args[1]) if len(call.args) > 1 else 0


#: collectives whose send buffer must have the same size on every rank (mpi4py buffer API, torch
#: reductions); a broadcast's receive buffer and the pickle API (``comm.reduce(obj)``) are left out
_SIZE_MUST_MATCH = {"Reduce", "Allreduce", "Allgather", "Reduce_scatter_block", "Scan", "Exscan", "all_reduce",
                    "reduce", "all_gather_into_tensor", "reduce_scatter_tensor"}


_NEGATED = {ast.IsNot: "Is", ast.NotEq: "Eq", ast.NotIn: "In"}


def _own_call(st):
    """The call that statement ``st`` is, or whose whole value it assigns or returns
    (``helper(x)``, ``y = helper(x)``, ``return helper(x)``); else None."""
    v = st.value if isinstance(st, (ast.Expr, ast.Assign, ast.AnnAssign, ast.Return)) else None
    return v if isinstance(v, ast.Call) else None


def _raise_tests(stmts):
    """The tests under which branch ``stmts`` raises, as a frozenset of tuples (for each
    ``raise`` statement of its own, outside loops, ``try`` and nested functions: the dumps of
    the ``if`` tests around it, with the side taken); None when a raise stands under no test
    of the branch (it raises whenever it runs) or nothing of the branch raises."""
    out = set()
    stack = [(st, ()) for st in stmts]
    while stack:
        n, path = stack.pop()
        if isinstance(n, ast.Raise):
            if not path:
                return None
            out.add(path)
        elif isinstance(n, ast.If):
            test = ast.dump(n.test)
            stack.extend((c, path + ((test, True),)) for c in n.body)
            stack.extend((c, path + ((test, False),)) for c in n.orelse)
        elif isinstance(n, (ast.With, ast.AsyncWith)):
            stack.extend((c, path) for c in n.body)
    return frozenset(out) or None


def _side(test, assigned, fixed=frozenset):
    """``(key, polarity)`` of an ``if`` test that reads only names the function never assigns
    (its parameters, globals), ``self`` attributes only the class's ``__init__`` assigns
    (``fixed()``, asked only for a test that reads one: :meth:`_Walker._fixed_attrs`) and constants, through ``not``, ``is``/``==``/``in`` and their
    negations (``store is None`` and ``store is not None`` are one key, opposite polarities);
    None for any other test (a call, another object's attribute: its value can change between
    two tests)."""
    pol = True
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, pol = test.operand, not pol
    for n in ast.walk(test):
        if isinstance(n, ast.Name):
            if n.id in assigned and n.id != "self":
                return None
        elif isinstance(n, ast.Attribute):
            if not (isinstance(n.value, ast.Name) and n.value.id == "self") or "self." + n.attr not in fixed():
                return None
        elif not isinstance(n, (ast.Constant, ast.Compare, ast.Load, ast.cmpop)):
            return None
    if isinstance(test, ast.Compare):
        if len(test.ops) != 1:
            return None
        op = _NEGATED.get(type(test.ops[0]))
        if op is not None:
            pol = not pol
        else:
            op = type(test.ops[0]).__name__
        return (ast.dump(test.left), op, ast.dump(test.comparators[0])), pol
    if isinstance(test, (ast.Name, ast.Attribute)):
        return ast.dump(test), pol
    return None


def _part_sides(test, op, pol, assigned, fixed):
    """The :func:`_side` of each fixed operand of ``test`` when it is a boolean ``op`` (``and``:
    each holds where the ``if`` body runs, ``pol`` True; ``or``: each fails in its ``else``,
    ``pol`` False), as a tuple; empty for any other test."""
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, op)):
        return ()
    out = []
    for v in test.values:
        got = _side(v, assigned, fixed)
        if got is not None:
            out.append((got[0], got[1] == pol))
    return tuple(out)


def _exclusive(exit_sides, here):
    """True when no run can stand on both the sides ``exit_sides`` (an exit's) and ``here``
    (a call's): one holds a fixed test true where the other holds it false, or both hold
    ``x == a`` and ``x == b`` for two different constants (Lightning raises only where
    ``self._state_dict_type == "full"`` and saves only where it is ``"sharded"``)."""
    mine = set(here)
    for key, pol in exit_sides:
        if (key, not pol) in mine:
            return True
        if pol and isinstance(key, tuple) and key[1] == "Eq" and key[2].startswith("Constant("):
            for other, opol in here:
                if opol and isinstance(other, tuple) and other[0] == key[0] and other[1] == "Eq" and \
                        other[2] != key[2] and other[2].startswith("Constant("):
                    return True
    return False


def _pytest_module(path):
    """True for a file pytest collects or runs as a plugin: ``test_*.py``, ``*_test.py``,
    ``conftest.py``."""
    base = os.path.basename(path)
    return base == "conftest.py" or (base.endswith(".py") and (base.startswith("test_") or
                                                               base.endswith("_test.py")))


def _line_text(project, path, line, here):
    """The text of ``line`` of file ``path`` as written (its indentation and comment kept, the
    line end dropped; '' when out of range or unreadable): the module being checked, or another
    file read once and kept as a few lines (a chain names lines of other files)."""
    if path == here.path:
        return here.lines[line - 1].rstrip("\r\n") if 0 < line <= len(here.lines) else ""
    cache = project.__dict__.setdefault("_line_cache", {})
    key = (path, line)
    if key not in cache:
        text = ""
        try:
            with open(path, "rb") as f:
                for i, got in enumerate(f, 1):
                    if i == line:
                        text = got.decode("utf-8", errors="replace").rstrip("\r\n")
                        break
        except OSError:
            pass
        cache[key] = text
    return cache[key]


def _rank_raise_line(stmts, ranked, taint):
    """The line of the first ``raise`` of ``stmts`` that stands under a test of the rank
    (``ranked``: already under one), outside a ``try`` with handlers, a single-process branch
    and code after a ``return``; None when there is none."""
    for st in stmts:
        if isinstance(st, _DEFS) or id(st) in taint.single:
            continue
        if isinstance(st, ast.Raise):
            return st.lineno if ranked else None
        if isinstance(st, ast.Return):
            return None  # what follows in this block never runs
        got = None
        if isinstance(st, ast.If):
            here = ranked or (taint.test_level_at(st.test, st.lineno) == 2 and taint.direct_level(st.test) == 2)
            got = _rank_raise_line(st.body, here, taint) or _rank_raise_line(st.orelse, here, taint)
        elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
            got = (None if st.handlers else _rank_raise_line(st.body, ranked, taint)) or \
                _rank_raise_line(st.orelse, ranked, taint) or _rank_raise_line(st.finalbody, ranked, taint)
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            got = _rank_raise_line(st.body, ranked, taint)
        if got:
            return got
    return None


_CMP = {ast.Eq: lambda x, v: x == v, ast.NotEq: lambda x, v: x != v, ast.Lt: lambda x, v: x < v,
        ast.LtE: lambda x, v: x <= v, ast.Gt: lambda x, v: x > v, ast.GtE: lambda x, v: x >= v,
        ast.In: lambda x, v: x in v, ast.NotIn: lambda x, v: x not in v}


def _int_of(e):
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        v = _int_of(e.operand)
        return -v if v is not None else None
    if isinstance(e, ast.Constant) and type(e.value) is int:
        return e.value
    return None


def _rank_compare(test):
    """``(key, op, value)`` of a test of a rank against integer constants (``RANK == 0``,
    ``local_rank > 0``, ``rank in (-1, 0)``, ``dist.get_rank() != 0``; ``value`` a frozenset for
    ``in``), ``key`` the rank's expression dumped; None for any other test."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _CMP):
        return None
    left, right = test.left, test.comparators[0]
    if isinstance(test.ops[0], (ast.In, ast.NotIn)):
        vals = [_int_of(x) for x in right.elts] if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [None]
        if None in vals:
            return None
        value = frozenset(vals)
    else:
        value = _int_of(right)
        if value is None:
            return None
    if isinstance(left, ast.Call):
        d = dotted(left.func)
        if left.args or left.keywords or not d or not C.is_rank_call(d[-1]):
            return None
    else:
        d = dotted(left)
        if not d or (d[-1] not in C.RANK_NAMES and d[-1].lower() not in C.RANK_NAMES):
            return None
    return ast.dump(left), type(test.ops[0]), value


def _decided(rc, path):
    """The side (True/False) that rank test ``rc`` (:func:`_rank_compare`) takes on every rank
    number from 0 up that the enclosing rank tests ``path`` let through, or None when they
    differ. A negative rank (``-1``) is the field's mark of a run without other ranks
    (``RANK = int(os.getenv("RANK", -1))``): it leaves no one waiting, so it is not counted
    (ultralytics' ``if RANK == 0: ... elif RANK > 0: ...``)."""
    key, op, value = rc
    consts = [value] + [v for k, _, v, _ in path if k == key]
    top = max(max(c) if isinstance(c, frozenset) else c for c in consts)
    seen = set()
    for x in range(0, max(top, 0) + 3):
        if all(_CMP[o](x, v) == side for k, o, v, side in path if k == key):
            seen.add(_CMP[op](x, value))
    return seen.pop() if len(seen) == 1 else None


def _catches_all(st):
    """True when a handler of ``try`` statement ``st`` takes every exception a ``raise`` can
    throw: a bare ``except:``, ``except Exception`` or ``except BaseException`` (alone or in a
    tuple)."""
    for h in getattr(st, "handlers", ()):
        types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
        if any(t is None or (dotted(t) or [""])[-1] in ("Exception", "BaseException") for t in types):
            return True
    return False


def _unscaled(e, op=None):
    """``ast.dump`` of ``e`` with each number that is an operand of its outermost chain of
    arithmetic (``+ - * /``) left out, but an integer factor (``[0] * 4`` repeats a list: its
    size is that number); numbers inside calls or subscripts are kept."""
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        return "(%s %s %s)" % (_unscaled(e.left, e.op), type(e.op).__name__, _unscaled(e.right, e.op))
    if isinstance(e, ast.Constant) and isinstance(e.value, (int, float)) and not isinstance(e.value, bool) and \
            not (isinstance(op, ast.Mult) and isinstance(e.value, int)):
        return "<number>"
    return ast.dump(e)


def _matched(a, b):
    """Ids of the collectives of two branches that the other branch matches (same name, in order);
    a call that stands for several collectives is matched when each of them is."""
    hits_a, hits_b = {}, {}
    pool = {}
    for w, i in b:
        pool.setdefault(w, []).append(i)
    for w, i in a:
        if pool.get(w):
            j = pool[w].pop(0)
            hits_a[i] = hits_a.get(i, 0) + 1
            hits_b[j] = hits_b.get(j, 0) + 1
    return _whole(a, hits_a), _whole(b, hits_b)


def _whole(sigs, hits):
    count = {}
    for _, i in sigs:
        count[i] = count.get(i, 0) + 1
    return frozenset(i for i, n in hits.items() if n == count[i])


def check_module(project, mod):
    """Findings of every function of ``mod`` (its tree must be loaded; facts propagated),
    ``# hangkit: ignore`` comments applied (on the collective's line or the branch's)."""
    out = []
    fixed = {}
    for ff in mod.funcs.values():
        # every rule is about a collective the function reaches, or its own point-to-point
        # calls: a function with neither has nothing to report (nested functions are their own)
        if ff.witness or ff.p2p or holds_wrapper(ff):
            _Walker(project, mod, ff, out, fixed).walk()
    kept = [f for f in out if not (mod.ignored(f.line, f.code) or mod.ignored(f.related_line, f.code)
                                   or _ignored_at_collective(project, f))]
    return merge_by_branch(kept, mod)


def merge_by_branch(findings, mod):
    """One finding per deciding line: the findings of ``mod`` (a list of :class:`Finding`)
    with the same code, level and branch line become the first of them (by line), the others
    listed in its ``also`` and named in its message. A rank-0 raise before five collectives is
    one bug, and one fix at that line; reported five times it read as five (measured: 254 of
    799 findings on the sixty-seven projects repeated a branch already reported). Merged after
    the ``# hangkit: ignore`` comments are applied, so that silencing one collective's line
    leaves the others reported. Returns the findings sorted by :meth:`Finding.sort_key`."""
    groups = {}
    for f in sorted(findings, key=Finding.sort_key):
        groups.setdefault((f.code, f.related_line, f.severity), []).append(f)
    out = []
    for fs in groups.values():
        first = fs[0]
        if len(fs) > 1:
            rest = fs[1:]
            msg = "%s; line %d decides %s too" % (first.message, first.related_line, ", ".join(
                "%s (line %d)" % (f.what, f.line) for f in rest))
            first = first._replace(message=msg, also=tuple(
                (f.line, f.col, mod.code_text(f.line), f.what) for f in rest))
        out.append(first)
    return sorted(out, key=Finding.sort_key)


def _ignored_at_collective(project, f):
    """True when a finding reached through helpers is silenced on its collective's own line
    (in the helper's file: ``dist.all_reduce(t)  # hangkit: ignore[HK101]``)."""
    if not f.chain:
        return False
    path, line = f.chain[-1][0], f.chain[-1][1]
    other = project.modules.get(os.path.normpath(os.path.abspath(path)))
    return other is not None and other.ignored(line, f.code)
