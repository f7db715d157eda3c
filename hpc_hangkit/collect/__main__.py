"""``python -m hpc_hangkit.collect epilog``: the entry point slurm/epilog runs (as root)."""
import sys

from hpc_hangkit.slurm.epilog import main

sys.exit(main())
