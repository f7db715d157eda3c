"""Figure 4: Flight Recorder analysis over N ranks' dumps (default 1,000) vs PyTorch's ``torchfrtrace``
on the same files. Target: ours >= 5x faster, and no crash where torchfrtrace crashes.

    python bench/bench_flightrec.py [--ranks 1000] [--entries 200] [--keep DIR] [--quick]

The dumps are generated from the real gloo dump of a hung job
(tests/fixtures/flight_recorder/gloo_divergent_barrier/pickle_raw, torch 2.13, dump version
2.10): every rank holds ``--entries`` ``all_reduce`` records with the real entry shape (5 stack
frames, sizes, dtypes, state ``scheduled``, ``pg_config`` keyed by ``''`` as gloo writes it); the
last one is in flight; three divergent ranks sit in ``barrier`` at that sequence id instead.

Measured, each in a fresh interpreter (wall and CPU of the child only):

- ``raw/``: the files as torch writes them. Ours: ``read_dumps`` + ``analyse``. torchfrtrace
  crashes on gloo's ``pg_config`` (KeyError in ``build_collectives``; its last line printed).
- ``fixed/``: the copies :func:`hpc_hangkit.evidence.flightrec.write_torchfrtrace` rewrites so torchfrtrace
  can read them (timed too). Both analysers on these files: the ratio is printed here.
- ``product/``: what the product reads: each rank's ``rank_<i>.pickle`` and the ``rank_<i>.json`` the
  rank writes beside it (hpc_hangkit/boot/_hangkit_fr.py: the same buffer, frames included).
  ``read_dumps`` reads the pickle and skips the whole-dump JSON of the same buffer (the JSON is the
  fallback when the pickle fails). Ours only (torchfrtrace reads no JSON); the ratio
  printed is against torchfrtrace on ``fixed/``, labelled as such.

CPU is the whole process tree (read_dumps' validator children included: they are waited for);
peak RSS is the measured process only (each child holds one dump's objects at a time, beside the
batch of at most 64 MiB it shares copy-on-write).

Exit status 0 when both verdicts name the divergent ranks, 1 otherwise.
"""
import argparse
import copy
import json
import os
import pickle
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "hpc_hangkit", "boot"))   # _hangkit_fr imports its siblings
import _util  # noqa: E402

SAMPLE = os.path.join(ROOT, "tests", "fixtures", "flight_recorder", "gloo_divergent_barrier", "pickle_raw")
TARGET_RATIO = 5.0


def generate(out, ranks, entries, divergent):
    """Write ``out/rank_<i>`` (pickles, torch's shape) for ``ranks`` ranks; returns bytes written."""
    with open(os.path.join(SAMPLE, "rank_0"), "rb") as f:
        healthy = pickle.load(f)
    with open(os.path.join(SAMPLE, "rank_1"), "rb") as f:
        odd = pickle.load(f)
    done, pending, barrier = healthy["entries"][0], healthy["entries"][-1], odd["entries"][-1]
    t0 = done["time_created_ns"]
    os.makedirs(out, exist_ok=True)
    total = 0
    for r in range(ranks):
        ents = []
        for i in range(entries):
            last = i == entries - 1
            tpl = (barrier if r in divergent else pending) if last else done
            e = copy.deepcopy(tpl)
            e.update(record_id=i, op_id=i + 1, collective_seq_id=i + 1, retired=not last,
                     time_created_ns=t0 + i * 5000000 + r * 1000, thread_id=str(139981985500032 + r))
            ents.append(e)
        doc = dict(healthy, entries=ents, pg_config={"": {"name": "", "desc": "", "ranks": str(list(range(ranks)))}},
                   pg_status={"0": {"last_enqueued_collective": entries, "last_started_collective": -1,
                                    "last_completed_collective": entries - 1}})
        data = pickle.dumps(doc)
        with open(os.path.join(out, "rank_%d" % r), "wb") as f:
            f.write(data)
        total += len(data)
    return total


