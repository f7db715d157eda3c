"""``hpc-hangkit lint``: a static checker for collectives that only some ranks reach.

Stdlib ``ast`` only. :func:`lint_paths` is the whole pipeline: find the files, parse each
once to index its functions (:mod:`.model`, :mod:`.calls`), propagate "reaches a
collective" and "returns a rank-dependent value" across the tree, then re-read only the
modules that reach a collective and run the rules (:mod:`.rules`) on them. docs/lint.md.
"""

__all__ = ["lint_paths", "LintResult"]


class LintResult:
    """``findings`` (sorted :class:`~hpc_hangkit.lint.rules.Finding`), ``errors`` (list of
    ``(path, message)`` for files that could not be read or parsed), ``warnings`` (list of
    ``(path, line, message)``: ``# hangkit:`` comments that silence nothing or name no rule),
    ``files`` (number of files scanned), ``lines`` (their total lines), ``level`` (the least
    certain level reported), ``below`` (``{level: count}`` of the findings left out for being
    below it), ``cache`` (None without a facts cache, else ``{"dir", "hits", "stored",
    "note"}``: the cache's directory for this run, files read from it and written to it, and
    None or why it was not used or stopped)."""

    def __init__(self):
        self.findings = []
        self.level = "warning"
        self.below = {}
        self.errors = []
        self.warnings = []
        self.files = 0
        self.lines = 0
        self.cache = None


def lint_paths(paths, *, select=None, ignore=None, exclude=(), collectives=(), rank_sources=(), jobs=None,
               level="warning", exclude_roots=(), cache_dir=None):
    """Lint every ``*.py`` under ``paths`` (files or directories).

    ``select``/``ignore``: iterables of codes or code prefixes (``"HK1"``); ``exclude``:
    glob patterns matched against each file's and directory's name, its path as given, and its
    path relative to each directory of ``exclude_roots`` that holds it (a project's root: the
    directory of its pyproject.toml); a file given by name is left out too; ``collectives``:
    extra collective names (see :func:`hpc_hangkit.lint.collectives.extend`); ``rank_sources``:
    extra names of calls/attributes whose value is the rank (see
    :func:`hpc_hangkit.lint.collectives.extend_rank_sources`); ``jobs``: processes for the
    per-file phases (parsing and indexing each file, checking each module that reaches a
    collective), this one and ``jobs - 1`` forked workers; None: the usable cores, and one process for fewer than
    :data:`PARALLEL_MIN_FILES` files. The result does not depend on ``jobs``. ``level``: the
    least certain level reported (:data:`hpc_hangkit.lint.rules.LEVELS`: ``"error"``,
    ``"warning"``, ``"note"``); the findings below it are only counted (``LintResult.below``).
    ``cache_dir``: a directory for the facts cache (:mod:`hpc_hangkit.lint.cache`: a file
    whose bytes, settings, file set and lint are those of an earlier run is not parsed again;
    the findings are the same); None: no cache. Returns a :class:`LintResult`. Raises
    ``FileNotFoundError`` for a path that does not exist,
    ``ValueError`` for an unknown level.
    """
    import gc

    from hpc_hangkit.lint import collectives as C
    from hpc_hangkit.lint.calls import set_tree_names
    from hpc_hangkit.lint.rules import LEVELS

    if level not in LEVELS:
        raise ValueError("unknown level %r (known: %s)" % (level, ", ".join(LEVELS)))

    saved = C.snapshot()
    C.extend(collectives)
    C.extend_rank_sources(rank_sources)
    # the cyclic collector off while the lint runs: the analysis makes no reference cycles
    # worth collecting (trees are freed by reference counts), and scanning the millions of
    # live ast nodes and facts cost a third of the CPU time on the installed torch
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _lint(paths, select, ignore, exclude, exclude_roots, jobs, LEVELS[:LEVELS.index(level) + 1],
                     cache_dir)
    finally:
        if collecting:
            gc.enable()
        C.restore(saved)
        set_tree_names(None)


#: below this many files one process does it all (starting workers costs more than it saves)
PARALLEL_MIN_FILES = 200
#: the project being checked, for the forked workers of the rules phase
_PROJECT = None


def _jobs(jobs, n):
    import os
    if jobs is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            cores = os.cpu_count() or 1
        return cores if n >= PARALLEL_MIN_FILES else 1
    return max(1, int(jobs))


