"""The house rules of the package layout, checked statically (no module is imported).

- no import cycle inside ``hpc_hangkit``;
- ``hpc_hangkit/boot/`` imports only the standard library (it runs inside every rank,
  where ``hpc_hangkit`` and its dependencies may not be installed);
- a package's ``__init__.py`` imports only its own submodules (no other hpc_hangkit
  package), so importing one stage never drags in another.

The import graph follows what Python executes:

- every ``import`` / ``from ... import`` counts, also inside functions (they run when
  the function is called) and ``try`` blocks; only ``if TYPE_CHECKING:`` bodies are left
  out (they never run);
- relative imports are resolved against the importing module's package;
- ``from P import name`` imports ``P`` and, when ``P.name`` is a module, ``P.name``;
- importing ``hpc_hangkit.a.b`` first executes ``hpc_hangkit/a/__init__.py``, so it is
  an edge to ``hpc_hangkit.a`` as well, except from a module inside ``hpc_hangkit.a``
  (Python has already started executing that package by then);
- a string literal that is exactly the name of an hpc_hangkit module
  (``importlib.import_module("hpc_hangkit.x")``, lazy-import tables) counts as an import
  of it.

Only files under ``hpc_hangkit/`` in this checkout are read.
"""
import ast
import os
import re
import sys
from typing import Dict, Iterator, List, Optional, Set, Tuple

from testlib import REPO

PKG = "hpc_hangkit"
PKG_DIR = os.path.join(REPO, PKG)
BOOT_DIR = os.path.join(PKG_DIR, "boot")
_MODNAME = re.compile(r"%s(\.[A-Za-z_][A-Za-z0-9_]*)*" % PKG)

#: (importer, imported, "file:line what") for one import statement or string
Edge = Tuple[str, str, str]


