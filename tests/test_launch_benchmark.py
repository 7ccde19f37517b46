"""`python -m benchmarks.launch` ends with one line, exit 1, when a run cannot be measured: a
launcher that fails, or that ends before its ranks are up (it waited for their lines forever)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAILING_LAUNCHER = "import sys; print('paths launch: no map here', file=sys.stderr); sys.exit(3)"


def with_failing_launcher(call: str) -> subprocess.CompletedProcess:
    """`call` in a fresh interpreter where benchmarks.launch's `paths launch` exits 3 at once."""
    program = (f"import sys\nimport benchmarks.launch as launch\nlaunch.PATHS = [sys.executable, '-c', "
               f"{FAILING_LAUNCHER!r}]\n{call}")
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_a_failing_launcher_ends_the_benchmark_in_one_line():
    done = with_failing_launcher("sys.exit(launch.main(['--ranks', '1', '--runs', '1']))")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "benchmarks.launch: paths launch failed (exit 3): paths launch: no map here\n"


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL", "a rank fails"])
def test_a_launcher_that_ends_before_its_ranks_are_up_is_no_reaping_time(how):
    done = with_failing_launcher(f"launch.reaping_seconds({how!r})")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == ("benchmarks.launch.LaunchFailed: paths launch ended (exit 3) before its "
                                            "6 ranks were up and one failed")
