"""The `hpc-hangkit` command (click group).

Each subcommand is a thin shell over one module; the logic lives in that module.
Exit statuses are documented in docs/cli.md.
"""
import sys

import click

from hpc_hangkit import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hpc-hangkit")
def cli():
    """hpc-hangkit: make hung parallel jobs legible and recoverable.

    \b
    run      watch a local launcher (mpiexec, torchrun) and report a hang
    report   roll call over a directory of dumps
    collect  gather a Slurm job's dumps and print its roll call
    admin    install / check the site setup (SPANK plugin, prolog/epilog)
    """


# --- commands are registered below, one block per module --------------------
# (each block imports its module lazily inside the command function, so
# `hpc-hangkit --help` stays fast)


def main(argv=None):
    """Console-script entry point."""
    try:
        cli.main(args=argv, prog_name="hpc-hangkit")
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
