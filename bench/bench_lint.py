"""Figure 9: `hpc-hangkit lint` over the whole installed ``torch`` package.

Each run in a fresh child interpreter on the same files: ours (``hpc_hangkit.lint.lint_paths``:
index every module, propagate over the call graph, rules on the modules that reach a
collective) and the anchor ``ast.parse`` of every file, nothing else (the floor of any
``ast``-based checker). Prints wall and CPU seconds, peak RSS (``ru_maxrss`` of the child),
the ratio ours/anchor, files, lines and findings per code.

Target: the whole installed torch (about 1M lines) in < 60 s on 2 cores, < 1 GiB.

    python bench/bench_lint.py [PATH ...]      (default: the installed torch package)
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _child(task, paths):
    code = ("import json,sys,time,resource\n"
            "sys.path.insert(0, %r)\n"
            "t0=time.perf_counter(); c0=time.process_time()\n"
            "out={}\n"
            "if %r == 'ours':\n"
            "    from hpc_hangkit.lint import lint_paths\n"
            "    r = lint_paths(%r)\n"
            "    codes = {}\n"
            "    for f in r.findings: codes[f.code] = codes.get(f.code, 0) + 1\n"
            "    out = {'files': r.files, 'lines': r.lines, 'findings': len(r.findings), 'codes': codes,\n"
            "           'errors': len(r.errors)}\n"
            "else:\n"
            "    import ast\n"
            "    from hpc_hangkit.lint.files import iter_files\n"
            "    n = 0\n"
            "    for p in iter_files(%r):\n"
            "        try:\n"
            "            with open(p, 'rb') as fh: ast.parse(fh.read())\n"
            "            n += 1\n"
            "        except (SyntaxError, ValueError): pass\n"
            "    out = {'files': n}\n"
            "out['wall_s'] = time.perf_counter() - t0; out['cpu_s'] = time.process_time() - c0\n"
            "out['rss_mib'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0\n"
            "print(json.dumps(out))\n") % (ROOT, task, list(paths), list(paths))
    p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.decode()[-2000:])
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        paths = argv
    else:
        import importlib.util
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            print("bench_lint: torch is not installed; give a PATH")
            return 2
        paths = list(spec.submodule_search_locations)
    load = os.getloadavg()[0]
    print("bench_lint: %s (load %.1f on %d cores)" % (", ".join(paths), load, os.cpu_count() or 0))
    anchor = _child("anchor", paths)
    ours = _child("ours", paths)
    print("%-22s %8s %8s %9s" % ("", "wall s", "cpu s", "peak MiB"))
    print("%-22s %8.1f %8.1f %9.0f" % ("ast.parse only", anchor["wall_s"], anchor["cpu_s"], anchor["rss_mib"]))
    print("%-22s %8.1f %8.1f %9.0f" % ("hpc-hangkit lint", ours["wall_s"], ours["cpu_s"], ours["rss_mib"]))
    print("cpu ratio ours/anchor: %.2f" % (ours["cpu_s"] / max(anchor["cpu_s"], 1e-9)))
    print("%d files, %d lines, %d unparsable; %d findings: %s" % (
        ours["files"], ours["lines"], ours["errors"], ours["findings"],
        ", ".join("%s %d" % kv for kv in sorted(ours["codes"].items()))))
    ok = ours["wall_s"] < 60 and ours["rss_mib"] < 1024
    print("target (< 60 s, < 1024 MiB): %s" % ("met" if ok else "MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
