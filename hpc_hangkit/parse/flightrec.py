"""Pure parser of PyTorch Flight Recorder dumps (pickle from ``_dump_fr_trace``, JSON from
``_dump_fr_trace_json`` / the control-plane ``fr_trace_json`` handler, or our ``rank_<i>.json``).

Format (torch 2.13, dump version "2.10"): ``version``, ``pg_config``
(gloo keys it by ``''`` and omits sub-groups), ``pg_status``, ``entries[]`` with
``pg_id, process_group (name, desc), collective_seq_id, p2p_seq_id, op_id,
profiling_name ('gloo:all_reduce'), input_sizes, input_dtypes, output_sizes,
output_dtypes, state, retired, is_p2p, time_created_ns, frames[{name, filename,
line}]`` (frames innermost first; JSON dumps from torch carry none).

Hostile input (a dump is read by root-run code and by the report over any job's files):

- Input larger than :data:`MAX_DUMP_BYTES` (256 MiB; a 2,000-entry dump with stacks is a
  few MiB) is refused before any decoding.
- A pickle is first scanned opcode by opcode (a byte loop: decodes nothing, allocates
  a few bytes per opcode) and refused unless it uses only the opcodes the
  dump format needs (protocol 2-5 dicts, lists, tuples, str, bytes, int, float, bool,
  None and the memo), with every length inside the input, every FRAME inside the
  input (CPython <= 3.13 allocates a ``BINBYTES``/``BINBYTES8``/``BYTEARRAY8`` payload at
  its claimed size before reading it), memo indices assigned in order (a crafted
  ``LONG_BINPUT 2490986542`` makes it allocate and zero a 20 GiB memo): these two made
  the fuzz run grow to 12 GiB (regressions: tests/fixtures/flight_recorder/hostile), no
  ``BYTEARRAY8``/``LONG4``/sets/text opcodes, integers of at most 9 bytes, dict
  keys that are scalars (no tuple keys with crafted hash collisions), and an
  estimated allocation under :data:`MAX_EXPANSION` x the input size (+64 KiB). Only
  then the stdlib unpickler runs, with a ``find_class`` that refuses every global.
  The scan also refuses nesting deeper than :data:`MAX_DEPTH`; a container referenced
  again (torch 2.13 shares equal stack-frame dicts between entries) is charged its whole
  size each time, so a doubling DAG exceeds the budget; after unpickling,
  :func:`check_decoded` refuses cycles (infinitely deep) and too many references before
  anything walks the entries.
- JSON: floods of ``{}``/``[]`` (json.loads spends ~130 bytes on each) beyond the same
  allocation budget, and nesting deeper than :data:`MAX_DEPTH`, are refused.

Every refusal is an :class:`FRParseError` naming the file and the byte offset; the
caller (:func:`hpc_hangkit.evidence.flightrec.read_dumps`) skips that file with a warning.

The scan is pure Python (~5 ms for a 200-entry, 44 KB dump, 10x the unpickling). For many files,
read_dumps instead runs :func:`summarize_unscanned` in forked children whose address space and
CPU time are limited (:func:`check_pickle_unscanned`: the C unpickler on the raw bytes, then
C-speed checks of the decoded objects: :func:`check_decoded` and reference counts), builds each
dump from the summary (:func:`dump_from_summary`) and unpickles the bytes that passed, with
``prechecked=True``, only when ``raw`` or ``entries`` is used (docs/flight-recorder.md, "Reading
dumps safely").

``FRDump.entries`` is built on first use when every entry has the field types :func:`_entry`
converts (:func:`_entries_safe`); ``FRDump.last_per_pg`` gives analyse what it needs without it.
"""
import gc
import io
import json
import marshal
import pickle
import re
from itertools import chain, compress, repeat
from operator import is_
from dataclasses import dataclass, field, fields
from typing import List, Optional, Tuple

from hpc_hangkit.parse.model import is_library_path


class FRParseError(ValueError):
    """Not a Flight Recorder dump (message names the file and why)."""


@dataclass(frozen=True)
class FREntry:
    """One recorded collective. ``op``: the collective without backend prefix
    (``all_reduce``); ``pg``: process-group name; ``seq``: collective sequence
    id within the group (p2p ops: ``p2p_seq``); ``frames``: (file, line, function)
    innermost first; ``retired``: completed (gloo leaves ``state`` at "scheduled")."""

    pg: str
    pg_desc: str
    seq: int
    p2p_seq: int
    is_p2p: bool
    op: str
    profiling_name: str
    input_sizes: tuple
    input_dtypes: tuple
    output_sizes: tuple
    output_dtypes: tuple
    state: str
    retired: bool
    frames: Tuple[Tuple[str, int, str], ...] = ()

    def user_frame(self) -> Optional[Tuple[str, int, str]]:
        """The innermost frame of the user's code (the call site: not torch, the standard
        library or hpc_hangkit's own check-in wrapper; :func:`~hpc_hangkit.parse.model.is_library_path`),
        else the innermost frame, or None."""
        for f in self.frames:
            if not is_library_path(f[0]):
                return f
        return self.frames[0] if self.frames else None

    def where(self) -> str:
        f = self.user_frame()
        return "%s:%d (%s)" % (f[0], f[1], f[2]) if f else "?"


