"""One gloo rank that blocks after one all_reduce: ``python launch.py one_rank_block.py gil|sleep``.

``gil``: the main thread sits in libc sleep() called through ctypes.PyDLL, which keeps the GIL held
(a rank blocked in C with the GIL: no Python thread of the process can run). ``sleep``: time.sleep
(GIL released).
"""
import ctypes
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.all_reduce(torch.ones(8))  # ONE_LINE
print("ready", flush=True)
if sys.argv[1] == "gil":
    ctypes.PyDLL(None).sleep(60)
else:
    time.sleep(60)
