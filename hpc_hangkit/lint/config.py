"""``[tool.hpc-hangkit.lint]`` in pyproject.toml: the lint's project settings.

Keys: ``select``, ``ignore`` (lists of codes or prefixes), ``exclude`` (glob patterns),
``collectives`` (extra collective names: ``"pkg.mod.func"``, ``"Class.method"`` or a method name),
``rank_sources`` (extra names of calls or attributes whose value is the rank: ``"should_save"``),
``level`` (a string: the least certain level reported, ``"error"``, ``"warning"`` or ``"note"``).
"""
import os

__all__ = ["KEYS", "find_pyproject", "load_config"]

KEYS = ("select", "ignore", "exclude", "collectives", "rank_sources", "level")


def find_pyproject(start):
    """The nearest ``pyproject.toml`` at or above directory ``start`` that mentions a
    ``[tool.hpc-hangkit...]`` table (a sub-project's own pyproject without one does not hide
    its parent's settings), or None. An unreadable file is taken, so that reading it reports why."""
    d = os.path.abspath(start)
    while True:
        p = os.path.join(d, "pyproject.toml")
        if os.path.isfile(p):
            try:
                with open(p, "rb") as f:
                    data = f.read()
                # the misspelt table counts: reading it says what is wrong
                ours = b"hpc-hangkit" in data or b"hpc_hangkit" in data
            except OSError:
                ours = True
            if ours:
                return p
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def load_config(path):
    """The ``[tool.hpc-hangkit.lint]`` table of pyproject file ``path`` as a dict of lists, and
    ``level`` as a string (``{}`` when absent). Raises ``ValueError`` naming the file and key for
    bad TOML (or not UTF-8), a misspelt table (``[tool.hpc_hangkit.lint]``), an unknown key, a
    value that is not a list of strings, an empty ``select``, or an unknown level."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ValueError("%s: not valid TOML: %s" % (path, e))
    tool = data.get("tool", {}) if isinstance(data.get("tool"), dict) else {}
    for k in tool:
        if k != "hpc-hangkit" and k.replace("_", "-").lower() in ("hpc-hangkit", "hpchangkit", "hangkit"):
            raise ValueError("%s: [tool.%s] is not read: the table is [tool.hpc-hangkit.lint]" % (path, k))
    ours = tool.get("hpc-hangkit", {})
    if isinstance(ours, dict):
        for k in ours:
            if k != "lint":
                what = "table [tool.hpc-hangkit.%s]" % k if isinstance(ours[k], dict) else \
                    "key %r in [tool.hpc-hangkit]" % k
                raise ValueError("%s: unknown %s (the settings go in [tool.hpc-hangkit.lint])" % (path, what))
    table = ours.get("lint", {}) if isinstance(ours, dict) else {}
    if not isinstance(table, dict):
        raise ValueError("%s: [tool.hpc-hangkit.lint] must be a table" % path)
    out = {}
    for k, v in table.items():
        if k not in KEYS:
            raise ValueError("%s: [tool.hpc-hangkit.lint] unknown key %r (known: %s)" % (path, k, ", ".join(KEYS)))
        if k == "level":
            from hpc_hangkit.lint.rules import LEVELS
            if v not in LEVELS:
                raise ValueError("%s: [tool.hpc-hangkit.lint] level must be one of %s, not %r"
                                 % (path, ", ".join('"%s"' % x for x in LEVELS), v))
        elif not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ValueError("%s: [tool.hpc-hangkit.lint] %s must be a list of strings" % (path, k))
        elif k == "select" and not [x for x in v if x.strip()]:
            # an empty choice is no choice: it would silently check every rule
            raise ValueError("%s: [tool.hpc-hangkit.lint] select is empty: name codes or prefixes "
                             "(\"HK1\"), or leave the key out for every rule" % path)
        out[k] = v
    return out