def generate_product(raw, out):
    """``out/rank_<i>.pickle`` + ``rank_<i>.json`` as an armed rank writes them, from ``raw``'s pickles."""
    from hpc_hangkit.boot._hangkit_fr import _jsonable

    os.makedirs(out, exist_ok=True)
    total = 0
    for name in sorted(os.listdir(raw)):
        with open(os.path.join(raw, name), "rb") as f:
            data = f.read()
        j = json.dumps(_jsonable(pickle.loads(data))).encode()  # our own generated files
        for ext, b in ((".pickle", data), (".json", j)):
            with open(os.path.join(out, name + ext), "wb") as f:
                f.write(b)
        total += len(j)
    return total


# --- measured tasks (fresh interpreter each) ----------------------------------------

def child_ours(path):
    from hpc_hangkit.evidence.flightrec import analyse, read_dumps

    def fn():
        dumps, warns = read_dumps(path)
        a = analyse(dumps)
        minority = min((g["ranks"] for f in a["pgs"] for g in f["groups"]), key=len, default=[])
        return {"verdict": a["verdict"], "suspects": a["suspect_ranks"], "minority": minority,
                "dumps": len(dumps), "warnings": len(warns)}
    return _util._measure(fn)


def child_fix(src, dst):
    from hpc_hangkit.evidence.flightrec import read_dumps, write_torchfrtrace

    def fn():
        dumps, _ = read_dumps(src)
        return {"files": len(write_torchfrtrace(dumps, dst))}
    return _util._measure(fn)


