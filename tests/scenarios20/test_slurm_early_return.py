"""The early return from a helper the other ranks are still inside (early_return.py), as a
2-node job on the Slurm test cluster (slurm/testbed/up.sh): 4 ranks, 2 per node, submitted as
the ordinary user ``hkuser`` with ``--hang-detect=observe``. The batch-step monitor confirms
the hang and writes the report; the job is cancelled, the epilog copies the attempt to
storage, and the stored report.json must name the branch line (``if rank == 2 and step ==
3:``, rule ``inside_left_function``), the suspect and both lines. Every job is cancelled in
teardown (``jobs`` fixture of tests/slurm/test_slurm_cluster.py).
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import free_port
from testlib import TESTS, validate_report, wait_for

pytestmark = pytest.mark.slurm


def _cluster_module():
    """tests/slurm/test_slurm_cluster.py, for its fixtures and constants (one testbed, one way to use it)."""
    path = os.path.join(TESTS, "slurm", "test_slurm_cluster.py")
    spec = importlib.util.spec_from_file_location("hk_slurm_cluster_for_scenarios20", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_sc = _cluster_module()
cluster, jobs = _sc.cluster, _sc.jobs  # noqa: F811 -- pytest fixtures, used by name
HERE = os.path.join(TESTS, "scenarios20")


def marks(script):
    out = {}
    with open(os.path.join(HERE, script)) as f:
        for i, line in enumerate(f, 1):
            tag = line.rsplit("# ", 1)[-1].split()[0] if "# " in line else ""
            if tag.endswith("_LINE"):
                out[tag[:-5]] = i
    return out


@pytest.mark.timeout(420)
def test_two_node_early_return_stored_report_names_the_branch(jobs):
    work = os.path.join(_sc.WORK, "scenarios20-%d" % os.getpid())
    os.makedirs(work, exist_ok=True)
    os.chmod(work, 0o755)
    for name in ("early_return.py", "_job.py"):
        shutil.copy(os.path.join(HERE, name), os.path.join(work, name))
        os.chmod(os.path.join(work, name), 0o644)
    script = """#!/bin/bash
#SBATCH -N2 --ntasks-per-node=2 -t 4 -o %(out)s/out-%%j.txt
export MASTER_ADDR=127.0.0.1 MASTER_PORT=%(port)d WORLD_SIZE=$SLURM_NTASKS OMP_NUM_THREADS=1
srun bash -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID exec %(py)s %(work)s/early_return.py'
""" % {"work": work, "out": _sc.WORK, "port": free_port(), "py": sys.executable}
    j = jobs.submit("early-return", script, "--hang-detect=observe")
    out = os.path.join(_sc.WORK, "out-%s.txt" % j)  # the testbed's work dir: hkuser writes there

    def text():
        return open(out, errors="replace").read() if os.path.exists(out) else ""

    def confirmed():
        if "HANG CONFIRMED in job %s attempt 0" % j in text():
            return True
        state = _sc.info(j).state
        assert state not in _sc.TERMINAL, "job %s ended (%s) before a confirmation:\n%s" % (j, state, text()[-3000:])
        return False

    wait_for(confirmed, 240, 0.5, what="the batch monitor's confirmation", detail=lambda: text()[-3000:])
    wait_for(lambda: os.path.exists(os.path.join(_sc.node_scratch("hk1", j), "hang_detector", "report.json")), 60,
             0.5, what="the monitor's report.json")
    subprocess.run(["scancel", j], timeout=30)
    _sc.wait_end(j, 120)
    stored = os.path.join(_sc.STORAGE, j, "attempt_0", "hang_detector", "report.json")
    wait_for(lambda: os.path.exists(stored), 120, 0.5, what="the epilog's copy of the report in storage")
    rep = validate_report(open(stored).read(), "the stored report.json")
    m = marks("early_return.py")
    assert rep["verdict"] == "SPLIT" and rep["suspect_ranks"] == [2], json.dumps(rep["groups"], indent=1)[:3000]
    (waiting,) = [g for g in rep["groups"] if 0 in g["ranks"]]
    (left,) = [g for g in rep["groups"] if 2 in g["ranks"]]
    assert waiting["ranks"] == [0, 1, 3] and waiting["frame"]["line"] == m["HELPER"], waiting
    assert left["ranks"] == [2] and left["frame"]["line"] == m["TRAIN"], left
    b = left["branch"]
    assert (os.path.basename(b["file"]), b["line"], b["rule"], b["kind"]) == (
        "early_return.py", m["BRANCH"], "inside_left_function", "early_exit"), b
    # the same line lint reports (HK102)
    p = subprocess.run([sys.executable, "-m", "hpc_hangkit", "lint", "--no-cache", "--format", "json",
                        os.path.join(HERE, "early_return.py")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=120)
    found = json.loads(p.stdout.decode())["findings"]
    assert any(f["code"] == "HK102" and f["line"] == m["HELPER"] and any(
        r["role"] == "branch" and r["line"] == m["BRANCH"] for r in f["related"]) for f in found), found
