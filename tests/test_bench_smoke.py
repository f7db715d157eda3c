"""Keep the bench scripts from rotting: each runs to completion in --quick mode (< 10 s each).
The figures themselves are not checked here (they are figures, not tests)."""
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("script", ["bench_rollcall.py", "fuzz.py", "bench_watchdog_robustness.py"])
def test_bench_quick(script):
    p = subprocess.run([sys.executable, os.path.join(BENCH, script), "--quick"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=110)
    out = p.stdout.decode()
    assert p.returncode in (0, 1), out[-3000:]  # 1 = figures report a problem (wrong suspects / crashes)
    assert "Traceback" not in out.split("CRASH in")[0], out[-3000:]
