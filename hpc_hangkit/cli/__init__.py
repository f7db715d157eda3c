"""The `hpc-hangkit` command (click group).

One module per command (report, run, collect, admin, and the internal slurm-*
commands in ``slurm``); each is a thin shell over the library module that holds the
logic, imported lazily inside the command function so `hpc-hangkit --help` stays
fast.  Exit statuses are in each command's --help (and docs/run.md, docs/report.md).
"""
import sys

import click

from hpc_hangkit import __version__
from hpc_hangkit.cli import admin, collect, lint, report, run, slurm


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hpc-hangkit")
def cli():
    """hpc-hangkit: make hung parallel jobs legible and recoverable.

    \b
    run      watch a local launcher (mpiexec, torchrun) and report a hang
    report   roll call over a directory of dumps
    collect  gather a Slurm job's dumps and print its roll call
    admin    install / check the site setup (SPANK plugin, prolog/epilog)
    lint     find collectives that only some ranks reach (static check)
    """


cli.add_command(report.report_cmd)
cli.add_command(run.run_cmd)
cli.add_command(collect.collect_cmd)
cli.add_command(slurm.slurm_monitor_cmd)
cli.add_command(slurm.slurm_probe_cmd)
cli.add_command(slurm.slurm_capture_cmd)
cli.add_command(admin.admin_group)
cli.add_command(lint.lint_cmd)


def main(argv=None):
    """Console-script entry point."""
    try:
        cli.main(args=argv, prog_name="hpc-hangkit")
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
