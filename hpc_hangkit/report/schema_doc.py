"""docs/report-schema.md, generated from the roll call's JSON Schema (``schema.json`` here).

``schema.json`` (JSON Schema draft 2020-12) is the one description of ``report.json``:
its ``description``s carry the prose, its ``examples[0]`` the example, and
``$defs/node_summary`` the node summary format. The page is rebuilt with::

    python3 -m hpc_hangkit.report.schema_doc > docs/report-schema.md

and a test checks that the checked-in page equals this output. Standard library only.
"""
import json
import os
import sys
from typing import List, Optional

__all__ = ["SCHEMA_PATH", "load_schema", "type_text", "markdown", "main"]

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema.json")

#: the ``propertyNames`` pattern of an object keyed by rank ("0", "17", ...)
_RANK_KEY = "^(0|[1-9][0-9]*)$"
_SCALAR = {"integer": "int", "string": "str", "boolean": "bool", "number": "float", "null": "null"}


def load_schema(path: str = SCHEMA_PATH) -> dict:
    """The schema as a dict (key order kept). Raises OSError / ValueError like ``json.load``."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _deref(node: dict, schema: dict) -> dict:
    ref = node.get("$ref")
    if not ref:
        return node
    if not ref.startswith("#/$defs/"):
        raise ValueError("only local $defs references are supported: %r" % ref)
    return schema["$defs"][ref[len("#/$defs/"):]]


def type_text(node: dict, schema: dict) -> str:
    """The short type of a schema node as the page's table writes it: ``int``,
    ``str or null``, ``[int]``, ``{rank: str}``, or a ``$defs`` entry's ``title``."""
    if "$ref" in node:
        target = _deref(node, schema)
        return target.get("title") or type_text(target, schema)
    if "anyOf" in node:
        return " or ".join(type_text(x, schema) for x in node["anyOf"])
    t = node.get("type")
    if t is None and "const" in node:
        t = {bool: "boolean", int: "integer", str: "string"}.get(type(node["const"]), "number")
    if isinstance(t, list):
        return " or ".join(_SCALAR.get(x, x) for x in t)
    if t == "array":
        items = node.get("items") or {}
        if "properties" in items:
            return "list"
        most = node.get("maxItems")
        return "[%s]%s" % (type_text(items, schema), "" if most is None else ", at most %d" % most)
    if t == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            key = "rank" if (node.get("propertyNames") or {}).get("pattern") == _RANK_KEY else "name"
            return "{%s: %s}" % (key, type_text(extra, schema))
        return "object"
    return _SCALAR.get(t, str(t))


def _meaning(node: dict, schema: dict) -> str:
    """The description, followed by the allowed values when the node (or its ``$ref``) is an enum."""
    desc = node.get("description", "")
    target = _deref(node, schema)
    enum = node.get("enum") or target.get("enum")
    if not enum:
        return desc
    notes = node.get("x-enum-notes") or target.get("x-enum-notes") or {}
    values = ", ".join("`%s`%s" % (v, " (%s)" % notes[v] if v in notes else "") for v in enum)
    return "%s: %s" % (desc, values) if desc else values


def _rows(props: dict, schema: dict, prefix: str = "") -> List[str]:
    out = []
    for name, node in props.items():
        items = node.get("items") or {}
        if node.get("type") == "array" and "properties" in items:
            out.append("| `%s%s[]` | list | %s |" % (prefix, name, _meaning(node, schema)))
            out.extend(_rows(items["properties"], schema, prefix + name + "[]."))
        else:
            out.append("| `%s%s` | %s | %s |" % (prefix, name, type_text(node, schema), _meaning(node, schema)))
    return out


def _example(doc: dict) -> str:
    """An example document, one top-level key per line (lists of objects one object a line)."""
    lines = []
    keys = list(doc)
    for i, k in enumerate(keys):
        v = doc[k]
        comma = "," if i < len(keys) - 1 else ""
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            lines.append("  %s: [" % json.dumps(k))
            for j, x in enumerate(v):
                lines.append("    %s%s" % (json.dumps(x, ensure_ascii=False), "," if j < len(v) - 1 else ""))
            lines.append("  ]" + comma)
        else:
            lines.append("  %s: %s%s" % (json.dumps(k), json.dumps(v, ensure_ascii=False), comma))
    return "{\n%s\n}" % "\n".join(lines)


def markdown(schema: Optional[dict] = None) -> str:
    """The whole page (Markdown text ending in a newline) for ``schema`` (default: ``schema.json``)."""
    s = load_schema() if schema is None else schema
    out = ["<!-- generated from hpc_hangkit/report/schema.json by "
           "`python3 -m hpc_hangkit.report.schema_doc > docs/report-schema.md`: edit the schema, not this page -->",
           "# " + s["title"], ""]
    out += [s["description"], "", "```json", _example(s["examples"][0]), "```", "",
            "| field | type | meaning |", "|---|---|---|"]
    out += _rows(s["properties"], s)
    ns = s["$defs"]["node_summary"]
    out += ["", "# " + ns["title"], "", ns["description"], "", "```json", _example(ns["examples"][0]), "```", ""]
    out += ["- " + note for note in ns.get("x-notes", ())]
    return "\n".join(out) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    """Print the page to stdout; returns the exit status (0)."""
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
