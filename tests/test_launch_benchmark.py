"""`python -m benchmarks.launch` ends with one line, exit 1, when a run cannot be measured: a
launcher that fails, that ends before its ranks are up (it waited for their lines forever), that
stays alive while its ranks print nothing, or that never ends (it waited for each forever too)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAILING_LAUNCHER = "import sys; print('paths launch: no map here', file=sys.stderr); sys.exit(3)"


STALLED_LAUNCHER = "import time; time.sleep(600)"  # alive, and its ranks never print


def with_launcher(launcher: str, call: str, setup: str = "") -> subprocess.CompletedProcess:
    """`call` in a fresh interpreter where benchmarks.launch's `paths launch` is the program
    `launcher`, after `setup`."""
    program = (f"import sys\nimport benchmarks.launch as launch\nlaunch.PATHS = [sys.executable, '-c', "
               f"{launcher!r}]\n{setup}\n{call}")
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, timeout=60)


def with_failing_launcher(call: str) -> subprocess.CompletedProcess:
    """`call` where benchmarks.launch's `paths launch` exits 3 at once."""
    return with_launcher(FAILING_LAUNCHER, call)


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


@pytest.mark.parametrize("how", ["SIGINT", "a rank fails"])
def test_a_launcher_whose_ranks_never_print_ends_the_benchmark_in_one_line(how):
    done = with_launcher(STALLED_LAUNCHER, f"sys.exit(launch.main(['--ranks', '1', '--runs', '1']))",
                         f"launch.UP_SECONDS = 1\nlaunch.report = lambda args: launch.reaping_seconds({how!r})")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "benchmarks.launch: paths launch printed no line for 1 s: its 6 ranks were not up, " \
                          "or none failed, in time\n"


def test_a_launcher_that_never_ends_ends_the_benchmark_in_one_line():
    done = with_launcher(STALLED_LAUNCHER, "sys.exit(launch.main(['--ranks', '1', '--runs', '1']))",
                         "launch.RUN_SECONDS = 1")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "benchmarks.launch: paths launch did not end within 1 s\n"


def test_each_way_of_reaping_is_judged_against_the_bound_in_every_run(monkeypatch, capsys):
    import benchmarks.launch as launch

    took = {"SIGINT": [0.1, 0.3], "SIGKILL": [0.1, 2.5], "a rank fails": [1.9, 2.0]}
    monkeypatch.setattr(launch, "median_seconds", lambda *args, **kwargs: 1.0)
    monkeypatch.setattr(launch, "reaping_seconds", lambda how: took[how].pop(0))
    launch.report(launch.argparse.Namespace(ranks=2, runs=2))
    verdicts = [line.split()[:2] for line in capsys.readouterr().out.splitlines() if "median" in line and "max" in line]
    assert verdicts == [["PASS", "SIGINT"], ["MISS", "SIGKILL"], ["PASS", "a"]]


def test_only_the_processes_carrying_a_runs_mark_are_its_own():
    import os

    import benchmarks.launch as launch

    mine, other = (subprocess.Popen(["sleep", "60"], env={**os.environ, launch.MARK: mark})
                   for mark in ("run-a", "run-b"))
    try:
        assert launch.left("run-a") == [mine.pid]
    finally:
        for process in (mine, other):
            process.kill()
            process.wait()
    assert launch.left("run-a") == []
