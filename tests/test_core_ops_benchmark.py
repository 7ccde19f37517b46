"""`python -m benchmarks.core_ops --help` states the target of every row it checks; it and the other
benchmarks of one process refuse counts their C loops cannot take, and end in one line on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.core_ops import TARGET_NS
from paths.model.placement import MAX_THREADS

ROOT = Path(__file__).resolve().parent.parent


def test_the_help_states_every_rows_target():
    done = subprocess.run([sys.executable, "-m", "benchmarks.core_ops", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, env={**os.environ, "COLUMNS": "500"})
    assert done.returncode == 0, done.stderr
    for side, ns in TARGET_NS.items():
        assert f'"{side}" <= {ns:g} ns' in done.stdout, done.stdout


# The single-process benchmarks: a count past what their C loops take, and Ctrl-C.
BENCHMARKS = {
    "core_ops": (["--pairs"], ["--pairs", str(2**63 - 1), "--runs", "1"]),  # its C loops run in chunks
    "gsum": (["--rounds", "--repeat"], ["--threads", "1,2", "--tree", "flat", "--rounds", "100000000", "--repeat", "1",
                                        "--no-targets"]),
    "mcpi": (["--darts", "--repeat"], ["--darts", "9000000000", "--repeat", "1"]),
    "trace_overhead": (["--runs"], ["--runs", "1000"]),
}


@pytest.mark.parametrize("benchmark, option", [(b, o) for b, (options, _) in BENCHMARKS.items() for o in options])
def test_a_count_past_2_to_the_63_is_a_usage_error(benchmark, option):
    """It was a traceback of the C binding's TypeError (or of a ValueError), exit 1."""
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{benchmark}", option, str(2**63)], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.endswith(f"error: argument {option}: expected a number from 1 to 2**63-1, got {2**63}\n")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_ctrl_c_ends_a_benchmark_in_one_line_and_exit_130(benchmark):
    run = subprocess.Popen([sys.executable, "-m", f"benchmarks.{benchmark}", *BENCHMARKS[benchmark][1]],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        time.sleep(3)  # past its imports, measuring
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=60)
    finally:
        run.kill()
        run.wait()
    assert (run.returncode, err) == (130, f"benchmarks.{benchmark}: interrupted\n")


@pytest.mark.parametrize("benchmark", ["gsum", "mcpi"])
def test_more_threads_than_a_run_places_is_a_usage_error(benchmark):
    """mcpi's was a ValueError traceback of the placement, exit 1."""
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{benchmark}", "--threads", "2000000"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.endswith(f"error: argument --threads: counts must be from 1 to {MAX_THREADS} (the most "
                                "threads a run places), got '2000000'\n")


@pytest.mark.parametrize("args, said", [
    (["--threads", "1,2,1"], "argument --threads: 1 given more than once in '1,2,1': expected each count once"),
    (["--tree", "flat,fanin2,flat"], "argument --tree: flat given more than once in 'flat,fanin2,flat': expected each "
                                     "tree once"),
])
def test_a_list_option_that_names_an_item_twice_is_a_usage_error(args, said):
    """It would be measured twice, and shown twice in the table and the CSV."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.gsum", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)
    assert done.returncode == 2 and done.stderr.endswith(f"error: {said}\n"), done.stderr