def module_files(root: str = PKG_DIR) -> Dict[str, str]:
    """``{dotted module name: path}`` for every ``.py`` under ``root`` (``boot/`` excluded:
    its files are top-level modules on a rank's PYTHONPATH, not ``hpc_hangkit.boot.*``)."""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__" and os.path.join(d, x) != BOOT_DIR)
        rel = os.path.relpath(d, os.path.dirname(root)).split(os.sep)
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            parts = rel if f == "__init__.py" else rel + [f[:-3]]
            out[".".join(parts)] = os.path.join(d, f)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` that can execute, skipping ``if TYPE_CHECKING:`` bodies."""
    stack = [tree]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, ast.If) and _is_type_checking(n.test):
            stack.extend(n.orelse)
            continue
        stack.extend(ast.iter_child_nodes(n))


def _docstring_nodes(tree: ast.AST) -> Set[int]:
    ids = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = n.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                ids.add(id(body[0].value))
    return ids


def raw_imports(path: str, modname: str, is_package: bool) -> List[Tuple[str, Optional[str], int, str]]:
    """The absolute module names one file imports: ``[(module, from_name or None, line, kind)]``.

    ``from_name`` is the name after ``from M import`` (it may be a submodule of ``M``);
    ``kind`` is ``import``, ``from`` or ``string``. Raises SyntaxError for an unparsable file.
    """
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = modname if is_package else modname.rpartition(".")[0]
    docs = _docstring_nodes(tree)
    out = []
    for n in _nodes(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                out.append((a.name, None, n.lineno, "import"))
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                base = package.split(".")
                base = base[:len(base) - (n.level - 1)]
                mod = ".".join(base + ([n.module] if n.module else []))
            else:
                mod = n.module or ""
            for a in n.names:
                out.append((mod, None if a.name == "*" else a.name, n.lineno, "from"))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs \
                and _MODNAME.fullmatch(n.value):
            out.append((n.value, None, n.lineno, "string"))
    return out


def import_graph(files: Dict[str, str]) -> List[Edge]:
    """Edges between hpc_hangkit modules (see the module docstring for the semantics)."""
    edges = []
    roots = {os.path.dirname(p) for m, p in files.items() if m == PKG}
    top = os.path.dirname(roots.pop()) if roots else REPO
    for m, path in files.items():
        rel = os.path.relpath(path, top)
        for mod, name, line, kind in raw_imports(path, m, path.endswith("__init__.py")):
            if mod != PKG and not mod.startswith(PKG + "."):
                continue
            targets = [mod]
            if name and mod + "." + name in files:
                targets.append(mod + "." + name)
            what = "%s:%d %s %s%s" % (rel, line, kind, mod, (" import " + name) if name else "")
            for t in targets:
                if t not in files:
                    continue
                parts = t.split(".")
                # t itself and every package above it that m is not inside
                for i in range(len(parts), 1, -1):
                    p = ".".join(parts[:i])
                    if m == p or m.startswith(p + "."):
                        break
                    edges.append((m, p, what))
    return edges


def _successors(edges: List[Edge]) -> Dict[str, Set[str]]:
    succ: Dict[str, Set[str]] = {}
    for a, b, _ in edges:
        succ.setdefault(a, set()).add(b)
        succ.setdefault(b, set())
    return succ


def strongly_connected(edges: List[Edge]) -> List[List[str]]:
    """The import cycles as strongly connected components: each a sorted list of the
    modules that import each other (directly or not), more than one module or a module
    that imports itself; in a stable order."""
    succ = _successors(edges)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    on: Set[str] = set()
    stack: List[str] = []
    sccs: List[List[str]] = []

    def strong(v):  # Tarjan; recursion depth stays below the module count (~50)
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(succ[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in succ[v]:
                sccs.append(sorted(comp))

    for v in sorted(succ):
        if v not in index:
            strong(v)
    return sorted(sccs)


def shortest_cycle(start: str, comp: List[str], edges: List[Edge]) -> List[str]:
    """The shortest cycle ``[start, ..., start]`` inside the component ``comp``
    (breadth-first, successors in sorted order, so the answer is stable)."""
    succ = _successors(edges)
    inside = set(comp)
    prev: Dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(succ[v] & inside):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start] + path[::-1][1:] + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    raise ValueError("%s is on no cycle inside %s" % (start, comp))


def describe(comp: List[str], edges: List[Edge]) -> str:
    """An import cycle for a person: the component's modules, then shortest cycles
    until every module is on one, each step ``a -> b  (file:line import ...)``."""
    why: Dict[Tuple[str, str], str] = {}
    for a, b, w in edges:
        why.setdefault((a, b), w)
    lines = ["import cycle among %s:" % ", ".join(comp)]
    covered: Set[str] = set()
    for m in comp:
        if m in covered:
            continue
        cyc = shortest_cycle(m, comp, edges)
        covered |= set(cyc)
        lines.append("  " + " -> ".join(cyc))
        for a, b in zip(cyc, cyc[1:]):
            lines.append("      %s -> %s  (%s)" % (a, b, why[(a, b)]))
    return "\n".join(lines)


# --- the rules --------------------------------------------------------------------

def test_no_import_cycle_inside_the_package():
    edges = import_graph(module_files())
    found = strongly_connected(edges)
    text = "\n".join(describe(c, edges) for c in found)
    print(text)
    assert not found, "import cycles inside %s:\n%s" % (PKG, text)


def _stdlib(name: str) -> bool:
    top = name.split(".")[0]
    names = getattr(sys, "stdlib_module_names", None)
    if names is not None:
        return top in names
    import importlib.util
    import sysconfig
    spec = importlib.util.find_spec(top)
    if spec is None:
        return False
    if spec.origin in (None, "built-in", "frozen"):
        return True
    std = os.path.realpath(sysconfig.get_paths()["stdlib"])
    return os.path.realpath(spec.origin).startswith(std + os.sep) and "site-packages" not in spec.origin


#: what boot/ may import besides the standard library and its own files: the job's own
#: torch, imported inside functions that only run in a rank that uses it
_BOOT_ALLOWED = {"torch"}


def test_boot_imports_only_the_standard_library():
    own = {f[:-3] for f in os.listdir(BOOT_DIR) if f.endswith(".py")}
    bad = []
    for f in sorted(os.listdir(BOOT_DIR)):
        if not f.endswith(".py"):
            continue
        path = os.path.join(BOOT_DIR, f)
        for mod, name, line, kind in raw_imports(path, f[:-3], False):
            top = mod.lstrip(".").split(".")[0] or (name or "")
            if kind == "string" or top in own or top in _BOOT_ALLOWED or _stdlib(mod):
                continue
            bad.append("hpc_hangkit/boot/%s:%d imports %s" % (f, line, mod))
    assert not bad, "boot/ must import only the standard library:\n" + "\n".join(bad)


def init_violations(files: Dict[str, str]) -> List[str]:
    """``pkg -> module  (file:line what)`` for each import in a package ``__init__.py``
    (below the top level) of a module outside that package."""
    bad = []
    for a, b, what in import_graph(files):
        if a == PKG or not files[a].endswith("__init__.py"):
            continue
        if b == a or b.startswith(a + "."):
            continue
        bad.append("%s -> %s  (%s)" % (a, b, what))
    return sorted(set(bad))


#: packages whose ``__init__.py`` still holds the stage's whole code (and so imports other
#: stages) until it is split into submodules; every other package's ``__init__`` must
#: import only its own submodules. Take a package off this list once it is split.
_INIT_NOT_YET_SPLIT: set = set()


def test_package_inits_import_only_their_own_submodules():
    bad = init_violations(module_files())
    print("\n".join(bad))
    new = [b for b in bad if b.split(" -> ")[0] not in _INIT_NOT_YET_SPLIT]
    assert not new, "a package __init__ imports another hpc_hangkit module:\n" + "\n".join(new)


# --- the analysis itself, on small packages written here ------------------------------

def _tree(tmp_path, files: Dict[str, str]) -> Dict[str, str]:
    for rel, text in files.items():
        p = tmp_path / PKG / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return module_files(str(tmp_path / PKG))


def test_analysis_finds_function_local_relative_and_string_imports(tmp_path):
    files = _tree(tmp_path, {
        "__init__.py": "",
        "a/__init__.py": "",
        "a/x.py": "def f():\n    from ..b import y\n",              # function-local, relative
        "b/__init__.py": "",
        "b/y.py": "import importlib\nimportlib.import_module('hpc_hangkit.c')\n",   # string
        "c.py": "from hpc_hangkit.a import x\n",                         # from P import submodule
    })
    comps = strongly_connected(import_graph(files))
    assert comps == [["hpc_hangkit.a.x", "hpc_hangkit.b.y", "hpc_hangkit.c"]], comps


def test_analysis_counts_the_parent_package_init(tmp_path):
    """Importing hpc_hangkit.a.x runs a/__init__.py: a cycle through an __init__ is one."""
    files = _tree(tmp_path, {
        "__init__.py": "",
        "a/__init__.py": "from hpc_hangkit import m\n",
        "a/x.py": "",
        "m.py": "import hpc_hangkit.a.x\n",
    })
    comps = strongly_connected(import_graph(files))
    assert comps == [["hpc_hangkit.a", "hpc_hangkit.m"]], comps
    text = describe(comps[0], import_graph(files))
    assert "hpc_hangkit.m -> hpc_hangkit.a  (" in text and "a/__init__.py:1 from hpc_hangkit import m" in text


def test_analysis_has_no_spurious_edges(tmp_path):
    """A submodule importing its own package or a sibling, a docstring naming a module,
    an ``if TYPE_CHECKING:`` import and a string that is not a module name make no cycle."""
    files = _tree(tmp_path, {
        "__init__.py": "",
        "a/__init__.py": "from hpc_hangkit.a import x\n",
        "a/x.py": '"""Uses hpc_hangkit.b."""\nfrom hpc_hangkit.a import y\nfrom . import y as z\n',
        "a/y.py": "from hpc_hangkit import a\nS = 'hpc_hangkit.cli:main'\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hpc_hangkit.a import x\n"
                "import hpc_hangkit.a.y\n",
    })
    edges = import_graph(files)
    assert strongly_connected(edges) == []
    assert {(a, b) for a, b, _ in edges} == {
        ("hpc_hangkit.a", "hpc_hangkit.a.x"), ("hpc_hangkit.a.x", "hpc_hangkit.a.y"),
        ("hpc_hangkit.b", "hpc_hangkit.a.y"), ("hpc_hangkit.b", "hpc_hangkit.a")}


def test_init_rule_names_the_import(tmp_path):
    files = _tree(tmp_path, {
        "__init__.py": "",
        "a/__init__.py": "from .x import f\n",
        "a/x.py": "def f(): pass\n",
        "b/__init__.py": "def g():\n    from hpc_hangkit.a.x import f\n",
    })
    bad = init_violations(files)
    assert [v.split("  (")[0] for v in bad] == ["hpc_hangkit.b -> hpc_hangkit.a", "hpc_hangkit.b -> hpc_hangkit.a.x"]


# --- one safe-file rule: temporary files are opened in fsio only ----------------------

#: the one module that opens temporary files (O_CREAT | O_EXCL | O_NOFOLLOW, then rename)
FSIO = PKG + ".fsio"
_OPENERS = {"open", "fdopen", "mkstemp", "NamedTemporaryFile"}


def _names_a_temp(node: ast.AST) -> bool:
    """Whether an expression (the first argument of an open) is built from a name or string
    saying ``tmp``: ``tmp``, ``path + ".tmp"``, ``"%s.tmp" % p``, ``self.tmp_path``."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and "tmp" in n.id.lower():
            return True
        if isinstance(n, ast.Attribute) and "tmp" in n.attr.lower():
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and "tmp" in n.value.lower():
            return True
    return False


def temp_opens(files: Dict[str, str]) -> List[str]:
    """``file:line`` of every call of ``open``/``os.open``/``os.fdopen`` (any ``*.open``) whose
    path argument names a temporary file, outside :data:`FSIO`."""
    bad = []
    for m, path in sorted(files.items()):
        if m == FSIO:
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for n in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: n.lineno):
            if not n.args:
                continue
            fn = n.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            if name in _OPENERS and _names_a_temp(n.args[0]):
                bad.append("%s:%d" % (os.path.relpath(path, REPO), n.lineno))
    return bad


def test_temporary_files_are_opened_only_in_fsio():
    bad = temp_opens(module_files())
    assert not bad, "open of a temporary file outside %s (use fsio.write_atomic / fsio.open_tmp):\n%s" % (
        FSIO, "\n".join(bad))


def test_temp_open_rule_finds_the_shapes(tmp_path):
    files = _tree(tmp_path, {
        "__init__.py": "",
        "fsio.py": "import os\ndef w(p):\n    fd = os.open(p + '.tmp', 0)\n",
        "a.py": "import os\ndef w(p, d):\n    tmp = p + '.tmp'\n    with open(tmp, 'wb') as f:\n        f.write(d)\n"
                "    os.open('%s.tmp' % p, os.O_CREAT)\n    open(p, 'rb')\n",
    })
    assert [b.rsplit(":", 1)[1] for b in temp_opens(files)] == ["4", "6"]


# --- one roll-call entry --------------------------------------------------------------

def definitions(files: Dict[str, str], name: str) -> List[str]:
    """``module`` of every top-level or nested ``def name`` in ``files``."""
    out = []
    for m, path in sorted(files.items()):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        out.extend(m for n in ast.walk(tree)
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)
    return out


def test_report_from_dir_is_defined_once():
    """Every roll call over a directory (``hpc-hangkit report``, ``collect``, the monitor,
    capture's plan) goes through one function, so they cannot disagree on its settings."""
    assert definitions(module_files(), "report_from_dir") == [PKG + ".rollcall.pipeline"]


# --- floors: the stage packages import only downwards -------------------------------

#: The stage packages by floor, bottom first: a module may import from its own floor and the
#: floors below, never from one above. A package that straddles two floors names the modules
#: of its lower floor (``capture``'s leaves sit below the sources, its orchestrator above
#: them and below the roll call, which its caller hands in for the sampling plan). Modules
#: outside these packages (the foundations, ``storage``, ``gather``, ``slurmjob``, ``detect``,
#: ``cli``, ``run``) are not floors here: the cycle rule covers them.
FLOORS: List[Tuple[str, Tuple[str, ...]]] = [
    ("parse", ("parse",)),
    ("capture leaves", ("capture.whyfile", "capture.ranks", "capture.native")),
    ("evidence", ("evidence",)),
    ("capture", ("capture",)),
    ("rollcall", ("rollcall",)),
    ("report", ("report",)),
    ("collect", ("collect",)),
    ("slurm", ("slurm",)),
]


def floor_of(module: str, floors=FLOORS) -> Optional[int]:
    """The floor (index into ``floors``) of a module, its most specific prefix winning; None
    for a module on no floor."""
    best, length = None, -1
    for i, (_, prefixes) in enumerate(floors):
        for p in prefixes:
            full = PKG + "." + p
            if (module == full or module.startswith(full + ".")) and len(full) > length:
                best, length = i, len(full)
    return best


def upward_imports(files: Dict[str, str], floors=FLOORS) -> List[str]:
    """``a (floor) -> b (floor)  (file:line what)`` for every import from a lower floor to a
    higher one. Not counted: a package ``__init__`` as the target (it imports only its own
    submodules: :func:`init_violations`) and ``__main__`` modules (entry points, like ``cli/``)."""
    bad = set()
    for a, b, what in import_graph(files):
        if a.endswith(".__main__") or files[b].endswith("__init__.py"):
            continue
        fa, fb = floor_of(a, floors), floor_of(b, floors)
        if fa is not None and fb is not None and fa < fb:
            bad.add("%s (%s) -> %s (%s)  (%s)" % (a, floors[fa][0], b, floors[fb][0], what))
    return sorted(bad)


def test_stage_packages_import_only_downwards():
    bad = upward_imports(module_files())
    assert not bad, "an import from a lower floor to a higher one (FLOORS in %s):\n%s" % (
        os.path.basename(__file__), "\n".join(bad))


def test_floor_rule_finds_an_upward_import(tmp_path):
    files = _tree(tmp_path, {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/leaf.py": "",
        "low/x.py": "from hpc_hangkit.high import y\n",            # up: found
        "high/__init__.py": "",
        "high/y.py": "from hpc_hangkit.low import leaf\n",          # down: fine
        "high/__main__.py": "from hpc_hangkit.top import z\n",      # an entry point: fine
        "top/__init__.py": "",
        "top/z.py": "import hpc_hangkit.low.x\n",
    })
    floors = [("low", ("low",)), ("high", ("high",)), ("top", ("top",))]
    assert [b.split("  (")[0] for b in upward_imports(files, floors)] == [
        "hpc_hangkit.low.x (low) -> hpc_hangkit.high.y (high)"]
    assert floor_of("hpc_hangkit.capture.whyfile") < floor_of("hpc_hangkit.evidence.stacks") \
        < floor_of("hpc_hangkit.capture.orchestrator")
