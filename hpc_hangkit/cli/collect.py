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

    Interactive steps (sruns in salloc, or srun alone) keep their ranks'
    files apart, under attempt_<n>/step_<s>/: each gets a roll call of its
    own, printed after a line "=== job J attempt N step S ===" (and one
    "=== job J attempt N: batch script ===" before the attempt's own report
    when there are both). With --json and steps, one object {"job", "attempt",
    "reports": [{"step": S or null, "report": ...}]}; with --html and steps,
    FILE is the first report and each further one goes to FILE's name with
    ".step_<s>" before its extension.

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
        parts = got.parts
        plain = len(parts) == 1 and parts[0].step is None   # no interactive steps: as ever
        if plain:
            click.echo(render.render_json(got.report) if as_json else render.render_text(got.report))
        elif as_json:
            import json

            click.echo(json.dumps({"job": job_id, "attempt": got.attempt, "reports": [
                {"step": p.step, "report": json.loads(render.render_json(p.report))}
                for p in parts]}, indent=2))
        else:
            for i, p in enumerate(parts):
                if i:
                    click.echo("")
                click.echo(_part_title(job_id, got.attempt, p.step))
                click.echo(render.render_text(p.report))
        if html_path:
            from hpc_hangkit.report import html

            for i, p in enumerate(parts):
                path = html_path if i == 0 else _step_html_path(html_path, p.step)
                ev = html.gather_evidence(p.hd_dir, path, p.report)
                if not keep:  # the gathered tree is removed below: no links into it
                    ev = ev._replace(files=[], more={})
                write_output(path, html.render_html(p.report, ev), "--html")
    finally:
        if not keep:
            shutil.rmtree(_gathered_root(got), ignore_errors=True)


def _part_title(job_id, attempt, step) -> str:
    """The line above one report of an attempt with interactive steps."""
    if step is None:
        return "=== job %s attempt %d: batch script ===" % (job_id, attempt)
    return "=== job %s attempt %d step %d ===" % (job_id, attempt, step)


def _step_html_path(path, step) -> str:
    """``report.html`` -> ``report.step_<s>.html`` (``report`` -> ``report.step_<s>``)."""
    from hpc_hangkit import layout

    stem, ext = os.path.splitext(path)
    return "%s.%s%s" % (stem, layout.step_dir_name(step), ext)


def _gathered_root(got) -> str:
    """The temporary directory every part was gathered into (``<root>/hang_detector``,
    ``<root>/step_<s>/hang_detector``)."""
    p = got.parts[0]
    up = os.path.dirname(p.hd_dir)
    return up if p.step is None else os.path.dirname(up)


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