@dataclass
class FRDump:
    """One rank's dump: ``rank`` (from the file name, or None), ``entries`` (record order; a
    property built on first use for a well-typed dump: see :meth:`last_per_pg`),
    ``error`` (the ``dump_error`` text of a rank that could not dump), ``raw`` (the decoded
    dict, for re-writing), ``warnings``."""

    name: str
    rank: Optional[int]
    version: str = ""
    entries: List[FREntry] = field(default_factory=list)
    pg_config: dict = field(default_factory=dict)
    pg_status: dict = field(default_factory=dict)
    error: Optional[str] = None
    raw: dict = field(default_factory=dict, repr=False)
    warnings: List[str] = field(default_factory=list)


def _get_entries(self) -> List[FREntry]:
    if "_bytes" in self.__dict__:
        self._load_full()
    got = self.__dict__.get("_entries")
    if got is None:
        got = []
        for i, e in enumerate(self.__dict__.pop("_lazy", ())):
            try:  # cannot fail (_entries_safe held); if it ever did, the same warning as at parse time
                got.append(_entry(e))
            except _ENTRY_ERRORS as err:
                self.warnings.append("%s: entry %d skipped (%s: %s)" % (self.name, i, type(err).__name__, err))
        self.__dict__["_entries"] = got
    return got


def _set_entries(self, value: List[FREntry]) -> None:
    self.__dict__.pop("_lazy", None)
    self.__dict__["_entries"] = value


FRDump.entries = property(_get_entries, _set_entries, doc="The FREntry list, built on first use.")


def _has_entries(self) -> bool:
    """Whether any entry was kept (without building them)."""
    if "_has" in self.__dict__:
        return self.__dict__["_has"]
    lazy = self.__dict__.get("_lazy")
    return bool(lazy) if lazy is not None else bool(self.entries)


def _last_per_pg(self) -> dict:
    """``{pg: (entry, desc)}``: per process group, the collective (p2p left out) with the highest
    sequence id (the later one on a tie) and the ``pg_desc`` of the group's first collective. Builds
    an FREntry only for those when :attr:`entries` was not built yet (what analyse needs)."""
    if "_last" in self.__dict__:
        return dict(self.__dict__["_last"])
    lazy = self.__dict__.get("_lazy")
    if lazy is not None:
        try:
            return self._last_lazy(lazy)
        except _ENTRY_ERRORS:  # cannot happen (_entries_safe held): then as from the built entries
            pass
    best: dict = {}
    for e in self.entries:
        if e.is_p2p:
            continue
        cur = best.get(e.pg)
        if cur is None:
            best[e.pg] = [e, e.seq, e.pg_desc]
        elif e.seq >= cur[1]:
            cur[0], cur[1] = e, e.seq
    return {k: (v[0], v[2]) for k, v in best.items()}


def _last_lazy(self, lazy: list) -> dict:
    best: dict = {}
    get = dict.get
    for e, pg, seq, p2p in zip(lazy, map(get, lazy, repeat("process_group")),
                               map(get, lazy, repeat("collective_seq_id")), map(get, lazy, repeat("is_p2p"))):
        if p2p:  # the same conversions as _entry (cannot fail: _entries_safe held)
            continue
        pg = pg or ("", "")
        key, seq = pg[0], seq or 0
        if type(key) is not str:
            key = str(key)
        cur = best.get(key)
        if cur is None:
            best[key] = [e, seq, str(pg[1]) if len(pg) > 1 else ""]
        elif seq >= cur[1]:
            cur[0], cur[1] = e, seq
    return {k: (_entry(v[0]), v[2]) for k, v in best.items()}


FRDump.has_entries = _has_entries
FRDump.last_per_pg = _last_per_pg
FRDump._last_lazy = _last_lazy
_ENTRY_ERRORS = (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError, RecursionError)

_STR_OR_NONE = frozenset((str, type(None)))
_INT_OR_NONE = frozenset((int, bool, type(None)))
_SEQ_OR_NONE = frozenset((list, tuple, type(None)))
_LIST_TUPLE = frozenset((list, tuple))


