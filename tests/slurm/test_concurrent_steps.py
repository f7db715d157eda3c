"""Real cluster: two ``srun`` steps at the same time in one ``salloc``, both hanging, are kept
apart from the node scratch to the report.

Each step is the 4-rank gloo example (2 ranks per node) with its own planted suspect
(``--skip-rank``): step A's rank 1, step B's rank 2. The SPANK plugin gives each step's ranks
``<attempt>/step_<s>`` as HANGKIT_SCRATCH_DIR, each step's monitor (fail mode) confirms its
hang and ends its step, the epilog stores ``attempt_0/step_<s>/hang_detector/``, and
``hpc-hangkit collect`` prints one roll call per step: each with only its own step's ranks
(the pids its ranks reported) and its own planted suspect.

Every rank writes ``<step id> <rank> <pid> <planted suspect>`` to a file as it starts, so the
test knows which step got which suspect (the two sruns race for step ids 0 and 1).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from conftest import free_port
from hpc_hangkit import layout
from testlib import validate_report, wait_for
from test_slurm_cluster import (STORAGE, TERMINAL, USER, WORK, as_user, cluster, info,  # noqa: F401
                                user_env)

pytestmark = pytest.mark.slurm

#: planted suspect of each of the two steps (the order they are started in)
PLANTED = (1, 2)

RANK_SH = """#!/bin/bash
# one rank of the gloo example: $1 master port, $2 the rank that skips, $3 the record file
echo "$SLURM_STEP_ID $SLURM_PROCID $$ $2" >> "$3"
export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID MASTER_ADDR=127.0.0.1 MASTER_PORT=$1
export WORLD_SIZE=$SLURM_NTASKS
exec %(py)s %(work)s/gloo_divergent.py --skip-step 3 --skip-rank $2
"""


@pytest.fixture
def salloc(cluster):
    """``salloc(name, argv) -> Popen`` as hkuser in a session of its own; at teardown its
    process group is killed and hkuser's jobs of that name cancelled."""
    started = []

    def _start(name, argv):
        p = subprocess.Popen([shutil.which("runuser") or "/usr/sbin/runuser", "-u", USER, "--"] + argv, cwd=WORK, env=user_env(),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
        started.append((name, p))
        return p

    yield _start
    for name, p in started:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait(30)
        subprocess.run(["scancel", "-u", USER, "-n", name], stderr=subprocess.DEVNULL, timeout=30)


def _records(path):
    """{step id: {"pids": {pid}, "ranks": {rank}, "planted": k}} from the ranks' record file."""
    out = {}
    for ln in open(path).read().split("\n"):
        if not ln.strip():
            continue
        step, rank, pid, k = (int(x) for x in ln.split())
        rec = out.setdefault(step, {"pids": set(), "ranks": set(), "planted": set()})
        rec["pids"].add(pid)
        rec["ranks"].add(rank)
        rec["planted"].add(k)
    return out


def _stored_rank_pids(attempt_dir, step):
    """{pid} of the rank files stored under the step's tree (watchdog/ and heartbeats/)."""
    hd = os.path.join(attempt_dir, layout.step_dir_name(step), layout.HANG_DETECTOR_DIR)
    return {rf.pid for sub in (layout.WATCHDOG_DIR, layout.HEARTBEAT_DIR)
            for rf in layout.list_rank_files(os.path.join(hd, sub))}


def two_steps(tag):
    """The rank script and the record file of one test (in WORK, named by ``tag``) and the
    shell line starting the two concurrent 4-rank steps, one per planted suspect in
    :data:`PLANTED`. Returns ``(record, sruns)``."""
    rank_sh = os.path.join(WORK, "steps-rank-%s.sh" % tag)
    record = os.path.join(WORK, "steps-ranks-%s.txt" % tag)
    with open(rank_sh, "w") as f:
        f.write(RANK_SH % {"py": sys.executable, "work": WORK})
    os.chmod(rank_sh, 0o755)
    open(record, "w").close()
    os.chmod(record, 0o666)
    sruns = " & ".join("srun --exact -n4 --ntasks-per-node=2 %s %d %d %s"
                       % (rank_sh, free_port(), k, record) for k in PLANTED)
    return record, sruns


@pytest.mark.timeout(480)
def test_two_concurrent_steps_in_one_salloc_get_two_separate_reports(salloc):
    tag = "%d-%d" % (os.getpid(), free_port())
    name = "hk-steps-%s" % tag
    record, sruns = two_steps(tag)
    p = salloc(name, ["salloc", "--hang-detect=fail", "-J", name, "-t", "5", "-N2",
                      "--ntasks-per-node=4", "bash", "-c", sruns + " & wait"])
    try:
        out = p.communicate(timeout=360)[0].decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out = p.communicate(timeout=30)[0].decode("utf-8", "replace")
        pytest.fail("salloc did not end: the step monitors did not end both steps\n" + out[-6000:])
    m = re.search(r"Granted job allocation (\d+)", out)
    assert m, out[-3000:]
    j = m.group(1)
    recs = _records(record)
    assert sorted(recs) == [0, 1], (recs, out[-3000:])
    for s, rec in recs.items():
        assert rec["ranks"] == {0, 1, 2, 3} and len(rec["pids"]) == 4 and len(rec["planted"]) == 1, rec
        # each step's own monitor confirmed its hang and ended its step
        assert "HANG CONFIRMED in step %s.%d: SPLIT" % (j, s) in out, out[-6000:]
        assert "hang confirmed: ending step %s.%d" % (j, s) in out, out[-6000:]
    assert {next(iter(r["planted"])) for r in recs.values()} == set(PLANTED)

    # the epilog of both nodes stored the attempt
    attempt_dir = os.path.join(STORAGE, layout.storage_attempt_prefix(j, 0))
    wait_for(lambda: info(j).state in TERMINAL and all(
        os.path.exists(os.path.join(attempt_dir, "collect_%s.json" % n)) for n in ("hk1", "hk2")),
        120, 0.5, what="job %s's epilogs to store its files" % j)
    for s, rec in recs.items():
        pids = _stored_rank_pids(attempt_dir, s)
        # nothing mixed: the step's tree holds its own ranks' files, all of them, only them
        assert pids == rec["pids"], (s, pids, rec["pids"])
    top = os.path.join(attempt_dir, layout.HANG_DETECTOR_DIR)
    assert not any(layout.list_rank_files(os.path.join(top, sub))
                   for sub in (layout.WATCHDOG_DIR, layout.HEARTBEAT_DIR)), \
        "a step's rank file landed in the attempt's own tree"

    bin_ = os.path.join(os.path.dirname(STORAGE), "bin", "hpc-hangkit")
    c = as_user([bin_, "collect", j, "--stored", "--json"], timeout=120)
    assert c.returncode == 0, c.stderr.decode()
    doc = json.loads(c.stdout)
    assert doc["attempt"] == 0 and [r["step"] for r in doc["reports"]] == [0, 1], doc.keys()
    for r in doc["reports"]:
        rep = validate_report(r["report"], "step %d's report" % r["step"])
        planted = next(iter(recs[r["step"]]["planted"]))
        assert rep["verdict"] == "SPLIT" and rep["suspect_ranks"] == [planted], \
            (r["step"], rep["verdict"], rep["suspect_ranks"])
        groups = sorted(sorted(g["ranks"]) for g in rep["groups"])
        assert groups == sorted([[planted], sorted({0, 1, 2, 3} - {planted})]), groups
    c = as_user([bin_, "collect", j, "--stored"], timeout=120)
    assert c.returncode == 0, c.stderr.decode()
    text = c.stdout.decode()
    titles = [ln for ln in text.split("\n") if ln.startswith("=== ")]
    assert titles == ["=== job %s attempt 0 step 0 ===" % j, "=== job %s attempt 0 step 1 ===" % j], text
    for s in (0, 1):
        part = text.split("=== job %s attempt 0 step %d ===" % (j, s), 1)[1].split("=== job", 1)[0]
        assert "suspect rank: %d\n" % next(iter(recs[s]["planted"])) in part, part[:2000]


@pytest.mark.timeout(480)
def test_collect_live_gathers_each_running_step_apart(salloc):
    """While both steps still hang (observe mode: the monitors report, the steps run on),
    ``hpc-hangkit collect J --live`` captures each step's own scratch on its nodes: one
    roll call per step, each with its own planted suspect."""
    tag = "%d-%d" % (os.getpid(), free_port())
    name = "hk-steps-live-%s" % tag
    record, sruns = two_steps(tag)
    log = os.path.join(WORK, "steps-salloc-%s.txt" % tag)
    p = salloc(name, ["bash", "-c", "exec salloc --hang-detect=observe -J %s -t 5 -N2 "
                      "--ntasks-per-node=4 bash -c '%s & wait' > %s 2>&1" % (name, sruns, log)])

    def text():
        return open(log, errors="replace").read() if os.path.exists(log) else ""
    m = wait_for(lambda: re.search(r"Granted job allocation (\d+)", text()), 60, 0.5,
                 what="the allocation", detail=lambda: text()[-3000:])
    j = m.group(1)
    for s in (0, 1):
        wait_for(lambda: "hang reported, step %s.%d keeps running" % (j, s) in text(), 300, 1.0,
                 what="step %s.%d's hang to be reported" % (j, s), detail=lambda: text()[-6000:])
    recs = _records(record)
    assert sorted(recs) == [0, 1], recs
    bin_ = os.path.join(os.path.dirname(STORAGE), "bin", "hpc-hangkit")
    c = as_user([bin_, "collect", j, "--live", "--json"], timeout=240)
    assert c.returncode == 0, c.stderr.decode()[-3000:]
    doc = json.loads(c.stdout)
    assert [r["step"] for r in doc["reports"]] == [0, 1], (doc.keys(), c.stderr.decode()[-2000:])
    for r in doc["reports"]:
        rep = validate_report(r["report"], "step %d's live report" % r["step"])
        planted = next(iter(recs[r["step"]]["planted"]))
        assert rep["suspect_ranks"] == [planted], (r["step"], rep["verdict"], rep["suspect_ranks"])
        assert sorted(r2 for g in rep["groups"] for r2 in g["ranks"]) == [0, 1, 2, 3], rep["groups"]
    assert p.poll() is None, "salloc ended before the live collect"
    subprocess.run(["scancel", j], timeout=30)
    p.wait(60)
