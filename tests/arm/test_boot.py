"""Boot: the job environment arms rank processes at interpreter start (real launchers)."""
import ast
import glob
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import PYTHON, REPO, free_port, have_module
from hpc_hangkit import config, layout
from hpc_hangkit.boot import _hangkit_core as core
from hpc_hangkit.parse.heartbeat import read_heartbeats

#: the torchrun and DataLoader tests run real torch processes
def needs_torch(test):
    return pytest.mark.torch(pytest.mark.skipif(not have_module("torch"),
                                                reason="torch is not installed (pip install torch==2.13.0)")(test))

BOOT = os.path.join(REPO, "hpc_hangkit", "boot")
DUMP = re.compile(r"^Stack \(most recent call first\):$", re.M)
RANKISH = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK",
           "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_NTASKS",
           "SLURM_LOCALID", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "HPC_HANGKIT_CONFIG")


def job_env(scratch, period="0.3", **extra):
    """The environment Settings.to_env() gives a job, plus ``extra`` (launcher variables)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_") and k not in RANKISH}
    base.pop("PYTHONPATH", None)
    s = config.load_settings(env={"HANGKIT_WATCHDOG_PERIOD_S": period}, path=os.devnull)
    env = s.to_env(str(scratch), base_env=base)
    env.update(extra)
    return env


def files(scratch):
    return sorted(os.path.relpath(p, str(scratch)) for p in glob.glob(os.path.join(str(scratch), "**", "*"),
                                                                       recursive=True) if os.path.isfile(p))


def run(spawn, argv, env, timeout=120, **kw):
    p = spawn(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out.decode(), err.decode()


@pytest.mark.timeout(60)
def test_rank_armed_where_hpc_hangkit_is_not_importable(spawn, tmp_path):
    """The boot directory alone arms a rank: a copy of it outside the repository, with an
    ``hpc_hangkit`` that cannot be imported (shadowing any installed one) after it on the path."""
    boot = tmp_path / "boot"
    shutil.copytree(BOOT, str(boot), ignore=shutil.ignore_patterns("__pycache__"))
    blocker = tmp_path / "blocker" / "hpc_hangkit"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('hpc_hangkit is not installed here')\n")
    scratch = tmp_path / "s"
    env = job_env(scratch, RANK="2", WORLD_SIZE="4")
    env["PYTHONPATH"] = os.pathsep.join([str(boot), str(tmp_path / "blocker")])
    code = textwrap.dedent("""
        import sys, time
        try:
            import hpc_hangkit
        except ImportError:
            pass
        else:
            raise SystemExit("hpc_hangkit is importable")
        print(sys.modules["_hangkit_core"].__file__, sys.modules["_hangkit_core"].is_armed())
        time.sleep(0.8)
        """)
    rc, out, err = run(spawn, [PYTHON, "-c", code], env, cwd=str(tmp_path))  # not the repository
    assert rc == 0 and err == "", err
    assert out.split() == [str(boot / "_hangkit_core.py"), "True"]
    pid = re.search(r"rank_2\.pid(\d+)\.log", " ".join(files(scratch))).group(1)
    assert files(scratch) == ["exits/rank_2.pid%s.txt" % pid, "heartbeats/rank_2.pid%s.hb" % pid,
                              "watchdog/rank_2.pid%s.log" % pid]
    text = (scratch / "watchdog" / ("rank_2.pid%s.log" % pid)).read_text()
    assert text.startswith("# hpc-hangkit rank=2 world=4 ") and DUMP.search(text), text
    (hb,) = read_heartbeats(str(scratch / "heartbeats"))
    assert (hb.rank, hb.world) == (2, 4)


def test_boot_sources_are_python38_syntax_and_stdlib_only():
    stdlib = set(getattr(sys, "stdlib_module_names", ())) | {"_signal", "_thread", "_hangkit_core", "_hangkit_names"}
    for name in ("sitecustomize.py", "_hangkit_core.py", "_hangkit_names.py"):
        src = open(os.path.join(BOOT, name)).read()
        tree = ast.parse(src, feature_version=(3, 8))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            else:
                continue
            for m in mods:
                assert m.split(".")[0] in stdlib, "%s imports %s" % (name, m)


@pytest.mark.parametrize("label,extra", [
    ("no rank variables", {}),
    ("Slurm batch step", {"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}),
    ("extern step", {"SLURM_PROCID": "0", "SLURM_STEP_ID": "4294967292"}),
    ("child of the armed rank", {"RANK": "0", "HANGKIT_ARMED_PID": "1"}),
])
@pytest.mark.timeout(60)
def test_non_rank_python_is_left_alone(spawn, tmp_path, label, extra):
    scratch = tmp_path / "s"
    rc, out, err = run(spawn, [PYTHON, "-c", "import time, os; time.sleep(0.8); print(os.environ.get('HANGKIT_ARMED_PID'))"],
                       job_env(scratch, **extra))
    assert rc == 0 and err == "", err
    assert files(scratch) == [], label
    assert out.strip() == extra.get("HANGKIT_ARMED_PID", "None")


@pytest.mark.timeout(60)
def test_hpc_hangkit_cli_is_never_armed(spawn, tmp_path):
    scratch = tmp_path / "s"
    rc, out, err = run(spawn, [PYTHON, "-m", "hpc_hangkit", "--help"],
                       job_env(scratch, RANK="0", WORLD_SIZE="1"))
    assert rc == 0 and "hpc-hangkit" in out
    assert files(scratch) == []


@pytest.mark.timeout(60)
def test_rank_armed_from_interpreter_start_and_python38(spawn, tmp_path):
    pythons = [PYTHON]
    py38 = None
    for cand in glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python")) + [shutil.which("python3.8")]:
        if cand and subprocess.run([cand, "-c", "import sys; assert sys.version_info[:2] == (3, 8)"],
                                   stderr=subprocess.DEVNULL).returncode == 0:
            py38 = cand
            pythons.append(py38)
            break
    for i, py in enumerate(pythons):
        scratch = tmp_path / ("s%d" % i)
        code = "import time; time.sleep(1.2)"
        rc, out, err = run(spawn, [py, "-c", code], job_env(scratch, SLURM_PROCID="3", SLURM_NTASKS="4",
                                                             SLURM_STEP_ID="0", SLURM_LOCALID="1"))
        assert rc == 0 and err == "", (py, err)
        names = files(scratch)
        assert len(names) == 3, names  # watchdog log, heartbeat, exit record
        log = [n for n in names if n.startswith("watchdog/")][0]
        text = open(os.path.join(str(scratch), log)).read()
        first = text.splitlines()[0]
        assert re.match(r"^# hpc-hangkit rank=3 world=4 local_rank=1 pid=\d+ host=\S+ t=\d+\.\d+ "
                        r"signal=SIGURG period_s=0\.3 argv=\[.*\]$", first), first
        assert '"-c", "import time; time.sleep(1.2)"]' in first
        assert len(DUMP.findall(text)) >= 2, text  # dumped with no user code calling anything
        assert 'File "<string>", line 1 in <module>' in text
        (hb,) = read_heartbeats(str(scratch / "heartbeats"))
        assert (hb.rank, hb.world, hb.local_rank, hb.counter) == (3, 4, 1, 0)
    if not py38:
        pytest.skip("armed under %s; no CPython 3.8 interpreter on this machine to check the 3.8 floor" % PYTHON)


@pytest.mark.timeout(60)
def test_malformed_env_value_one_stderr_line_marker_and_program_runs(spawn, tmp_path):
    scratch = tmp_path / "s"
    for extra, rank, why in (
            ({"RANK": "2", "WORLD_SIZE": "4", "HANGKIT_WATCHDOG_PERIOD_S": "abc"}, "2",
             "HANGKIT_WATCHDOG_PERIOD_S='abc' is not a number of seconds"),
            ({"RANK": "1", "WORLD_SIZE": "4", "HANGKIT_WATCHDOG_SIGNAL": "SIGKILL"}, "1", "HANGKIT_WATCHDOG_SIGNAL"),
            ({"RANK": "two", "WORLD_SIZE": "4"}, "x", "RANK='two' is not an integer"),
            ({"RANK": "0", "WORLD_SIZE": "4", "HANGKIT_MODE": "loud"}, "0", "HANGKIT_MODE='loud' is not one of")):
        env = job_env(scratch, **extra)
        rc, out, err = run(spawn, [PYTHON, "-c", "import os; print('ran', os.getpid())"], env)
        assert rc == 0
        pid = int(out.split()[1])
        lines = err.splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith("hpc-hangkit: rank %s NOT watched: " % ("?" if rank == "x" else rank)), lines
        assert why in lines[0]
        marker = scratch / "unwatched" / ("rank_%s.pid%d.txt" % (rank, pid))
        text = marker.read_text()
        assert why in text and text.count("\n") == 1
        assert not (scratch / "watchdog" / ("rank_%s.pid%d.log" % (rank, pid))).exists()


@pytest.mark.timeout(60)
def test_unwritable_scratch_still_runs_and_says_so(spawn, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = job_env(blocker / "scratch", RANK="0", WORLD_SIZE="1")
    rc, out, err = run(spawn, [PYTHON, "-c", "print('ran')"], env)
    assert rc == 0 and out.strip() == "ran"
    assert len(err.splitlines()) == 1 and "rank 0 NOT watched: arming failed" in err
    assert "marker file not written" in err


@pytest.mark.timeout(60)
def test_chains_the_sites_own_sitecustomize(spawn, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent("""
        import os, sys
        os.environ["SITE_CUSTOMIZED"] = __name__ + ":" + os.path.basename(__file__)
        print("site sitecustomize ran", file=sys.stderr)
        """))
    scratch = tmp_path / "s"
    for extra in ({}, {"RANK": "0", "WORLD_SIZE": "1"}):
        env = job_env(scratch, **extra)
        env["PYTHONPATH"] = env["PYTHONPATH"] + os.pathsep + str(site)
        rc, out, err = run(spawn, [PYTHON, "-c", "import os, sitecustomize; print(os.environ['SITE_CUSTOMIZED'], "
                                                 "sitecustomize.__file__)"], env)
        assert rc == 0, err
        assert err == "site sitecustomize ran\n"
        assert out.split() == ["sitecustomize:sitecustomize.py", str(site / "sitecustomize.py")]
    assert len([n for n in files(scratch) if n.startswith("watchdog/")]) == 1  # the rank run only


@pytest.mark.timeout(60)
def test_extension_points_are_called_and_guarded(spawn, tmp_path):
    boot = tmp_path / "boot"
    boot.mkdir()
    for name in ("sitecustomize.py", "_hangkit_core.py", "_hangkit_names.py"):
        shutil.copy(os.path.join(BOOT, name), str(boot / name))
    (boot / "_hangkit_fr.py").write_text("def arm(env):\n    raise RuntimeError('no torch here')\n")
    (boot / "_hangkit_autocheckin.py").write_text(
        "import os\ndef arm(env):\n    open(os.path.join(env['HANGKIT_SCRATCH_DIR'], 'autocheckin'), 'w').close()\n")
    scratch = tmp_path / "s"
    for auto in ("0", "1"):
        env = job_env(scratch, RANK="0", WORLD_SIZE="1", HANGKIT_AUTO_CHECKIN=auto)
        env["PYTHONPATH"] = str(boot)
        rc, out, err = run(spawn, [PYTHON, "-c", "import time; time.sleep(0.5); print('ran')"], env)
        assert rc == 0 and out.strip() == "ran"
        assert err.splitlines() == ["hpc-hangkit: rank 0: _hangkit_fr.arm failed (the watchdog is still armed): "
                                    "RuntimeError('no torch here')"]
        assert (scratch / "autocheckin").exists() == (auto == "1")
    assert len([n for n in files(scratch) if n.startswith("watchdog/")]) == 2


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_mpiexec_ranks_armed(spawn, tmp_path):
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("mpiexec (pip install mpich) is not on PATH")
    scratch = tmp_path / "s"
    script = tmp_path / "prog.py"
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    # each rank names its pid in a file of its own: mpiexec forwards the ranks' stdout in
    # chunks, so two printed pids can arrive as one line ("2577125772")
    script.write_text("import os, time\ntime.sleep(1.2)  # before any user call\n"
                      "open(os.path.join(%r, str(os.getpid())), 'w').close()\n" % str(pids_dir))
    rc, out, err = run(spawn, [mpiexec, "-n", "2", PYTHON, str(script)], job_env(scratch))
    assert rc == 0, err
    pids = sorted(int(x) for x in os.listdir(str(pids_dir)))
    logs = sorted(glob.glob(str(scratch / "watchdog" / "*.log")))
    got = sorted(layout.parse_rank_file_name(os.path.basename(l))[:2] for l in logs)
    assert [r for r, _ in got] == [0, 1] and sorted(p for _, p in got) == pids
    for l in logs:
        text = open(l).read()
        assert " world=2 " in text.splitlines()[0]
        assert "line 2 in <module>" in text and len(DUMP.findall(text)) >= 2
    assert sorted(h.rank for h in read_heartbeats(str(scratch / "heartbeats"))) == [0, 1]


@needs_torch
@pytest.mark.timeout(180)
def test_torchrun_workers_armed_agent_not(spawn, tmp_path):
    scratch = tmp_path / "s"
    script = tmp_path / "prog.py"
    # one write(2) per worker: the workers share the agent's stdout pipe, and two print()s
    # can interleave their digits and newlines
    script.write_text("import os, time\ntime.sleep(1.5)  # before any user call\nos.write(1, b\"%d\\n\" % os.getpid())\n")
    # as under `srun python -m torch.distributed.run`: the agent has SLURM_PROCID but is no rank
    env = job_env(scratch, SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_STEP_ID="0")
    p = spawn([PYTHON, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(script)],
              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=150)
    assert p.returncode == 0, err.decode()[-3000:]
    worker_pids = sorted(int(x) for x in out.decode().split())
    logs = glob.glob(str(scratch / "watchdog" / "*.log"))
    got = sorted(layout.parse_rank_file_name(os.path.basename(l))[:2] for l in logs)
    assert sorted(r for r, _ in got) == [0, 1]
    assert sorted(pid for _, pid in got) == worker_pids  # the agent (p.pid) has no file
    assert not os.path.exists(str(scratch / "unwatched"))
    for l in logs:
        text = open(l).read()
        assert " world=2 " in text.splitlines()[0] and "line 2 in <module>" in text


@needs_torch
@pytest.mark.timeout(180)
def test_dataloader_workers_fork_and_spawn_do_not_pose_as_the_rank(spawn, tmp_path):
    scratch = tmp_path / "s"
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time
        import torch  # imported while armed at a 0.2 s period: dumps during import must be harmless
        from torch.utils.data import DataLoader, Dataset

        class Slow(Dataset):
            def __len__(self):
                return 4
            def __getitem__(self, i):
                time.sleep(0.5)  # longer than the period: a worker must not be dumped as the rank
                return torch.tensor([i, os.getpid()])

        if __name__ == "__main__":
            from hpc_hangkit import checkpoint
            from hpc_hangkit.arm import watchdog
            assert watchdog.is_watching()
            pids = set()
            for method in ("fork", "spawn"):
                for b in DataLoader(Slow(), batch_size=1, num_workers=2, multiprocessing_context=method):
                    pids.add(int(b[0][1]))
                    checkpoint("batch")
            print(os.getpid(), " ".join(map(str, sorted(pids))))
        """))
    rc, out, err = run(spawn, [PYTHON, str(script)], job_env(scratch, period="0.2", RANK="0", WORLD_SIZE="1"),
                       timeout=170)
    assert rc == 0, err[-3000:]
    me, *workers = [int(x) for x in out.split()]
    assert len(workers) == 4 and me not in workers
    assert files(scratch) == ["exits/rank_0.pid%d.txt" % me, "heartbeats/rank_0.pid%d.hb" % me,
                              "watchdog/rank_0.pid%d.log" % me]
    (hb,) = read_heartbeats(str(scratch / "heartbeats"))
    assert hb.pid == me and hb.counter == 8 and hb.label == "batch"
    text = open(str(scratch / "watchdog" / ("rank_0.pid%d.log" % me))).read()
    assert len(DUMP.findall(text)) >= 3
    assert not re.search(r'prog\.py", line \d+ in __getitem__', text)  # no worker frames in the rank's log
    assert re.search(r'prog\.py", line \d+ in <module>', text)