def run_child(*args, timeout=3600):
    """One task in a fresh interpreter; its JSON plus ``proc_wall_s``/``proc_cpu_s``: the whole process
    (interpreter start and imports included, as torchfrtrace is measured)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError("child %s failed (exit %d): %s" % (args, p.returncode, p.stderr.decode()[-2000:]))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = json.loads(p.stdout.decode().strip().splitlines()[-1])
    out["proc_wall_s"] = wall
    out["proc_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out


def torchfrtrace(path, timeout):
    """Run torchfrtrace on ``path``: {wall_s, cpu_s, rc, last_line, culprits, timed_out}."""
    argv = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", path, "-p", "rank_"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"wall_s": time.perf_counter() - t0, "cpu_s": float("nan"), "rc": None,
                "last_line": "timed out after %.0f s" % timeout, "culprits": [], "timed_out": True}
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    lines = [ln for ln in (err + "\n" + out).splitlines() if ln.strip() and "tabulate" not in ln]
    err_lines = [ln for ln in err.splitlines() if ln.strip() and "tabulate" not in ln]
    culprits = sorted({int(m) for m in re.findall(r"Culprit rank (\d+)", out + err)})
    return {"wall_s": wall, "cpu_s": cpu, "rc": p.returncode, "timed_out": False, "culprits": culprits,
            "last_line": (err_lines or lines or [""])[-1].strip(), "stdout_lines": len(out.splitlines())}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--entries", type=int, default=200, help="Flight Recorder entries per rank")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed to each torchfrtrace run")
    ap.add_argument("--keep", help="generate into this directory and keep it")
    ap.add_argument("--quick", action="store_true", help="16 ranks x 20 entries (smoke test)")
    a = ap.parse_args(argv)
    if a.quick:
        a.ranks, a.entries, a.timeout = 16, 20, 100.0
    divergent = sorted({1, a.ranks // 3 + 1, (2 * a.ranks) // 3 + 1} - {0})
    divergent = [r for r in divergent if r < a.ranks]
    print("bench_flightrec: %d ranks x %d entries; divergent ranks %s; %s"
          % (a.ranks, a.entries, divergent, _util.load_note()))
    base = a.keep or tempfile.mkdtemp(prefix="hk_frbench_")
    raw, fixed, product = (os.path.join(base, x) for x in ("raw", "fixed", "product"))
    try:
        for d in (raw, fixed, product):
            shutil.rmtree(d, ignore_errors=True)
        t0 = time.perf_counter()
        nbytes = generate(raw, a.ranks, a.entries, divergent)
        print("generated %d dumps, %.1f MiB, in %.1f s" % (a.ranks, nbytes / 2**20, time.perf_counter() - t0))

        jbytes = generate_product(raw, product)
        print("product layout: %d rank_<i>.json (%.1f MiB) beside the pickles" % (a.ranks, jbytes / 2**20))

        fix = run_child("fix", raw, fixed)
        print("write_torchfrtrace (our rewrite for torchfrtrace): wall %.2f s, CPU %.2f s (whole process)"
              % (fix["proc_wall_s"], fix["proc_cpu_s"]))
        ok = True
        res = {}
        for label, d in (("raw (as torch writes them)", raw), ("fixed (torchfrtrace-ready)", fixed)):
            ours = run_child("ours", d)
            theirs = torchfrtrace(d, a.timeout)
            res[d] = (ours, theirs)
            print("\n%s:" % label)
            found = ours["minority"] == divergent
            ok &= found
            print("  ours         wall %7.2f s  CPU %7.2f s  (whole process; analysis alone %.2f s wall)  peak RSS %.0f MiB"
                  % (ours["proc_wall_s"], ours["proc_cpu_s"], ours["wall_s"], ours["maxrss_bytes"] / 2**20))
            print("               verdict %s, smallest group %s (%s)" % (
                ours["verdict"], ours["minority"], "the divergent ranks" if found else "WRONG"))
            failed = theirs["timed_out"] or theirs["rc"] != 0
            print("  torchfrtrace wall %7.2f s  CPU %7.2f s  exit %s%s" % (
                theirs["wall_s"], theirs["cpu_s"], theirs["rc"],
                ("  FAILED: %s" % theirs["last_line"]) if failed else
                "  culprit ranks named: %s" % (theirs["culprits"] or "none")))
            if failed:
                print("  -> torchfrtrace %s; ours did not crash (target: no crash where it crashes: met)"
                      % ("timed out" if theirs["timed_out"] else "crashed"))
            else:
                r = theirs["wall_s"] / max(ours["proc_wall_s"], 1e-9)
                rc = theirs["cpu_s"] / max(ours["proc_cpu_s"], 1e-9)
                print("  ratio torchfrtrace/ours (whole processes): wall %.1fx, CPU %.1fx  (target >= %.0fx: wall %s, "
                      "CPU %s; ours runs on 2 cores, torchfrtrace on 1)" % (
                          r, rc, TARGET_RATIO, "met" if r >= TARGET_RATIO else "NOT met",
                          "met" if rc >= TARGET_RATIO else "NOT met"))
                if not (ours["minority"] == divergent and set(theirs["culprits"]) <= set(divergent)):
                    print("  note: torchfrtrace culprits %s vs divergent %s" % (theirs["culprits"], divergent))
        ours_f, theirs_f = res[fixed]
        prod = run_child("ours", product)
        found = prod["minority"] == divergent
        ok &= found
        print("\nproduct layout (rank_<i>.json + .pickle as the ranks write them; read_dumps reads the pickle, the JSON is its fallback):")
        print("  ours         wall %7.2f s  CPU %7.2f s  (whole process; analysis alone %.2f s wall)  peak RSS %.0f MiB"
              % (prod["proc_wall_s"], prod["proc_cpu_s"], prod["wall_s"], prod["maxrss_bytes"] / 2**20))
        print("               verdict %s, smallest group %s (%s)" % (
            prod["verdict"], prod["minority"], "the divergent ranks" if found else "WRONG"))
        if not (theirs_f["timed_out"] or theirs_f["rc"] != 0):
            print("  ratio torchfrtrace on fixed/ (pickles) / ours on the JSON: wall %.1fx, CPU %.1fx"
                  % (theirs_f["wall_s"] / max(prod["proc_wall_s"], 1e-9), theirs_f["cpu_s"] / max(prod["proc_cpu_s"], 1e-9)))
        if not (theirs_f["timed_out"] or theirs_f["rc"] != 0):
            r = theirs_f["wall_s"] / max(ours_f["proc_wall_s"] + fix["proc_wall_s"], 1e-9)
            print("\nincluding our rewrite (write_torchfrtrace + ours) against torchfrtrace on its copies: %.1fx" % r)
        return 0 if ok else 1
    finally:
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        fn = {"ours": child_ours, "fix": child_fix}[sys.argv[2]]
        print(json.dumps(fn(*sys.argv[3:])))
        sys.exit(0)
    sys.exit(main())
