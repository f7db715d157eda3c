"""Helpers shared by the tests (importable from every stage folder: tests/ is on sys.path)."""
import os

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
FIXTURES = os.path.join(TESTS, "fixtures")
BENCH = os.path.join(REPO, "bench")

REPORT_SCHEMA = os.path.join(REPO, "hpc_hangkit", "report", "schema.json")
_validator = None


def report_errors(doc):
    """Every way ``doc`` (a parsed report.json) breaks hpc_hangkit/report/schema.json:
    a list of ``"path.to.field: message"`` strings, empty when it is valid."""
    global _validator
    if _validator is None:
        import json

        import jsonschema

        with open(REPORT_SCHEMA, encoding="utf-8") as f:
            schema = json.load(f)
        _validator = jsonschema.Draft202012Validator(schema)
    errs = sorted(_validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    return ["%s: %s" % (".".join(map(str, e.absolute_path)) or "(top)", e.message) for e in errs]


def validate_report(doc, where="report"):
    """Check a roll call JSON against the schema; returns ``doc`` (parsed when given as text).

    ``doc``: a dict, or the JSON text (e.g. ``hpc-hangkit report --json`` stdout).
    Raises AssertionError naming ``where`` and every violation (ValueError text for bad JSON).
    """
    import json

    if isinstance(doc, (str, bytes)):
        try:
            doc = json.loads(doc)
        except ValueError as e:
            raise AssertionError("%s is not JSON: %s" % (where, e))
    errs = report_errors(doc)
    if errs:
        raise AssertionError("%s does not match hpc_hangkit/report/schema.json:\n  %s" % (where, "\n  ".join(errs)))
    return doc


def _looks_like_report(path):
    """A report.json, or another *.json holding a roll call (``run --json-out FILE``)."""
    name = os.path.basename(path)
    if name == "report.json":
        return True
    if not name.endswith(".json") or name.endswith(".summary.json"):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    return head.lstrip().startswith(b'{') and b'"schema_version"' in head


def reports_under(root):
    """Paths of the roll call JSON files under ``root`` (report.json files and any *.json
    whose top-level object starts with ``schema_version``, as render_json writes it);
    symlinks are not followed."""
    out = []
    for d, dirs, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            if not os.path.islink(p) and _looks_like_report(p):
                out.append(p)
    return sorted(out)


def report_violations_under(root):
    """``{path: [violation...]}`` for every roll call JSON under ``root`` that breaks the schema
    (a file that is not JSON is a violation too)."""
    import json

    bad = {}
    for p in reports_under(root):
        try:
            with open(p, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            bad[p] = ["not readable as JSON: %s" % e]
            continue
        errs = report_errors(doc)
        if errs:
            bad[p] = errs
    return bad


def wait_for(predicate, timeout_s, interval_s=0.1, what="the condition", detail=None):
    """Poll ``predicate()`` until it returns something truthy, and return that value.

    ``timeout_s``: seconds on the monotonic clock; ``interval_s``: seconds between polls.
    The predicate runs at least once, and once more at the deadline. Exceptions from
    it propagate. Raises AssertionError ``timed out after N s waiting for <what>
    (last value: ...)`` when the deadline passes with a falsy value; ``detail``, a
    callable returning text (e.g. the tail of a child's output), is appended to it.
    """
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        last = predicate()
        if last:
            return last
        left = deadline - time.monotonic()
        if left <= 0:
            shown = repr(last)
            if len(shown) > 800:
                shown = shown[:800] + "..."
            msg = "timed out after %.1f s waiting for %s (last value: %s)" % (timeout_s, what, shown)
            if detail is not None:
                msg += "\n" + str(detail())
            raise AssertionError(msg)
        time.sleep(min(interval_s, left))


def dump_samples(watchdog_dir):
    """``{file name: number of stack samples}`` for the ``*.log`` watchdog dumps in
    ``watchdog_dir`` (parsed by hpc_hangkit's faulthandler parser; a missing dir is ``{}``)."""
    from hpc_hangkit.parse.faulthandler import parse_faulthandler

    out = {}
    if not os.path.isdir(watchdog_dir):
        return out
    for n in sorted(os.listdir(watchdog_dir)):
        if n.endswith(".log"):
            with open(os.path.join(watchdog_dir, n), "rb") as f:
                out[n] = len(parse_faulthandler(f.read(), n).samples)
    return out


#: system call numbers the tests wait on, per machine (as /proc/<pid>/syscall gives them)
_SYSCALLS = {
    "x86_64": {0: "read", 7: "poll", 35: "nanosleep", 61: "wait4", 202: "futex", 230: "clock_nanosleep",
               232: "epoll_wait", 271: "ppoll", 281: "epoll_pwait"},
    "aarch64": {22: "epoll_pwait", 63: "read", 73: "ppoll", 98: "futex", 101: "nanosleep",
                115: "clock_nanosleep", 260: "wait4"},
}


def blocked_in(pid):
    """The system call the main thread of ``pid`` is blocked in, by /proc/<pid>/syscall:
    ``"read"``, ``"nanosleep"``, ``"clock_nanosleep"``, ``"futex"``...; ``"running"`` when it
    is running, ``"-1"`` when blocked outside a system call, ``"nr <n>"`` for a number not
    named here; None when it cannot be told (no such process, not readable, a machine not
    in the table). E.g. ``wait_for(lambda: blocked_in(p.pid) == "read", 30)``."""
    try:
        with open("/proc/%d/syscall" % pid) as f:
            first = f.read().split(" ", 1)[0].strip()
    except OSError:
        return None
    if not first.isdigit():
        return first
    names = _SYSCALLS.get(os.uname().machine)
    if names is None:
        return None
    return names.get(int(first), "nr %s" % first)


VANISH_JOB = os.path.join(TESTS, "gone_jobs", "vanish_job.py")


def start_two_ranks(spawn, tmp_path, watchdog_period_s):
    """Ranks 0 (``wait``: blocked for ever) and 1 (``compute``: checks in all the time) of
    tests/gone_jobs/vanish_job.py, armed (mode observe, the given watchdog period in s, an
    empty site config) into ``tmp_path/scratch`` by ``spawn`` (the conftest fixture); returns
    ``(scratch, [Popen, Popen], settings)`` once both heartbeats exist."""
    import subprocess
    import sys

    from hpc_hangkit import layout
    from hpc_hangkit.config import load_settings

    cfg = tmp_path / "config.toml"
    cfg.write_text("")
    scratch = str(tmp_path / "scratch")
    settings = load_settings(env={}, path=str(cfg),
                             overrides={"mode": "observe", "watchdog_period_s": float(watchdog_period_s)})
    base = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_")}
    env = settings.to_env(scratch, base_env=dict(base, HPC_HANGKIT_CONFIG=str(cfg), PYTHONUNBUFFERED="1"))
    procs = [spawn([sys.executable, VANISH_JOB, what], env=dict(env, RANK=str(r), WORLD_SIZE="2"),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for r, what in enumerate(("wait", "compute"))]
    hb = os.path.join(scratch, layout.HEARTBEAT_DIR)
    wait_for(lambda: len(layout.list_rank_files(hb, ext="hb")) == 2, 30, what="both ranks armed")
    return scratch, procs, settings


def inprocess_probe(remote):
    """A probe function for ``SlurmStackSource`` that runs ``slurm-probe`` in this process on
    the scratch ``remote`` (standing for another node) instead of through ``srun``."""
    import io

    from hpc_hangkit.slurm import probe as slurm_probe

    def probe(nodes):
        buf = io.StringIO()
        slurm_probe.probe_main(remote, out=buf)
        return slurm_probe.probe_files(buf.getvalue())
    return probe


GLOO_DUMPS = os.path.join(FIXTURES, "torch_samples", "gloo_divergent_barrier", "faulthandler")


def gloo_node_scratch(path, ranks, copies=1, period_s=None, mtimes=None):
    """A node scratch at ``path`` holding the real watchdog logs of ``ranks`` of the gloo
    divergent-barrier fixture, named as armed ranks name them (``rank_<r>.pid<p>.log``).
    ``copies`` > 1 repeats each log's dumps (a longer hang); ``period_s`` writes that watchdog
    period into each header; ``mtimes``: rank -> epoch s of its last dump (default: now).
    Returns ``path``."""
    import re
    from hpc_hangkit import layout
    wd = os.path.join(path, layout.WATCHDOG_DIR)
    os.makedirs(wd, exist_ok=True)
    for r in ranks:
        with open(os.path.join(GLOO_DUMPS, "rank_%d.log" % r), "rb") as f:
            data = f.read()
        pid = int(re.search(rb"pid=(\d+)", data).group(1))
        head, _, body = data.partition(b"\n")
        if period_s is not None:
            assert b" argv=" in head and b"period_s=" not in head
            head = head.replace(b" argv=", b" period_s=%g argv=" % period_s, 1)
        dst = os.path.join(wd, "rank_%d.pid%d.log" % (r, pid))
        with open(dst, "wb") as f:
            f.write(head + b"\n" + body * copies)
        if mtimes and r in mtimes:
            os.utime(dst, (mtimes[r], mtimes[r]))
    return path
