"""hpc-hangkit: make hung parallel jobs on Slurm legible and recoverable.

Rank-side API (cheap, safe to import in any rank):

- :func:`checkpoint` -- heartbeat + watchdog deadline push (see :mod:`hpc_hangkit.arm.watchdog`)
- :func:`watch`, :func:`unwatch`, :func:`watching`
- :func:`ranks_agree`, :func:`collective` (see :mod:`hpc_hangkit.arm.agree`)

Everything else (parsers, roll call, monitor, Slurm integration) lives in
submodules and is imported on demand.
"""

__version__ = "0.1.0"

_LAZY = {
    "checkpoint": "hpc_hangkit.arm.watchdog",
    "watch": "hpc_hangkit.arm.watchdog",
    "unwatch": "hpc_hangkit.arm.watchdog",
    "watching": "hpc_hangkit.arm.watchdog",
    "ranks_agree": "hpc_hangkit.arm.agree",
    "collective": "hpc_hangkit.arm.agree",
}


def __getattr__(name):  # PEP 562: keep `import hpc_hangkit` free of side effects
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError("module 'hpc_hangkit' has no attribute %r" % name)
    import importlib

    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


__all__ = ["__version__"] + sorted(_LAZY)
