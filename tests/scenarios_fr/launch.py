"""Run a scenario the way an armed rank runs: Flight Recorder trigger armed first, then the script.

``python launch.py <script.py>``; the boot dir (hpc_hangkit/boot) must be on PYTHONPATH. The boot
``sitecustomize`` does the same ``arm(env)`` call in a real job.
"""
import os
import runpy
import sys

import _hangkit_fr

_hangkit_fr.arm(os.environ)
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
