"""tests/fakeslurm.py: the fake commands answer, record and fail the way their Reply says."""
import os
import signal
import subprocess

from fakeslurm import FakeCommands, Reply


def run(fake, *argv):
    p = subprocess.run(list(argv), env=dict(os.environ, PATH=fake.path()), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=30)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def test_replies_by_prefix_state_and_format(tmp_path):
    fake = FakeCommands(tmp_path / "bin")
    fake.add("scontrol",
             Reply(["requeue"], set_state="requeued", signal=signal.SIGTERM),
             Reply(["show", "job"], when_state="requeued", stdout="JobId={argv[3]} JobState=PENDING\n", format=True),
             Reply(["show", "job"], stdout="JobId={argv[3]} JobState=RUNNING\n", format=True),
             default=Reply(rc=1, stderr="scontrol: error: Invalid command\n"))
    fake.add("sacct", Reply(stdout='{"jobs": []}\n'))          # braces kept without format=True
    assert run(fake, "scontrol", "show", "job", "-o", "77") == (0, "JobId=77 JobState=RUNNING\n", "")
    assert run(fake, "scontrol", "requeue", "77")[0] == -signal.SIGTERM
    assert run(fake, "scontrol", "show", "job", "-o", "77") == (0, "JobId=77 JobState=PENDING\n", "")
    assert run(fake, "scontrol", "bogus") == (1, "", "scontrol: error: Invalid command\n")
    assert run(fake, "sacct", "--json") == (0, '{"jobs": []}\n', "")
    assert fake.calls("scontrol") == [["show", "job", "-o", "77"], ["requeue", "77"], ["show", "job", "-o", "77"],
                                      ["bogus"]]
    assert fake.transcript().splitlines()[-1] == "sacct --json"


def test_wedged_tool_and_unrecorded_calls(tmp_path):
    fake = FakeCommands(tmp_path / "bin")
    fake.add("sstat", default=Reply(sleep_s=30), record=False)
    try:
        subprocess.run(["sstat"], env=dict(os.environ, PATH=fake.path()), timeout=1)
        raise AssertionError("a wedged fake must not answer")
    except subprocess.TimeoutExpired:
        pass
    assert fake.calls() == []


def test_fake_ignores_site_hooks(tmp_path):
    """A PYTHONPATH sitecustomize that would hang (like the epilog tests' hook) never runs in a fake."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import time\ntime.sleep(60)\n")
    fake = FakeCommands(tmp_path / "bin")
    fake.add("squeue", Reply(stdout="JOBID\n"))
    p = subprocess.run(["squeue"], env=dict(os.environ, PATH=fake.path(), PYTHONPATH=str(hook)),
                       stdout=subprocess.PIPE, timeout=20)
    assert p.stdout == b"JOBID\n"
