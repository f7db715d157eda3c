"""Internal commands Slurm runs (hidden from --help): the batch-step monitor the SPANK
plugin starts, and the per-node probe and capture that the monitor runs with srun --overlap
(hpc_hangkit.slurm.batch)."""
import sys

import click


@click.command("slurm-monitor", hidden=True)
@click.option("--step", default=None, metavar="JOB.STEP",
              help="watch this interactive step (srun) instead of the batch job")
def slurm_monitor_cmd(step):
    """Internal: the batch-step monitor, started by the SPANK plugin in the batch step
    as the job's user, or with --step the monitor of an interactive step, started by the
    plugin in srun. Reads the job (or srun) environment; always exits 0."""
    from hpc_hangkit.slurm.batch import monitor_main
    from hpc_hangkit.slurmjob import validate_step_id

    if step is not None:
        try:
            validate_step_id(step)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--step")
    sys.exit(monitor_main(step=step))


@click.command("slurm-probe", hidden=True, add_help_option=False,
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def slurm_probe_cmd(argv):
    """Internal (srun --overlap on each node): print this node's answer (framed lines,
    hpc_hangkit.slurm.probe.probe_main). Its options are parsed by
    hpc_hangkit.slurm.probe.probe_cli, which ``python -m hpc_hangkit slurm-probe`` reaches
    without this CLI."""
    from hpc_hangkit.slurm.probe import probe_cli

    sys.exit(probe_cli(list(argv)))


@click.command("slurm-capture", hidden=True)
@click.option("--scratch", required=True, help="the job attempt's node scratch")
@click.option("--suspects", default="", help="the job's suspect ranks (e.g. 1,5-6): they get py-spy --native")
@click.option("--at", type=float, default=None, help="epoch seconds to take the snapshot at (every node the same)")
def slurm_capture_cmd(scratch, suspects, at):
    """Internal (srun --overlap on each node): capture this node's ranks into
    <scratch>/hang_detector/ and print what was captured as one JSON line."""
    from hpc_hangkit.gather import capture_main
    from hpc_hangkit.config import load_settings
    from hpc_hangkit.ranges import parse_ranks

    try:
        sus = parse_ranks(suspects) if suspects else []
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--suspects")
    sys.exit(capture_main(load_settings(), scratch, suspects=sus, at=at))