def test_identify_rules():
    pid = str(os.getpid())
    ident = core.identify
    argv = ["python", "train.py"]
    assert ident({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "SLURM_PROCID": "0",
                  "SLURM_STEP_ID": "0"}, argv) == (3, 8, 1, "RANK")
    assert ident({"PMI_RANK": "1", "PMI_SIZE": "2"}, argv) == (1, 2, None, "PMI_RANK")
    assert ident({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6"}, argv)[:2] == (5, 6)
    assert ident({"PMIX_RANK": "2", "SLURM_NTASKS": "4"}, argv)[:2] == (2, 4)
    assert ident({"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0"}, argv)[:2] == (2, 4)
    assert ident({"RANK": "0", "HANGKIT_ARMED_PID": pid}, argv)[0] == 0  # exec'd in place: still the rank
    for env, argv2 in (({"RANK": "0"}, ["python", "-m", "torch.distributed.run", "x.py"]),
                       ({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0"}, ["python", "/venv/bin/torchrun", "x.py"]),
                       ({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0"}, ["python", "-u", "-mtorch.distributed.launch"]),
                       ({"TORCHELASTIC_RUN_ID": "x", "SLURM_PROCID": "0", "SLURM_STEP_ID": "0"}, argv),
                       ({"RANK": "0"}, ["python", "/usr/bin/hpc-hangkit", "run"]),
                       ({"SLURM_PROCID": "0"}, argv), ({}, argv)):
        with pytest.raises(core.NotRank):
            ident(env, argv2)
    with pytest.raises(core.Unwatched, match="RANK=4 is not below the world size 4"):
        ident({"RANK": "4", "WORLD_SIZE": "4"}, argv)


def _exit_record(scratch):
    (name,) = [n for n in files(scratch) if n.startswith("exits/")]
    with open(os.path.join(str(scratch), name)) as f:
        return f.read()


@pytest.mark.timeout(60)
def test_rank_records_its_own_end_without_changing_the_programs_output(spawn, tmp_path):
    """Uncaught exception (default hook, and a hook the program installs itself), sys.exit,
    normal end: each rank's exit record says how; the program's stderr is what it would be."""
    cases = {
        "raise": ("def f():\n    raise ValueError('bad shard')\nf()\n", 1,
                  "how=exception status=1", "ValueError: bad shard"),
        "own_hook": ("import sys\nsys.excepthook = lambda t, v, tb: sys.stderr.write('MY HOOK %s\\n' % v)\n"
                     "raise KeyError('k')\n", 1, "how=exception status=1", "KeyError: 'k'"),
        "exit": ("import sys\nsys.exit(3)\n", 3, "how=exit status=3", "SystemExit: 3"),
        "normal": ("x = 1\n", 0, "how=normal status=0", None),
    }
    for name, (code, want_rc, head, tail) in cases.items():
        scratch = tmp_path / name
        prog = tmp_path / (name + ".py")
        prog.write_text(code)
        rc, out, err = run(spawn, [sys.executable, str(prog)], job_env(scratch, RANK="0", WORLD_SIZE="2"))
        assert rc == want_rc, (name, err)
        rec = _exit_record(scratch)
        assert rec.startswith("# hpc-hangkit exit " + head + "\n"), (name, rec)
        if tail:
            assert rec.rstrip().endswith(tail), (name, rec)
        if name == "raise":  # the interpreter's own report is still printed
            assert "Traceback (most recent call last)" in err and "ValueError: bad shard" in err
            assert ', line 2, in f' in rec
        if name == "own_hook":
            assert "MY HOOK 'k'" in err and "Traceback" not in err
