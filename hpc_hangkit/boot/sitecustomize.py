"""hpc-hangkit boot: arms rank processes at interpreter start (stdlib-only, CPython >= 3.8).

``Settings.to_env()`` puts this directory first on PYTHONPATH, so every Python
process of the job imports this module at start-up.  It:

1. arms the watchdog (``_hangkit_core.boot``) if this process is a rank
   (RANK / OMPI_COMM_WORLD_RANK / PMI_RANK / PMIX_RANK / SLURM_PROCID) and
   HANGKIT_MODE is observe or fail; helpers (torchrun agent, hpc-hangkit
   itself, the Slurm batch step, children of the armed rank) are left alone;
2. runs the optional extension points ``_hangkit_exit.arm(env)`` (the rank
   records how it ends), ``_hangkit_fr.arm(env)`` (Flight
   Recorder dump trigger) and ``_hangkit_autocheckin.arm(env)`` (if
   HANGKIT_AUTO_CHECKIN is true or unset: on by default), each guarded;
3. chains to the site's own ``sitecustomize`` (the next one on sys.path),
   imported under its real name so it behaves exactly as before.

It never raises into the user's program: a rank that cannot be armed gets one
stderr line ``hpc-hangkit: rank R NOT watched: <why>`` and a marker file
``$HANGKIT_SCRATCH_DIR/unwatched/rank_<r>.pid<pid>.txt``.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _arm():
    if not os.environ.get("HANGKIT_MODE"):  # = _hangkit_core.ENV_MODE, checked before importing it
        return None
    try:
        import _hangkit_core
    except BaseException as e:  # pragma: no cover - broken install
        try:
            sys.stderr.write("hpc-hangkit: rank ? NOT watched: cannot import the watchdog core: %r\n" % (e,))
        except BaseException:
            pass
        return None
    st = _hangkit_core.boot(os.environ)
    if st is None:
        return None
    _extension("_hangkit_exit", st)
    _extension("_hangkit_fr", st)
    auto = os.environ.get(_hangkit_core.ENV_AUTO_CHECKIN)
    if auto is None or _hangkit_core._truthy(auto):  # on by default (config.auto_checkin)
        _extension("_hangkit_autocheckin", st)
    return st


def _extension(name, st):
    """Import ``name`` from this directory and call its ``arm(env)``; never raises."""
    try:
        if not os.path.exists(os.path.join(_HERE, name + ".py")):
            return
        mod = __import__(name)
        mod.arm(os.environ)
    except BaseException as e:
        try:
            sys.stderr.write("hpc-hangkit: rank %s: %s.arm failed (the watchdog is still armed): %r\n"
                             % (st.get("rank"), name, e))
        except BaseException:
            pass


def _chain():
    """Import the site's own sitecustomize (next on sys.path) under its real name."""
    from importlib.machinery import PathFinder

    def same(p):
        try:
            return os.path.realpath(p or os.getcwd()) == os.path.realpath(_HERE)
        except (OSError, ValueError):
            return False

    rest = [p for p in sys.path if not same(p)]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return None
    mod = type(sys)("sitecustomize")
    mod.__spec__ = spec
    mod.__loader__ = spec.loader
    mod.__file__ = spec.origin
    if spec.submodule_search_locations is not None:
        mod.__path__ = list(spec.submodule_search_locations)
    me = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        # same as before hpc-hangkit: site.py reports the site's own error
        if me is not None:
            sys.modules["sitecustomize"] = me
        raise
    return mod


try:
    _arm()
except BaseException:  # pragma: no cover - _hangkit_core.boot never raises
    pass
_chain()
