"""Builds the C stress tests three ways — plain, AddressSanitizer + UBSan, ThreadSanitizer — and runs
each: it must exit 0 with no sanitizer report. A missing compiler, sanitizer runtime or libzmq fails
the test; nothing is skipped. Each build compiles the library the way CMake builds libpaths — its
sources found by the globs CMakeLists.txt names, so a new stage's file is in it with no list kept
here — into an archive once, and each stress test links what it uses from that archive.

- tests/c/stress_pastset.c: the PastSet core (pastset/*.c).
- tests/c/stress_stages.c: the stage layer (wrappers_c/ over pastset/): reduce-sum trees,
  pass-through stages, links, counters, move_many, failures explained to their own thread.
- tests/c/stress_kernel_run.c: kernel runs, the C side of paths.h (threads, barriers, handles
  through the run's hooks, reports, a failing thread), over the stage layer.
- tests/c/stress_batch.c: the aggregation stages: batch under many callers with every buffer
  trigger, over a full bound and over a failing stage; the fence through a sum; the prefetching
  cache under a writer.
- tests/c/stress_remote.c: remote stages and a server in one process on the direct transport
  (tcp and Unix sockets): a sum, a job queue, move_many batches, links opened and released over
  and over; and a server that admits only the client keys it lists while its list changes. libzmq,
  which carries the BUILDs, is not built for TSan: tests/c/tsan.supp silences it.
"""

import os
import platform
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
C_TESTS = ROOT / "tests" / "c"
COMMON_FLAGS = ["-std=c11", "-O1", "-g", "-D_GNU_SOURCE", "-DPATHS_BUILDING_LIBRARY", "-pthread",
                f"-I{ROOT / 'pastset'}", f"-I{ROOT / 'wrappers_c'}"]
BUILD_TIMEOUT_S = 300
RUN_TIMEOUT_S = 60


def library_sources(target):
    """The C sources of a CMake target, found as CMakeLists.txt finds them: the files its
    file(GLOB VAR ...) patterns match, for each ${VAR} the target's add_library lists."""
    cmake = (ROOT / "CMakeLists.txt").read_text()
    globs = {name: patterns.split() for name, patterns in
             re.findall(r"file\(GLOB\s+(\w+)\s+(?:CONFIGURE_DEPENDS\s+)?([^)]*)\)", cmake)}
    listed = re.search(rf"add_library\({target}\s+\w+\s+([^)]*)\)", cmake)
    assert listed, f"CMakeLists.txt has no add_library({target} ...)"
    sources = []
    for variable in re.findall(r"\$\{(\w+)\}", listed[1]):
        for pattern in globs[variable]:
            sources += sorted(ROOT.glob(pattern))
    assert sources, f"CMakeLists.txt's globs for {target} match no file"
    return sources


SANITIZER_FLAGS = {
    "plain": [],
    "asan-ubsan": ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"],
    "tsan": ["-fsanitize=thread"],
}
# The size each stress test runs at, per build: sized so that each run stays well under a minute
# on two cores (stress_pastset: tuples per producer; stress_stages: GSum rounds; stress_batch: moves per
# caller).
SIZES = {
    "stress_pastset": {"plain": 200_000, "asan-ubsan": 100_000, "tsan": 50_000},
    "stress_stages": {"plain": 20_000, "asan-ubsan": 10_000, "tsan": 4_000},
    "stress_kernel_run": {"plain": 4_000, "asan-ubsan": 2_000, "tsan": 400},
    "stress_remote": {"plain": 2_000, "asan-ubsan": 1_000, "tsan": 500},
    "stress_batch": {"plain": 4_000, "asan-ubsan": 2_000, "tsan": 500},
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


def pkg_config_libzmq(what):
    pkg_config = shutil.which("pkg-config")
    assert pkg_config, "no pkg-config (bootstrap.sh installs it)"
    found = subprocess.run([pkg_config, what, "libzmq"], capture_output=True, text=True)
    assert found.returncode == 0, f"pkg-config finds no libzmq (bootstrap.sh installs libzmq3-dev):\n{found.stderr}"
    return found.stdout.split()


def libzmq_cflags():
    return pkg_config_libzmq("--cflags")


def libzmq_libs():
    return pkg_config_libzmq("--libs")


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


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """library(build): the path of libpaths's sources compiled for `build` into an archive (made
    once per build in this module)."""
    made = {}

    def archive(build):
        if build not in made:
            folder = tmp_path_factory.mktemp(f"libpaths-{build}")
            compiled = subprocess.run(
                [c_compiler(), *COMMON_FLAGS, *SANITIZER_FLAGS[build], f"-I{sysconfig.get_paths()['include']}",
                 *libzmq_cflags(), "-c", *map(str, library_sources("pastset") + library_sources("paths"))],
                capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, cwd=folder)
            assert compiled.returncode == 0, f"building libpaths ({build}) failed:\n{compiled.stderr}"
            objects = sorted(str(o) for o in folder.glob("*.o"))
            made[build] = folder / "libpaths.a"
            packed = subprocess.run(["ar", "rcs", str(made[build]), *objects], capture_output=True, text=True)
            assert packed.returncode == 0, f"ar failed:\n{packed.stderr}"
        return made[build]

    return archive


def build_and_run(name, build, tmp_path, library):
    """Compiles tests/c/<name>.c for `build`, links it with libpaths's archive of that build, runs
    it at its size and checks that it passed with no sanitizer report."""
    binary = tmp_path / f"{name}_{build}"
    compiled = subprocess.run(
        [c_compiler(), *COMMON_FLAGS, *SANITIZER_FLAGS[build], str(C_TESTS / f"{name}.c"), str(library(build)),
         *libzmq_libs(), "-ldl", "-lm", "-o", str(binary)],
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


def test_the_archive_holds_every_source_cmake_builds():
    """The sources are CMake's: every .c file of pastset/ (the static core) and of wrappers_c/
    (libpaths, which the core goes into whole), the newest stage among them, and nothing else."""
    for target, folder in (("pastset", "pastset"), ("paths", "wrappers_c")):
        found = {p.relative_to(ROOT).as_posix() for p in library_sources(target)}
        assert found == {p.relative_to(ROOT).as_posix() for p in (ROOT / folder).glob("*.c")}, target
    assert {"wrappers_c/operation.c", "wrappers_c/reduce_sum.c", "wrappers_c/bridge_stage.c"} <= found


def test_the_core_compiles_as_plain_c11_alone(tmp_path):
    """pastset/ is plain C11: each file compiles with -std=c11 -pedantic and no other flag (what
    it needs of POSIX it asks for itself), warning-free."""
    for source in library_sources("pastset"):
        done = subprocess.run([c_compiler(), "-std=c11", "-pedantic", "-Wall", "-Wextra", "-Werror",
                               f"-I{ROOT / 'pastset'}", "-c", str(source), "-o", str(tmp_path / "core.o")],
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        assert done.returncode == 0, f"{source.name}:\n{done.stderr}"


@pytest.mark.parametrize("name", list(SIZES))
@pytest.mark.parametrize("build", list(SANITIZER_FLAGS))
def test_stress(name, build, tmp_path, library):
    build_and_run(name, build, tmp_path, library)
