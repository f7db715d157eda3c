"""collect: node scratch -> storage (fsspec), verified; and ``hpc-hangkit collect JOBID``.

- :mod:`hpc_hangkit.collect.copy` -- the copy engine (no-follow tree walk,
  verified copy, manifest); runs as the job's user.
- :mod:`hpc_hangkit.collect.job` -- ``hpc-hangkit collect JOBID``: finish a
  copy a failed epilog left on this node, gather a running job live or read a
  finished one from storage, build its roll call.
- ``python -m hpc_hangkit.collect epilog`` (what ``slurm/epilog`` runs as
  root) is :func:`hpc_hangkit.slurm.epilog.main`, the root side: privilege
  drop, supervision of the copying child, budget.
"""
