"""Output-path options shared by the commands: refuse an unusable path when the option is
parsed (exit 2), and turn a failed write into one line (exit 1)."""
import click


def output_option(kind, make_parents):
    """A click option callback refusing (exit 2, BadParameter) an output path that cannot be
    written (:func:`hpc_hangkit.outpath.output_problem`; ``kind`` "file" or "dir")."""
    def check(ctx, param, value):
        if value is not None:
            from hpc_hangkit.outpath import output_problem

            why = output_problem(value, kind, make_parents)
            if why:
                raise click.BadParameter("cannot %s %s: %s" % ("write" if kind == "file" else "create", value, why),
                                         ctx=ctx, param=param)
        return value
    return check


def write_output(path, text, option):
    """Write ``text`` to ``path``; an OSError becomes a one-line ClickException (exit 1) naming ``option``."""
    try:
        with open(path, "w") as fh:
            fh.write(text)
    except OSError as e:
        raise click.ClickException("cannot write %s %s: %s" % (option, path, e.strerror or e))
