"""The `hpc-hangkit` command (click group).

Each subcommand is a thin shell over one module; the logic lives in that module.
Exit statuses are in each command's --help (and docs/run.md, docs/report.md).
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


# --- output paths: checked when the options are parsed, before any work ----------
def _output_problem(path, kind, make_parents):
    """Why ``path`` cannot be written, or None if it can.

    ``kind``: "file" (written with open(path, "w")) or "dir" (created with
    os.makedirs, files made inside). ``make_parents``: the command creates
    missing parent directories itself. The test is real: a temporary file is
    created and removed in the directory that would receive the output (or in
    its nearest existing ancestor when parents are created), so a read-only
    mount, /proc or a missing permission is found as the OS reports it.
    """
    import os
    import tempfile

    ap = os.path.abspath(path)
    if kind == "file":
        if os.path.isdir(ap):
            return "it is a directory"
        where = os.path.dirname(ap)
    else:
        if os.path.lexists(ap) and not os.path.isdir(ap):
            return "it exists and is not a directory"
        where = ap
    if not os.path.isdir(where):
        anc = where
        while not os.path.lexists(anc) and os.path.dirname(anc) != anc:
            anc = os.path.dirname(anc)
        if not make_parents or not os.path.isdir(anc):
            if os.path.lexists(anc) and not os.path.isdir(anc):
                return "%s is not a directory" % anc
            return "directory %s does not exist (create it first)" % where
        where = anc
    try:
        fd, probe = tempfile.mkstemp(prefix=".hangkit-probe-", dir=where)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return "cannot create files in %s: %s" % (where, e.strerror or e)
    return None


def _output_option(kind, make_parents):
    """A click option callback refusing (exit 2, BadParameter) an output path that cannot be written."""
    def check(ctx, param, value):
        if value is not None:
            why = _output_problem(value, kind, make_parents)
            if why:
                raise click.BadParameter("cannot %s %s: %s" % ("write" if kind == "file" else "create", value, why),
                                         ctx=ctx, param=param)
        return value
    return check


def _write_output(path, text, option):
    """Write ``text`` to ``path``; an OSError becomes a one-line ClickException (exit 1) naming ``option``."""
    try:
        with open(path, "w") as fh:
            fh.write(text)
    except OSError as e:
        raise click.ClickException("cannot write %s %s: %s" % (option, path, e.strerror or e))


# --- report (owner: hpc_hangkit/rollcall.py + render.py) ----------------------
@cli.command("report")
@click.argument("path", type=click.Path(exists=False))
@click.option("--json", "as_json", is_flag=True, help="Print the roll call as JSON (schema v1, docs/report-schema.md).")
@click.option("--depth", type=click.IntRange(min=1), default=None, metavar="N",
              help="Group ranks by the innermost N frames of the call chain (default: the whole chain).")
@click.option("--tree", is_flag=True, help="Also print the merged call-prefix tree with rank sets on each branch "
              "(with --json: a \"tree\" key).")
@click.option("--svg", "svg_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              callback=_output_option("file", make_parents=False),
              help="Write the call-prefix tree as an SVG picture to FILE.")
@click.option("--samples", type=click.IntRange(min=1), default=None, metavar="K",
              help="How many of each rank's newest samples decide its position (default: stack_samples, 5).")
@click.option("--world-size", type=click.IntRange(min=1), default=None, metavar="N",
              help="Number of ranks (default: from the dump headers); ranks with no data are listed as missing.")
@click.option("--summary-out", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              callback=_output_option("file", make_parents=False),
              help="Also write the node summary of PATH (FILE should end in .summary.json) for a later merge.")
def report_cmd(path, as_json, depth, tree, svg_path, samples, world_size, summary_out):
    """Roll call over PATH: which ranks wait where, and which went the other way.

    \b
    PATH is a directory (searched recursively, symlinks not followed) holding any
    mix of: watchdog logs (faulthandler dumps), py-spy dumps (text or --json,
    with or without --native), stdout/stderr files with Python tracebacks,
    heartbeats/*.hb, unwatched/*.txt markers and *.summary.json node summaries.

    \b
    Exit status:
      0  a report was produced (whatever the verdict; it is in the output)
      1  an output file (--svg, --summary-out) could not be written
      2  bad usage: PATH does not exist or holds no dumps at all, or an
         output file's directory is missing or not writable
    """
    import json as _json
    import os

    from hpc_hangkit import render, rollcall

    if not os.path.exists(path):
        click.echo("hpc-hangkit report: %s: no such file or directory" % path, err=True)
        sys.exit(2)
    if samples is None:
        try:
            from hpc_hangkit.config import load_settings

            samples = load_settings().stack_samples
        except Exception:  # a broken site config must not block a post-mortem
            samples = 5
    summary = rollcall.summarize_dir(path, world_size=world_size, samples=samples)
    if not summary["positions"] and not summary["unwatched"]:
        click.echo("hpc-hangkit report: no stack dumps, tracebacks, heartbeats or summaries under %s" % path,
                   err=True)
        for w in summary["warnings"][:20]:
            click.echo("  " + w, err=True)
        sys.exit(2)
    rep = rollcall.report_from_summary_and_dir(summary, path, depth=depth, world_size=world_size)
    if summary_out:
        _write_output(summary_out, _json.dumps(summary, separators=(",", ":")), "--summary-out")
    if svg_path:
        _write_output(svg_path, render.render_svg(rep), "--svg")
    if as_json:
        click.echo(render.render_json(rep, tree=tree), nl=False)
    else:
        click.echo(render.render_text(rep), nl=False)
        if tree:
            click.echo("")
            click.echo(render.render_tree(rep), nl=False)
        if svg_path:
            click.echo("call-prefix tree picture: %s" % svg_path)
    sys.exit(0)


# --- run (owner: hpc_hangkit/run.py) ------------------------------------------
@cli.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--mode", type=click.Choice(["observe", "fail"]), default=None,
              help="observe: log, capture, leave the job running (default). "
                   "fail: also terminate the job and exit 3.")
@click.option("--confirm-duration", "confirm_duration_s", type=float, default=None, metavar="S",
              help="seconds the ranks must stay frozen and disagreeing (rounded up to whole polls).")
@click.option("--poll-interval", "poll_interval_s", type=float, default=None, metavar="S",
              help="seconds between looks at the ranks' dumps and heartbeats.")
@click.option("--suspect-after", "suspect_after_s", type=float, default=None, metavar="S",
              help="seconds frozen before the first 'suspected' warning.")
@click.option("--report-every", "report_every_s", type=float, default=None, metavar="S",
              help="seconds between 'still suspected' warnings (with the current roll call).")
@click.option("--watchdog-period", "watchdog_period_s", type=float, default=None, metavar="S",
              help="seconds without checkpoint() before a rank's watchdog dumps its stack (and between dumps).")
@click.option("--pyspy-path", "pyspy_path", default=None, metavar="PATH",
              help="py-spy executable used at capture (default: py-spy on PATH).")
@click.option("--out", "out_dir", default=None, metavar="DIR", callback=_output_option("dir", make_parents=True),
              help="output directory (default ./hangkit-run-<UTC time>): DIR/hang_detector/ and the ranks' scratch.")
@click.option("--json-out", "json_out", default=None, metavar="FILE",
              callback=_output_option("file", make_parents=True),
              help="also write the roll call JSON (report.json, schema v1) here.")
@click.option("--grace", "grace_s", type=float, default=10.0, show_default=True, metavar="S",
              help="fail mode: seconds between SIGTERM and SIGKILL to the job's process group.")
@click.argument("launcher", nargs=-1, required=True, type=click.UNPROCESSED)
def run_cmd(mode, confirm_duration_s, poll_interval_s, suspect_after_s, report_every_s,
            watchdog_period_s, pyspy_path, out_dir, json_out, grace_s, launcher):
    """Run LAUNCHER armed, watch its ranks, and report a hang while they live.

    \b
    hpc-hangkit run [OPTIONS] -- LAUNCHER ARGS...
      e.g.  hpc-hangkit run --confirm-duration 6 --poll-interval 1 -- mpiexec -n 4 python train.py
            hpc-hangkit run --mode fail -- python -m torch.distributed.run --nproc-per-node 4 train.py

    The job environment comes from the settings (defaults < site config.toml <
    HANGKIT_* environment < these options); the launcher runs in its own
    process group and Ctrl-C / SIGTERM are forwarded to it. On a confirmed hang
    (ranks disagree and nothing moved for the confirm window) it captures an
    on-demand watchdog dump and `py-spy dump --native` of every rank into
    OUT/hang_detector/, prints the roll call and writes report.txt and
    report.json there. Stages are logged to stderr with UTC timestamps.

    \b
    Exit status:
      the job's own status (128+N if killed by signal N), also in observe mode
      2    bad usage: unknown option (LAUNCHER never starts with '-'), or
           --out / --json-out cannot be created; nothing is started or created
      3    hang confirmed and the job terminated (--mode fail)
      4    hpc-hangkit failed (bad setting, unusable --out, monitor crash)
      126  LAUNCHER not executable;  127  LAUNCHER not found
    """
    if launcher[0].startswith("-"):
        # ignore_unknown_options hands a misspelled option to LAUNCHER: refuse it as click would
        ctx = click.get_current_context()
        names = [n for p in ctx.command.get_params(ctx) for n in p.opts + p.secondary_opts
                 if n.startswith("-")]
        raise click.NoSuchOption(launcher[0].split("=", 1)[0], possibilities=names, ctx=ctx)
    from hpc_hangkit.run import run_command

    overrides = {"mode": mode, "confirm_duration_s": confirm_duration_s,
                 "poll_interval_s": poll_interval_s, "suspect_after_s": suspect_after_s,
                 "report_every_s": report_every_s, "watchdog_period_s": watchdog_period_s,
                 "pyspy_path": pyspy_path}
    sys.exit(run_command(list(launcher), overrides, out_dir, json_out, grace_s=grace_s))


# --- collect (hpc_hangkit.collect) --------------------------------------------
@cli.command("collect")
@click.argument("job_id")
@click.option("--attempt", type=click.IntRange(min=0), default=None,
              help="Attempt number (0 = first run; default: the current/newest).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema v1).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              callback=_output_option("dir", make_parents=True),
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

    from hpc_hangkit import collect

    try:
        collect.parse_job_id(job_id)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="JOB_ID")
    from hpc_hangkit.config import ConfigError

    try:
        settings = collect.load_site_settings(storage_url=storage_url)
    except ConfigError as e:
        raise click.ClickException(str(e))
    keep = out_dir is not None
    if keep:
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as e:
            raise click.ClickException("cannot create --out %s: %s" % (out_dir, e.strerror or e))
    try:
        got = collect.collect_job(job_id, attempt=attempt, settings=settings, out_dir=out_dir,
                                  live=live)
    except (FileNotFoundError, RuntimeError, OSError) as e:
        raise click.ClickException(str(e))
    try:
        from hpc_hangkit import render

        for note in got.notes:
            click.echo("hpc-hangkit collect: " + note, err=True)
        click.echo("hpc-hangkit collect: job %s attempt %d from %s" % (
            job_id, got.attempt, got.source), err=True)
        click.echo(render.render_json(got.report) if as_json else render.render_text(got.report))
    finally:
        if not keep:
            shutil.rmtree(os.path.dirname(got.hd_dir), ignore_errors=True)


# --- Slurm batch-step monitor and its node-side helpers (hpc_hangkit.batch) ---
@cli.command("slurm-monitor", hidden=True)
def slurm_monitor_cmd():
    """Internal: the batch-step monitor, started by the SPANK plugin in the batch step
    as the job's user. Reads the job environment; always exits 0."""
    from hpc_hangkit.batch import monitor_main

    sys.exit(monitor_main())


@cli.command("slurm-probe", hidden=True)
@click.option("--scratch", required=True, help="the job attempt's node scratch")
def slurm_probe_cmd(scratch):
    """Internal (srun --overlap on each node): print this node's rank files (tails) as one JSON line."""
    from hpc_hangkit.batch import probe_main

    sys.exit(probe_main(scratch))


@cli.command("slurm-capture", hidden=True)
@click.option("--scratch", required=True, help="the job attempt's node scratch")
def slurm_capture_cmd(scratch):
    """Internal (srun --overlap on each node): capture this node's ranks into
    <scratch>/hang_detector/ and print what was captured as one JSON line."""
    from hpc_hangkit.batch import capture_main
    from hpc_hangkit.config import load_settings

    sys.exit(capture_main(load_settings(), scratch))


# --- admin (hpc_hangkit.admin) ------------------------------------------------
@cli.group("admin")
def admin_group():
    """Install and check hpc-hangkit's Slurm site set-up (run as root on each node)."""


@admin_group.command("build-spank")
@click.option("--out", "out_path", default=None, metavar="FILE", callback=_output_option("file", make_parents=True),
              help="where to put hangkit_spank.so (default: spank/hangkit_spank.so in the source tree)")
@click.option("--slurm-include", default=None, metavar="DIR",
              help="directory holding slurm/spank.h (default /usr/include)")
def admin_build_spank_cmd(out_path, slurm_include):
    """Build the SPANK plugin against the installed slurm/spank.h (make -C spank).

    Rebuild after every Slurm upgrade: a plugin only loads into the Slurm
    release it was built for. Prints the path of the built .so; exit 1 with
    the compiler's message on failure.
    """
    from hpc_hangkit import admin

    try:
        click.echo(admin.build_spank(out=out_path, include=slurm_include))
    except admin.AdminError as e:
        raise click.ClickException(str(e))
    except OSError as e:
        raise click.ClickException("cannot write %s: %s" % (e.filename or out_path, e.strerror or e))


@admin_group.command("install")
@click.option("--default-mode", type=click.Choice(["off", "observe", "fail"]), default="off",
              show_default=True, help="site default when a job gives no --hang-detect")
@click.option("--root", "root", default="/", show_default=True, metavar="DIR",
              help="install under this root directory instead of / (for images and tests)")
@click.option("--lib-dir", default="/usr/local/lib/hpc-hangkit", show_default=True,
              help="where the plugin .so goes")
@click.option("--etc-dir", default="/etc/hpc-hangkit", show_default=True,
              help="where config.toml and the prolog/epilog hooks go")
@click.option("--slurm-etc", default="/etc/slurm", show_default=True,
              help="Slurm's configuration directory (plugstack.conf.d/)")
@click.option("--dry-run", is_flag=True, help="print what would be done, change nothing")
def admin_install_cmd(default_mode, root, lib_dir, etc_dir, slurm_etc, dry_run):
    """Install the site set-up on this node: the SPANK plugin (built here),
    plugstack.conf.d/hpc-hangkit.conf with the site default, the prolog and
    epilog hooks, and an example /etc/hpc-hangkit/config.toml (kept if present).

    It does not edit slurm.conf: it prints the lines to add there (Prolog,
    Epilog, PrologFlags=Alloc, JobAcctGatherType). Restart slurmd afterwards.
    Run `hpc-hangkit admin check` to verify.
    """
    from hpc_hangkit import admin

    try:
        for line in admin.install(default_mode=default_mode, root=root, lib_dir=lib_dir,
                                  etc_dir=etc_dir, slurm_etc=slurm_etc, dry_run=dry_run):
            click.echo(line)
    except admin.AdminError as e:
        raise click.ClickException(str(e))
    except OSError as e:
        raise click.ClickException("cannot write %s: %s" % (e.filename or root, e.strerror or e))


@admin_group.command("check")
@click.option("--root", "root", default="/", show_default=True, metavar="DIR",
              help="check an installation under this root directory")
@click.option("--etc-dir", default="/etc/hpc-hangkit", show_default=True)
@click.option("--slurm-etc", default="/etc/slurm", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="findings as JSON")
def admin_check_cmd(root, etc_dir, slurm_etc, as_json):
    """Find what is missing or wrong in this node's set-up and say how to fix it.

    One line per finding: OK, WARN or ERROR and what was found; a WARN or
    ERROR is followed by an indented "fix:" line. Passing checks print an OK
    line only for Slurm, the site config, the plugin (its build release, or
    "build version unknown" when it cannot be read), the site default mode
    and Prolog=/Epilog=; the other checks print nothing when they pass.
    Exit status: 0 no ERROR, 1 at least one ERROR.
    """
    import json as _json

    from hpc_hangkit import admin

    findings = admin.check(root=root, etc_dir=etc_dir, slurm_etc=slurm_etc)
    if as_json:
        click.echo(_json.dumps([f.__dict__ for f in findings], indent=1))
    else:
        for f in findings:
            click.echo(f.line())
    sys.exit(1 if any(f.level == "ERROR" for f in findings) else 0)


def main(argv=None):
    """Console-script entry point."""
    try:
        cli.main(args=argv, prog_name="hpc-hangkit")
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
