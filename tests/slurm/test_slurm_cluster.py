"""Real-cluster tests: the 2-node Slurm test cluster (slurm/testbed/up.sh), the
SPANK plugin, the prolog, the batch-step monitor and fail-mode requeue.

Every job is submitted as the ordinary user ``hkuser`` (never root), with a
clean environment, from the shared work directory of the testbed. Every job a
test submits is cancelled in teardown. The site TOML of the testbed sets short
windows (poll 1 s, confirm 6 s) and ``max_hang_requeues = 1``.
"""
from testlib import REPO, validate_report, wait_for
import json
import os
import shutil
import stat
import subprocess
import sys
import time

import pytest

from conftest import free_port
from hpc_hangkit import slurmjob as slurm

pytestmark = pytest.mark.slurm

HK_ROOT = os.environ.get("HK_ROOT", "/var/tmp/hk-slurm")
WORK = os.path.join(HK_ROOT, "work")
STORAGE = os.path.join(HK_ROOT, "storage")
SITE_TOML = os.path.join(HK_ROOT, "etc", "config.toml")
USER = "hkuser"
TERMINAL = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
            "DEADLINE", "PREEMPTED")


@pytest.fixture(scope="session")
def cluster():
    """The running test cluster; brings it up (idempotent, well under a second when up)."""
    if os.geteuid() != 0:
        pytest.skip("the Slurm test cluster needs root: it installs packages and starts slurmctld/slurmd")
    env = dict(os.environ, HK_PYTHON=sys.executable, HK_ROOT=HK_ROOT)
    p = subprocess.run(["bash", os.path.join(REPO, "slurm", "testbed", "up.sh")], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    if p.returncode != 0:
        pytest.fail("slurm/testbed/up.sh failed:\n" + p.stdout.decode(errors="replace")[-3000:])
    shutil.copy(os.path.join(REPO, "examples", "gloo_divergent.py"), os.path.join(WORK, "gloo_divergent.py"))
    os.chmod(os.path.join(WORK, "gloo_divergent.py"), 0o644)
    return HK_ROOT


def user_env():
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/" + USER, "USER": USER,
           "LOGNAME": USER, "LANG": "C.UTF-8"}
    if os.environ.get("SLURM_CONF"):  # a second test cluster (slurm/testbed/up.sh HK_ETC)
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
    return env


def as_user(argv, timeout=60):
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    return subprocess.run([runuser, "-u", USER, "--"] + argv, cwd=WORK, env=user_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)


@pytest.fixture
def jobs(cluster):
    """Submit as hkuser: ``jobs.submit(name, script_text, *sbatch_args) -> job id``; all cancelled at teardown."""
    submitted = []

    class _Jobs:
        def submit(self, name, text, *args):
            path = os.path.join(WORK, "%s-%d.sh" % (name, os.getpid()))
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
            p = as_user(["sbatch", "--parsable"] + list(args) + [path])
            assert p.returncode == 0, p.stderr.decode()
            jid = p.stdout.decode().strip().split(";")[0]
            submitted.append(jid)
            return jid

    yield _Jobs()
    for j in submitted:
        subprocess.run(["scancel", j], stderr=subprocess.DEVNULL, timeout=30)


def info(j):
    return slurm.job_info(j)


def wait_end(j, timeout):
    return wait_for(lambda: (lambda i: i if i.state in TERMINAL else None)(info(j)), timeout,
                    0.5, what="job %s to end" % j)


def out_of(j):
    p = os.path.join(WORK, "out-%s.txt" % j)
    return open(p, errors="replace").read() if os.path.exists(p) else ""


def node_scratch(node, j, attempt=0):
    return os.path.join(HK_ROOT, "nodes", node, "tmp", "hpc-hangkit", "job_%s" % j, "attempt_%d" % attempt)


def gloo_script(hang_when="always", time_min=2):
    """A 4-rank gloo job across both nodes (2 per node) where rank 1 skips an all_reduce.

    hang_when: "always", "first" (attempt 0 only: later attempts complete) or
    "second" (attempt with SLURM_RESTART_COUNT=1 only).
    """
    port = free_port()
    cond = {"always": "true", "first": '[ "${SLURM_RESTART_COUNT:-0}" = 0 ]',
            "second": '[ "${SLURM_RESTART_COUNT:-0}" = 1 ]'}[hang_when]
    return """#!/bin/bash
#SBATCH -N2 --ntasks-per-node=2 -t %(t)d -o %(work)s/out-%%j.txt --open-mode=append
echo "attempt restart_count=${SLURM_RESTART_COUNT:-unset} mode=$HANGKIT_MODE"
export MASTER_ADDR=127.0.0.1 MASTER_PORT=$((%(port)d + ${SLURM_RESTART_COUNT:-0})) WORLD_SIZE=$SLURM_NTASKS
if %(cond)s; then SKIP=3; else SKIP=-1; fi
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ] && [ -n "$HK_WAIT_FOR_ADMIN_REQUEUE" ]; then sleep 300; fi
srun bash -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID exec %(py)s %(work)s/gloo_divergent.py --skip-step '$SKIP
echo "job script done rc=$?"
""" % {"t": time_min, "work": WORK, "port": port, "cond": cond, "py": sys.executable}