def _entries_safe(ents: list) -> bool:
    """True when :func:`_entry` cannot raise on any of ``ents`` (dicts), judged by the types of the
    fields it converts, column by column at C speed: ``process_group`` a list/tuple of str,
    ``profiling_name``/``state`` str, sequence ids int, ``frames`` a list of frames whose
    ``filename``/``name`` are str and ``line`` int, no mapping inside sizes/dtypes. A real dump always
    is; anything else is converted entry by entry (malformed ones skipped with a warning)."""
    def col(key):
        return list(map(dict.get, ents, repeat(key)))

    def types(values):
        return set(map(type, values))

    pgs = col("process_group")
    if not (types(pgs) <= _SEQ_OR_NONE and types(chain.from_iterable(filter(None, pgs))) <= _STR_OR_NONE
            and types(col("profiling_name")) <= _STR_OR_NONE and types(col("state")) <= _STR_OR_NONE
            and types(col("collective_seq_id")) <= _INT_OR_NONE and types(col("p2p_seq_id")) <= _INT_OR_NONE):
        return False
    frs = col("frames")
    if not types(frs) <= _SEQ_OR_NONE:
        return False
    frames = list(chain.from_iterable(filter(None, frs)))
    frames = list(compress(frames, map(is_, map(type, frames), repeat(dict))))
    if not (types(map(dict.get, frames, repeat("line"))) <= _INT_OR_NONE
            and types(map(dict.get, frames, repeat("filename"))) <= _STR_OR_NONE
            and types(map(dict.get, frames, repeat("name"))) <= _STR_OR_NONE):
        return False
    for key in ("input_sizes", "input_dtypes", "output_sizes", "output_dtypes"):
        level = col(key)
        while level:  # depth <= MAX_DEPTH (checked at decoding)
            t = types(level)
            if dict in t:
                return False
            if not t & _LIST_TUPLE:
                break
            level = list(chain.from_iterable(compress(level, map(_LIST_TUPLE.__contains__, map(type, level)))))
    return True


MAX_DUMP_BYTES = 256 << 20
"""Largest dump parsed (bytes). A torch dump of 2,000 entries with stacks is a few MiB."""
MAX_EXPANSION = 32
"""A pickle whose estimated allocation exceeds ``MAX_EXPANSION * len(data) + 64 KiB`` is refused
(a 2,000-entry pickle whose strings the memo shares estimates 19x and really allocates 12x;
JSON with more ``{}``/``[]`` than the same budget is refused too; other JSON shapes stay under
~25x)."""
MAX_DEPTH = 16
"""Deepest nesting accepted (a real dump nests 5 levels: doc > entries > entry > frames > frame)."""


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError("global %s.%s refused (a Flight Recorder dump holds none)" % (module, name))


# Opcodes of a protocol 2-5 pickle of plain containers and scalars (the only ones a dump needs).
# _ALLOC_*: an upper bound on what CPython's unpickler allocates for each (bytes; a payload is
# added by its length, a container item by _ITEM_*), and on what the scan itself holds for it
# (a container: a 3-item list on its stack, ~104 bytes; the two never live at the same time).
_OPNAMES = {0x80: "PROTO", 0x95: "FRAME", 0x2e: "STOP", 0x28: "MARK", 0x30: "POP", 0x31: "POP_MARK",
            0x7d: "EMPTY_DICT", 0x5d: "EMPTY_LIST", 0x29: "EMPTY_TUPLE", 0x74: "TUPLE", 0x85: "TUPLE1",
            0x86: "TUPLE2", 0x87: "TUPLE3", 0x61: "APPEND", 0x65: "APPENDS", 0x73: "SETITEM",
            0x75: "SETITEMS", 0x94: "MEMOIZE", 0x71: "BINPUT", 0x72: "LONG_BINPUT", 0x68: "BINGET",
            0x6a: "LONG_BINGET", 0x8c: "SHORT_BINUNICODE", 0x58: "BINUNICODE", 0x8d: "BINUNICODE8",
            0x43: "SHORT_BINBYTES", 0x42: "BINBYTES", 0x8e: "BINBYTES8", 0x4a: "BININT", 0x4b: "BININT1",
            0x4d: "BININT2", 0x8a: "LONG1", 0x47: "BINFLOAT", 0x4e: "NONE", 0x88: "NEWTRUE", 0x89: "NEWFALSE"}
