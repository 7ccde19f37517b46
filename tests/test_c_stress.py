"""Builds the C stress tests three ways — plain, AddressSanitizer + UBSan, ThreadSanitizer — and runs
each: it must exit 0 with no sanitizer report. A missing compiler, sanitizer runtime or libzmq fails
the test; nothing is skipped.

- tests/c/stress_pastset.c: the PastSet core (pastset/*.c).
- tests/c/stress_stages.c: the stage layer (wrappers_c/ over pastset/; libzmq links the remote
  stage in, which the test does not use): reduce-sum trees, pass-through stages, links, counters.
- tests/c/stress_kernel_run.c: kernel runs, the C side of paths.h (threads, barriers, handles
  through the run's hooks, reports, a failing thread), over the stage layer.
- tests/c/stress_remote.c: remote stages and a server in one process on the direct transport
  (tcp and Unix sockets): a sum, a job queue, links opened and released over and over.
  libzmq, which carries the BUILDs, is not built for TSan: tests/c/tsan.supp silences it.
"""

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
C_TESTS = ROOT / "tests" / "c"
PASTSET_SOURCES = sorted((ROOT / "pastset").glob("*.c"))
STAGE_SOURCES = [
    ROOT / "wrappers_c" / f"{name}.c"
    for name in ("stage", "stage_params", "registry", "core", "reduce_sum", "cache", "trace", "delay", "remote",
                 "server", "wire", "direct_channel", "zmq_context", "bridge_stage")
]
KERNEL_RUN_SOURCES = [ROOT / "wrappers_c" / f"{name}.c" for name in ("kernel_run", "kernel_context", "paths_handle")]
COMMON_FLAGS = ["-std=c11", "-O1", "-g", "-D_GNU_SOURCE", "-pthread", f"-I{ROOT / 'pastset'}"]
BUILD_TIMEOUT_S = 120
RUN_TIMEOUT_S = 60

SANITIZER_FLAGS = {
    "plain": [],
    "asan-ubsan": ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"],
    "tsan": ["-fsanitize=thread"],
}
# The size each stress test runs at, per build: sized so that each run stays well under a minute
# on two cores (stress_pastset: tuples per producer; stress_stages: GSum rounds).
SIZES = {
    "stress_pastset": {"plain": 200_000, "asan-ubsan": 100_000, "tsan": 50_000},
    "stress_stages": {"plain": 20_000, "asan-ubsan": 10_000, "tsan": 4_000},
    "stress_kernel_run": {"plain": 4_000, "asan-ubsan": 2_000, "tsan": 400},
    "stress_remote": {"plain": 2_000, "asan-ubsan": 1_000, "tsan": 500},
}
SANITIZER_OPTIONS = {
    "ASAN_OPTIONS": "halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    "TSAN_OPTIONS": f"halt_on_error=1:second_deadlock_stack=1:suppressions={C_TESTS / 'tsan.supp'}",
}
SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "WARNING: ThreadSanitizer")
# Some kernels map memory where TSan's shadow should go; TSan then runs only with ASLR off.
TSAN_NEEDS_FIXED_LAYOUT = "FATAL: ThreadSanitizer: unexpected memory mapping"


def c_compiler():
    compiler = os.environ.get("CC") or shutil.which("cc")
    assert compiler, "no C compiler: set CC or install one (bootstrap.sh installs build-essential)"
    return compiler


def libzmq_flags():
    pkg_config = shutil.which("pkg-config")
    assert pkg_config, "no pkg-config (bootstrap.sh installs it)"
    found = subprocess.run([pkg_config, "--cflags", "--libs", "libzmq"], capture_output=True, text=True)
    assert found.returncode == 0, f"pkg-config finds no libzmq (bootstrap.sh installs libzmq3-dev):\n{found.stderr}"
    return found.stdout.split()


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


def build_and_run(name, build, tmp_path, sources, flags=()):
    """Compiles tests/c/<name>.c with `sources` for `build`, runs it at its size and checks that it
    passed with no sanitizer report. `flags` follow the sources, so that libraries among them link."""
    binary = tmp_path / f"{name}_{build}"
    compiled = subprocess.run(
        [c_compiler(), *COMMON_FLAGS, *SANITIZER_FLAGS[build], *map(str, sources), str(C_TESTS / f"{name}.c"),
         *flags, "-o", str(binary)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert compiled.returncode == 0, f"build failed:\n{compiled.stderr}"

    command = [str(binary), str(SIZES[name][build])]
    result = run(command)
    if TSAN_NEEDS_FIXED_LAYOUT in result.stderr:
        setarch = shutil.which("setarch")
        assert setarch, f"TSan needs ASLR off and setarch (util-linux) is missing:\n{describe(result)}"
        result = run([setarch, platform.machine(), "-R", *command])

    reports = [report for report in SANITIZER_REPORTS if report in result.stderr]
    assert not reports, f"sanitizer reported {reports}:\n{describe(result)}"
    assert result.returncode == 0, describe(result)
    assert f"{name}:" in result.stdout, describe(result)


@pytest.mark.parametrize("build", list(SANITIZER_FLAGS))
def test_stress_pastset(build, tmp_path):
    build_and_run("stress_pastset", build, tmp_path, PASTSET_SOURCES)


@pytest.mark.parametrize("build", list(SANITIZER_FLAGS))
def test_stress_stages(build, tmp_path):
    build_and_run("stress_stages", build, tmp_path, [*PASTSET_SOURCES, *STAGE_SOURCES],
                  [f"-I{ROOT / 'wrappers_c'}", *libzmq_flags()])


@pytest.mark.parametrize("build", list(SANITIZER_FLAGS))
def test_stress_kernel_run(build, tmp_path):
    build_and_run("stress_kernel_run", build, tmp_path, [*PASTSET_SOURCES, *STAGE_SOURCES, *KERNEL_RUN_SOURCES],
                  [f"-I{ROOT / 'wrappers_c'}", "-DPATHS_BUILDING_LIBRARY", *libzmq_flags()])


@pytest.mark.parametrize("build", list(SANITIZER_FLAGS))
def test_stress_remote(build, tmp_path):
    build_and_run("stress_remote", build, tmp_path, [*PASTSET_SOURCES, *STAGE_SOURCES],
                  [f"-I{ROOT / 'wrappers_c'}", *libzmq_flags()])
