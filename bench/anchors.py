"""Anchors: the simplest credible implementations of what hpc-hangkit does, run beside
ours in the same benchmark so the printed ratio holds on a noisy machine.

``seed_rollcall``: the roll call as the Underworld3 seed describes it (main thread by
outermost frame, modal position over the recent dumps, grouping by ONE frame, majority
waits, the rest are suspects). Regex over the text, no data model, no node summaries:
the cost floor of reading the same dumps.
"""
import os
import re

_FRAME = re.compile(r'^  File "(.*)", line (\d+|\?\?\?) in (.*)$', re.M)
_SPLIT = re.compile(r"^(?:Timeout \(|Stack \(most|Current thread )", re.M)
_RANK = re.compile(r"rank[_=](\d+)")


def _main_frames(dump):
    best = None
    for block in dump.split("\n\n"):
        fr = _FRAME.findall(block)
        if not fr:
            continue
        if fr[-1][2] == "<module>" and not fr[-1][0].startswith("<frozen"):
            best = fr
        elif best is None:
            best = fr
    return best


def seed_rollcall(path, k=5):
    """(verdict, suspects) over every file under ``path``."""
    pos = {}
    for root, _, names in os.walk(path):
        for nm in names:
            m = _RANK.search(nm)
            if not m:
                continue
            with open(os.path.join(root, nm), "rb") as fh:
                text = fh.read().decode("utf-8", "replace")
            dumps = [d for d in _SPLIT.split(text)[1:]]
            keys = []
            for d in dumps:
                fr = _main_frames(d)
                if fr and not any(f[0].startswith("<frozen importlib") for f in fr):
                    keys.append(fr[0])
            keys = keys[-k:]
            if keys:
                pos[int(m.group(1))] = max(set(keys), key=lambda x: (keys.count(x), len(keys) - keys[::-1].index(x)))
    groups = {}
    for r, key in pos.items():
        groups.setdefault(key, []).append(r)
    if len(groups) < 2:
        return ("TOGETHER" if groups else "INCONCLUSIVE"), []
    big = max(groups.values(), key=len)
    return "MISSED", sorted(r for g in groups.values() if g is not big for r in g)
