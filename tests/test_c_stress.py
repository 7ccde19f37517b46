"""Builds the C stress test (tests/c/stress_pastset.c) with the PastSet core three ways — plain,
AddressSanitizer + UBSan, ThreadSanitizer — and runs each: it must exit 0 with no sanitizer
report. A missing compiler or sanitizer runtime fails the test; nothing is skipped."""

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [*sorted((ROOT / "pastset").glob("*.c")), ROOT / "tests" / "c" / "stress_pastset.c"]
COMMON_FLAGS = ["-std=c11", "-O1", "-g", "-D_GNU_SOURCE", "-pthread", f"-I{ROOT / 'pastset'}"]
BUILD_TIMEOUT_S = 120
RUN_TIMEOUT_S = 60

# build name -> (sanitizer flags, tuples per producer: sized so each run stays well under a minute)
BUILDS = {
    "plain": ([], 200_000),
    "asan-ubsan": (["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"], 100_000),
    "tsan": (["-fsanitize=thread"], 50_000),
}
SANITIZER_OPTIONS = {
    "ASAN_OPTIONS": "halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    "TSAN_OPTIONS": "halt_on_error=1:second_deadlock_stack=1",
}
SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "WARNING: ThreadSanitizer")
# Some kernels map memory where TSan's shadow should go; TSan then runs only with ASLR off.
TSAN_NEEDS_FIXED_LAYOUT = "FATAL: ThreadSanitizer: unexpected memory mapping"


def c_compiler():
    compiler = os.environ.get("CC") or shutil.which("cc")
    assert compiler, "no C compiler: set CC or install one (bootstrap.sh installs build-essential)"
    return compiler


def run(command):
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, **SANITIZER_OPTIONS},
    )


def describe(result):
    return f"exit code {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr[-8000:]}"


@pytest.mark.parametrize("build", list(BUILDS))
def test_stress_pastset(build, tmp_path):
    sanitizer_flags, tuples_per_producer = BUILDS[build]
    binary = tmp_path / f"stress_pastset_{build}"
    compiled = subprocess.run(
        [c_compiler(), *COMMON_FLAGS, *sanitizer_flags, *map(str, SOURCES), "-o", str(binary)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert compiled.returncode == 0, f"build failed:\n{compiled.stderr}"

    command = [str(binary), str(tuples_per_producer)]
    result = run(command)
    if TSAN_NEEDS_FIXED_LAYOUT in result.stderr:
        setarch = shutil.which("setarch")
        assert setarch, f"TSan needs ASLR off and setarch (util-linux) is missing:\n{describe(result)}"
        result = run([setarch, platform.machine(), "-R", *command])

    reports = [report for report in SANITIZER_REPORTS if report in result.stderr]
    assert not reports, f"sanitizer reported {reports}:\n{describe(result)}"
    assert result.returncode == 0, describe(result)
    assert "stress_pastset:" in result.stdout, describe(result)
