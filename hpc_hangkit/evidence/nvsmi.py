"""nvidia-smi snapshot of a node on a confirmed hang.

Where the data comes from: ``nvidia-smi -q`` (installed with the NVIDIA
driver) on the node that runs the capture: power, temperature, clocks,
utilisation and ECC state of every GPU at the moment of the hang. Written to
``<hd_dir>/nvidia_smi/node_<host>.log``; when nvidia-smi is missing, fails or
hangs, the file is the one-line why-file ``hpc-hangkit: nvidia-smi unavailable: <why>``.
Runs once per node: the capture runs once per node.
"""
import os
import shutil
import signal
import socket
import subprocess
from typing import Optional, Tuple

from hpc_hangkit import layout
from hpc_hangkit.capture.whyfile import write_why_file
from hpc_hangkit.evidence.source import Source

NVIDIA_SMI = "nvidia-smi"
TIMEOUT_S = 30.0


def snapshot(path: str = NVIDIA_SMI, timeout_s: float = TIMEOUT_S) -> Tuple[Optional[bytes], Optional[str]]:
    """Run ``<path> -q``; return ``(output, None)`` or ``(None, why)``. Never raises.

    ``why`` names the cause: not found on PATH, exit status with the tool's
    first stderr/stdout line, or no answer within ``timeout_s`` seconds (killed).
    """
    exe = shutil.which(path)
    if exe is None:
        return None, "%s not found on PATH (no NVIDIA driver on this node?)" % path
    try:
        p = subprocess.Popen([exe, "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        return None, "cannot run %s: %s" % (exe, e)
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            p.kill()
        p.communicate()
        return None, "%s -q gave no answer within %.0f s (killed; a wedged driver?)" % (exe, timeout_s)
    if p.returncode != 0:
        msg = (err or out).decode("utf-8", "replace").strip().splitlines()
        return None, "%s -q exited %d: %s" % (exe, p.returncode, msg[0] if msg else "(no output)")
    return out, None


def capture_node(hd_dir: str, host: Optional[str] = None, path: str = NVIDIA_SMI,
                 timeout_s: float = TIMEOUT_S) -> Tuple[str, Optional[str]]:
    """Write ``<hd_dir>/nvidia_smi/node_<host>.log``; return ``(file, why or None)``.
    Raises ValueError for a ``host`` unfit for a file name (:func:`hpc_hangkit.layout.validate_host`)
    before running anything."""
    host = host or socket.gethostname()
    dest = os.path.join(hd_dir, layout.NVIDIA_SMI_DIR, layout.nvidia_smi_name(host))
    out, why = snapshot(path, timeout_s)
    if why is not None:
        return write_why_file(dest, "nvidia-smi", why), why
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "wb") as f:
        f.write(out)
    return dest, None


def capture_hook(ctx) -> None:
    """Capture step: one snapshot of this node into ``ctx.hd_dir/nvidia_smi/`` (``ctx``: a
    :class:`hpc_hangkit.capture.orchestrator.CaptureContext`); the file is named by the first rank's
    host when it is a valid host name, else by this node's; a missing tool is one problem line."""
    host = None
    for rp in getattr(ctx, "ranks", {}).values():
        host = rp.host or None  # from the rank's own files: hostile input
        break
    if host is not None:
        try:
            layout.validate_host(host)
        except ValueError as e:
            ctx.problem("nvidia-smi: %s in the rank's files; the file is named by this node's host name" % e)
            host = None
    _, why = capture_node(ctx.hd_dir, host=host)
    if why:
        ctx.problem("nvidia-smi unavailable: %s" % why)


SOURCE = Source("nvidia_smi", section_dir=layout.NVIDIA_SMI_DIR, capture=capture_hook)