def _map(func, items, jobs):
    """``func`` over ``items``, yielded in the order of ``items``: in this process alone
    (``jobs`` 1), or here and in ``jobs - 1`` forked workers, which see this process's state
    as it is now (the settings' collectives and rank sources, the project). Each process takes
    the next item not yet taken, so a list sorted largest first leaves no process with a large
    item at the end; this process's own results are not pickled. An exception ``func`` raises
    in a worker is raised here (``RuntimeError`` with its traceback when it cannot be
    pickled); a worker that dies raises ``RuntimeError``."""
    import multiprocessing
    import queue
    n = len(items)
    if jobs <= 1 or n < 2 or "fork" not in multiprocessing.get_all_start_methods():
        for x in items:
            yield func(x)
        return
    from multiprocessing.connection import wait
    ctx = multiprocessing.get_context("fork")
    taken = ctx.RawValue("q", 0)
    lock = ctx.Lock()
    out = ctx.Queue()

    def take():
        with lock:
            i = taken.value
            taken.value = i + 1
        return i

    def work():
        i = take()
        while i < n:
            try:
                got = (i, True, func(items[i]))
            except BaseException as e:  # the parent raises it
                import traceback
                got = (i, False, e if _picklable(e) else RuntimeError(traceback.format_exc()))
            out.put(got)
            if not got[1]:
                break
            i = take()
        out.close()
        out.join_thread()

    procs = [ctx.Process(target=work, daemon=True) for _ in range(min(jobs, n) - 1)]
    for p in procs:
        p.start()
    done = {}
    head = 0
    running = list(procs)

    def drain(block):
        # the results the workers have sent; ``block``: wait until at least one has come
        while True:
            try:
                i, ok, got = out.get_nowait()
            except queue.Empty:
                if not block:
                    return
                ready = wait([out._reader] + [p.sentinel for p in running])
                for p in running[:]:
                    if p.sentinel in ready:
                        p.join()
                        running.remove(p)
                        if p.exitcode != 0:
                            raise RuntimeError("a lint worker process died (exit code %s)" % p.exitcode)
                continue
            if not ok:
                raise got
            done[i] = got
            block = False

    try:
        while head < n:
            i = take()
            if i < n:
                done[i] = func(items[i])
                drain(False)
            else:
                while head not in done:
                    drain(True)
            while head in done:
                yield done.pop(head)
                head += 1
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join()
        out.close()


def _picklable(obj):
    import pickle
    try:
        pickle.dumps(obj)
        return True
    except Exception:
        return False


def _index_file(path, raw=None):
    """Parse one file and compute its facts (no tree kept): ``(path, (module, foreign flags,
    lines))``, or ``(path, message)`` when it cannot be read or parsed. ``raw``: its bytes,
    already read."""
    from hpc_hangkit.lint.calls import Project
    from hpc_hangkit.lint.model import decode_source, load_module
    try:
        if raw is None:
            with open(path, "rb") as f:
                raw = f.read()
        mod = load_module(path, text=decode_source(raw))
    except (SyntaxError, ValueError, OSError, RecursionError) as e:
        return path, "%s: %s" % (type(e).__name__, e)
    one = Project()
    try:
        one.facts(mod)
    except RecursionError:
        return path, _TOO_DEEP
    lines = len(mod.lines)
    # re-read below only where a collective is reached
    mod.tree, mod.local, mod.lines, mod.words = None, {}, [], {}
    for ff in mod.funcs.values():
        ff.node = None
    return path, (mod, one.foreign, lines)


def _index_kept(path):
    """:func:`_index_file` for a run with a facts cache: ``(path, digest of the bytes read,
    the result pickled)``, or ``(path, None, message)`` when the file cannot be checked (such
    a result is not kept)."""
    import pickle

    from hpc_hangkit.lint.cache import FactsCache
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        return path, None, "%s: %s" % (type(e).__name__, e)
    _, got = _index_file(path, raw)
    if isinstance(got, str):
        return path, None, got
    return path, FactsCache.digest(raw), pickle.dumps(got, protocol=pickle.HIGHEST_PROTOCOL)


#: why a file whose facts or rules recursed too deep is left out (its error, as an unparsable file's)
_TOO_DEEP = ("RecursionError: an expression or statement nested deeper than the lint follows (Python's "
             "recursion limit); this file is not checked, the others are")


def _check_key(key):
    """The findings of module ``key`` of :data:`_PROJECT` (parsed again for the rules): a list
    of findings, or :data:`_TOO_DEEP` when they recursed too deep."""
    from hpc_hangkit.lint.model import functions_of, load_module
    from hpc_hangkit.lint.rules import check_module
    mod = _PROJECT.modules[key]
    fresh = load_module(mod.path, name=mod.name)
    for qual, cls, node in functions_of(fresh.tree):
        if qual in mod.funcs:
            mod.funcs[qual].node = node
    mod.tree, mod.lines, mod.local, mod.words = fresh.tree, fresh.lines, fresh.local, fresh.words
    try:
        return check_module(_PROJECT, mod)
    except RecursionError:
        return _TOO_DEEP
    finally:
        mod.tree, mod.lines, mod.local, mod.words = None, [], {}, {}
        for ff in mod.funcs.values():
            ff.node = None


