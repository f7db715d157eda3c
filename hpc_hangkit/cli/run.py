"""``hpc-hangkit run -- LAUNCHER ...``: run a local launcher armed and report a hang (hpc_hangkit.run)."""
import sys

import click

from hpc_hangkit.cli._paths import output_option


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
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
@click.option("--out", "out_dir", default=None, metavar="DIR", callback=output_option("dir", make_parents=True),
              help="output directory (default ./hangkit-run-<UTC time>): DIR/hang_detector/ and the ranks' scratch.")
@click.option("--json-out", "json_out", default=None, metavar="FILE",
              callback=output_option("file", make_parents=True),
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
