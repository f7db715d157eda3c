"""collect: node scratch -> storage (fsspec), verified; and ``hpc-hangkit collect JOBID``.

The whole collector lives here:

- :mod:`hpc_hangkit.collect.copy` -- the copy engine (no-follow tree walk,
  verified copy, manifest); runs as the job's user.
- :mod:`hpc_hangkit.collect.attempt` -- one attempt's collection as root runs it:
  privilege drop, supervision and reaping of the copying child, budget, settings.
- :mod:`hpc_hangkit.collect.job` -- ``hpc-hangkit collect JOBID``: finish a
  copy a failed epilog left on this node, gather a running job live or read a
  finished one from storage, build its roll call.
- ``python -m hpc_hangkit.collect epilog`` (what ``slurm/epilog`` runs as
  root) is :func:`hpc_hangkit.slurm.epilog.main`, slurmd's hook, which calls
  :mod:`~hpc_hangkit.collect.attempt` (an entry point, like ``cli/``, may import
  from above its package).
"""
