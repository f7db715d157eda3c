"""``hpc-hangkit report PATH``: the roll call of a directory of dumps (:func:`hpc_hangkit.rollcall.report_from_dir`)."""
import sys

import click

from hpc_hangkit.cli._paths import output_option, write_output


@click.command("report")
@click.argument("path", type=click.Path(exists=False))
@click.option("--json", "as_json", is_flag=True, help="Print the roll call as JSON (schema v1, docs/report-schema.md).")
@click.option("--depth", type=click.IntRange(min=1), default=None, metavar="N",
              help="Group ranks by the innermost N frames of the call chain (default: the whole chain).")
@click.option("--tree", is_flag=True, help="Also print the merged call-prefix tree with rank sets on each branch "
              "(with --json: a \"tree\" key).")
@click.option("--svg", "svg_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              callback=output_option("file", make_parents=False),
              help="Write the call-prefix tree as an SVG picture to FILE.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              callback=output_option("file", make_parents=False),
              help="Write the roll call as one self-contained HTML page to FILE (no network; "
              "links to PATH's files by relative path).")
@click.option("--samples", type=click.IntRange(min=1), default=None, metavar="K",
              help="How many of each rank's newest samples decide its position (default: stack_samples, 5).")
@click.option("--world-size", type=click.IntRange(min=1), default=None, metavar="N",
              help="Number of ranks (default: from the dump headers); ranks with no data are listed as missing.")
@click.option("--summary-out", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              callback=output_option("file", make_parents=False),
              help="Also write the node summary of PATH (FILE should end in .summary.json) for a later merge.")
def report_cmd(path, as_json, depth, tree, svg_path, html_path, samples, world_size, summary_out):
    """Roll call over PATH: which ranks wait where, and which went the other way.

    \b
    PATH is a directory (searched recursively, symlinks not followed) holding any
    mix of: watchdog logs (faulthandler dumps), py-spy dumps (text or --json,
    with or without --native), stdout/stderr files with Python tracebacks,
    heartbeats/*.hb, unwatched/*.txt markers and *.summary.json node summaries.

    \b
    Exit status:
      0  a report was produced (whatever the verdict; it is in the output)
      1  an output file (--svg, --html, --summary-out) could not be written
      2  bad usage: PATH does not exist or holds no dumps at all, or an
         output file's directory is missing or not writable
    """
    import json as _json

    from hpc_hangkit import rollcall
    from hpc_hangkit.report import render

    try:
        rep = rollcall.report_from_dir(path, _settings(), depth=depth, world_size=world_size, samples=samples,
                                       empty_ok=False)
    except FileNotFoundError:
        click.echo("hpc-hangkit report: %s: no such file or directory" % path, err=True)
        sys.exit(2)
    except rollcall.NoDumps as e:
        click.echo("hpc-hangkit report: %s" % e, err=True)
        for w in e.warnings[:20]:
            click.echo("  " + w, err=True)
        sys.exit(2)
    summary = rep.summary
    if summary_out:
        write_output(summary_out, _json.dumps(summary, separators=(",", ":")), "--summary-out")
    if svg_path:
        write_output(svg_path, render.render_svg(rep), "--svg")
    if html_path:
        from hpc_hangkit.report import html

        write_output(html_path, html.render_html(rep, html.gather_evidence(path, html_path, rep)), "--html")
    if as_json:
        click.echo(render.render_json(rep, tree=tree), nl=False)
    else:
        click.echo(render.render_text(rep), nl=False)
        if tree:
            click.echo("")
            click.echo(render.render_tree(rep), nl=False)
        if svg_path:
            click.echo("call-prefix tree picture: %s" % svg_path)
        if html_path:
            click.echo("HTML report: %s" % html_path)
    sys.exit(0)


def _settings():
    """The site settings (config file and HANGKIT_* environment), or the built-in defaults
    when they cannot be loaded: a broken site config must not block a post-mortem."""
    from hpc_hangkit import config

    try:
        return config.load_settings()
    except Exception:
        return config.Settings.defaults()
