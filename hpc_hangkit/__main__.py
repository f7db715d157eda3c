"""`python -m hpc_hangkit` is the `hpc-hangkit` command."""
from hpc_hangkit.cli import main

if __name__ == "__main__":
    main()
