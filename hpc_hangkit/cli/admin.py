"""``hpc-hangkit admin build-spank|install|check``: the Slurm site set-up (hpc_hangkit.slurm.admin)."""
import os
import sys

import click

from hpc_hangkit.cli._paths import output_option


def _slurm_etc():
    """Slurm's configuration directory: that of ``$SLURM_CONF`` (Slurm's own variable
    naming slurm.conf) when set, else /etc/slurm."""
    conf = os.environ.get("SLURM_CONF")
    return os.path.dirname(conf) if conf else "/etc/slurm"


@click.group("admin")
def admin_group():
    """Install and check hpc-hangkit's Slurm site set-up (run as root on each node)."""


@admin_group.command("build-spank")
@click.option("--out", "out_path", default=None, metavar="FILE", callback=output_option("file", make_parents=True),
              help="where to put hangkit_spank.so (default: spank/hangkit_spank.so in the source tree)")
@click.option("--slurm-include", default=None, metavar="DIR",
              help="directory holding slurm/spank.h (default /usr/include)")
def admin_build_spank_cmd(out_path, slurm_include):
    """Build the SPANK plugin against the installed slurm/spank.h (make -C spank).

    Rebuild after every Slurm upgrade: a plugin only loads into the Slurm
    release it was built for. Prints the path of the built .so; exit 1 with
    the compiler's message on failure.
    """
    from hpc_hangkit.slurm import admin

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
@click.option("--slurm-etc", default=lambda: _slurm_etc(), show_default="/etc/slurm, or $SLURM_CONF's directory",
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
    from hpc_hangkit.slurm import admin

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
@click.option("--slurm-etc", default=lambda: _slurm_etc(), show_default="/etc/slurm, or $SLURM_CONF's directory")
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

    from hpc_hangkit.slurm import admin

    findings = admin.check(root=root, etc_dir=etc_dir, slurm_etc=slurm_etc)
    if as_json:
        click.echo(_json.dumps([f.__dict__ for f in findings], indent=1))
    else:
        for f in findings:
            click.echo(f.line())
    sys.exit(1 if any(f.level == "ERROR" for f in findings) else 0)
