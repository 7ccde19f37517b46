"""The examples a newcomer runs first keep working: each runs to its end and says so."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("script, says", [
    ("producer_consumer.py", "20000 jobs taken exactly once"),
    ("global_sum_tree.py", "every total checked"),
    ("remote_sum.py", "requests=1001, answers=1001, failures=0"),
    ("python_stage.py", "the element holds (40, 5.0)"),
])
def test_example_runs(script, says):
    done = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert says in done.stdout
