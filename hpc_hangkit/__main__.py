"""`python -m hpc_hangkit` is the `hpc-hangkit` command."""
import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["slurm-probe"]:
        # the monitor runs this on every node at every poll: no CLI framework to load
        from hpc_hangkit.slurm.probe import probe_cli

        sys.exit(probe_cli(sys.argv[2:]))
    from hpc_hangkit.cli import main

    main()
