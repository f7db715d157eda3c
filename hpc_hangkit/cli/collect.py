"""``hpc-hangkit collect JOB_ID``: gather a Slurm job's dumps and print its roll call (hpc_hangkit.collect)."""
import click

from hpc_hangkit.cli._paths import output_option


@click.command("collect")
@click.argument("job_id")
@click.option("--attempt", type=click.IntRange(min=0), default=None,
              help="Attempt number (0 = first run; default: the current/newest).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema v1).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              callback=output_option("dir", make_parents=True),
              help="Keep the gathered hang_detector/ tree in this directory.")
@click.option("--live/--stored", "live", default=None,
              help="Force a live gather (running job) or a read from storage.")
@click.option("--storage-url", default=None, help="Override the storage_url setting.")
def collect_cmd(job_id, attempt, as_json, out_dir, live, storage_url):
    """Gather a Slurm job's dumps and print its roll call.

    JOB_ID is a job id (1234) or an array task (1234_5). A running job is
    gathered live from every node (srun --overlap probes that trigger an
    on-demand stack dump of each rank); a finished job is read from
    <storage_url>/<job_id>/attempt_<n>/hang_detector/. A copy that a failed
    epilog left in this node's scratch is finished first. Exit status: 0
    report printed, 1 nothing found or storage/Slurm unusable, 2 bad JOB_ID.
    """
    import os
    import shutil

    from hpc_hangkit import layout
    from hpc_hangkit.collect.job import collect_job
    from hpc_hangkit.slurm.epilog import load_site_settings

    try:
        layout.validate_job_id(job_id)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="JOB_ID")
    from hpc_hangkit.config import ConfigError

    try:
        settings = load_site_settings(storage_url=storage_url)
    except ConfigError as e:
        raise click.ClickException(str(e))
    keep = out_dir is not None
    if keep:
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as e:
            raise click.ClickException("cannot create --out %s: %s" % (out_dir, e.strerror or e))
    try:
        got = collect_job(job_id, attempt=attempt, settings=settings, out_dir=out_dir, live=live)
    except (FileNotFoundError, RuntimeError, OSError) as e:
        raise click.ClickException(str(e))
    try:
        from hpc_hangkit.report import render

        for note in got.notes:
            click.echo("hpc-hangkit collect: " + note, err=True)
        click.echo("hpc-hangkit collect: job %s attempt %d from %s" % (
            job_id, got.attempt, got.source), err=True)
        click.echo(render.render_json(got.report) if as_json else render.render_text(got.report))
    finally:
        if not keep:
            shutil.rmtree(os.path.dirname(got.hd_dir), ignore_errors=True)
