"""Fake command-line tools (``scontrol``, ``scancel``, ``sstat``, ``srun``, ``squeue``,
``sacct``, ``nvidia-smi``, ``ncclras``...) written onto a PATH directory from Python data.

Each fake is a small Python script (run with this interpreter, ``-I -S``: no site hooks,
no PYTHONPATH, so a test's armed or hanging sitecustomize never reaches it) that

- records its argv (one JSON line per call in ``<bindir>/calls.jsonl``),
- picks the first :class:`Reply` whose ``match`` is a prefix of its arguments and whose
  ``when_state`` equals the command's current state (``None``: any state),
- writes the reply's ``stdout``/``stderr``, optionally sets the state, sleeps, kills
  itself with a signal, and exits with ``rc``.

Usage::

    fake = FakeCommands(tmp_path / "bin")
    fake.add("scancel")                                   # rc 0, no output
    fake.add("scontrol",
             Reply(["requeue"], set_state="requeued", signal=signal.SIGTERM),
             Reply(["show", "job"], when_state="requeued", stdout="JobState=PENDING Restarts=2\\n"),
             Reply(["show", "job"], stdout="JobId={argv[3]} JobState=RUNNING\\n", format=True))
    monkeypatch.setenv("PATH", fake.path())
    ...
    assert fake.calls("scontrol") == [["requeue", "77"], ["show", "job", "-o", "77"]]
"""
import json
import os
import stat
import sys
from typing import List, Optional, Sequence, Union

__all__ = ["Reply", "FakeCommands"]

_SCRIPT = r'''#!%(python)s -IS
import json, os, sys, time
NAME, SPEC, LOG, STATE = %(name)r, %(spec)r, %(log)r, %(state)r
args = sys.argv[1:]
with open(SPEC) as f:
    spec = json.load(f)
if spec["record"]:
    with open(LOG, "a") as f:
        f.write(json.dumps({"cmd": NAME, "argv": args}) + "\n")
try:
    with open(STATE) as f:
        state = f.read()
except OSError:
    state = None
for r in spec["replies"]:
    if args[:len(r["match"])] == r["match"] and r["when_state"] in (None, state):
        break
else:
    r = spec["default"]
if r["set_state"] is not None:
    with open(STATE, "w") as f:
        f.write(r["set_state"])
out, err = r["stdout"], r["stderr"]
if r["format"]:
    out, err = out.format(argv=args), err.format(argv=args)
sys.stdout.write(out)
sys.stdout.flush()
sys.stderr.write(err)
sys.stderr.flush()
if r["sleep_s"]:
    time.sleep(r["sleep_s"])
if r["signal"]:
    os.kill(os.getpid(), r["signal"])
    time.sleep(5)  # the signal's default action ends the process before this returns
sys.exit(r["rc"])
'''


class Reply:
    """One answer of a fake command.

    ``match``: leading arguments that select this reply (``[]``: any call);
    ``stdout``/``stderr``: text written (with ``format=True``, ``{argv[i]}`` is replaced
    by the call's i-th argument, 0-based after the command name); ``rc``: exit status;
    ``when_state``: only when the command's state (a string, initially ``None``) is this;
    ``set_state``: the state after this call; ``sleep_s``: seconds to sleep before
    exiting (a wedged tool); ``signal``: a signal number the fake sends itself last
    (a tool killed mid-call).
    """

    def __init__(self, match: Sequence[str] = (), stdout: str = "", stderr: str = "", rc: int = 0,
                 when_state: Optional[str] = None, set_state: Optional[str] = None, sleep_s: float = 0,
                 signal: int = 0, format: bool = False):
        self.spec = {"match": list(match), "stdout": stdout, "stderr": stderr, "rc": int(rc),
                     "when_state": when_state, "set_state": set_state, "sleep_s": float(sleep_s),
                     "signal": int(signal), "format": bool(format)}


class FakeCommands:
    """A directory of fake executables (created if missing) and the record of their calls."""

    def __init__(self, bindir: Union[str, "os.PathLike"]):
        self.bindir = os.fspath(bindir)
        os.makedirs(os.path.join(self.bindir, ".fake"), exist_ok=True)
        self.log = os.path.join(self.bindir, ".fake", "calls.jsonl")
        open(self.log, "a").close()

    def add(self, name: str, *replies: Reply, default: Optional[Reply] = None, record: bool = True) -> str:
        """Write the fake ``name`` (replacing one of that name); returns its path.

        ``replies`` are tried in order; ``default`` (rc 0, no output) answers any other call.
        ``record``: log each call's argv (see :meth:`calls`).
        """
        if os.sep in name or name.startswith("."):
            raise ValueError("not a command name: %r" % name)
        spec = os.path.join(self.bindir, ".fake", name + ".json")
        with open(spec, "w") as f:
            json.dump({"replies": [r.spec for r in replies], "default": (default or Reply()).spec,
                       "record": record}, f)
        path = os.path.join(self.bindir, name)
        with open(path, "w") as f:
            f.write(_SCRIPT % {"python": sys.executable, "name": name, "spec": spec, "log": self.log,
                               "state": os.path.join(self.bindir, ".fake", name + ".state")})
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return path

    def calls(self, name: Optional[str] = None) -> List[List[str]]:
        """The argv (without the command name) of each recorded call of ``name``, oldest
        first; with ``name`` None, ``[name] + argv`` of every call."""
        out = []
        with open(self.log) as f:
            for line in f:
                rec = json.loads(line)
                if name is None:
                    out.append([rec["cmd"]] + rec["argv"])
                elif rec["cmd"] == name:
                    out.append(rec["argv"])
        return out

    def transcript(self) -> str:
        """Every recorded call as a line ``name arg1 arg2 ...`` (for ``in`` checks and messages)."""
        return "".join(" ".join(c) + "\n" for c in self.calls())

    def path(self, rest: Optional[str] = None) -> str:
        """A PATH value with the fakes first: ``bindir:rest`` (default: this process's PATH)."""
        rest = os.environ.get("PATH", "") if rest is None else rest
        return self.bindir + (os.pathsep + rest if rest else "")
