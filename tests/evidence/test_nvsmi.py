"""nvidia-smi capture: a snapshot or a one-line why-file, never an exception or a hang.

This machine has no NVIDIA driver: the real absent case is tested as is; the failing and wedged
cases use small executables that behave like a broken driver install (exit 9 with nvidia-smi's
own message, or no answer).
"""
import os
import time

import pytest

from fakeslurm import FakeCommands, Reply
from hpc_hangkit.evidence.nvsmi import capture_node


def tool(tmp_path, reply):
    return FakeCommands(tmp_path / "bin").add("nvidia-smi", default=reply)


def test_missing_nvidia_smi_writes_why_file(tmp_path):
    path, why = capture_node(str(tmp_path), host="node-a", path=str(tmp_path / "absent" / "nvidia-smi"))
    assert path.endswith(os.path.join("nvidia_smi", "node_node-a.log"))
    text = open(path).read()
    assert text.startswith("hpc-hangkit: nvidia-smi unavailable: ") and text.count("\n") == 1
    assert "not found" in why


def test_failing_driver_is_reported_with_its_message(tmp_path):
    exe = tool(tmp_path, Reply(stdout="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                                      "Make sure that the latest NVIDIA driver is installed and running.\n", rc=9))
    path, why = capture_node(str(tmp_path / "hd"), host="n1", path=exe)
    assert "exited 9" in why and "couldn't communicate" in open(path).read()


@pytest.mark.timeout(30)
def test_wedged_nvidia_smi_is_killed(tmp_path):
    exe = tool(tmp_path, Reply(sleep_s=60))
    t0 = time.monotonic()
    path, why = capture_node(str(tmp_path / "hd"), host="n1", path=exe, timeout_s=1)
    assert time.monotonic() - t0 < 10 and "no answer within 1 s" in why


def test_snapshot_written_verbatim(tmp_path):
    exe = tool(tmp_path, Reply(stdout="==============NVSMI LOG==============\nAttached GPUs : 0\n"))
    path, why = capture_node(str(tmp_path / "hd"), host="n1", path=exe)
    assert why is None and "NVSMI LOG" in open(path).read()