def _comment_warnings(mod, out):
    """Append ``(path, line, message)`` to ``out`` for each ``# hangkit:`` comment of ``mod``
    that silences nothing (its form) or names a code no rule has."""
    from hpc_hangkit.lint.rules import RULES
    for line, text in mod.bad_ignores:
        out.append((mod.path, line, "`%s` silences nothing: write `# hangkit: ignore` (every code) or "
                                    "`# hangkit: ignore[HK101,HK2]` (codes or prefixes)" % text))
    for line, codes in sorted(mod.ignores.items()):
        for c in sorted(codes - {"*"}):
            if not any(r.startswith(c) for r in RULES):
                out.append((mod.path, line, "`# hangkit: ignore[%s]`: no rule has code %s (known: %s)"
                            % (c, c, ", ".join(sorted(RULES)))))


def _indexed(files, jobs, cache, res):
    """``(path, result of :func:`_index_file`)`` for each of ``files`` in order: from the
    :class:`~hpc_hangkit.lint.cache.FactsCache` ``cache`` where it holds the file's bytes, the
    others indexed in worker processes (``jobs`` as :func:`lint_paths` takes it; a handful of
    changed files are indexed in this process) and kept in ``cache``. ``cache`` None: no cache.
    Notes in ``res.cache`` what the cache did."""
    if cache is None:
        yield from _map(_index_file, files, _jobs(jobs, len(files)))
        return
    import pickle
    got = {}
    if cache.usable:
        for path in files:
            try:
                with open(path, "rb") as f:
                    raw = f.read()
            except OSError:
                continue  # indexing it says why
            kept = cache.get(path, raw)
            if kept is not None:
                got[path] = kept
    missing = [p for p in files if p not in got]
    indexed = _map(_index_kept, missing, _jobs(jobs, len(missing)))
    try:
        for path in files:
            if path in got:
                yield path, got.pop(path)
                continue
            path, digest, blob = next(indexed)
            if digest is None:
                yield path, blob
                continue
            cache.put(path, digest, blob)
            yield path, pickle.loads(blob)
    finally:
        indexed.close()
    res.cache = {"dir": cache.dir, "hits": cache.hits, "stored": cache.stored, "note": cache.note}


def _lint(paths, select, ignore, exclude, exclude_roots, jobs, levels, cache_dir=None):
    global _PROJECT
    from hpc_hangkit.lint.calls import Project, set_tree_names
    from hpc_hangkit.lint.files import iter_files
    from hpc_hangkit.lint.model import holds_wrapper

    res = LintResult()
    project = Project()
    files = list(iter_files(paths, exclude, exclude_roots))
    asked, jobs = jobs, _jobs(jobs, len(files))
    reach = []
    sizes = {}
    # the forked workers see it; forgotten when this run ends
    set_tree_names(files)
    cache = None
    if cache_dir is not None:
        from hpc_hangkit.lint import collectives as C
        from hpc_hangkit.lint.cache import FactsCache
        cache = FactsCache(cache_dir, tuple(tuple(sorted(x)) for x in C.snapshot()), files)
    for path, got in _indexed(files, asked, cache, res):
        if isinstance(got, str):
            res.errors.append((path, got))
            continue
        mod, foreign, lines = got
        res.files += 1
        res.lines += lines
        sizes[mod.key] = lines
        project.insert(mod)
        for k, lv in foreign.items():
            if lv > project.foreign.get(k, 0):
                project.foreign[k] = lv
        reach.append(mod)
        _comment_warnings(mod, res.warnings)
    project.propagate()
    keys = list(dict.fromkeys(mod.key for mod in reach if project.modules.get(mod.key) is mod and (
        mod.has_p2p or any(ff.witness or holds_wrapper(ff) for ff in mod.funcs.values()))))
    _PROJECT = project
    # the largest modules first, one at a time: no worker is left with a large one at the end
    largest = sorted(keys, key=lambda k: -sizes.get(k, 0))
    try:
        got = dict(zip(largest, _map(_check_key, largest, jobs if len(keys) > 1 else 1)))
        for key in keys:
            found = got.pop(key)
            if isinstance(found, str):
                res.errors.append((project.modules[key].path, found))
            else:
                res.findings.extend(found)
    finally:
        _PROJECT = None

    def wanted(code):
        if select and not any(code.startswith(s) for s in select):
            return False
        return not (ignore and any(code.startswith(s) for s in ignore))
    res.findings = [f for f in res.findings if wanted(f.code)]
    for f in res.findings:
        if f.severity not in levels:
            res.below[f.severity] = res.below.get(f.severity, 0) + 1
    res.findings = [f for f in res.findings if f.severity in levels]
    res.level = levels[-1]
    return res
