"""Everything that is Slurm's: the batch-step monitor, admin, the epilog hook, the per-job RAS
port (the job environment and the Slurm commands are :mod:`hpc_hangkit.slurmjob`, below)."""
