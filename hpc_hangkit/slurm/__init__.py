"""Everything that talks to Slurm: commands, the batch-step monitor, admin, the epilog."""