_OBJECT_OPS = {0x63: "GLOBAL", 0x93: "STACK_GLOBAL", 0x69: "INST", 0x6f: "OBJ", 0x52: "REDUCE",
               0x81: "NEWOBJ", 0x92: "NEWOBJ_EX", 0x62: "BUILD", 0x50: "PERSID", 0x51: "BINPERSID",
               0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4"}
_SCALAR, _LIST, _DICT, _TUPLE = 0, 1, 2, 3  # stack items: _SCALAR, or [kind, height, nodes] (containers)
_FIXED_SCALAR = {0x4b: 1, 0x4a: 4, 0x4d: 2, 0x47: 8, 0x4e: 0, 0x88: 0, 0x89: 0}  # opcode: argument bytes
_COUNTED = {0x8c: 1, 0x58: 4, 0x8d: 8, 0x43: 1, 0x42: 4, 0x8e: 8, 0x8a: 1}        # opcode: count bytes
_STR_OPS = (0x8c, 0x58, 0x8d)
_ALLOC_SCALAR, _ALLOC_STR, _ALLOC_BYTES, _ALLOC_DICT, _ALLOC_LIST, _ALLOC_TUPLE, _ALLOC_MEMO = \
    40, 64, 40, 112, 112, 112, 16
_EMPTY_TUPLE = [_TUPLE, 1, 1, False]  # shared: a tuple's entry is never changed
# a container's entry: [kind, height, nodes, open]; open while its items are still being
# added (a list or dict until it is put into its parent; a tuple never)
_ITEM_LIST, _ITEM_DICT, _ITEM_TUPLE = 12, 24, 8


def _scan_pickle(data: bytes, name: str) -> None:
    """Refuse (FRParseError naming ``name`` and the byte offset) a pickle that is not a plain
    protocol 2-5 pickle of containers and scalars bounded by its own size; see the module doc.
    A byte loop over the opcodes that decodes nothing (~0.2 us an opcode, the frequent ones
    inlined). It tracks each container's height (refused over :data:`MAX_DEPTH`) and node
    count; adding items to a list or dict already complete is refused; a further reference
    (memo GET) to a container (torch 2.13 shares equal stack-frame dicts; Python equal
    tuples) is charged its whole node count, so a doubling DAG exceeds the budget. Cycles
    are left to :func:`check_decoded`, run on the decoded object (they cost nothing to
    unpickle)."""
    n = len(data)
    budget = MAX_EXPANSION * n + (64 << 10)
    cost = 0
    stack: list = []
    marks: list = []  # the enclosing marks' stack positions; the innermost is `mk`
    mk = 0            # stack position of the innermost mark (0 without one: the same floor)
    memo: list = []
    at = i = 0
    c = 0
    push, pop, fixed, counted, remember = stack.append, stack.pop, _FIXED_SCALAR, _COUNTED, memo.append

    def bad(why):
        return FRParseError("%s: pickle refused at byte %d: %s (%d bytes)" % (name, at, why, n))

    def take(k):  # pop k items above the innermost mark
        if len(stack) - mk < k:
            raise bad("%s: stack underflow" % _OPNAMES[c])
        out = stack[len(stack) - k:]
        del stack[len(stack) - k:]
        return out

    def take_mark():  # pop the items above the innermost mark, and the mark
        nonlocal mk
        if not marks:
            raise bad("%s without MARK" % _OPNAMES[c])
        out = stack[mk:]
        del stack[mk:]
        mk = marks.pop()
        return out

    def measure(items):  # (height, nodes) of the items as children
        if not any(items):  # all scalars (most items of a real dump): C-speed
            return 1, len(items)
        h, nodes = 0, len(items)
        for x in items:
            if x:
                x[3] = False  # in its parent now: complete
                if x[1] > h:
                    h = x[1]
                nodes += x[2] - 1
        if h + 1 > MAX_DEPTH:
            raise bad("nested deeper than %d levels" % MAX_DEPTH)
        return h + 1, nodes

    def add_to_top(want, items):
        if len(stack) <= mk or not stack[-1] or stack[-1][0] != want:
            raise bad("%s to a non-%s" % (_OPNAMES[c], "list" if want == _LIST else "dict"))
        t = stack[-1]
        if not t[3]:
            raise bad("%s to a list or dict that is already complete (a second reference)" % _OPNAMES[c])
        if any(items):
            h, nodes = measure(items)
            if h > t[1]:
                t[1] = h
            t[2] += nodes
        else:
            t[2] += len(items)

    def get(k):  # push memo[k]; a container is charged its node count
        nonlocal cost
        v = memo[k]  # IndexError: never stored
        if v:
            # (a cycle -- a container referenced from inside itself -- costs nothing to
            # unpickle; check_decoded refuses it afterwards as infinitely deep)
            # a shared container (torch >= 2.13 shares equal stack-frame dicts between
            # entries): whoever walks the dump expands it, so it costs its whole size again
            cost += 8 * v[2]
        push(v)

    try:
        while True:  # an IndexError below is a truncated input or a memo index never stored
            at = i
            c = data[i]
            if c == 0x68:  # BINGET (half of a real dump's opcodes)
                v = memo[data[i + 1]]
                i += 2
                if v:
                    get(data[i - 1])
                else:
                    push(v)
                continue
            i += 1
            if c == 0x94:  # MEMOIZE
                if len(stack) <= mk:
                    raise bad("MEMOIZE with nothing to store")
                remember(stack[-1])
                cost += _ALLOC_MEMO
            elif c in fixed:  # BININT*, BINFLOAT, NONE, NEWTRUE, NEWFALSE
                i += fixed[c]
                if i > n:
                    raise IndexError
                push(_SCALAR)
                if c == 0x4b or c == 0x4e or c == 0x89 or c == 0x88:
                    continue
                cost += _ALLOC_SCALAR
            elif c == 0x28:  # MARK
                marks.append(mk)
                mk = len(stack)
                continue
            elif c == 0x5d:  # EMPTY_LIST
                push([_LIST, 1, 1, True])
                cost += _ALLOC_LIST
            elif c == 0x7d:  # EMPTY_DICT
                push([_DICT, 1, 1, True])
                cost += _ALLOC_DICT
            elif c == 0x61:  # APPEND
                if len(stack) - mk < 2 or not stack[-2] or stack[-2][0] != _LIST:
                    raise bad("APPEND to a non-list" if len(stack) - mk >= 2 else "APPEND: stack underflow")
                x = pop()
                if x:
                    add_to_top(_LIST, (x,))
                elif not stack[-1][3]:
                    raise bad("APPEND to a list that is already complete (a second reference)")
                else:
                    stack[-1][2] += 1
                cost += _ITEM_LIST
            elif c == 0x75 and marks:  # SETITEMS (a real dump's every dict)
                k = mk
                items = stack[k:]
                del stack[k:]
                mk = marks.pop()
                if len(items) % 2 or any(items[::2]):
                    raise bad("SETITEMS with a non-scalar key")
                add_to_top(_DICT, items)
                cost += _ITEM_DICT * len(items)
            elif c in counted:  # strings, bytes, LONG1
                w = counted[c]
                if i + w > n:
                    raise IndexError
                k = data[i] if w == 1 else int.from_bytes(data[i:i + w], "little")
                i += w
                if k > n - i:
                    raise bad("%s claims %d bytes, %d remain" % (_OPNAMES[c], k, n - i))
                if c == 0x8a:
                    if k > 9:
                        raise bad("LONG1 integer of %d bytes (a dump holds 64-bit counters)" % k)
                    cost += _ALLOC_SCALAR
                elif c in _STR_OPS:
                    cost += _ALLOC_STR + (k if k < 16 or data[i:i + k].isascii() else 4 * k)
                else:
                    cost += _ALLOC_BYTES + k
                i += k
                push(_SCALAR)
            elif c == 0x75 or c == 0x73:  # SETITEMS without MARK (refused by take_mark), SETITEM
                items = take_mark() if c == 0x75 else take(2)
                if len(items) % 2 or any(items[::2]):
                    raise bad("%s with a non-scalar key" % _OPNAMES[c])
                add_to_top(_DICT, items)
                cost += _ITEM_DICT * len(items)
            elif c == 0x65:  # APPENDS
                items = take_mark()
                add_to_top(_LIST, items)
                cost += _ITEM_LIST * len(items)
            elif c in (0x85, 0x86, 0x87, 0x74, 0x29):  # TUPLE1-3, TUPLE, EMPTY_TUPLE
                items = take_mark() if c == 0x74 else () if c == 0x29 else take(c - 0x84)
                if items:
                    h, nodes = measure(items)
                    push([_TUPLE, h, nodes + 1, False])
                    cost += _ALLOC_TUPLE + _ITEM_TUPLE * len(items)
                else:
                    push(_EMPTY_TUPLE)
            elif c == 0x71 or c == 0x72:  # BINPUT, LONG_BINPUT
                w = 1 if c == 0x71 else 4
                if i + w > n:
                    raise IndexError
                k = int.from_bytes(data[i:i + w], "little")
                i += w
                if k > len(memo):
                    raise bad("%s memo index %d out of order (memo holds %d)" % (_OPNAMES[c], k, len(memo)))
                if len(stack) <= mk:
                    raise bad("%s with nothing to store" % _OPNAMES[c])
                if k == len(memo):
                    remember(stack[-1])
                    cost += _ALLOC_MEMO
                else:
                    memo[k] = stack[-1]
            elif c == 0x6a:  # LONG_BINGET
                if i + 4 > n:
                    raise IndexError
                get(int.from_bytes(data[i:i + 4], "little"))
                i += 4
            elif c == 0x80:  # PROTO
                if not 2 <= data[i] <= 5:
                    raise bad("protocol %d (a dump uses 2-5)" % data[i])
                i += 1
            elif c == 0x95:  # FRAME
                if i + 8 > n or int.from_bytes(data[i:i + 8], "little") > n - i - 8:
                    raise bad("FRAME larger than the rest of the input")
                i += 8
            elif c == 0x30:  # POP
                take(1)
            elif c == 0x31:  # POP_MARK
                take_mark()
            elif c == 0x2e:  # STOP
                if len(stack) != 1 or marks:
                    raise bad("STOP with %d objects on the stack" % len(stack))
                return
            elif c in _OBJECT_OPS:
                raise bad("global/object opcode %s refused (a Flight Recorder dump holds none)" % _OBJECT_OPS[c])
            else:
                raise bad("opcode 0x%02x is not used by a Flight Recorder dump" % c)
            if cost > budget:
                raise bad("would allocate over %d bytes (%dx its size)" % (budget, MAX_EXPANSION))
    except IndexError:
        if at >= n:
            raise bad("no STOP opcode (truncated)") from None
        if c in (0x68, 0x6a) and at + (2 if c == 0x68 else 5) <= n:
            raise bad("%s of a memo index never stored" % _OPNAMES[c]) from None
        raise bad("%s truncated" % _OPNAMES.get(c, "opcode 0x%02x" % c)) from None


_ATOMS = (str, int, float, bool, type(None), bytes)
_TREE_TYPES = frozenset((dict, list, tuple) + _ATOMS)
_KEY_TYPES = frozenset(_ATOMS)


def check_decoded(doc, name: str, n: int, kind: str = "pickle") -> None:
    """Refuse (FRParseError naming ``name``, "at byte 0 (whole file)") a decoded dump (``n`` input bytes)
    holding any type but dict/list/tuple/str/int/float/bool/None/bytes (sets, bytearrays), nested
    deeper than :data:`MAX_DEPTH` (which a reference cycle is), or with more references than
    ``(MAX_EXPANSION * n + 64 KiB) / 8`` (a doubling DAG of shared tuples; a real dump has ~n / 4).
    Level by level with ``gc.get_referents`` (C-speed: ~0.3 ms for a 200-entry, 44 KB dump)."""
    max_refs = (MAX_EXPANSION * n + (64 << 10)) // 8

    def bad(why):
        return FRParseError("%s: %s refused at byte 0 (whole file): %s (%d bytes)" % (name, kind, why, n))

    level = [doc]
    refs = 0
    for depth in range(1, MAX_DEPTH + 2):
        types = set(map(type, level))
        if not types <= _TREE_TYPES:
            raise bad("a %s object (a dump holds dicts, lists, tuples and scalars)"
                      % sorted(t.__name__ for t in types - _TREE_TYPES)[0])
        if not types - _KEY_TYPES:
            return
        if depth > MAX_DEPTH:
            raise bad("nested deeper than %d levels" % MAX_DEPTH)
        level = gc.get_referents(*level)  # nothing for the scalars
        refs += len(level)
        if refs > max_refs:
            raise bad("over %d references for %d bytes (a DAG of shared tuples?)" % (max_refs, n))


def check_pickle_unscanned(data: bytes, name: str):
    """Unpickle ``data`` WITHOUT the opcode scan (globals still refused), then
    :func:`check_decoded` (types, depth: a cycle is infinitely deep, references counted with
    their multiplicity: a doubling DAG); returns the decoded object. Raises FRParseError, or MemoryError or anything
    else the C unpickler raises on hostile bytes. Dict keys are not checked (tuple keys pass; the
    caller bounds the CPU time a crafted hash collision costs).

    Only for a process whose address space and CPU time are limited (the validator child of
    :func:`hpc_hangkit.evidence.flightrec.read_dumps`): a hostile length or memo index makes the unpickler
    allocate what it claims. The caller unpickles bytes that passed again with
    ``parse_flightrec(..., prechecked=True)``, which then allocates what this process did."""
    if data[:1] != b"\x80" or len(data) > MAX_DUMP_BYTES:
        raise FRParseError("%s: not a pickle within the cap" % name)
    doc = _SafeUnpickler(io.BytesIO(data)).load()
    # shared containers are allowed (torch 2.13 shares stack-frame dicts); a cycle is
    # infinitely deep and a doubling DAG has too many references: check_decoded refuses both
    check_decoded(doc, name, len(data))
    return doc


_RANK_RE = re.compile(r"(\d+)(?:\.(?:json|pickle|pkl))?$")


def rank_from_name(name: str) -> Optional[int]:
    """Trailing digits of a file name: ``rank_3.json`` -> 3, ``fr_host-a_12`` -> 12, else None."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    m = _RANK_RE.search(base)
    return int(m.group(1)) if m else None


def _t(v):
    """Lists to tuples (hashable, for comparing ranks); refuses mappings (TypeError)."""
    if isinstance(v, (list, tuple)):
        return tuple([x if type(x) in _ATOM_SET else _t(x) for x in v])
    if isinstance(v, dict):
        raise TypeError("a mapping where sizes/dtypes are expected")
    return v


_ATOM_SET = frozenset(_ATOMS)
_new_entry = object.__new__


def _entry(e: dict) -> FREntry:
    """An FREntry from one entry mapping (raises TypeError/ValueError/... on a malformed one). Built
    without the frozen dataclass's per-field ``object.__setattr__`` (3x cheaper, same object)."""
    g = e.get
    pg = g("process_group") or ("", "")
    name = g("profiling_name", "")
    if type(name) is not str:
        name = str(name)
    fr = g("frames")
    frames = tuple([(str(f.get("filename", "")), int(f.get("line", 0) or 0), str(f.get("name", "")))
                    for f in fr if isinstance(f, dict)]) if fr else ()
    x = _new_entry(FREntry)
    x.__dict__.update(
        pg=str(pg[0]), pg_desc=str(pg[1]) if len(pg) > 1 else "",
        seq=int(g("collective_seq_id", 0) or 0), p2p_seq=int(g("p2p_seq_id", 0) or 0),
        is_p2p=bool(g("is_p2p", False)), op=name.split(":", 1)[-1], profiling_name=name,
        input_sizes=_t(g("input_sizes") or ()), input_dtypes=_t(g("input_dtypes") or ()),
        output_sizes=_t(g("output_sizes") or ()), output_dtypes=_t(g("output_dtypes") or ()),
        state=str(g("state", "")), retired=bool(g("retired", False)), frames=frames)
    return x


def parse_flightrec(data: bytes, name: str, rank: Optional[int] = None, *, prechecked: bool = False) -> FRDump:
    """Parse one dump (pickle or JSON bytes). ``rank`` defaults to :func:`rank_from_name`.

    Raises :class:`FRParseError` (and nothing else) for empty, truncated, foreign or
    hostile input: over :data:`MAX_DUMP_BYTES`, a pickle refused by the opcode scan
    (see the module doc), nesting deeper than :data:`MAX_DEPTH` (a reference cycle is), more
    references than the size bound allows (a DAG of shared containers); the message names ``name`` and the byte offset. Memory: at most ~:data:`MAX_EXPANSION`
    x ``len(data)`` (+64 KiB). A ``{"dump_error": ...}`` file gives a dump with
    ``error`` set and no entries. Malformed entries, and ``pg_config``/``pg_status``
    values that are not mappings, are skipped with a warning.

    ``prechecked=True`` skips the opcode scan of a pickle: only for these very bytes having passed
    :func:`check_pickle_unscanned` in a memory- and CPU-limited process (read_dumps does that in a
    forked child, ~10x faster than the scan); the unpickler then allocates what it allocated there.
    """
    if rank is None:
        rank = rank_from_name(name)
    if not data:
        raise FRParseError("%s: empty file" % name)
    if len(data) > MAX_DUMP_BYTES:
        raise FRParseError("%s: refused at byte %d: larger than the %d-byte cap for a Flight Recorder dump"
                           % (name, MAX_DUMP_BYTES, MAX_DUMP_BYTES))
    if data[:1] == b"\x80":
        if not prechecked:
            _scan_pickle(data, name)
        f = io.BytesIO(data)
        try:
            doc = _SafeUnpickler(f).load()
        except MemoryError:  # the scan's bound failed: a bug to see, not a bad file to skip
            raise
        except Exception as e:  # the scan passed: a decoding error (bad UTF-8, ...) remains
            raise FRParseError("%s: unreadable pickle at byte %d (%s: %s; %d bytes)" % (
                name, f.tell(), type(e).__name__, e, len(data))) from None
        if not prechecked:  # (prechecked bytes went through it in the limited process)
            check_decoded(doc, name, len(data))  # cycles, shared-container DAGs, depth, types
    else:
        # json.loads spends ~130 bytes on each {} / [] (3 input bytes in a flood): refuse floods
        n_cont = data.count(b"{") + data.count(b"[")
        if 136 * n_cont > MAX_EXPANSION * len(data) + (64 << 10):
            raise FRParseError("%s: refused at byte 0: %d JSON objects/arrays in %d bytes would allocate over "
                               "%dx its size" % (name, n_cont, len(data), MAX_EXPANSION))
        try:
            doc = json.loads(data.decode("utf-8", "replace"))
        except (ValueError, RecursionError) as e:
            raise FRParseError("%s: not JSON or pickle (%s at byte %s)" % (name, getattr(e, "msg", e),
                                                                         getattr(e, "pos", "?"))) from None
        check_decoded(doc, name, len(data), kind="JSON")
    return _from_doc(doc, name, rank)


def _from_doc(doc, name: str, rank: Optional[int]) -> FRDump:
    """The FRDump of a decoded dump (see :func:`parse_flightrec`)."""
    if not isinstance(doc, dict):
        raise FRParseError("%s: not a Flight Recorder dump (top level is %s)" % (name, type(doc).__name__))
    if "dump_error" in doc and "entries" not in doc:
        return FRDump(name=name, rank=rank, error=str(doc["dump_error"]), raw=doc)
    if not isinstance(doc.get("entries"), list):
        raise FRParseError("%s: not a Flight Recorder dump (no 'entries' list)" % name)
    d = FRDump(name=name, rank=rank, version=str(doc.get("version", "")), raw=doc)
    for key in ("pg_config", "pg_status"):
        v = doc.get(key) or {}
        if not isinstance(v, dict):
            d.warnings.append("%s: %s is a %s, not a mapping; ignored" % (name, key, type(v).__name__))
            doc[key] = v = {}
        bad = [k for k, x in v.items() if not isinstance(x, dict)]
        for k in bad:
            d.warnings.append("%s: %s[%r] is not a mapping; ignored" % (name, key, k))
            del v[k]
        setattr(d, key, v)
    if set(map(type, doc["entries"])) <= {dict} and _entries_safe(doc["entries"]):
        d.__dict__["_entries"] = None  # built on first use of .entries; analyse builds only the last ones
        d.__dict__["_lazy"] = doc["entries"]
        return d
    kept = []  # raw is re-written for torchfrtrace: only mappings stay in it
    for i, e in enumerate(doc["entries"]):
        if not isinstance(e, dict):
            d.warnings.append("%s: entry %d skipped (a %s, not a mapping)" % (name, i, type(e).__name__))
            continue
        kept.append(e)
        try:
            d.entries.append(_entry(e))
        except _ENTRY_ERRORS as err:
            d.warnings.append("%s: entry %d skipped (%s: %s)" % (name, i, type(err).__name__, err))
    doc["entries"] = kept
    return d


_FIELDS = tuple(f.name for f in fields(FREntry))


def _make_entry(values) -> FREntry:
    x = _new_entry(FREntry)
    x.__dict__.update(zip(_FIELDS, values))
    return x


def summarize_unscanned(data: bytes, name: str) -> Optional[bytes]:
    """In read_dumps' validator child (see :func:`check_pickle_unscanned`, whose errors it raises; JSON
    ``data`` is parsed by :func:`parse_flightrec`):
    what read_dumps and analyse need of a dump, marshalled (a few KB: version, pg_config,
    pg_status, warnings, whether it has entries, :meth:`FRDump.last_per_pg`), so that the parent
    unpickles the whole dump only if ``entries`` or ``raw`` are asked for (:func:`dump_from_summary`).
    None for a dump whose entries are not all well-typed, or a ``dump_error`` file: the parent parses
    those (``prechecked=True``)."""
    if data[:1] == b"\x80":
        d = _from_doc(check_pickle_unscanned(data, name), name, rank_from_name(name))
    else:  # JSON: parsed as in the parent (no unscanned step), the summary saves the parent the parse
        d = parse_flightrec(data, name)
    if d.error is not None or "_lazy" not in d.__dict__:
        return None
    last = [(pg, tuple(getattr(e, f) for f in _FIELDS), desc) for pg, (e, desc) in d.last_per_pg().items()]
    return marshal.dumps((d.version, d.pg_config, d.pg_status, d.warnings, d.has_entries(), last))


def dump_from_summary(summary: bytes, data: bytes, name: str) -> FRDump:
    """The FRDump of ``data`` (bytes that passed :func:`check_pickle_unscanned`) from its
    :func:`summarize_unscanned` ``summary``; ``raw`` and ``entries`` unpickle ``data`` on first use
    (``prechecked=True``: the same dump as parse_flightrec gives)."""
    version, pg_config, pg_status, warnings, has, last = marshal.loads(summary)
    d = FRDump(name=name, rank=rank_from_name(name), version=version, pg_config=pg_config, pg_status=pg_status,
               warnings=warnings)
    d.__dict__.update(_entries=None, _raw=None, _bytes=data, _has=has,
                      _last={pg: (_make_entry(values), desc) for pg, values, desc in last})
    return d


def _load_full(self) -> None:
    full = parse_flightrec(self.__dict__.pop("_bytes"), self.name, self.rank, prechecked=True)
    self.__dict__.update(_raw=full.raw, _entries=full.__dict__["_entries"])
    if "_lazy" in full.__dict__:
        self.__dict__["_lazy"] = full.__dict__["_lazy"]
    self.__dict__.pop("_last", None)
    self.__dict__.pop("_has", None)


def _get_raw(self) -> dict:
    if "_bytes" in self.__dict__:
        self._load_full()
    return self.__dict__["_raw"]


def _set_raw(self, value: dict) -> None:
    self.__dict__.pop("_bytes", None)
    self.__dict__["_raw"] = value


FRDump._load_full = _load_full
FRDump.raw = property(_get_raw, _set_raw, doc="The decoded dump (for re-writing), unpickled on first use.")
