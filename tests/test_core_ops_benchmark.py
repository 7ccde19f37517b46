"""`python -m benchmarks.core_ops --help` states the target of every row it checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.core_ops import TARGET_NS

ROOT = Path(__file__).resolve().parent.parent


def test_the_help_states_every_rows_target():
    done = subprocess.run([sys.executable, "-m", "benchmarks.core_ops", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, env={**os.environ, "COLUMNS": "500"})
    assert done.returncode == 0, done.stderr
    for side, ns in TARGET_NS.items():
        assert f'"{side}" <= {ns:g} ns' in done.stdout, done.stdout
