"""``hpc-hangkit lint [PATH ...]``: collectives that only some ranks reach (hpc_hangkit.lint)."""
import os
import sys

import click


def _codes(values):
    """The codes of repeated comma-separated option values (``("HK1,HK201", "HK3")``)."""
    return [c.strip() for v in values or () for c in v.split(",") if c.strip()]


@click.command("lint")
@click.argument("paths", nargs=-1, type=click.Path(exists=True))
@click.option("--format", "fmt", type=click.Choice(["text", "json", "sarif"]), default="text", show_default=True,
              help="Output format (sarif: SARIF 2.1.0 for code-scanning UIs).")
@click.option("--select", multiple=True, metavar="CODES",
              help="Only these codes or prefixes, comma-separated (HK1,HK201); repeatable.")
@click.option("--ignore", multiple=True, metavar="CODES",
              help="Leave out these codes or prefixes, comma-separated; repeatable.")
@click.option("--level", type=click.Choice(["error", "warning", "note"]), default=None,
              help="The least certain level reported (default: warning, or the file's `level`). note adds "
              "the findings on a process group whose members the lint cannot resolve (docs/lint.md).")
@click.option("--exclude", multiple=True, metavar="GLOB",
              help="Skip files or directories matching GLOB (repeatable): by name (build), or by path "
              "relative to the current directory or to the pyproject.toml's (tests/data/*). Applies to "
              "files named on the command line too.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Processes that parse and check the files, this one included (default: the usable cores "
              "when there are 200 files or more, else 1). The findings do not depend on it.")
@click.option("--cache-dir", type=click.Path(), default=None, metavar="DIR",
              help="Keep each file's indexed facts here, so that a file unchanged since an earlier run "
              "(same lint, settings and set of files) is not parsed again (default: "
              "$XDG_CACHE_HOME/hpc-hangkit/lint, else ~/.cache/hpc-hangkit/lint). The findings do not "
              "depend on it; a directory that cannot be used (not yours alone, not writable, not a "
              "directory) is said on stderr and the run goes on without it.")
@click.option("--no-cache", is_flag=True, help="Read and write no facts cache.")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="pyproject.toml to read [tool.hpc-hangkit.lint] from (default: the nearest one at or above the "
              "current directory that has a [tool.hpc-hangkit] table).")
def lint_cmd(paths, fmt, select, ignore, level, exclude, jobs, cache_dir, no_cache, config_path):
    """Find collectives that only some ranks reach, in Python sources (default PATH: .).

    \b
    Rules (docs/lint.md): HK101-HK107 the deciding value is rank-dependent,
    HK201-HK203, HK205 it is rank-local. Silence one line with
    `# hangkit: ignore[HK101]` (codes or prefixes: HK1) on the collective's or
    the branch's line; a malformed comment silences nothing and is warned of.
    Levels: error (the deciding line names the rank), warning (rank-local data,
    or a rank dependence inferred through attributes and callers), note (the
    collective runs on a process group whose members the lint cannot resolve: an
    MPI Split communicator, a group on another axis, a rank tested in another
    sub-communicator; or a raise in a project whose exception hook or exit
    handler aborts the job; not reported unless asked for: --level note).
    Each text line shows its level: `HK101 [error] ...`.
    Settings: [tool.hpc-hangkit.lint] select/ignore/exclude/collectives/rank_sources/level in
    pyproject.toml; --select or --ignore given here replaces both of the file's select and
    ignore; --exclude adds to its exclude; --level replaces its level.

    \b
    Exit status:
      0  nothing found at the levels reported, every file checked
      1  at least one finding reported, or a file that could not be parsed (named in the
         text output; on stderr with --format json or sarif)
      2  bad usage: unknown option, missing path, no Python file to check, bad
         [tool.hpc-hangkit.lint]
    """
    from hpc_hangkit.lint import lint_paths
    from hpc_hangkit.lint.cache import default_dir
    from hpc_hangkit.lint.config import find_pyproject, load_config
    from hpc_hangkit.lint.output import render_json, render_sarif, render_text
    from hpc_hangkit.lint.rules import RULES

    cfg = {}
    pp = config_path or find_pyproject(os.getcwd())
    if pp:
        try:
            cfg = load_config(pp)
        except (ValueError, OSError) as e:
            raise click.UsageError(str(e))
    if select and not _codes(select):
        raise click.UsageError("--select is empty: name codes or prefixes (HK1,HK201), or leave it out for every rule")
    if select or ignore:
        # the command line's choice of codes is the whole choice: a code it selects is not
        # silently taken away again by the file's `ignore`
        sel, ign, where = _codes(select) or None, _codes(ignore) or None, "the command line"
    else:
        sel, ign, where = cfg.get("select"), cfg.get("ignore"), pp
    for code in (sel or []) + (ign or []):
        if not any(c.startswith(code) for c in RULES):
            raise click.UsageError("unknown rule code %r in %s (known: %s)" % (code, where, ", ".join(sorted(RULES))))
    result = lint_paths(list(paths) or ["."], select=sel, ignore=ign,
                        exclude=list(cfg.get("exclude", [])) + list(exclude),
                        collectives=cfg.get("collectives", []), rank_sources=cfg.get("rank_sources", []),
                        jobs=jobs, level=level or cfg.get("level", "warning"),
                        exclude_roots=[os.getcwd()] + ([os.path.dirname(os.path.abspath(pp))] if pp else []),
                        cache_dir=None if no_cache else (cache_dir or default_dir()))
    if result.cache and result.cache["note"]:
        # a slower run, not a wrong one: said once, on stderr, whatever the format
        click.echo("hpc-hangkit lint: facts cache not used: %s" % result.cache["note"], err=True)
    if result.files == 0 and not result.errors:
        # a gate pointed at the wrong folder must not pass: nothing was read
        raise click.UsageError("no Python file to check under %s%s" % (
            ", ".join(paths) or ".", " (after exclude)" if cfg.get("exclude") or exclude else ""))
    render = {"text": render_text, "json": render_json, "sarif": render_sarif}[fmt]
    sys.stdout.write(render(result))
    if fmt != "text":
        for path, line, msg in result.warnings:
            click.echo("%s:%d: warning: %s" % (path, line, msg), err=True)
        for path, msg in result.errors:
            click.echo("%s: cannot check: %s" % (path, msg), err=True)
    # a file that could not be checked fails the run as a finding does: a CI gate must not pass it
    sys.exit(1 if result.findings or result.errors else 0)