# --------------------------------------------------------------------------- cluster

@pytest.mark.timeout(300)
def test_testbed_up_is_idempotent_and_down_up_cycles(cluster):
    env = dict(os.environ, HK_PYTHON=sys.executable, HK_ROOT=HK_ROOT)
    up = os.path.join(REPO, "slurm", "testbed", "up.sh")
    down = os.path.join(REPO, "slurm", "testbed", "down.sh")
    pid_file = os.path.join(HK_ROOT, "run", "slurmctld.pid")
    pid = open(pid_file).read().strip()
    p = subprocess.run(["bash", up], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert p.returncode == 0 and b"restarting" not in p.stdout and b"starting slurmctld" not in p.stdout
    assert open(pid_file).read().strip() == pid                   # nothing restarted
    assert subprocess.run(["bash", down], env=env, timeout=120).returncode == 0
    assert subprocess.run(["bash", down], env=env, timeout=120).returncode == 0   # down twice: fine
    assert not os.path.exists(pid_file)
    p = subprocess.run(["bash", up], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert p.returncode == 0, p.stdout.decode()[-2000:]
    assert b"smoke: " in p.stdout and b"hk1" in p.stdout and b"hk2" in p.stdout
    q = as_user(["srun", "-N2", "-n2", "-l", "hostname"])
    assert sorted(q.stdout.decode().split()) == ["0:", "1:", "hk1", "hk2"]


# --------------------------------------------------------------------------- SPANK

@pytest.mark.timeout(60)
@pytest.mark.parametrize("cmd", [["sbatch", "--wrap=true"], ["srun", "true"], ["salloc", "true"]])
def test_bogus_mode_refused_at_submit(cluster, cmd):
    p = as_user([cmd[0], "--hang-detect=bogus"] + cmd[1:])
    assert p.returncode != 0
    err = p.stderr.decode()
    assert "invalid --hang-detect value 'bogus'" in err and "off, observe, fail" in err


@pytest.mark.timeout(60)
def test_option_listed_in_help(cluster):
    for c in ("sbatch", "srun", "salloc"):
        assert "--hang-detect=MODE" in as_user([c, "--help"]).stdout.decode()


ENV_JOB = """#!/bin/bash
#SBATCH -N2 --ntasks-per-node=1 -t 2 -o %(work)s/out-%%j.txt
echo "batch HANGKIT_MODE=$HANGKIT_MODE SCRATCH=$HANGKIT_SCRATCH_DIR PP=$PYTHONPATH FR=$TORCH_FR_BUFFER_SIZE CONFIRM=$HANGKIT_CONFIRM_DURATION_S"
srun -l bash -c 'echo "task $(hostname) HANGKIT_MODE=$HANGKIT_MODE SCRATCH=$HANGKIT_SCRATCH_DIR PP=$PYTHONPATH"'
touch %(work)s/ready-$SLURM_JOB_ID
sleep 30
""" % {"work": WORK}


def _lines(text, prefix):
    return [ln for ln in text.splitlines() if prefix in ln]


@pytest.mark.timeout(120)
def test_site_default_mode_reaches_batch_tasks_and_prolog(jobs):
    j = jobs.submit("envjob", ENV_JOB)          # no --hang-detect: site default (observe)
    wait_for(lambda: os.path.exists(os.path.join(WORK, "ready-%s" % j)), 60, 0.5, what="job %s to start" % j)
    out = out_of(j)
    att = "/tmp/hpc-hangkit/job_%s/attempt_0" % j
    assert "batch HANGKIT_MODE=observe SCRATCH=%s" % att in out
    assert "CONFIRM=6.0" in out                                      # the site TOML's value
    tasks = _lines(out, "task hk")
    assert len(tasks) == 2 and all("HANGKIT_MODE=observe" in t and "SCRATCH=" + att in t for t in tasks)
    assert all(t.split("PP=")[1].endswith("hpc_hangkit/boot") for t in tasks)
    uid = int(subprocess.check_output(["id", "-u", USER]))
    for node in ("hk1", "hk2"):                                     # the prolog ran on both nodes
        st = os.lstat(node_scratch(node, j))
        assert st.st_uid == uid and stat.S_IMODE(st.st_mode) == 0o700
        env_file = os.path.join(node_scratch(node, j), "hangkit.env")
        assert "HANGKIT_MODE=observe" in open(env_file).read()
        parent = os.lstat(os.path.dirname(node_scratch(node, j)))
        assert parent.st_uid == 0
    # the batch-step monitor runs as the job's user, once
    def monitors():
        """(pid, uid) of the processes running `slurm-monitor` for this job (SLURM_JOB_ID in /proc)."""
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmd = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
                env = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
                uid = os.stat("/proc/%s" % pid).st_uid
            except OSError:
                continue
            if b"slurm-monitor" in cmd and ("SLURM_JOB_ID=%s" % j).encode() in env:
                found.append((int(pid), uid))
        return found
    wait_for(monitors, 30, 0.5, what="the batch-step monitor")
    time.sleep(2)  # a "nothing happens" window: a second monitor, if one were started, shows by now
    mons = monitors()
    assert len(mons) == 1 and mons[0][1] == uid, mons


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["off", "fail"])
def test_option_overrides_site_default(jobs, mode):
    j = jobs.submit("envjob", ENV_JOB, "--hang-detect=" + mode)
    wait_for(lambda: os.path.exists(os.path.join(WORK, "ready-%s" % j)), 60, 0.5, what="job %s to start" % j)
    out = out_of(j)
    assert "batch HANGKIT_MODE=%s " % mode in out
    assert all("HANGKIT_MODE=%s " % mode in t for t in _lines(out, "task hk"))
    if mode == "off":
        assert "SCRATCH= " in out and "PP= " in out                  # nothing armed
        assert not os.path.exists(os.path.dirname(node_scratch("hk1", j)))
    else:
        assert os.path.isdir(node_scratch("hk2", j))


@pytest.mark.timeout(120)
def test_step_option_overrides_job_mode(jobs):
    text = """#!/bin/bash
#SBATCH -N1 -t 2 -o %s/out-%%j.txt
srun --hang-detect=off bash -c 'echo "step HANGKIT_MODE=$HANGKIT_MODE PP=$PYTHONPATH"'
""" % WORK
    j = jobs.submit("stepopt", text, "--hang-detect=observe")
    wait_end(j, 60)
    assert "step HANGKIT_MODE=off PP=" in out_of(j).splitlines()   # boot dir taken out again


@pytest.mark.timeout(120)
def test_prolog_survives_planted_symlink_and_node_stays_idle(jobs):
    # hkuser plants /tmp/hpc-hangkit -> a directory of its own on node hk2
    node_tmp = os.path.join(HK_ROOT, "nodes", "hk2", "tmp")
    root = os.path.join(node_tmp, "hpc-hangkit")
    aside = os.path.join(node_tmp, "planted-target")
    if os.path.lexists(root):
        os.rename(root, root + ".pre-test.%d" % time.time_ns())
    os.makedirs(aside, exist_ok=True)
    uid = int(subprocess.check_output(["id", "-u", USER]))
    os.chown(aside, uid, uid)
    os.symlink(aside, root)
    os.lchown(root, uid, uid)
    j = jobs.submit("envjob", ENV_JOB)
    wait_for(lambda: os.path.exists(os.path.join(WORK, "ready-%s" % j)), 60, 0.5, what="job %s to start" % j)
    assert os.listdir(aside) == []                           # nothing went through the link
    st = os.lstat(root)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == 0
    assert os.path.isdir(node_scratch("hk2", j))
    subprocess.run(["scancel", j], timeout=30)
    wait_end(j, 60)
    states = subprocess.check_output(["sinfo", "-h", "-N", "-o", "%N %T"]).decode()
    assert "drain" not in states and "down" not in states, states


# --------------------------------------------------------------------------- monitor

def _report_json(j, attempt):
    p = os.path.join(node_scratch("hk1", j, attempt), "hang_detector", "report.json")
    q = os.path.join(STORAGE, j, "attempt_%d" % attempt, "hang_detector", "report.json")
    for f in (p, q):
        if os.path.exists(f):
            return json.load(open(f))
    return None


@pytest.mark.timeout(300)
def test_observe_gloo_across_two_nodes_rank1_diverges(jobs):
    j = jobs.submit("gloo-observe", gloo_script("always", time_min=2), "--hang-detect=observe")
    wait_for(lambda: "HANG CONFIRMED in job %s attempt 0" % j in out_of(j), 150, 0.5, what="the confirmation")
    out = out_of(j)
    assert "SUSPECTED stacks" in out and "observe mode: hang reported, the job keeps running" in out
    hd = os.path.join(node_scratch("hk1", j), "hang_detector")
    rep = validate_report(open(os.path.join(hd, "report.json")).read(), "the monitor's report.json")
    assert rep["suspect_ranks"] == [1]
    # captured on both nodes: every rank's py-spy/why-file is in the batch node's tree,
    # and hk2 kept its own capture for the epilog
    for r in range(4):
        assert os.path.exists(os.path.join(hd, "stack_traces", "rank_%d.log" % r)), os.listdir(hd)
    assert os.listdir(os.path.join(node_scratch("hk2", j), "hang_detector", "stack_traces"))
    assert subprocess.run(["squeue", "-h", "-j", j], stdout=subprocess.PIPE).stdout.strip()  # still running
    i = wait_end(j, 150)
    assert i.state == "TIMEOUT" and i.restarts == 0                    # ran to its time limit
    mon_log = open(os.path.join(HK_ROOT, "work", "out-%s.txt" % j)).read()
    assert "requeue" not in mon_log.replace("Requeue", "")
    # the epilog collected; collect JOBID --json reads storage
    wait_for(lambda: os.path.exists(os.path.join(STORAGE, j, "attempt_0", "hang_detector", "report.json")),
             60, 0.5, what="the epilog's copy of the report")
    p = subprocess.run([sys.executable, "-m", "hpc_hangkit", "collect", j, "--json"],
                       env=dict(os.environ, HPC_HANGKIT_CONFIG=SITE_TOML), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    got = validate_report(p.stdout, "collect --json")
    assert got["suspect_ranks"] == [1]
    assert any(g.get("frame", {}).get("line") == 25 for g in got["groups"])   # the waiting all_reduce line


def _requeue_state(j):
    p = os.path.join(STORAGE, j, "hangkit_requeue.json")
    return json.load(open(p)) if os.path.exists(p) else None


@pytest.mark.timeout(360)
def test_fail_requeues_once_then_second_attempt_completes(jobs):
    j = jobs.submit("gloo-fail", gloo_script("first"), "--hang-detect=fail")
    i = wait_end(j, 300)
    out = out_of(j)
    assert "requeueing: hang requeue 1 of 1" in out
    assert i.state == "COMPLETED" and i.restarts == 1, (i.state, i.restarts, out[-3000:])
    assert "attempt restart_count=1" in out and "job script done rc=0" in out
    st = _requeue_state(j)
    assert st["hang_requeues"] == 1 and st["hangs"][0]["signature"]["suspect_ranks"] == [1]
    assert _report_json(j, 0)["suspect_ranks"] == [1]


@pytest.mark.timeout(360)
def test_fail_requeue_reports_of_both_attempts_reach_storage(jobs):
    j = jobs.submit("gloo-fail2", gloo_script("always"), "--hang-detect=fail")
    wait_end(j, 300)
    for a in (0, 1):
        wait_for(lambda: os.path.exists(os.path.join(STORAGE, j, "attempt_%d" % a, "hang_detector",
                                                     "report.json")), 60,
                 0.5, what="attempt %d's report in storage" % a)


@pytest.mark.timeout(360)
def test_same_hang_twice_is_a_repeat_and_ends_the_job(jobs):
    j = jobs.submit("gloo-repeat", gloo_script("always"), "--hang-detect=fail")
    i = wait_end(j, 300)
    out = out_of(j)
    assert "requeueing: hang requeue 1 of 1" in out
    assert "not requeued: repeat - rank(s) 1 hang at the same place as in attempt 0" in out
    assert "gloo_divergent.py:54 main (in barrier)" in out
    assert i.state == "CANCELLED" and i.restarts == 1
    assert i.raw.get("Comment", "").startswith("hpc-hangkit: hang confirmed, not requeued: repeat")
    assert "report:" in out.split("not requeued: repeat")[1].lower()


@pytest.mark.timeout(300)
def test_no_requeue_job_gets_a_clear_message_and_is_not_requeued(jobs):
    j = jobs.submit("gloo-noreq", gloo_script("always"), "--hang-detect=fail", "--no-requeue",
                    "--comment=mine")
    i = wait_end(j, 200)
    out = out_of(j)
    assert "hang confirmed, not requeued: the job does not allow requeue" in out
    assert "Report: /tmp/hpc-hangkit/job_%s/attempt_0/hang_detector/report.txt" % j in out
    assert i.state == "CANCELLED" and i.restarts == 0
    assert "hang confirmed, not requeued" in i.raw.get("Comment", "")
    # the user's own Comment is kept, after ours
    comment = slurm.job_comment(j)  # whole (scontrol's key=value line cuts it at "JobRequeue=0")
    assert comment.startswith("hpc-hangkit: hang confirmed, not requeued: the job does not allow requeue")
    assert "; report: /tmp/hpc-hangkit/job_%s/attempt_0/hang_detector/report.txt" % j in comment, comment
    assert comment.endswith(") | mine") and len(comment.encode()) <= slurm.COMMENT_MAX, comment
    assert _requeue_state(j).get("hang_requeues", 0) == 0


@pytest.mark.timeout(420)
def test_admin_requeue_does_not_spend_the_hang_budget(jobs):
    # attempt 0 waits; an admin requeue makes SLURM_RESTART_COUNT=1; attempt 1 hangs
    # and still gets its hang requeue; attempt 2 completes.
    # (Once flaky: the monitor's `scontrol requeue` can be killed by the requeue's own
    # SIGTERM before its answer arrives; the monitor then took it for a refusal and
    # scancel'ed the requeued job. test_slurm_unit.py replays that race.)
    text = gloo_script("second").replace("#SBATCH -N2", "#SBATCH -N2", 1)
    text = text.replace("echo \"attempt", "export HK_WAIT_FOR_ADMIN_REQUEUE=1\necho \"attempt", 1)
    j = jobs.submit("gloo-admin", text, "--hang-detect=fail")
    wait_for(lambda: info(j).state == "RUNNING", 60, 0.5, what="job %s to run" % j)
    # attempt 0 is in its batch script (its first line printed; it waits for this requeue) and
    # its monitor is up (attempt 0 prints restart_count=unset or =0: the count is not set yet)
    wait_for(lambda: "attempt restart_count=" in out_of(j) and _monitor_pids(j), 60, 0.5,
             what="attempt 0's batch script and monitor of job %s" % j, detail=lambda: out_of(j)[-2000:])
    p = as_user(["scontrol", "requeue", j])
    assert p.returncode == 0, p.stderr.decode()
    i = wait_end(j, 380)
    out = out_of(j)
    assert "attempt restart_count=1" in out
    assert "requeueing: hang requeue 1 of 1" in out, out[-3000:]
    assert "not requeued" not in out, out[-3000:]
    assert i.state == "COMPLETED" and i.restarts == 2, (i.state, i.restarts, i.raw.get("Comment"),
                                                        out[-3000:])
    st = _requeue_state(j)
    assert st["hang_requeues"] == 1 and st["hangs"][0]["attempt"] == 1


def _monitor_pids(j):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open("/proc/%s/cmdline" % pid, "rb").read()
            env = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if b"slurm-monitor" in cmd and ("SLURM_JOB_ID=%s" % j).encode() in env:
            found.append(int(pid))
    return found


@pytest.mark.timeout(120)
def test_monitor_ends_with_the_job(jobs):
    j = jobs.submit("short", "#!/bin/bash\n#SBATCH -N1 -t 1 -o %s/out-%%j.txt\nsleep 6\necho done\n" % WORK)
    wait_for(lambda: _monitor_pids(j), 30, 0.5, what="the monitor of job %s" % j)
    i = wait_end(j, 60)
    assert i.state == "COMPLETED"
    wait_for(lambda: not _monitor_pids(j), 15, 0.5, what="the monitor to exit with the job")
    assert "monitor for job %s attempt 0" % j not in out_of(j)          # INFO goes to monitor.log only


@pytest.mark.timeout(120)
def test_array_task_ids_resolve_to_their_own_job(jobs):
    j = jobs.submit("arr", "#!/bin/bash\n#SBATCH -N1 -t 1 -o /dev/null\nsleep 20\n", "--array=1-2",
                    "--hang-detect=off")
    wait_for(lambda: info(j + "_1").state == "RUNNING" and info(j + "_2").state == "RUNNING", 60,
             0.5, what="array tasks %s_1 and _2 to run" % j)
    uid1, uid2 = slurm.resolve_job_id(j + "_1"), slurm.resolve_job_id(j + "_2")
    assert uid1.isdigit() and uid2.isdigit() and uid1 != uid2 and j in (uid1, uid2)
    assert slurm.resolve_job_id(j) == j
    t = info(j + "_2")
    assert t.array_job_id == j and t.array_task_id == "2" and t.batch and t.nodes
    with pytest.raises(ValueError):
        slurm.resolve_job_id(j + "_[1-2]")
    subprocess.run(["scancel", j], timeout=30)


@pytest.mark.timeout(180)
def test_finished_array_task_is_collected_by_its_array_id(jobs):
    """The monitor stores ``<storage>/<A>_<T>.jobid``; after Slurm forgot the task
    (here: no Slurm command on collect's PATH), ``collect A_T`` still finds it."""
    text = """#!/bin/bash
#SBATCH -N1 -t 1 -o %s/out-%%A_%%a.txt
srun -n1 %s -c 'import time; time.sleep(4); print("task ran")'
""" % (WORK, sys.executable)
    j = jobs.submit("arr-alias", text, "--array=1-2", "--hang-detect=observe")
    ids = {t: wait_for(lambda t=t: (lambda i: i if i.state in TERMINAL else None)(info("%s_%d" % (j, t))),
                       120, 0.5, what="array task %s_%d to end" % (j, t)) for t in (1, 2)}
    assert all(i.state == "COMPLETED" for i in ids.values()), {t: i.state for t, i in ids.items()}
    for t, i in ids.items():
        alias = os.path.join(STORAGE, "%s_%d.jobid" % (j, t))
        wait_for(lambda: os.path.exists(alias), 30, 0.5, what="the alias %s" % alias)
        assert open(alias).read().strip() == i.job_id
        wait_for(lambda: os.path.isdir(os.path.join(STORAGE, i.job_id, "attempt_0")), 60,
                 0.5, what="the epilog's copy of %s" % i.job_id)
        no_slurm = dict(os.environ, HPC_HANGKIT_CONFIG=SITE_TOML, PATH=os.path.dirname(sys.executable))
        p = subprocess.run([sys.executable, "-m", "hpc_hangkit", "collect", "%s_%d" % (j, t), "--json"],
                           env=no_slurm, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        assert p.returncode == 0, p.stderr.decode()[-2000:]
        validate_report(p.stdout, "collect %s_%d --json" % (j, t))
        assert "is SLURM_JOB_ID %s" % i.job_id in p.stderr.decode() + p.stdout.decode(), \
            p.stderr.decode()[-2000:]
    bad = subprocess.run([sys.executable, "-m", "hpc_hangkit", "collect", "%s_9" % j],
                         env=dict(os.environ, HPC_HANGKIT_CONFIG=SITE_TOML,
                                  PATH=os.path.dirname(sys.executable)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert bad.returncode != 0 and b"alias" in bad.stderr


@pytest.mark.timeout(120)
def test_misspelled_setting_is_reported_and_the_job_still_runs(jobs):
    text = """#!/bin/bash
#SBATCH -N1 -t 1 -o %s/out-%%j.txt
sleep 4
echo "script ran"
""" % WORK
    # exported at submit time: the job (and so the monitor) sees the typo
    path = os.path.join(WORK, "typo-%d.sh" % os.getpid())
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    env = dict(user_env(), HANGKIT_CONFIRM_DURATON_S="5")
    p = subprocess.run([shutil.which("runuser") or "/usr/sbin/runuser", "-u", USER, "--", "sbatch", "--parsable",
                        path], cwd=WORK, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 0, p.stderr
    j = p.stdout.decode().strip()
    try:
        i = wait_end(j, 60)
    finally:
        subprocess.run(["scancel", j], timeout=30)
    out = out_of(j)
    assert i.state == "COMPLETED" and "script ran" in out
    assert "hpc-hangkit: hang monitor not started for this job" in out
    assert "HANGKIT_CONFIRM_DURATION_S" in out                  # the did-you-mean


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["srun", "salloc"])
def test_interactive_jobs_are_armed_too(cluster, how):
    show = ["bash", "-c", 'echo "$(hostname) $HANGKIT_MODE $HANGKIT_SCRATCH_DIR $PYTHONPATH"']
    if how == "srun":
        p = as_user(["srun", "--hang-detect=fail", "-N2", "-n2"] + show)
    else:
        p = as_user(["salloc", "--hang-detect=fail", "-N2", "srun", "-n2"] + show)
    assert p.returncode == 0, p.stderr.decode()
    lines = sorted(p.stdout.decode().split("\n"))[-2:]
    assert [ln.split()[0] for ln in lines] == ["hk1", "hk2"]
    for ln in lines:
        host, mode, scratch, pp = ln.split()
        assert mode == "fail" and scratch.startswith("/tmp/hpc-hangkit/job_") and pp.endswith("hpc_hangkit/boot")


# --------------------------------------------------------------------------- interactive steps watched

class Terminal:
    """A command run as hkuser on a real pty (``pty.fork``: the pty is its controlling
    terminal and its stdin/stdout/stderr, so srun sees a terminal), with what it printed."""

    def __init__(self, argv):
        import pty
        self.text = ""
        self.status = None
        pid, fd = pty.fork()
        if pid == 0:                                   # the child: become the command
            try:
                os.chdir(WORK)
                os.execve(shutil.which("runuser") or "/usr/sbin/runuser",
                          ["runuser", "-u", USER, "--"] + argv, user_env())
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd

    def read(self, block_s=0.5) -> str:
        """What the pty has printed so far, after waiting up to ``block_s`` seconds for more."""
        import select
        if self.fd is not None and select.select([self.fd], [], [], block_s)[0]:
            try:
                data = os.read(self.fd, 65536)
            except OSError:                            # EIO: every writer has closed the pty
                data = b""
            if not data:
                os.close(self.fd)
                self.fd = None
            self.text += data.decode("utf-8", "replace").replace("\r\n", "\n")
        return self.text

    def wait_text(self, needle, timeout_s, what=None):
        """Read until ``needle`` was printed (or fail after ``timeout_s`` s); returns all text."""
        return wait_for(lambda: needle in self.read() and self.text, timeout_s, 0.01,
                        what=what or repr(needle), detail=lambda: self.text[-4000:])

    def exited(self):
        """The exit status once the command ended (its output read to the end), else None."""
        self.read()
        if self.status is None and self.fd is None:
            self.status = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.status

    def kill(self):
        if self.status is None:
            try:
                os.killpg(self.pid, 9)
            except OSError:
                pass
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
            os.waitpid(self.pid, 0)
            self.status = -9


@pytest.fixture
def terminal(cluster):
    """``terminal(name, argv) -> Terminal``: argv runs as hkuser on a pty with the job name
    ``name``; at teardown the command is killed and hkuser's jobs of that name cancelled."""
    started = []

    def _start(name, argv):
        started.append((name, Terminal(argv)))
        return started[-1][1]

    yield _start
    for name, t in started:
        t.kill()
        subprocess.run(["scancel", "-u", USER, "-n", name], stderr=subprocess.DEVNULL, timeout=30)


def _step_monitor_pids(j):
    """Pids of the processes running ``slurm-monitor --step <j>.<s>``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if b"slurm-monitor" in cmd and b"--step" in cmd:
            at = cmd.index(b"--step") + 1
            if at < len(cmd) and cmd[at].split(b".")[0] == j.encode():
                found.append(int(pid))
    return found


def gloo_ranks():
    """The bash -c command line of one rank of the gloo example, rank 1 skipping step 3's
    all_reduce (as gloo_script, for srun run directly)."""
    return ("RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID MASTER_ADDR=127.0.0.1 MASTER_PORT=%d "
            "WORLD_SIZE=$SLURM_NTASKS exec %s %s/gloo_divergent.py --skip-step 3"
            % (free_port(), sys.executable, WORK))


def _watched_step(text):
    import re
    m = re.search(r"hpc-hangkit: watching step (\d+)\.(\d+) \(4 task\(s\) on hk1,hk2\), mode (\w+)", text)
    assert m, text[-3000:]
    return m.group(1), "%s.%s" % (m.group(1), m.group(2)), m.group(3)


def _roll_call_on_terminal(text, step):
    confirmed = text.split("HANG CONFIRMED in step %s: SPLIT" % step, 1)
    assert len(confirmed) == 2, text[-4000:]
    roll = confirmed[1]
    assert "hpc-hangkit roll call: SPLIT" in roll and "\nsuspect rank: 1\n" in roll, roll[:3000]
    assert "ranks 0,2-3  waiting at     gloo_divergent.py:25 in sync_grads" in roll, roll[:3000]
    assert "SUSPECTED stacks" in confirmed[0]                       # suspected came first
    return roll


@pytest.mark.timeout(300)
def test_interactive_srun_hang_is_confirmed_on_the_terminal_and_fail_ends_the_step(terminal):
    name = "hk-int-fail-%d" % os.getpid()
    t = terminal(name, ["srun", "--hang-detect=fail", "-J", name, "-t", "3", "-N2", "-n4",
                        "bash", "-c", gloo_ranks()])
    t.wait_text("hpc-hangkit: watching step", 60)
    j, step, mode = _watched_step(t.text)
    assert mode == "fail"
    t.wait_text("hang confirmed: ending step %s (interactive work is not requeued)" % step, 220)
    status = wait_for(lambda: t.exited() is not None, 60, 0.1, what="srun to end",
                      detail=lambda: t.text[-3000:])
    assert status != 0 and t.status != 0
    roll = _roll_call_on_terminal(t.text, step)
    assert roll.index("ending step %s" % step) < roll.index("STEP %s ON" % step)   # said before ending it
    assert "STEP %s ON hk" % step in roll and "CANCELLED" in roll
    i = wait_end(j, 60)                      # the job srun allocated ends with it, never requeued
    assert i.state in ("FAILED", "CANCELLED") and i.restarts == 0, (i.state, i.raw.get("Reason"))
    rep = os.path.join("/home", USER, ".hpc-hangkit", "jobs", j, "step_" + step.split(".")[1],
                       "hang_detector", "report.json")
    assert validate_report(open(rep).read(), "the step monitor's report.json")["suspect_ranks"] == [1]
    assert "report: %s" % rep.replace(".json", ".txt") in roll
    wait_for(lambda: not _step_monitor_pids(j), 15, 0.2, what="the step monitor to end with srun")


@pytest.mark.timeout(120)
def test_sruns_of_a_batch_script_get_no_step_monitor(jobs):
    """The batch monitor watches a batch job's steps; its sruns (ENVIRONMENT=BATCH) start none."""
    ready = os.path.join(WORK, "step-ready-%d" % os.getpid())
    j = jobs.submit("batchstep", "#!/bin/bash\n#SBATCH -N1 -t 1 -o %s/out-%%j.txt\n"
                    "srun -n1 bash -c 'touch %s-$SLURM_JOB_ID; sleep 30'\n" % (WORK, ready),
                    "--hang-detect=fail")
    # the plugin forks a step monitor in srun before the step's tasks start, so once the
    # task has run, one would be there
    wait_for(lambda: os.path.exists("%s-%s" % (ready, j)), 60, 0.2, what="job %s's step to run" % j)
    assert _monitor_pids(j) and not _step_monitor_pids(j)


@pytest.mark.timeout(300)
def test_interactive_srun_in_salloc_observe_reports_and_the_step_keeps_running(terminal):
    name = "hk-int-obs-%d" % os.getpid()
    t = terminal(name, ["salloc", "--hang-detect=observe", "-J", name, "-t", "3", "-N2",
                        "-n4", "srun", "bash", "-c", gloo_ranks()])
    t.wait_text("hpc-hangkit: watching step", 60)
    j, step, mode = _watched_step(t.text)
    assert mode == "observe"
    t.wait_text("observe mode: hang reported, step %s keeps running" % step, 220)
    _roll_call_on_terminal(t.text, step)
    st = slurm.step_info(step)
    assert st is not None and st.state == "RUNNING" and st.ntasks == 4      # not ended
    assert t.exited() is None and "ending step" not in t.text
    assert subprocess.run(["scancel", j], timeout=30).returncode == 0
    wait_for(lambda: t.exited() is not None, 60, 0.1, what="salloc to end", detail=lambda: t.text[-2000:])


# --------------------------------------------------------------------------- one RAS address per job

RAS_JOB = """#!/bin/bash
#SBATCH -N1 -w hk1 -t 2 -o %(work)s/out-%%j.txt
echo "RAS $NCCL_RAS_ADDR"
# this job's "NCCL processes": the RAS stand-in, listening where the job environment says;
# ended by the job itself (a background process can outlive its batch script's step)
%(py)s -I %(listener)s %(poll)s &
listener=$!
sleep 15
kill $listener 2>/dev/null || true
wait $listener 2>/dev/null || true
"""


@pytest.mark.timeout(240)
def test_two_users_one_node_each_monitor_queries_only_its_own_jobs_ras(jobs):
    """Two jobs of two users on one node, each with the RAS stand-in listening at its
    job's own NCCL_RAS_ADDR; each job's monitor (ncclras stand-in in connect mode, which
    really connects to -h/-p) keeps a RAS history of its own job's communicators only;
    the ports are given back when the jobs end."""
    polls = {"hkuser": "a_healthy_world8.json", "hkuser2": "c_tp_subcomm_hang_minimal.json"}
    comms = {"hkuser": ["0x9a1c3f0e5b7d2468"],
             "hkuser2": ["0x2d4f6a8c0e1b3d5f", "0x9a1c3f0e5b7d2468", "0xe7c9a1b3d5f70913"]}
    standin = os.path.join(REPO, "tests", "ncclras_standin")
    ids = {}
    for user, poll in polls.items():
        path = os.path.join(WORK, "ras-%s-%d.sh" % (user, os.getpid()))
        with open(path, "w") as f:
            f.write(RAS_JOB % {"work": WORK, "py": sys.executable, "listener": os.path.join(standin, "listener"),
                               "poll": os.path.join(REPO, "tests", "fixtures", "nccl", poll)})
        os.chmod(path, 0o755)
        env = dict(user_env(), USER=user, LOGNAME=user, HOME="/home/" + user,
                   HANGKIT_NCCLRAS_PATH=os.path.join(standin, "ncclras"), NCCLRAS_STANDIN_MODE="connect")
        p = subprocess.run([shutil.which("runuser") or "/usr/sbin/runuser", "-u", user, "--", "sbatch",
                            "--parsable", path], cwd=WORK, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        assert p.returncode == 0, p.stderr.decode()
        ids[user] = p.stdout.decode().strip().split(";")[0]
    for user, j in ids.items():
        wait_end(j, 120)
    addrs = {u: [ln.split()[1] for ln in out_of(j).splitlines() if ln.startswith("RAS ")] for u, j in ids.items()}
    assert all(len(a) == 1 and a[0].startswith("localhost:") for a in addrs.values()), addrs
    assert addrs["hkuser"] != addrs["hkuser2"], addrs
    for user, j in ids.items():
        hist = os.path.join(STORAGE, j, "attempt_0", "hang_detector", "nccl_ras")
        files = wait_for(lambda: sorted(f for f in os.listdir(hist) if f.endswith(".json"))
                         if os.path.isdir(hist) else None, 60, what="job %s's RAS history in storage" % j)
        for f in files:
            got = sorted(c["hash"] if isinstance(c, dict) and "hash" in c else c
                         for c in _ras_comm_keys(os.path.join(hist, f)))
            assert got == comms[user], (user, f, got)
    for node in ("hk1", "hk2"):
        d = os.path.join(HK_ROOT, "nodes", node, "tmp", "hpc-hangkit", "nccl_ras_ports")
        left = os.listdir(d) if os.path.isdir(d) else []
        assert not [f for f in left if open(os.path.join(d, f)).read().strip() in ids.values()], left


def _ras_comm_keys(path):
    from hpc_hangkit.parse.ncclras import parse_ncclras_json
    with open(path, "rb") as f:
        return list(parse_ncclras_json(f.read(), path).comms)
