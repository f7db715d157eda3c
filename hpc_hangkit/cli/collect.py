"""``hpc-hangkit collect JOB_ID``: gather a Slurm job's dumps and print its roll call (hpc_hangkit.collect)."""
import os
import sys

import click

from hpc_hangkit.cli._paths import output_option, write_output

#: exit status of ``collect`` when the caller may not read the job's files
EXIT_DENIED = 4


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
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              callback=output_option("file", make_parents=False),
              help="Also write the roll call as one self-contained HTML page to FILE (its evidence "
              "links point into --out when given).")
def collect_cmd(job_id, attempt, as_json, out_dir, live, storage_url, html_path):
    """Gather a Slurm job's dumps and print its roll call.

    JOB_ID is a job id (1234) or an array task (1234_5). A running job is
    gathered live from every node (srun --overlap probes that trigger an
    on-demand stack dump of each rank); a finished job is read from
    <storage_url>/<job_id>/attempt_<n>/hang_detector/. A copy that a failed
    epilog left in this node's scratch is finished first.

    \b
    Exit status:
      0  report printed
      1  nothing found, storage/Slurm unusable, or --html could not be written
      2  bad JOB_ID, or an output path (--out, --html) that cannot be written
      4  permission denied: the job's files belong to another user (the line
         names the owner's uid; the owner or an admin can collect it)
    """
    import shutil

    from hpc_hangkit import layout
    from hpc_hangkit.collect.job import collect_job
    from hpc_hangkit.collect.attempt import load_site_settings

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
    except PermissionError as e:
        click.echo("hpc-hangkit collect: " + _denied(job_id, e), err=True)
        sys.exit(EXIT_DENIED)
    except (FileNotFoundError, RuntimeError, OSError) as e:
        raise click.ClickException(str(e))
    try:
        from hpc_hangkit.report import render

        for note in got.notes:
            click.echo("hpc-hangkit collect: " + note, err=True)
        click.echo("hpc-hangkit collect: job %s attempt %d from %s" % (
            job_id, got.attempt, got.source), err=True)
        click.echo(render.render_json(got.report) if as_json else render.render_text(got.report))
        if html_path:
            from hpc_hangkit.report import html

            ev = html.gather_evidence(got.hd_dir, html_path, got.report)
            if not keep:  # the gathered tree is removed below: no links into it
                ev = ev._replace(files=[], more={})
            write_output(html_path, html.render_html(got.report, ev), "--html")
    finally:
        if not keep:
            shutil.rmtree(os.path.dirname(got.hd_dir), ignore_errors=True)


def _denied(job_id, err) -> str:
    """One line for a PermissionError met while reading a job's files: whose they are
    (the uid owning the refused path, from lstat: the path itself, never a link's
    target) and who can collect the job."""
    path = getattr(err, "filename", None)
    owner = None
    if path:
        try:
            owner = os.lstat(path).st_uid
        except OSError:
            owner = None
    me = os.getuid()
    if owner is None or owner == me:
        return ("job %s: permission denied reading %s (you are uid %d): only the job's owner or an admin "
                "(root) can collect it" % (job_id, path or err, me))
    try:
        import pwd

        name = " (%s)" % pwd.getpwuid(owner).pw_name
    except (KeyError, ImportError):
        name = ""
    return ("job %s belongs to uid %d%s; you (uid %d) may not read %s: the job's owner or an admin "
            "(root) can collect it" % (job_id, owner, name, me, path))
