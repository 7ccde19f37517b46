"""`python -m benchmarks.mcpi` reports its speed-up over one thread, whatever thread counts it is
given, and its target at 2 threads."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_speed_up_is_over_one_thread_measured_first_and_the_target_is_checked():
    done = subprocess.run([sys.executable, "-m", "benchmarks.mcpi", "--threads", "2", "--darts", "200000",
                           "--repeat", "1"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = re.findall(r"^\s+(\d+)\s+[\d.]+\s+[\d.e+-]+\s+[\d.]+\s+([\d.]+)\s+([\d.]+)x$", done.stdout, re.M)
    assert [threads for threads, _, _ in rows] == ["1", "2"], done.stdout
    (_, one, one_up), (_, two, two_up) = rows
    assert float(one_up) == 1.0
    assert math.isclose(float(two_up), float(two) / float(one), rel_tol=0.02, abs_tol=0.01)
    verdict = re.search(r"^  (PASS|MISS)  MCPi at 2 threads >= 1.8x darts/s of 1 thread: ([\d.]+)x$", done.stdout, re.M)
    assert verdict and verdict[2] == two_up, done.stdout
    assert verdict[1] == ("PASS" if float(two_up) >= 1.8 else "MISS")
