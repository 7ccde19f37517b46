"""Kernels of your own: the public header, C kernels built outside the package as a user builds
them (the one documented command) and run on local and emulated maps with exact results, a
kernel written in Python, the acquire and release hooks, the capsule, a program of its own, and
every bad input (a missing file or symbol, another API version, a kernel that fails, an element
acquired with two formats, a hook that raises): one clear line, and every node reaped.

The C sources are tests/c/kernels.c (small kernels, each checking one thing), tests/c/old_kernel.c
(a stale build) and the examples: examples/jacobi/, examples/extension/, examples/program/.
"""

import contextlib
import csv
import math
import os
import platform
import re
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

import pytest
from run_progress import without_progress

import paths
from paths import BuildContext, make_path, stage
from paths.model.cluster_map import builtin_map
from paths.runtime.process_context import make_runtime
from paths.runtime.server import PathServer
from paths.runtime.kernel import Kernel, KernelError, load_kernel, parse_kernel_args, run_kernel
from paths.runtime.trace_file import read_trace

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
C_TESTS = ROOT / "tests" / "c"
RUN_TIMEOUT = 120


def compile_c(*args: str, cwd: Path) -> None:
    done = subprocess.run([os.environ.get("CC", "cc"), *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def config(*options: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "paths", "config", *options], capture_output=True, text=True,
                          check=True)
    return done.stdout.split()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The kernels, built outside the package exactly as the README says a user builds them."""
    folder = tmp_path_factory.mktemp("kernels")
    include = f"-I{paths.get_include()}"
    compile_c("-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", include, str(EXAMPLES / "jacobi" / "jacobi.c"),
              "-o", "libjacobi.so", cwd=folder)
    compile_c("-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", include, str(C_TESTS / "kernels.c"),
              "-o", "libkernels.so", cwd=folder)
    compile_c("-shared", "-fPIC", str(C_TESTS / "old_kernel.c"), "-o", "libold.so", cwd=folder)
    compile_c("-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", include, str(C_TESTS / "shadowing_kernel.c"),
              "-o", "libshadowing.so", cwd=folder)
    return folder


def paths_run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`paths run`, its stderr without the progress lines (what it says besides them)."""
    done = subprocess.run([sys.executable, "-m", "paths", "run", *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, cwd=cwd)
    done.stderr = without_progress(done.stderr)
    return done


def csv_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ---- the header and the package's own libraries -------------------------------------------------

@pytest.mark.parametrize("compiler, source", [("cc", "kernel.c"), ("c++", "kernel.cpp")])
def test_the_public_header_alone_compiles_a_kernel_in_c_and_cpp(tmp_path, compiler, source):
    (tmp_path / source).write_text('#include <paths.h>\nPATHS_SUMS(k, "A", "B");\n'
                                   + ('extern "C" ' if source.endswith(".cpp") else "")
                                   + "int k(paths_kernel_ctx *c) { return paths_thread(c) + PATHS_API_VERSION; }\n")
    done = subprocess.run([compiler, "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", f"-I{paths.get_include()}",
                           source, "-o", "libk.so"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(paths.get_include())) == ["paths.h"]  # nothing internal is needed
    assert (Path(paths.get_include()) / "paths.h").read_text() == (ROOT / "wrappers_c" / "paths.h").read_text()
    kernel = load_kernel(str(tmp_path / "libk.so") + ":k")
    assert kernel.sums == ("A", "B")


def test_the_exact_declarations_of_the_api():
    header = (Path(paths.get_include()) / "paths.h").read_text()
    for declaration in [
        "typedef struct paths_handle paths_handle;", "typedef struct paths_kernel_ctx paths_kernel_ctx;",
        "#define PATHS_OK 0", "#define PATHS_FOREVER (-1)",
        "int paths_move(paths_handle *h, const void *tuple, int64_t timeout_ns);",
        "int paths_observe(paths_handle *h, void *out, int64_t timeout_ns);",
        "int paths_observe_at(paths_handle *h, int64_t index, void *out, int64_t timeout_ns);",
        "int paths_observe_range(paths_handle *h, int64_t index, size_t n, void *out, size_t *got, int64_t timeout_ns);",
        "size_t paths_range_max(const paths_handle *h);",
        "int paths_first(paths_handle *h, int64_t *out);", "int paths_last(paths_handle *h, int64_t *out);",
        "int paths_axe(paths_handle *h, int64_t index);", "size_t paths_tuple_size(const paths_handle *h);",
        "const char *paths_format(const paths_handle *h);", "const char *paths_strerror(int status);",
        "int paths_thread(const paths_kernel_ctx *c);", "int paths_threads(const paths_kernel_ctx *c);",
        "const char *paths_node(const paths_kernel_ctx *c);",
        "const char *paths_arg(const paths_kernel_ctx *c, const char *key);",
        "paths_handle *paths_acquire(paths_kernel_ctx *c, const char *element, const char *format);",
        "void paths_release(paths_kernel_ctx *c, paths_handle *h);",
        "int paths_barrier(paths_kernel_ctx *c, int64_t timeout_ns);",
        "void paths_report(paths_kernel_ctx *c, const char *name, double value);", "int64_t paths_now_ns(void);",
        "int paths_init(int *argc, char ***argv);", "void paths_finalize(void);",
    ]:
        assert declaration in header, declaration
    assert f"#define PATHS_API_VERSION {paths._native.API_VERSION}\n" in header


def dynamic_symbols(library: Path, which: str) -> set[str]:
    done = subprocess.run(["nm", "-D", which, str(library)], capture_output=True, text=True, check=True)
    return {line.split()[-1].split("@")[0] for line in done.stdout.splitlines() if line.strip()}


def needed_libraries(library: Path) -> list[str]:
    done = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True)
    return re.findall(r"\(NEEDED\).*\[(.+)\]", done.stdout)


def test_gsum_and_mcpi_are_kernels_on_the_public_api_alone():
    package = Path(paths._native.__file__).parent
    kernels = package / "libpaths_kernels.so"
    undefined = dynamic_symbols(kernels, "--undefined-only")
    assert {"paths_acquire", "paths_move", "paths_observe", "paths_barrier", "paths_report"} <= undefined
    assert not [s for s in undefined if s.startswith("ps_")], undefined  # nothing internal
    assert {"gsum", "mcpi", "paths_sums_gsum", "paths_sums_mcpi"} <= dynamic_symbols(kernels, "--defined-only")
    assert load_kernel("gsum").sums == ("GSUM",) and load_kernel("mcpi").sums == ("MCPI",)
    for library in package.glob("*.so"):  # the anchors left the package: no OpenMP in it
        assert not [n for n in needed_libraries(library) if "gomp" in n or "mpi" in n], library


def test_the_openmp_anchor_is_a_program_of_its_own_and_caps_its_threads():
    from benchmarks import anchors

    assert anchors.openmp_sum_us(2, 200) > 0
    with pytest.raises(ValueError, match=r"^the OpenMP anchor: expected 1 <= threads <= 1024 and rounds >= 1, "
                                         r"got 100000 threads and 10 rounds$"):
        anchors.openmp_sum_us(100_000, 10)
    done = subprocess.run([str(anchors.OPENMP_BUILD / "sum"), "100000", "10"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.endswith("usage: " + str(anchors.OPENMP_BUILD / "sum") + " THREADS ROUNDS "
                                "(1 <= THREADS <= 1024, 1 <= ROUNDS <= 100000000)\n")


# ---- the Jacobi example, unchanged across maps --------------------------------------------------

def test_jacobi_converges_to_the_known_answer_on_every_map(built, probe):
    results = {}
    for cluster_map, threads in (("local", "1,4"), ("paper-2w", "3"), ("multicluster", "4")):
        out = built / f"jacobi-{cluster_map}.csv"
        done = paths_run("./libjacobi.so:jacobi", "--map", cluster_map, "--threads", threads, "--repeat", "1",
                         "--csv", str(out), cwd=built)
        assert done.returncode == 0, done.stderr
        for row in csv_rows(out):
            results[cluster_map, row["threads"]] = (row["nodes"], row["iterations"], float(row["residual"]),
                                                     float(row["rms_error"]))
            # The table shows the tiny residual as it is, not as 0.00000.
            assert re.search(rf"^\s+{row['threads']}\s.*\s{float(row['residual']):.5e}\s", done.stdout, re.M), done.stdout
    assert sorted(results) == [("local", "1"), ("local", "4"), ("multicluster", "4"), ("paper-2w", "3")]
    assert {key: nodes for key, (nodes, *_) in results.items()} == {
        ("local", "1"): "1", ("local", "4"): "1", ("paper-2w", "3"): "2", ("multicluster", "4"): "2"}
    # The same updates everywhere (the halos are exact): the same iterations, the same answer.
    assert len({iterations for _, iterations, _, _ in results.values()}) == 1
    for _, iterations, residual, error in results.values():
        assert 100 < int(iterations) < 100_000 and residual < 1e-8 and error < 1e-6
    assert probe.alive() == []


# ---- C kernels through paths run: totals, barriers, reports ----------------------------------------

def test_a_c_kernel_sums_and_passes_barriers_across_nodes_and_reports_columns(built, probe):
    out = built / "count.csv"
    done = paths_run("./libkernels.so:count", "--map", "paper-4w", "--threads", "1,6", "--repeat", "2",
                     "--arg", "rounds=4", "--csv", str(out), cwd=built)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "./libkernels.so:count on map paper-4w (policy block, max fan-in 4), rounds=4 x 2 runs"
    assert lines[1].split() == ["threads", "nodes"] + [f"{c}:{s}" for c in ("total", "barriers", "thread")
                                                       for s in ("min", "avg", "max")]
    # a column's cells share their decimals: whole numbers have none
    assert [line.split() for line in lines[2:4]] == [
        ["1", "1", "1", "1", "1", "4", "4", "4", "0.00000", "0.00000", "0.00000"],
        ["6", "2", "21", "21", "21", "4", "4", "4", "2.50000", "2.50000", "2.50000"]]
    assert [(r["threads"], r["nodes"], r["total"], r["barriers"], r["thread"]) for r in csv_rows(out)] == [
        ("1", "1", "1", "4", "0"), ("1", "1", "1", "4", "0"),
        ("6", "2", "21", "4", "2.5"), ("6", "2", "21", "4", "2.5")]
    assert sorted(set(probe.started().values())) == ["n0", "n1"] and probe.alive() == []


def test_a_kernel_written_in_python(built, probe, user_module):
    user_module("python_kernel", """
        import paths

        def kernel(ctx):
            total = paths.acquire("TOTAL", "q")  # as ctx.acquire, for the thread that runs it
            own = ctx.acquire(f"own@{ctx.thread}", "q")   # lives on this thread's node
            ctx.barrier(timeout=20)
            own.move(ctx.thread)
            total.move(int(ctx.arg("base")) + ctx.thread)
            ctx.report("total", total.observe(timeout=20)[0])
            ctx.report("own", own.observe(0, timeout=20)[0])
            if ctx.thread == 0:
                ctx.report("seen_threads", ctx.threads)

        kernel.paths_sums = ("TOTAL",)
    """)
    out = built / "python.csv"
    done = paths_run("python_kernel:kernel", "--map", "paper-4w", "--threads", "5", "--repeat", "1",
                     "--arg", "base=10", "--csv", str(out), cwd=built)
    assert done.returncode == 0, done.stderr
    assert [(r["nodes"], r["total"], r["own"], r["seen_threads"]) for r in csv_rows(out)] == [("2", "60", "2", "5")]
    assert probe.alive() == []


def test_what_a_kernel_prints_comes_out_on_standard_error_led_by_its_node(built, probe, user_module):
    """A node's standard output is the launcher's channel: a kernel's print (or a C kernel's
    printf, written to file descriptor 1) goes to the node's standard error, and from there to
    the run's, each line led by the node's name."""
    user_module("printing_kernel", """
        import os
        import sys

        def kernel(ctx):  # one write a line: print's parts of several threads may interleave
            sys.stdout.write(f"print from thread {ctx.thread}\\n")
            os.write(1, b"fd 1 from thread %d\\n" % ctx.thread)
    """)
    done = paths_run("printing_kernel:kernel", "--map", "paper-4w", "--threads", "5", "--repeat", "2", cwd=built)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    for thread, node in ((0, "n0"), (3, "n0"), (4, "n1")):
        for said in (f"print from thread {thread}", f"fd 1 from thread {thread}"):
            assert lines.count(f"[{node}] {said}") == 2, done.stderr  # one per repeat
    assert "print from" not in done.stdout and "printing_kernel:kernel on map paper-4w" in done.stdout
    assert probe.alive() == []


def test_a_kernels_long_line_and_bytes_come_out_as_written_led_by_its_node(built, probe, user_module):
    """A line of 3 MiB (passed on in pieces as it comes, never held whole) and bytes that are not
    UTF-8 come out on the run's standard error as the kernel wrote them, led by its node."""
    user_module("long_line_kernel", """
        import os

        def kernel(ctx):
            if ctx.thread == 0:
                os.write(1, b"y" * (3 << 20) + b"\\n\\xff\\xfe not text\\n")
    """)
    command = [sys.executable, "-m", "paths", "run", "long_line_kernel:kernel", "--map", "paper-4w", "--threads", "1"]
    done = subprocess.run(command, capture_output=True, timeout=120, cwd=built)
    assert done.returncode == 0, done.stderr[-2000:]
    assert b"[n0] " + b"y" * (3 << 20) + b"\n[n0] \xff\xfe not text\n" in done.stderr
    assert probe.alive() == []


# ---- the hooks ----------------------------------------------------------------------------------

def test_a_replaced_acquire_hook_changes_the_path_and_the_release_hook_sees_every_handle(built, probe, user_module,
                                                                                        tmp_path):
    released = tmp_path / "released.txt"
    user_module("tracing_hooks", f"""
        import paths
        from paths import make_path, stage

        @paths.acquire_hook
        def traced(request):  # a trace on top of the default path, one per node and run, as the README's
            file = f"{tmp_path}/{{request.node}}.{{request.tag}}.bin"
            return make_path(stage("trace", file=file, node=request.node), request.default())

        @paths.release_hook
        def note(request, handle):
            with open("{released}", "a") as f:
                f.write(f"{{request.element}} {{request.tag}} {{request.thread}} {{handle.stage.kind}}\\n")
    """)
    done = paths_run("gsum", "--map", "paper-4w", "--threads", "6", "--repeat", "2", "--rounds", "50",
                     "--acquire", "tracing_hooks:traced", "--release", "tracing_hooks:note", "--counters", cwd=built)
    assert done.returncode == 0, done.stderr
    traces = re.findall(rf"^  (n\d) +trace\(file='{re.escape(str(tmp_path))}/(n\d\.6\.\d)\.bin', node='n\d'\) +"
                        r"operations=(\d+), .*events=(\d+)", done.stdout, re.M)
    # 4 threads on n0, 2 on n1: a move and an observe per round each, through the trace of each repeat
    assert sorted(traces) == [("n0", "n0.6.0", "400", "400"), ("n0", "n0.6.1", "400", "400"),
                              ("n1", "n1.6.0", "200", "200"), ("n1", "n1.6.1", "200", "200")]
    events = {path.name: len(read_trace(str(path)).events) for path in tmp_path.glob("*.bin")}
    assert events == {"n0.6.0.bin": 400, "n0.6.1.bin": 400, "n1.6.0.bin": 200, "n1.6.1.bin": 200}
    # once per handle, each at the top of the path the hook gave (the barrier's are not the hook's)
    assert sorted(released.read_text().splitlines()) == [f"GSUM 6.{r} {t} trace" for r in range(2) for t in range(6)]
    assert probe.alive() == []


def test_a_failed_run_leaves_no_temporary_file_of_the_trace_stages_it_still_held(built, probe, user_module, tmp_path):
    """The kernel's second acquire fails (its trace would write the file of its first): the run
    fails while the first traces are in use, and the launcher ends the node. Those traces are not
    written, and their temporary files go with the node."""
    traces = tmp_path / "traces"
    traces.mkdir()
    user_module("failing_traced", f"""
        import paths
        from paths import make_path, stage

        @paths.acquire_hook
        def traced(request):  # one file per thread: its second element's trace is refused
            return make_path(stage("trace", file=f"{traces}/{{request.thread}}.bin"), request.default())

        def kernel(ctx):
            ctx.acquire("A", "q").move((1,))
            ctx.acquire("B", "q")
    """)
    done = paths_run("failing_traced:kernel", "--acquire", "failing_traced:traced", "--threads", "2", "--repeat", "1",
                     cwd=built)
    assert done.returncode == 1 and "is written by another live trace stage" in done.stderr, done.stderr
    assert sorted(p.name for p in traces.iterdir()) == []
    assert probe.alive() == []


@pytest.mark.parametrize("option, name, words", [
    ("--acquire", "no_such_module:hook", ["acquire hook 'no_such_module:hook': cannot import module"]),
    ("--acquire", "unmarked_hook:acquire", ["acquire hook 'unmarked_hook:acquire': acquire is not marked as one: "
                                            "decorate it with @paths.acquire_hook"]),
    ("--acquire", "broken_module:acquire", ["acquire hook 'broken_module:acquire': importing module 'broken_module' "
                                            "raised RuntimeError: no cluster today (at ", "broken_module.py:1)"]),
    ("--acquire", "typo_module:acquire", ["acquire hook 'typo_module:acquire': importing module 'typo_module' raised "
                                          "SyntaxError: ", "typo_module.py, line 1)"]),
    ("--policy", "unmarked_hook:placing", ["policy 'unmarked_hook:placing' (map ", "paper-4w.yaml): raised "
                                           "ZeroDivisionError: division by zero (at ", "unmarked_hook.py:4)"]),
    ("--acquire", "misshapen_hooks:acquire", ["acquire hook 'misshapen_hooks:acquire': acquire cannot be called as the "
                                              "hook it is marked as: expected def acquire(request)"]),
    ("--release", "misshapen_hooks:release", ["release hook 'misshapen_hooks:release': release cannot be called as the "
                                              "hook it is marked as: expected def release(request, handle)"]),
    ("--acquire", "misshapen_hooks:waiting", ["acquire hook 'misshapen_hooks:waiting': waiting is an async function "
                                              "(calling it runs none of its body): expected def waiting(request)"]),
], ids=["no module", "not marked", "module raises", "module does not compile", "policy raises", "acquire misshapen",
        "release misshapen", "acquire async"])
def test_a_hook_that_cannot_be_used_is_refused_before_any_node_starts(built, probe, user_module, option, name, words):
    user_module("unmarked_hook", "def acquire(request):\n    return request.default()\n"
                                 "def placing(cluster_map, n_threads):\n    return 1 / 0\n")
    user_module("misshapen_hooks", "import paths\n@paths.acquire_hook\ndef acquire(request, extra):\n    pass\n"
                                   "@paths.release_hook\ndef release(request):\n    pass\n"
                                   "@paths.acquire_hook\nasync def waiting(request):\n    pass\n")
    user_module("broken_module", "raise RuntimeError('no cluster today')\n")
    user_module("typo_module", "def acquire(request:\n")
    done = paths_run("gsum", "--map", "paper-4w", "--threads", "2", option, name, cwd=built)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("paths run: ")
    for word in words:
        assert word in done.stderr, done.stderr
    assert probe.started() == {}


def test_a_policy_is_asked_only_for_the_thread_counts_of_the_run(built, probe, user_module):
    """A policy that places threads in pairs refuses an odd count: nodes, which get their runs'
    placements from the launcher, must not ask it for one thread of their own."""
    user_module("pairs_policy", """
        def pairs(cluster_map, n_threads):
            if n_threads % 2:
                raise ValueError(f"pairs: expected an even thread count, got {n_threads}")
            return [cluster_map.nodes[i // 2].name for i in range(n_threads)]
    """)
    done = paths_run("gsum", "--map", "paper-4w", "--threads", "2,4", "--policy", "pairs_policy:pairs", "--repeat",
                     "1", "--rounds", "20", cwd=built)
    assert done.returncode == 0, done.stderr
    assert probe.alive() == []


# ---- bad input: one line each, exit 1 or 2, and every node reaped --------------------------------

LOAD_ERRORS = {  # kernel, the one line on stderr
    "missing file": ("./nope.so:k", "paths run: kernel ./nope.so:k: no file ./nope.so"),
    "missing symbol": ("./libkernels.so:nosuch", "paths run: kernel ./libkernels.so:nosuch: no function 'nosuch' in "
                       "it (a kernel is `int nosuch(paths_kernel_ctx *c)`, not static; in C++ extern \"C\")"),
    "a variable named": ("./libkernels.so:paths_sums_count", "paths run: kernel ./libkernels.so:paths_sums_count: "
                         "'paths_sums_count' in it is not a function (a kernel is `int paths_sums_count"
                         "(paths_kernel_ctx *c)`)"),
    "a folder named": ("./kernels.so:k", "paths run: kernel ./kernels.so:k: ./kernels.so is a folder, not a shared "
                       "library"),
    "another API version": ("./libold.so:stale", "paths run: kernel ./libold.so:stale: compiled against PATHS API "
                            "version 0, this PATHS has version 1: compile it again with -I paths.get_include()"),
    "a name libpaths exports": ("./libshadowing.so:shadowing", "paths run: kernel ./libshadowing.so:shadowing: it "
                                "defines 'ps_deadline', a name libpaths (PATHS' library) exports too: the kernel's "
                                "own uses of it would reach libpaths' instead; rename it, or make it static"),
    "unknown name": ("fast", "paths run: unknown kernel 'fast': expected gsum, mcpi, FILE.so:SYMBOL (a C kernel) or "
                     "pkg.mod:func (a Python kernel)"),
    "missing module": ("no_such_module:run", "paths run: kernel 'no_such_module:run': cannot import module "
                       "'no_such_module' (No module named 'no_such_module')"),
}


@pytest.mark.parametrize("case", LOAD_ERRORS, ids=list(LOAD_ERRORS))
def test_a_kernel_that_cannot_be_loaded_is_refused_before_any_node_starts(built, probe, case):
    kernel, line = LOAD_ERRORS[case]
    (built / "kernels.so").mkdir(exist_ok=True)
    done = paths_run(kernel, "--map", "paper-4w", "--threads", "2", cwd=built)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")
    assert probe.started() == {}


# What a library's constructor does as it loads, and the one line that says so.
CONSTRUCTORS = {
    "crashes": ("abort()", "the library crashed while loading: signal 6 (Aborted)"),
    "exits": ("exit(3)", "the library ended the process while loading, with exit status 3"),
    "hangs": ("for (;;) sleep(1)", "the library did not finish loading within 2 s: a constructor in it (or in a "
                                   "library it needs) still ran"),
}


def constructor_library(folder: Path, case: str) -> str:
    """A kernel k whose library runs CONSTRUCTORS[case] as it loads: its name for paths run."""
    (folder / f"{case}.c").write_text(
        "#include <paths.h>\n#include <stdlib.h>\n#include <unistd.h>\n"
        f"__attribute__((constructor)) static void load(void) {{ {CONSTRUCTORS[case][0]}; }}\n"
        "int k(paths_kernel_ctx *c) { (void)c; return PATHS_OK; }\n")
    compile_c("-shared", "-fPIC", f"-I{paths.get_include()}", f"{case}.c", "-o", f"lib{case}.so", cwd=folder)
    return f"./lib{case}.so:k"


@pytest.mark.parametrize("case", CONSTRUCTORS, ids=list(CONSTRUCTORS))
def test_a_library_that_crashes_exits_or_hangs_as_it_loads_is_refused_before_any_node_starts(tmp_path, probe, case):
    """paths run loads a C kernel's library in a child process first: loaded in its own, the
    library took paths run down with it (exit 134, nothing said) or hung it for good."""
    kernel = constructor_library(tmp_path, case)
    begin = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "paths", "run", kernel, "--map", "paper-4w", "--threads", "2",
                           "--timeout", "2"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    line = f"paths run: kernel {kernel}: {CONSTRUCTORS[case][1]}\n"
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line)
    assert time.monotonic() - begin < 30
    assert probe.started() == {} and probe.alive() == []


def test_what_a_librarys_constructor_prints_comes_out_once_not_again_from_the_child_that_loads_it_first(tmp_path):
    (tmp_path / "says.c").write_text(
        "#include <paths.h>\n#include <stdio.h>\n"
        "__attribute__((constructor)) static void load(void) { printf(\"constructor says hi\\n\"); fflush(stdout); }\n"
        "int k(paths_kernel_ctx *c) { (void)c; return PATHS_OK; }\n")
    compile_c("-shared", "-fPIC", f"-I{paths.get_include()}", "says.c", "-o", "libsays.so", cwd=tmp_path)
    done = subprocess.run([sys.executable, "-m", "paths", "run", "./libsays.so:k", "--map", "paper-4w", "--threads",
                           "1"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("constructor says hi\n") == 1  # the launcher's own load; its node's is led by [n0]


def test_a_kernels_failure_in_bytes_that_are_no_text_keeps_its_reason(tmp_path):
    """paths_fail's text went to Python as UTF-8: the run said only the codec's complaint."""
    (tmp_path / "fails.c").write_text(
        "#include <paths.h>\nint k(paths_kernel_ctx *c) { return paths_fail(c, PATHS_EINVAL, \"caf\\xe9 \\xff\"); }\n")
    compile_c("-shared", "-fPIC", f"-I{paths.get_include()}", "fails.c", "-o", "libfails.so", cwd=tmp_path)
    done = subprocess.run([sys.executable, "-m", "paths", "run", "./libfails.so:k", "--threads", "1"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (1, "paths run: node localhost: KernelError: kernel ./libfails.so:k: thread "
                                                 "0 on node localhost returned PATHS_EINVAL: a bad argument: "
                                                 "caf\\xe9 \\xff\n")


def test_ctrl_c_while_a_library_loads_ends_paths_run_and_the_loading(tmp_path, probe):
    kernel = constructor_library(tmp_path, "hangs")
    run = subprocess.Popen([sys.executable, "-m", "paths", "run", kernel, "--threads", "1"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    children = Path(f"/proc/{run.pid}/task/{run.pid}/children")

    def loading():  # until the child that loads it is there
        deadline = time.monotonic() + 30
        while run.poll() is None and not children.read_text().strip():
            assert time.monotonic() < deadline, "no child process loads the library"
            time.sleep(0.05)

    out, err, _ = interrupted(run, loading)
    assert (run.returncode, out, err) == (130, "", "paths: interrupted\n")
    assert probe.alive() == []


def interrupted(run: subprocess.Popen, ready) -> tuple:
    """Ctrl-C to `run` once ready() returns: its output, and the seconds it took to end after
    the signal (killed, should it outlive the test)."""
    try:
        ready()
        sent = time.monotonic()
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=30)
        return out, err, time.monotonic() - sent
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()


@pytest.mark.parametrize("source, kind", [
    ("def kernel(ctx):\n    yield ctx.thread\n", "a generator function"),
    ("async def kernel(ctx):\n    ctx.report('n', 1.0)\n", "an async function"),
    ("async def kernel(ctx):\n    yield ctx.thread\n", "an async generator"),
], ids=["generator", "async", "async generator"])
def test_a_python_kernel_whose_call_runs_nothing_is_refused_before_any_node_starts(built, probe, user_module,
                                                                                 source, kind):
    user_module("lazy_kernel", source)
    done = paths_run("lazy_kernel:kernel", "--map", "paper-4w", "--threads", "2", cwd=built)
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", f"paths run: kernel lazy_kernel:kernel: kernel is {kind} (calling it runs none of its body): "
               "expected def kernel(ctx) returning None or a status\n")
    assert probe.started() == {}


@pytest.mark.parametrize("options", [["./" + "y" * 5000 + ".so:k"], ["m" + "y" * 5000 + ":k"], ["y" * 5000],
                                     ["gsum", "--map", "/tmp/" + "y" * 5000 + ".yaml"]],
                         ids=["a long file", "a long module", "a long name", "a long map path"])
def test_a_long_kernel_or_map_name_is_cut_in_its_one_line(built, options):
    done = paths_run(*options, "--threads", "1", cwd=built)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and len(done.stderr) < 400, done.stderr
    assert "y" * 20 + "..." + "y" * 20 in done.stderr


def test_a_python_kernel_wrapped_by_a_decorator_is_taken_by_what_it_is_called_with(built, probe, user_module):
    user_module("wrapped_kernel", """
        import functools

        def _inner():
            pass

        @functools.wraps(_inner)
        def kernel(ctx):
            ctx.report("ran", 1.0)
    """)
    done = paths_run("wrapped_kernel:kernel", "--threads", "1", "--repeat", "1", cwd=built)
    assert done.returncode == 0, done.stderr


def test_columns_whose_sum_passes_the_largest_float_or_holds_both_infinities_are_averaged(built, probe, user_module,
                                                                                         tmp_path):
    """A column's average over threads and over repeats: the mean of values whose sum overflows,
    and nan for +inf with -inf (as for a nan reported), not an exception."""
    user_module("extreme_kernel", """
        def kernel(ctx):
            ctx.report("big", 1.7976931348623157e308)  # the largest float: their sum overflows however scaled
            ctx.report("both", float("inf") if ctx.thread else float("-inf"))
    """)
    table, plot = tmp_path / "extreme.csv", tmp_path / "extreme.png"
    done = paths_run("extreme_kernel:kernel", "--threads", "1,2", "--repeat", "2", "--csv", str(table), "--plot",
                     str(plot), cwd=built)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert plot.stat().st_size > 0  # its values are beyond any axis: the panels are empty, the file is there
    rows = csv_rows(table)
    assert len(rows) == 4
    for row in rows:  # a run's mean over its threads, then min, avg and max over the repeats (nan: empty)
        assert float(row["big"]) == 1.7976931348623157e308 and math.isnan(float(row["both"])) == (row["threads"] != "1")
        assert [float(row[f"big:{s}"]) for s in ("min", "avg", "max")] == [1.7976931348623157e308] * 3
        assert [row[f"both:{s}"] for s in ("min", "avg", "max")] == ["-inf" if row["threads"] == "1" else ""] * 3


def test_a_node_that_does_not_end_well_after_the_run_fails_it_and_keeps_the_results(built, probe, user_module,
                                                                                   tmp_path):
    """What a kernel left to run as its node exits (here an atexit that aborts) kills the node
    after the run: the run fails (exit 1) naming the node and how it ended, and keeps its row."""
    user_module("aborts_at_exit", """
        import atexit
        import os

        def kernel(ctx):
            if ctx.thread == 0:
                atexit.register(os.abort)
            ctx.report("ran", 1.0)
    """)
    table = tmp_path / "kept.csv"
    done = paths_run("aborts_at_exit:kernel", "--map", "paper-4w", "--threads", "2", "--repeat", "1", "--csv",
                     str(table), cwd=built)
    assert done.returncode == 1, done.stderr
    assert "paths run: after the run, as the nodes quit: node n0 killed by SIGABRT\n" in done.stderr
    assert [row["ran"] for row in csv_rows(table)] == ["1"]


def test_paths_init_in_a_kernel_is_refused_and_fails_its_thread(built, probe):
    """A kernel's process runs PATHS already: paths_init there is refused (every thread at once),
    and the run fails in one line of its own, not in the node's end."""
    done = paths_run("./libkernels.so:init_in_kernel", "--map", "local", "--threads", "2", "--repeat", "1", cwd=built)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert lines.count("[localhost] paths_init: called where kernels run: a kernel has its run's context already "
                       "(paths_acquire(c, ...)); paths_init starts a program of its own") == 2, done.stderr
    assert re.search(r"thread [01] on node localhost returned PATHS_EINVAL", done.stderr), done.stderr
    assert "Fatal" not in done.stderr and "Traceback" not in done.stderr


def test_paths_init_in_a_python_process_is_refused_and_it_ends_well():
    """A Python program (or the paths command, which loads kernel libraries) has paths already:
    paths_init there is refused, and the process ends as it would have."""
    script = ("import ctypes, sys\n"
              "from paths.runtime.compile_flags import PACKAGE\n"
              "library = ctypes.CDLL(str(PACKAGE / 'libpaths.so'))\n"
              "argc, argv = ctypes.c_int(1), (ctypes.c_char_p * 2)(b'program', None)\n"
              "pointer = ctypes.cast(argv, ctypes.POINTER(ctypes.c_char_p))\n"
              "print(library.paths_init(ctypes.byref(argc), ctypes.byref(pointer)))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "7\n"), done.stderr  # PATHS_EINVAL
    assert done.stderr == ("paths_init: called in a process that runs Python already: paths_init starts a C program "
                           "of its own; from Python, import paths\n")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the kernel is an x86-64 assembler label")
def test_a_c_kernel_written_as_an_assembler_label_without_a_type_runs(tmp_path, probe):
    """A label without .type is STT_NOTYPE: it may be code, so it is not refused as a variable."""
    (tmp_path / "label.c").write_text('#include <paths.h>\n__asm__(".text\\n.globl labelled\\nlabelled: xorl %eax, %eax; ret");\n')
    compile_c("-shared", "-fPIC", f"-I{paths.get_include()}", "label.c", "-o", "liblabel.so", cwd=tmp_path)
    done = subprocess.run([sys.executable, "-m", "paths", "run", "./liblabel.so:labelled", "--threads", "1", "--repeat",
                           "1"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("source", ["def kernel():\n    pass\n", "def kernel(ctx, extra):\n    pass\n",
                                    "def kernel(*, ctx):\n    pass\n"], ids=["none", "two", "keyword only"])
def test_a_python_kernel_that_cannot_take_the_context_is_refused_before_any_node_starts(built, probe, user_module,
                                                                                        source):
    user_module("shaped_kernel", source)
    done = paths_run("shaped_kernel:kernel", "--map", "paper-4w", "--threads", "2", cwd=built)
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", "paths run: kernel shaped_kernel:kernel: kernel cannot be called with one argument, the thread's "
               "context: expected def kernel(ctx) returning None or a status\n")
    assert probe.started() == {}


RUN_ERRORS = {  # kernel and its options, exit status, the one line on stderr (a pattern)
    "a thread fails": (["./libkernels.so:failing", "--map", "paper-4w", "--threads", "6", "--arg", "fail=5"],
                       r"node n1: KernelError: kernel \./libkernels\.so:failing: thread 5 on node n1 returned "
                       r"PATHS_EFAILED: the kernel's own failure: thread 5 of 6 on n1 says no"),
    "a status of its own": (["./libkernels.so:failing", "--map", "paper-2w", "--threads", "2", "--arg", "status=42"],
                            r"node n0: KernelError: kernel \./libkernels\.so:failing: thread 1 on node n0 returned "
                            r"status 42: a status PATHS does not know \(the kernel's own\): thread 1 of 2 on n0 says no"),
    "a thread ends by pthread_exit": (["./libkernels.so:exits_thread", "--map", "paper-2w", "--threads", "2",
                                       "--timeout", "5"],
                                      r"node n0: KernelError: kernel \./libkernels\.so:exits_thread: thread 0 on node "
                                      r"n0 returned PATHS_EFAILED: the kernel's own failure: thread 0 gives up \(then "
                                      r"the kernel ended its thread with pthread_exit instead of returning a "
                                      r"status\)"),
    "two formats": (["./libkernels.so:two_formats", "--map", "local", "--threads", "2"],
                    r"node localhost: KernelError: kernel \./libkernels\.so:two_formats: thread 1 on node localhost "
                    r"returned PATHS_EFAILED: the kernel's own failure: paths_acquire\('X', 'd'\) by thread 1: element "
                    r"'X' was acquired with format 'q' by thread 0: an element has one format"),
    "two formats, two nodes": (["./libkernels.so:two_formats", "--map", "paper-2w", "--threads", "3"],
                               r"node n1: KernelError: kernel \./libkernels\.so:two_formats: thread 2 on node n1 "
                               r"returned PATHS_EFAILED: the kernel's own failure: paths_acquire\('X', 'd'\) by thread "
                               r"2: its path remote\(host='n0'\) -> core\(format='d', name='X\.3\.0'\): "
                               r".*stage 'core': element 'X\.3\.0' exists with format 'q', not 'd'.*"),
    "two formats, a long name": (["./libkernels.so:two_formats", "--map", "paper-2w", "--threads", "3",
                                  "--arg", "name=" + "a_long_element_name_" * 12],
                                 r"node n1: KernelError: .* by thread 2: its path remote\(host='n0'\) -> core\(format="
                                 r"'d', name='(a_long_element_name_){12}\.3\.0'\): .*stage 'core': element "
                                 r"'(a_long_element_name_){12}\.3\.0' exists with format 'q', not 'd'.*"),
    "a sum acquired twice": (["./libkernels.so:sum_twice", "--map", "paper-2w", "--threads", "4", "--timeout", "5"],
                             r"node n1: KernelError: kernel \./libkernels\.so:sum_twice: thread 3 on node n1 returned "
                             r"PATHS_EFAILED: the kernel's own failure: paths_acquire\('TOTAL', 'q'\) by thread 3: the "
                             r"thread holds a handle on the sum 'TOTAL' already, and a sum counts each thread once: "
                             r"use that handle"),
    "a hook raises": (["./libkernels.so:touch", "--map", "paper-4w", "--threads", "6",
                       "--acquire", "raising_hook:acquire"],
                      r"node n1: KernelError: kernel \./libkernels\.so:touch: thread 5 on node n1 returned "
                      r"PATHS_EFAILED: the kernel's own failure: paths_acquire\('X', 'q'\) by thread 5 on node n1: "
                      r"acquire hook raising_hook:acquire raised LookupError: no path to X for thread 5 "
                      r"\(at .*raising_hook\.py:7\)"),
    "a hook exits": (["./libkernels.so:touch", "--map", "paper-4w", "--threads", "6",
                      "--acquire", "raising_hook:exiting"],
                     r"node n1: KernelError: kernel \./libkernels\.so:touch: thread 5 on node n1 returned "
                     r"PATHS_EFAILED: the kernel's own failure: paths_acquire\('X', 'q'\) by thread 5 on node n1: "
                     r"acquire hook raising_hook:exiting raised SystemExit: 4 \(at .*raising_hook\.py:14\)"),
    "a hook raises KeyboardInterrupt": (["./libkernels.so:touch", "--map", "paper-4w", "--threads", "6",
                                         "--acquire", "raising_hook:interrupting"],
                                        r"node n1: KernelError: kernel \./libkernels\.so:touch: thread 5 on node n1 "
                                        r"returned PATHS_EFAILED: the kernel's own failure: paths_acquire\('X', "
                                        r"'q'\) by thread 5 on node n1: acquire hook raising_hook:interrupting "
                                        r"raised KeyboardInterrupt: stop \(at .*raising_hook\.py:21\)"),
    "a bad --arg": (["./libkernels.so:count", "--map", "local", "--threads", "2", "--arg", "rounds=many"],
                    r"node localhost: KernelError: kernel \./libkernels\.so:count: thread [01] on node localhost "
                    r"returned PATHS_EINVAL: a bad argument: --arg rounds=many: expected a whole number"),
}


@pytest.mark.parametrize("case", RUN_ERRORS, ids=list(RUN_ERRORS))
def test_a_kernel_that_fails_on_a_node_is_one_line_and_every_node_is_reaped(built, probe, user_module, case):
    user_module("raising_hook", """
        import paths


        @paths.acquire_hook
        def acquire(request):
            if request.thread == 5:
                raise LookupError(f"no path to {request.element} for thread {request.thread}")
            return request.default()


        @paths.acquire_hook
        def exiting(request):  # sys.exit(4), as a kernel thread sees it
            if request.thread == 5:
                raise SystemExit(4)
            return request.default()


        @paths.acquire_hook
        def interrupting(request):
            if request.thread == 5:
                raise KeyboardInterrupt("stop")
            return request.default()
    """)
    args, pattern = RUN_ERRORS[case]
    done = paths_run(*args, "--repeat", "1", "--timeout", "60", cwd=built)
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert re.fullmatch(f"paths run: {pattern}\n", done.stderr, re.S), done.stderr
    assert done.stderr.count("\n") == 1
    assert probe.started() and probe.alive() == []


def test_a_kernel_still_running_at_the_timeout_is_named_with_what_to_do(built, probe, user_module):
    user_module("stuck_kernel", """
        def kernel(ctx):
            ctx.acquire("NEVER", "q").observe()  # no timeout, and nothing ever moves to NEVER
    """)
    done = paths_run("stuck_kernel:kernel", "--map", "local", "--threads", "1", "--repeat", "1", "--timeout", "1",
                     cwd=built)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr == ("paths run: node localhost did not answer within 2 s (for kernel stuck_kernel:kernel to "
                           "end): the kernel was still running (a run may take twice --timeout), perhaps in a call "
                           "that waits with no timeout: give its waits the timeout it gets as arg 'timeout' "
                           "(--timeout, in seconds), or raise --timeout\n")
    assert probe.started() and probe.alive() == []


def test_a_run_whose_acquire_hook_never_returns_names_the_hook_too(built, probe, user_module):
    user_module("stuck_hook", """
        import time

        import paths


        @paths.acquire_hook
        def never(request):
            time.sleep(3600)


        def kernel(ctx):
            ctx.acquire("E", "q")
    """)
    done = paths_run("stuck_hook:kernel", "--acquire", "stuck_hook:never", "--map", "local", "--threads", "1",
                     "--repeat", "1", "--timeout", "1", cwd=built)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert ("perhaps in a call that waits with no timeout, or in the hook stuck_hook:never that its paths_acquire or "
            "paths_release runs: give its waits" in done.stderr), done.stderr
    assert probe.started() and probe.alive() == []


@pytest.mark.parametrize("args, line", [
    (["rounds"], "--arg 'rounds': expected KEY=VALUE"),
    (["=5"], "--arg '=5': expected KEY=VALUE"),
    (["rounds=5", "rounds=6"], "--arg 'rounds=6': rounds is given twice (first rounds=5): expected each KEY once"),
], ids=["no =", "no key", "a key twice"])
def test_a_malformed_arg_is_a_usage_error(built, probe, args, line):
    done = paths_run("gsum", *(part for arg in args for part in ("--arg", arg)), cwd=built)
    assert (done.returncode, done.stderr) == (2, f"paths run: {line}\n")
    assert probe.started() == {}


def test_an_arg_value_may_hold_equals_signs():
    assert parse_kernel_args(["expr=a=b", "empty="]) == {"expr": "a=b", "empty": ""}


def test_every_operation_of_a_handle_from_c(built, space):
    kernel = load_kernel(str(built / "libkernels.so") + ":history")
    element = paths.build_path(make_path(stage("core", name="H", format="q")), pastset=space)
    done = run_kernel(kernel, [0], 1, "here", {}, lambda thread, name, format: element, lambda thread, handle: None)
    assert done.reports == {0: [("tuple_size", 8.0), ("format_is_q", 1.0), ("now_moves", 1.0)]}
    assert element.last() == 10 and element.first() == 1  # what the kernel did, seen from Python


def test_a_kernel_reads_why_an_operation_failed_where_the_status_cannot_say(built, space):
    """paths_handle_error gives a C kernel the stage's explanation that Python's exception carries:
    a batch's failed send and how many of its moves took effect (the kernel checks the line)."""
    kernel = load_kernel(str(built / "libkernels.so") + ":handle_error")
    element = paths.build_path(make_path(stage("batch", max_moves=3, buffers=1), stage("reduce-sum", num_threads=2),
                                         stage("core", name="S", format="q")), pastset=space)
    done = run_kernel(kernel, [0], 1, "here", {}, lambda thread, name, format: element, lambda thread, handle: None)
    assert done.reports == {0: [("explained", 1.0)]}


@pytest.mark.parametrize("how", ["paths_release", "return"])
def test_moves_a_batch_holds_go_down_as_the_kernel_lets_the_handle_go(built, space, how):
    """As `paths run` does, the release hook keeps the handle (and so its stages, for their
    counters): the moves its batch holds go down all the same, on paths_release or as the kernel
    returns, and the other thread sees the last of them."""
    kernel = load_kernel(str(built / "libkernels.so") + ":release_sends")
    core = stage("core", name="L", format="q")
    batched = paths.build_path(make_path(stage("batch", max_moves=100), core), pastset=space)
    direct = paths.build_path(make_path(core), pastset=space)
    done = run_kernel(kernel, [0, 1], 2, "here", {"release": str(int(how == "paths_release"))},
                      lambda thread, name, format: direct if thread else batched, lambda thread, handle: None)
    assert done.reports == {0: [], 1: [("seen", 9.0)]}
    assert [direct.observe(i) for i in range(10)] == [(i,) for i in range(10)]


def test_moves_a_batch_could_not_send_as_the_kernel_returned_fail_its_thread(built, space):
    import refusing_stage  # noqa: F401 - registers the kind test-no-negatives
    kernel = load_kernel(str(built / "libkernels.so") + ":release_sends")
    core = stage("core", name="L", format="q")
    batched = paths.build_path(make_path(stage("batch", max_moves=100), stage("test-no-negatives"), core), pastset=space)
    direct = paths.build_path(make_path(core), pastset=space)
    with pytest.raises(KernelError, match=r"thread 0 .*as the kernel returned: the moves a handle held back could not "
                                          r"go down: batch: 9 of 10 moves sent down together took effect, then the "
                                          r"send failed .*no negatives here, got -1"):
        run_kernel(kernel, [0, 1], 2, "here", {"negative": "1", "last": "8"},
                   lambda thread, name, format: direct if thread else batched, lambda thread, handle: None)
    assert direct.last() == 9  # the nine before the refused one, and nothing after


def test_moves_still_on_a_slow_wire_as_the_kernel_returns_are_no_failure(built, space):
    """Thread 0's moves cross a pipelined delay of 1.2 s: as it returns they are still on their
    way after the second its handles wait; the thread does not fail, and the moves arrive."""
    kernel = load_kernel(str(built / "libkernels.so") + ":release_sends")
    core = stage("core", name="L", format="q")
    wire = paths.build_path(make_path(stage("delay", ms=1200, pipelined=1), core), pastset=space)
    direct = paths.build_path(make_path(core), pastset=space)
    done = run_kernel(kernel, [0, 1], 2, "here", {},
                      lambda thread, name, format: direct if thread else wire, lambda thread, handle: None)
    assert done.reports == {0: [], 1: [("seen", 9.0)]}


@pytest.mark.parametrize("across", ["here", "remote"])
def test_a_kernel_reads_a_range_in_one_operation(built, space, across):
    """paths_observe_range: the tuples from an index that exist, at most n, as one operation; an
    axed index and a timeout are told apart by their status."""
    kernel = load_kernel(str(built / "libkernels.so") + ":range_read")
    with contextlib.ExitStack() as stack:
        core = stage("core", name="R", format="q")
        if across == "remote":
            server = stack.enter_context(PathServer("tcp://127.0.0.1:*", pastset=space).start())
            element = paths.build_path(make_path(stage("remote", host=server.endpoint), core))
        else:
            element = paths.build_path(make_path(core), pastset=space)
        element.move_many(list(range(10)))
        element.axe(2)
        done = run_kernel(kernel, [0], 1, "here", {}, lambda thread, name, format: element,
                          lambda thread, handle: None)
        assert done.reports == {0: [("from_3", 7.0), ("from_8", 2.0), ("checked", 1.0)]}


def test_a_negative_timeout_other_than_forever_is_refused_not_waited_out(built, probe):
    """A deadline already passed (deadline - paths_now_ns() < 0) is no request to wait for ever:
    every call that waits refuses it with PATHS_EINVAL at once (the kernel checks each, on an
    empty element that would keep an observe waiting)."""
    done = paths_run("./libkernels.so:negative_timeouts", "--map", "local", "--threads", "1", "--repeat", "1",
                     "--timeout", "60", cwd=built)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert probe.alive() == []


def test_null_handles_buffers_and_counts_no_memory_holds_are_refused_not_a_crash(built, probe):
    """Each call of paths.h given a NULL handle, a NULL buffer or a count of tuples whose bytes
    wrap around returns PATHS_EINVAL with nothing done (the kernel checks each): the node runs on,
    where it used to die of a segmentation fault."""
    done = paths_run("./libkernels.so:null_arguments", "--map", "local", "--threads", "1", "--repeat", "1",
                     "--timeout", "60", cwd=built)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert probe.alive() == []


def test_a_refused_call_that_returns_nothing_fails_the_thread_naming_the_call(built, probe):
    """paths_release given a handle the thread does not hold cannot return a status: the thread
    fails with its reason, which a later call that succeeds does not wipe out."""
    done = paths_run("./libkernels.so:refused_release", "--map", "local", "--threads", "1", "--repeat", "1",
                     "--timeout", "60", cwd=built)
    assert done.returncode == 1
    assert done.stderr == ("paths run: node localhost: KernelError: kernel ./libkernels.so:refused_release: thread 0 on "
                           "node localhost returned PATHS_EINVAL: a bad argument: paths_release: given a handle thread "
                           "0 does not hold (released already?) (a refused call fails the thread: the kernel returned "
                           "PATHS_OK)\n"), done.stderr
    assert probe.alive() == []


def test_a_kernel_that_passes_a_null_context_is_told_so_and_fails(built, probe):
    """NULL is a program's own context: a kernel that passes it is told it passed no context, in
    its own context, and a paths_report(NULL, ...), which returns nothing, fails its thread."""
    done = paths_run("./libkernels.so:null_context", "--map", "local", "--threads", "1", "--repeat", "1",
                     "--timeout", "60", cwd=built)
    assert done.returncode == 1, done.stderr
    assert ("thread 0 on node localhost returned PATHS_EINVAL: a bad argument: paths_report: no context (NULL): a "
            "kernel passes the context its run gave it (its argument); NULL is a program's own, after paths_init"
            in done.stderr), done.stderr
    assert probe.alive() == []


def test_a_kernel_that_fails_with_a_null_context_fails_for_its_reason(built, probe):
    done = paths_run("./libkernels.so:null_context_fails", "--map", "local", "--threads", "1", "--repeat", "1",
                     "--timeout", "60", cwd=built)
    assert done.returncode == 1, done.stderr
    assert "thread 0 on node localhost returned PATHS_EFAILED: " in done.stderr and "given up with NULL" in done.stderr, \
        done.stderr
    assert probe.alive() == []


def test_what_paths_fail_said_stays_the_reason_after_a_call_that_worked(built, space):
    """paths_fail, then a paths_acquire that works (which clears paths_last_error): the run names
    what paths_fail said, not a bare status."""
    kernel = load_kernel(str(built / "libkernels.so") + ":fails_then_acquires")

    def acquire(thread, element, format):
        return paths.build_path(make_path(stage("core", name=element, format=format)), pastset=space)

    with pytest.raises(KernelError, match=r"thread 0 on node here returned PATHS_EFAILED: the kernel's own failure: "
                                          r"thread 0 gives up$"):
        run_kernel(kernel, range(1), 1, "here", {}, acquire, lambda thread, handle: None)


def test_run_kernel_in_this_process_names_the_failed_thread(built, space):
    kernel = load_kernel(str(built / "libkernels.so") + ":failing")

    def acquire(thread, element, format):  # the barrier's sum, in a PastSet of this test's own
        return paths.build_path(make_path(stage("reduce-sum", num_threads=3), stage("core", name=element,
                                                                                    format=format)), pastset=space)

    # Threads 0 and 1 wait in the barrier for thread 2 (and would time out after a second): as in a
    # node, the run ends at thread 2's failure, leaving them to end by themselves.
    begin = time.monotonic()
    with pytest.raises(KernelError, match=r"^kernel .*libkernels\.so:failing: thread 2 on node here returned "
                                          r"PATHS_EFAILED: the kernel's own failure: thread 2 of 3 on here says no$"):
        run_kernel(kernel, range(3), 3, "here", {"fail": "2", "timeout": "1"}, acquire,
                   lambda thread, handle: None, spans_processes=True, until_failure=True)
    assert time.monotonic() - begin < 0.9


@pytest.mark.parametrize("spans_processes", [False, True], ids=["in memory", "through paths.barrier"])
def test_a_barrier_called_again_after_its_timeout_arrives_once(built, space, spans_processes):
    """A thread that waits at a barrier in short turns (calling again after each timeout) arrives
    once, on one node as on many: across processes the barrier is a round of a sum, and a call
    again after a timeout must not move into it again (five moves ahead were refused)."""
    kernel = load_kernel(str(built / "libkernels.so") + ":barrier_in_turns")

    def acquire(thread, element, format):
        return paths.build_path(make_path(stage("reduce-sum", num_threads=2), stage("core", name=element,
                                                                                    format=format)), pastset=space)

    done = run_kernel(kernel, range(2), 2, "here", {}, acquire, lambda thread, handle: None,
                      spans_processes=spans_processes)
    [(name, turns)] = done.reports[0]
    assert name == "turns" and turns >= 3  # it did wait in turns at each barrier


CTRL_C = """
import sys
import paths
from benchmarks.local_trees import tree_handles

handles = tree_handles(2, "flat", paths.PastSet())
print("running", flush=True)
try:
    paths.bench.gsum(handles, 20_000_000, timeout=600)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def test_ctrl_c_ends_a_kernel_run_in_this_process_at_once():
    run = subprocess.Popen([sys.executable, "-c", CTRL_C], stdout=subprocess.PIPE, text=True, cwd=ROOT)

    def running():
        assert run.stdout.readline() == "running\n"
        time.sleep(0.5)  # well into the kernel, which would run for minutes

    out, _, seconds = interrupted(run, running)
    assert (out, run.returncode) == ("interrupted\n", 130)
    assert seconds < 2.0


PARTIAL_KERNEL = """
    import pathlib
    import time

    def kernel(ctx):
        if ctx.threads >= 3 or (ctx.threads == 2 and ctx.arg("repeat") == "1" and ctx.arg("how") == "midway"):
            if ctx.arg("how") == "fail":
                raise RuntimeError("three is too many")
            pathlib.Path(ctx.arg("started")).touch()
            time.sleep(120)
        ctx.report("x", 1.0 + ctx.thread)
"""


def partial_run(tmp_path, how: str, threads: str, *options: str) -> tuple[int, str, str]:
    """`paths run` of PARTIAL_KERNEL, which fails (how=fail) or waits until this sends Ctrl-C
    (ctrl-c, midway), or SIGTERM to `paths run` alone (sigterm): its status, stdout and stderr."""
    started = tmp_path / "started"
    run = subprocess.Popen([sys.executable, "-m", "paths", "run", "partial_kernel:kernel", "--threads", threads,
                            "--repeat", "2", *options, "--arg", f"how={how}", "--arg", f"started={started}"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                           start_new_session=True)
    try:
        if how != "fail":
            deadline = time.monotonic() + RUN_TIMEOUT
            while not started.exists():
                assert time.monotonic() < deadline and run.poll() is None, run.communicate()
                time.sleep(0.05)
            if how == "sigterm":
                run.terminate()
            else:
                os.killpg(run.pid, signal.SIGINT)
        stdout, stderr = run.communicate(timeout=RUN_TIMEOUT)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate()
    return run.returncode, stdout, stderr


@pytest.mark.parametrize("how", ["fail", "ctrl-c", "sigterm"])
def test_a_run_that_fails_or_is_interrupted_keeps_what_it_measured_before(user_module, tmp_path, how):
    """Thread counts 1 and 2 are measured, then 3 fails (or waits until Ctrl-C, or until SIGTERM
    to `paths run` alone, as kill or a batch system's time limit sends it): their table is printed
    and the --csv file written with their runs, and the run exits 1 (130, 143)."""
    user_module("partial_kernel", PARTIAL_KERNEL)
    out = tmp_path / "partial.csv"
    status, stdout, stderr = partial_run(tmp_path, how, "1-4", "--csv", str(out))
    assert status == {"fail": 1, "ctrl-c": 130, "sigterm": 143}[how], stderr
    said = {"fail": "three is too many", "ctrl-c": "paths: interrupted\n", "sigterm": "paths: terminated\n"}
    assert said[how] in stderr
    assert "keeping what was measured before it ended: 4 runs at 1, 2 threads" in stderr
    rows = re.findall(r"^\s+(\d+)\s+1\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", stdout, re.M)
    assert rows == [("1", "1.00000", "1.00000", "1.00000"), ("2", "1.50000", "1.50000", "1.50000")], stdout
    assert [(r["threads"], r["repeat"], r["x"]) for r in csv_rows(out)] == [
        ("1", "0", "1"), ("1", "1", "1"), ("2", "0", "1.5"), ("2", "1", "1.5")]


def test_a_thread_count_the_run_ended_during_says_how_many_runs_its_row_has(user_module, tmp_path):
    """Ctrl-C during the second of two runs at 2 threads: the row of 2 threads is one run's, and
    says so, where it looked like a whole thread count's."""
    user_module("partial_kernel", PARTIAL_KERNEL)
    status, stdout, stderr = partial_run(tmp_path, "midway", "1-2")
    assert status == 130, stderr
    assert "keeping what was measured before it ended: 3 runs at 1, 2 threads" in stderr
    rows = re.findall(r"^\s+(\d+)\s+1\s+[\d.]+\s+[\d.]+\s+[\d.]+(.*)$", stdout, re.M)
    assert rows == [("1", ""), ("2", "  (1 of 2 runs: it ended before the rest)")], stdout


@pytest.mark.parametrize("call, line", [
    (lambda h: paths.bench.mcpi(h, 2.5), "mcpi: expected darts, a whole number from 1 to 2**63-1, got 2.5"),
    (lambda h: paths.bench.mcpi(h, 2**70),
     "mcpi: expected darts, a whole number from 1 to 2**63-1, got 1180591620717411303424"),
    (lambda h: paths.bench.mcpi(h, 10, total_darts=5),
     "mcpi: expected total_darts, a whole number from 10 to 2**63-1, got 5"),
    (lambda h: paths.bench.mcpi(h, 10, seed="7"),
     "mcpi: expected seed, a whole number from -2**63 to 2**63-1, got '7'"),
    (lambda h: paths.bench.mcpi(h, 10, timeout="soon"),
     "mcpi: expected timeout, None or a number of seconds >= 0, got 'soon'"),
    (lambda h: paths.bench.gsum(h, 0), "gsum: expected iters, a whole number from 1 to 2**63-1, got 0"),
    (lambda h: paths.bench.gsum(h, 10, contributors=1.5),
     "gsum: expected contributors, a whole number from 1 to 2**63-1, got 1.5"),
], ids=["fractional darts", "darts beyond 64 bits", "fewer total darts", "a seed as text", "a timeout as text",
        "no iters", "fractional contributors"])
def test_paths_bench_names_its_own_parameter_not_a_command_line_option(space, call, line):
    handles = [paths.build_path(make_path(stage("core", name="S", format="q")), pastset=space)]
    with pytest.raises(ValueError, match=f"^{re.escape(line)}$"):
        call(handles)


def test_paths_bench_refuses_what_is_not_a_handle_and_a_handle_given_twice(space):
    import paths.bench as imported  # importable under its name, as well as an attribute of paths
    assert imported is paths.bench
    for run, given in ((paths.bench.gsum, 5), (paths.bench.mcpi, "ab"), (paths.bench.gsum, None)):
        with pytest.raises(TypeError, match=rf"^{run.__name__}: expected handles, a list of Handles \(build_path gives "
                                            rf"them\), got {re.escape(repr(given))}$"):
            run(given, 10)
    with pytest.raises(TypeError, match=r"^gsum: handles\[1\] is 2, not a Handle \(build_path gives them\)$"):
        paths.bench.gsum([paths.build_path(make_path(stage("core", name="S", format="q")), pastset=space), 2], 10)
    path = make_path(stage("reduce-sum", num_threads=2), stage("core", name="T", format="q"))
    handle = paths.build_path(path, pastset=space)
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"^mcpi: handles\[1\] is handles\[0\] again: each thread needs a handle of "
                                         r"its own \(one build_path each\)$"):
        paths.bench.mcpi([handle, handle], 1000)
    assert time.monotonic() - started < 5  # refused at once, not after the sum's timeout
    doubles = paths.build_path(make_path(stage("core", name="D", format="d")), pastset=space)
    with pytest.raises(ValueError, match=r"^gsum: handles\[0\] is a path to format 'd': the kernel sums 'q' tuples$"):
        paths.bench.gsum([doubles], 10)


def test_python_kernels_in_this_process_say_what_went_wrong_and_where(space):
    def handle(thread, element, format):
        return paths.build_path(make_path(stage("core", name=element, format=format)), pastset=space)

    def run(function):
        return run_kernel(Kernel("test:kernel", function), range(2), 2, "here", {"n": "7"}, handle,
                          lambda thread, h: None)

    def fine(ctx):
        h = ctx.acquire(f"E@{ctx.thread}", "q")
        h.move(int(ctx.arg("n")) + ctx.thread)
        ctx.report("n", h.observe()[0])
        ctx.report("missing", 1.0 if ctx.arg("missing") is None else 0.0)
        ctx.release(h)
        ctx.barrier(timeout=5)

    assert run(fine).reports == {0: [("n", 7.0), ("missing", 1.0)], 1: [("n", 8.0), ("missing", 1.0)]}

    gave_up = threading.Event()

    def raising(ctx):
        if ctx.thread == 1:
            gave_up.set()
            return 1 // 0
        gave_up.wait(10)
        ctx.barrier(timeout=0.2)  # thread 1 never comes: a timeout, after thread 1's failure

    line = raising.__code__.co_firstlineno + 3
    with pytest.raises(KernelError, match=rf"^kernel test:kernel: thread 1 on node here returned PATHS_EFAILED: "
                                          rf"the kernel's own failure: ZeroDivisionError: integer division or modulo "
                                          rf"by zero \(at {re.escape(__file__)}:{line}\)$"):
        run(raising)

    with pytest.raises(KernelError, match=r"thread 0 on node here returned PATHS_EFAILED: the kernel's own failure: "
                                          r"ValueError: paths_report: expected a column name of 1 to 63 letters, "
                                          r"digits and _ \. - / %, got 'a b' \(at "):
        run(lambda ctx: ctx.report("a b" if ctx.thread == 0 else "ok", 1.0))
    for column in paths._native.RUN_COLUMNS:  # kernel, map, ..., threads: a CSV would have it twice
        with pytest.raises(KernelError, match=rf"thread 0 on node here returned PATHS_EFAILED: the kernel's own "
                                              rf"failure: ValueError: paths_report\('{column}'\): paths run writes a "
                                              rf"column of that name itself: choose another \(at "):
            run(lambda ctx: ctx.report(column if ctx.thread == 0 else "ok", 1.0))
    with pytest.raises(KernelError, match=r"thread 0 on node here returned PATHS_EFAILED: the kernel's own failure: "
                                          r"TypeError: ctx\.report\(x, value\): expected a number, got 'abc' \(at "):
        run(lambda ctx: ctx.report("x", "abc" if ctx.thread == 0 else 1.0))
    with pytest.raises(KernelError, match=r"TypeError: ctx\.report\(name, value\): expected a name as text, got 5 "):
        run(lambda ctx: ctx.report(5, 1.0))
    with pytest.raises(KernelError, match=r"TypeError: ctx\.acquire\(element, format\): expected the element's name as "
                                          r"text, got None \(at "):
        run(lambda ctx: ctx.acquire(None, "q"))
    with pytest.raises(KernelError, match=r"TypeError: ctx\.acquire\(element, format\): expected a format as text, "
                                          r"got b'q' \(at "):
        run(lambda ctx: ctx.acquire("E", b"q"))
    with pytest.raises(KernelError, match=r"TypeError: ctx\.arg\(key\): expected a key as text, got 7 \(at "):
        run(lambda ctx: ctx.arg(7))
    with pytest.raises(KernelError, match=r"ValueError: ctx\.acquire\(element, format\): expected the element's name as "
                                          r"text UTF-8 can hold \(no lone surrogates\), got 'E\\ud800' \(at "):
        run(lambda ctx: ctx.acquire("E\ud800", "q"))
    with pytest.raises(KernelError, match=r"ValueError: ctx\.acquire\(element, format\): expected a format without a NUL "
                                          r"character, got 'q\\x00junk' \(at "):
        run(lambda ctx: ctx.acquire("E", "q\x00junk"))
    with pytest.raises(KernelError, match=r"TypeError: acquire\(\): incompatible function arguments\. .* \(at [^\n]*$"):
        run(lambda ctx: ctx.acquire(element="E", fmt="q"))  # the interpreter's own message, on one line
    with pytest.raises(KernelError, match=r"thread [01] on node here returned PATHS_EFAILED: the kernel's own failure: "
                                          r"ValueError: paths_report\('c32'\): a thread reports at most 32 columns \(at "):
        run(lambda ctx: [ctx.report(f"c{i}", 1.0) for i in range(40)] and None)

    def releasing_twice(ctx):
        with pytest.raises(TypeError, match=r"^ctx\.release\(handle\): expected a handle of ctx\.acquire, got None$"):
            ctx.release(None)
        h = ctx.acquire(f"R@{ctx.thread}", "q")
        ctx.release(h)
        with pytest.raises(ValueError, match=rf"^paths_release: given a handle thread {ctx.thread} does not hold "
                                             r"\(released already\?\)$"):
            ctx.release(h)
        with pytest.raises(RuntimeError, match=r"move \(the handle was released\): closed$"):
            h.move(1)

    run(releasing_twice)  # each refusal raised where it was made: the threads end well
    with pytest.raises(KernelError, match=r"a Python kernel returns None or a status \(an int from .*\), "
                                          r"it returned 'done'"):
        run(lambda ctx: "done")
    with pytest.raises(KernelError, match=r"^kernel test:kernel: thread 0 on node here returned PATHS_EINVAL: a bad "
                                          r"argument: a Python kernel returns None or a status \(an int from "
                                          r"-2147483648 to 2147483647\), it returned 1180591620717411303424$"):
        run(lambda ctx: 2**70 if ctx.thread == 0 else None)  # thread 0 alone fails: it is the first


ACQUIRING = r"""
#include <paths.h>
/* Acquires --arg name, or a name that is no UTF-8 text, as "q": fails with what paths_last_error says. */
static int acquire(paths_kernel_ctx *c, const char *name) {
    return paths_acquire(c, name, "q") ? PATHS_OK : paths_fail(c, PATHS_EFAILED, "%s", paths_last_error(c));
}
int acquire_arg(paths_kernel_ctx *c) { return acquire(c, paths_arg(c, "name")); }
int acquire_not_utf8(paths_kernel_ctx *c) { return acquire(c, "\xff\xfe"); }
"""


@pytest.fixture(scope="module")
def acquiring(tmp_path_factory):
    folder = tmp_path_factory.mktemp("acquiring")
    (folder / "acquiring.c").write_text(ACQUIRING)
    compile_c("-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", f"-I{paths.get_include()}", "acquiring.c", "-o",
              "libacquiring.so", cwd=folder)
    return str(folder / "libacquiring.so")


def runtime_acquire(space, hook=None):
    """acquire(thread, element, format) through the runtime of a run of 1 thread on map local, as
    a node's (with `hook` as its acquire hook), building in `space`."""
    runtime = make_runtime(builtin_map("local"), 1).for_run(("localhost",), "1.0")
    runtime.context = BuildContext(space)
    if hook:
        runtime.acquire_hook = hook
    return lambda thread, element, format: runtime.acquire(element, format, thread)


def failure_of(kernel: Kernel, space, args: dict, hook=None) -> str:
    """What thread 0 of a run of `kernel` through runtime_acquire fails with: the line after "the
    kernel's own failure: "."""
    with pytest.raises(KernelError) as failed:
        run_kernel(kernel, [0], 1, "localhost", args, runtime_acquire(space, hook), lambda thread, handle: None)
    head, _, line = str(failed.value).partition(" returned PATHS_EFAILED: the kernel's own failure: ")
    assert head == f"kernel {kernel.name}: thread 0 on node localhost" and "\n" not in line, str(failed.value)
    return line


def test_an_acquire_error_shows_a_long_name_short_and_keeps_its_reason(acquiring, space):
    """paths_last_error was the first 2 KiB of a 200,000-byte name quoted twice, without the
    reason; a Python kernel's exception said it, after 400,000 characters."""
    x60 = "x" * 60
    line = (f"paths_acquire('{x60}...(200000 bytes)', 'q') by thread 0: its path core(format='q', name='{x60}..."
            "(200000 bytes).1.0'): stage 'core': an element's name is 1 to 255 bytes, got 200004 bytes")
    assert failure_of(load_kernel(acquiring + ":acquire_arg"), space, {"name": "x" * 200_000}) == line
    said = []

    def python_kernel(ctx):
        try:
            ctx.acquire("x" * 200_000, "q")
        except ValueError as e:
            said.append(str(e))

    run_kernel(Kernel("test:kernel", python_kernel), [0], 1, "localhost", {}, runtime_acquire(space),
               lambda thread, handle: None)
    assert said == [line]


def test_an_acquire_error_too_long_for_a_line_loses_its_middle_not_its_reason(acquiring, space):
    """A path of 300 delay stages was cut mid-word, 2 KiB in, before the reason."""
    def delays(request):
        return make_path(*[stage("delay", ms=0)] * 300, stage("core", name=request.element, format=request.format))

    line = failure_of(load_kernel(acquiring + ":acquire_arg"), space, {"name": "TOTAL"}, delays)
    assert line.startswith("paths_acquire('TOTAL', 'q') by thread 0: its path delay(ms=0) -> delay(ms=0) -> "), line
    assert line.endswith(" -> core(format='q', name='TOTAL.1.0'): path of 301 stages: a path has at most 256 (its "
                         "first stages: delay(ms=0) -> delay(ms=0) -> delay(ms=0) -> ...)"), line
    assert " [...] " in line and len(line) < 2048


def test_an_element_name_that_is_no_utf8_text_is_refused_naming_the_call(acquiring, space):
    """It was Python's "'utf-8' codec can't decode byte 0xff in position 0", naming neither
    paths_acquire nor the element."""
    assert failure_of(load_kernel(acquiring + ":acquire_not_utf8"), space, {}) == (
        r"paths_acquire('\xff\xfe', 'q') by thread 0: an element's name must be UTF-8 text, and its byte 0 is 0xff")


# ---- the capsule and a program of its own --------------------------------------------------------

def test_a_users_extension_module_runs_c_on_a_handle_through_its_capsule(tmp_path):
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    compile_c("-shared", "-fPIC", "-O2", "-Wall", "-Werror", *config("--cflags"),
              str(EXAMPLES / "extension" / "handle_loops.c"), "-o", f"handle_loops{suffix}", cwd=tmp_path)
    script = f"""
import sys
sys.path.insert(0, {str(tmp_path)!r})
import paths, handle_loops
h = paths.build_path(paths.make_path(paths.stage("core", name="N", format="q")))
capsule = h.capsule()
handle_loops.move_range(capsule, 1000)
print(type(capsule).__name__, handle_loops.observe_sum(capsule, 1000), h.last())
del h  # the capsule keeps the handle alive
handle_loops.move_range(capsule, 5)
print(handle_loops.observe_sum(capsule, 5))
d = paths.build_path(paths.make_path(paths.stage("core", name="D", format="d")))
try:
    handle_loops.move_range(d.capsule(), 1)
except ValueError as e:
    print(e)
try:
    handle_loops.move_range(object(), 1)
except ValueError as e:
    print(e)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["PyCapsule 499500 1000", "10",
                                        "expected a handle on a 'q' element, got format 'd'",
                                        "PyCapsule_GetPointer called with invalid PyCapsule object"]


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    folder = tmp_path_factory.mktemp("program")
    compile_c("-Wall", "-Wextra", "-Werror", str(EXAMPLES / "program" / "squares.c"), *config("--cflags", "--libs"),
              "-o", "squares", cwd=folder)
    return folder / "squares"


def test_a_program_of_its_own_on_a_map(program, tmp_path, user_module):
    user_module("program_hook", f"""
        import paths
        from paths import make_path, stage

        @paths.acquire_hook
        def traced(request):
            return make_path(stage("trace", file="{tmp_path}/" + request.element + ".bin"), request.default())
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHOME"}
    done = subprocess.run([str(program), "1000", "--paths-map", "local", "--paths-sum", "TOTAL",
                           "--paths-acquire", "program_hook:traced"], capture_output=True, text=True, timeout=60,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "squares: node localhost, thread 0 of 1, sum 332833500, total 332833500\n"
    assert sorted(p.name for p in tmp_path.glob("*.bin")) == ["TOTAL.bin", "squares.bin"]  # the hook ran
    assert read_trace(str(tmp_path / "squares.bin")).events[0].op == "move"


def test_a_program_of_its_own_keeps_its_own_functions_and_libpaths_its_own(tmp_path):
    """A program that defines a function named as one of libpaths' internal ones (its clock) calls
    its own, and libpaths goes on calling libpaths' (its waits end)."""
    compile_c("-Wall", "-Wextra", "-Werror", str(EXAMPLES / "program" / "squares.c"), str(C_TESTS / "own_clock.c"),
              *config("--cflags", "--libs"), "-o", "squares", cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHOME"}
    done = subprocess.run([str(tmp_path / "squares"), "1000", "--paths-map", "local", "--paths-sum", "TOTAL"],
                          capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "squares: node localhost, thread 0 of 1, sum 332833500, total "
                                                 "332833500\n"), done.stderr


def test_a_program_of_its_own_finds_its_python_whatever_comes_first_on_path(program, tmp_path):
    """The embedded Python is the virtual environment's the package is in, not the python3 that
    PATH names first (another installation's, with another standard library)."""
    env = {"HOME": os.environ.get("HOME", "/"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([str(program), "10", "--paths-map", "local"], capture_output=True, text=True, timeout=60,
                          env=env, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "squares: node localhost, thread 0 of 1, sum 285, total 285\n"), \
        done.stderr


def test_a_program_starts_paths_once(tmp_path):
    compile_c("-Wall", "-Wextra", "-Werror", str(C_TESTS / "init_again.c"), *config("--cflags", "--libs"),
              "-o", "init_again", cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHOME"}
    done = subprocess.run([str(tmp_path / "init_again"), "--paths-map", "local"], capture_output=True, text=True,
                          timeout=60, env=env, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (
        3, "first run saw 5\n", "paths_init: called twice: a process starts PATHS once (as MPI_Init)\n"
                                 "paths_init: called again after paths_finalize or a failed paths_init: a process "
                                 "starts PATHS once (as MPI_Init)\n")


def test_a_program_of_its_own_as_ranks_of_paths_launch(program, tmp_path):
    """Three ranks of the C program, one per node: each moves its squares into the one element
    `squares` (at the map's home) and takes 1000 of them back, whoever moved them; the sum TOTAL
    of what they took is every square moved."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHOME"}
    done = subprocess.run([sys.executable, "-m", "paths", "launch", "--map", "paper-4w", "--threads", "3", "--policy",
                           "cyclic", "--sum", "TOTAL", "--", str(program), "1000"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = [re.fullmatch(r"\[(\d)\] squares: node (n\d), thread (\d) of 3, sum (\d+), total (\d+)", line)
             for line in done.stdout.splitlines()]
    assert all(found) and len(found) == 3, done.stdout
    assert sorted((m[1], m[2], m[3]) for m in found) == [("0", "n0", "0"), ("1", "n1", "1"), ("2", "n2", "2")]
    assert sum(int(m[4]) for m in found) == 3 * 332833500
    assert {m[5] for m in found} == {str(3 * 332833500)}


@pytest.fixture(scope="module")
def rank_program(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rank_program")
    compile_c("-Wall", "-Wextra", "-Werror", str(C_TESTS / "rank_program.c"), *config("--cflags", "--libs"),
              "-o", "rank_program", cwd=folder)
    return folder / "rank_program"


def start_ranks(program: Path, size: int, *args: str, folder: Path, ranks: int | None = None) -> list[subprocess.Popen]:
    """`size` ranks of the C program under mpirun's variables (no mpirun), on map paper-2w (the
    first `ranks` of them only, when given)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHOME"}
    env.update({"OMPI_COMM_WORLD_SIZE": str(size), "OMPI_COMM_WORLD_LOCAL_SIZE": str(size),
                "PMIX_NAMESPACE": folder.name, "PATHS_MAP": "paper-2w", "PATHS_SUM": "TOTAL",
                "PATHS_RENDEZVOUS_DIR": str(folder)})
    return [subprocess.Popen([str(program), *args], env={**env, "OMPI_COMM_WORLD_RANK": str(r)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="surrogateescape")
            for r in range(size if ranks is None else ranks)]


def test_a_program_that_ends_without_paths_finalize_is_finalized_on_its_way_out(rank_program, tmp_path):
    """Both ranks return 0 from main without paths_finalize: each still meets the other at the
    last barrier on its way out, and exits 0 (not killed by Python's end in a static destructor)."""
    ranks = start_ranks(rank_program, 2, "unfinalized", folder=tmp_path)
    outcomes = [rank.communicate(timeout=60) for rank in ranks]
    assert [(rank.returncode, out) for rank, (out, _) in zip(ranks, outcomes)] == [
        (0, f"rank {r} total 3\n") for r in range(2)], outcomes


@pytest.mark.parametrize("size, args", [(1, ("wait",)), (2, ("sum",))],
                         ids=["in a blocking call", "in paths_init waiting for rank 1"])
def test_ctrl_c_stops_a_program_of_its_own_as_it_would_without_python(rank_program, tmp_path, size, args):
    """The program left SIGINT at its default: Ctrl-C ends it at once, killed by SIGINT (130 in a
    shell), whether it waits in a C call or in paths_init for a rank that never comes; it is not
    turned into a KeyboardInterrupt that C code never sees (which left the program running and
    aborted it in paths_finalize)."""
    rank = start_ranks(rank_program, size, *args, folder=tmp_path, ranks=1)[0]
    try:
        if args == ("wait",):
            assert rank.stdout.readline() == "waiting\n"
        time.sleep(0.5)
        rank.send_signal(signal.SIGINT)
        out, err = rank.communicate(timeout=20)
        assert (rank.returncode, err) == (-signal.SIGINT, ""), err
    finally:
        rank.kill()
        rank.communicate()


@pytest.mark.parametrize("how, status, err", [
    (("fail", "1", "3"), 3, ""),            # returns 3 without paths_finalize
    (("said", "1"), 1, "paths: rank 1 of 2 fails: rank 1 gives up\n"),  # paths_fail(NULL, ...), paths_finalize
    (("said", "1", "bytes"), 1, "paths: rank 1 of 2 fails: rank 1 gives up \udcff\n"),  # no UTF-8: paths_finalize aborted
    (("said_acquired", "1"), 1, "paths: rank 1 of 2 fails: rank 1 gives up\n"),  # an acquire that worked since
    (("said_then_0", "1"), 1, "paths: rank 1 of 2 fails: rank 1 gives up\ngoodbye\n"),  # returns 0: exits 1 all the
                                                                                      # same, its exit handler run
    (("said_unfinalized", "1"), 1, "paths: rank 1 of 2 fails: rank 1 gives up\n"),  # ... without paths_finalize
], ids=["returns a failure", "says it fails", "says it fails in bytes that are no text",
        "says it fails, then acquires", "says it fails, then returns 0", "says it fails, returns 0 unfinalized"])
def test_a_program_rank_that_fails_ends_at_once_though_the_others_wait_for_it(rank_program, tmp_path, how, status,
                                                                              err):
    """Rank 1 fails before it adds its part to the sum rank 0 waits for: returning a failure
    without paths_finalize, or saying so with paths_fail(NULL, ...) before paths_finalize. It
    waits for no rank and ends at once with its status (1 where it said it fails and returned 0),
    and so its launcher ends the run (here the test ends rank 0)."""
    ranks = start_ranks(rank_program, 2, *how, folder=tmp_path)
    try:
        out, got_err = ranks[1].communicate(timeout=20)
        assert (ranks[1].returncode, out, got_err) == (status, "", err)
        assert ranks[0].poll() is None  # still waiting for rank 1's part
    finally:
        for rank in ranks:
            rank.kill()
            rank.communicate()


@pytest.mark.parametrize("args, line", [
    (["--paths-map", "no-such-map"], "paths_init: --paths-map: no built-in map 'no-such-map': expected one of local, "
                                     "multicluster, paper-2w, paper-4w, paper-8w"),
    (["--paths-thread", "3"], "paths_init: --paths-thread 3: expected 0 <= thread < 1 (--paths-threads, 1 when not "
                              "given)"),
    (["--paths-thread", "3", "--paths-threads", "2"], "paths_init: --paths-thread 3: expected 0 <= thread < 2 "
                                                      "(--paths-threads 2)"),
    (["--paths-threads", "0"], "paths_init: --paths-threads 0: expected a whole number >= 1"),
    (["--paths-acquire", "nowhere:hook"], "paths_init: acquire hook 'nowhere:hook': cannot import module 'nowhere' "
                                          "(No module named 'nowhere')"),
    (["--paths-colour", "red"], "paths_init: --paths-colour: unknown option (known: --paths-map, --paths-thread, "
                                "--paths-threads, --paths-policy, --paths-sum, --paths-arg, --paths-acquire, "
                                "--paths-release)"),
    (["--paths-map"], "paths_init: --paths-map: expected a map after it"),
    (["--paths-threads=two"], "paths_init: --paths-threads two: expected a whole number"),
    (["--paths-arg", "n=1", "--paths-arg=n=2"], "paths_init: --paths-arg 'n=2': n is given twice (first n=1): "
                                                "expected each KEY once"),
], ids=["unknown map", "thread out of range", "thread past threads", "no threads", "missing hook",
        "unknown option", "no value", "not a number", "an arg twice"])
def test_a_program_with_bad_paths_options_says_so_in_one_line(program, args, line):
    done = subprocess.run([str(program), "10", *args], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")


def test_a_programs_own_paths_acquire_shows_a_long_name_short_as_a_kernels_does():
    """A Python program's paths.acquire quoted a 200,000-character name whole, three times."""
    from paths.runtime import process_context as runtime

    runtime.start_program(["--paths-map", "local", "--paths-threads", "1", "--paths-thread", "0"])
    try:
        with pytest.raises(ValueError) as refused:
            paths.acquire("x" * 200_000, "q")
        with pytest.raises(ValueError) as not_text:  # no text UTF-8 can hold: quoted with escapes
            paths.acquire("\udcff", "q")
        with pytest.raises(ValueError) as escaped:  # it was quoted whole: 2.4 MB
            paths.acquire("\udcff" * 100_000, "q")
        with pytest.raises(TypeError, match=r"^paths.acquire: element: expected text \(a str\), got b'xx"):
            paths.acquire(b"x" * 300, "q")  # was: a bytes-like object is required, not 'str'
        with pytest.raises(ValueError, match="'zz'"):
            paths.acquire("E", "zz")
        paths.acquire("E", "q").move(1)  # was refused: "element 'E' was acquired with format 'zz'"
    finally:
        runtime.end_program()
    x60 = "x" * 60
    assert str(refused.value) == (
        f"paths_acquire('{x60}...(200000 bytes)', 'q') by thread 0: its path core(format='q', name='{x60}..."
        "(200000 bytes)'): stage 'core': an element's name is 1 to 255 bytes, got 200000 bytes")
    assert str(not_text.value).startswith("paths_acquire('\\udcff', 'q') by thread 0: ")
    escapes = "\\udcff" * 10
    assert str(escaped.value).startswith(f"paths_acquire('{escapes}...(600000 bytes)', 'q') by thread 0: ")
    assert len(str(escaped.value)) < 2048


def test_a_programs_paths_options_end_at_a_double_dash():
    """What follows `--` is the program's own, a --paths-* word too (for a program it starts)."""
    from paths.runtime.process_context import program_options

    options, others = program_options(["a", "--paths-map=local", "b", "--", "--paths-map", "x", "c"], environ={})
    assert (options, others) == ({"--paths-map": ["local"]}, [0, 2, 3, 4, 5, 6])


def test_paths_acquire_in_python_uses_the_process_runtime():
    from paths.runtime import process_context as runtime

    with pytest.raises(ValueError, match="^paths.acquire: this process takes part in no run"):
        paths.acquire("S", "q")
    with pytest.raises(ValueError, match="^paths.runtime_info: this process takes part in no run"):
        paths.runtime_info()
    kept = runtime.start_program(["a", "--paths-map", "paper-4w", "b", "--paths-sum", "S", "--paths-threads", "3",
                                  "--paths-thread=2"])
    try:
        assert kept == [1, 4]  # indices in main's argv: "a" and "b"
        total = paths.acquire("S", "q")  # thread 2 of 3 on n0: its leg of the sum's tree
        assert [s.kind for s in paths.runtime.build.handle_tree(total)[1]] == ["reduce-sum", "core"]
        plain = paths.acquire("P", "q")
        plain.move(7)
        assert plain.observe() == (7,)
    finally:
        runtime.end_program()
    with pytest.raises(ValueError):
        paths.acquire("P", "q")



def test_a_python_stages_exception_a_release_met_is_not_raised_again_by_a_later_call(space):
    """ctx.release sends what a batch holds; the Python stage below refuses it (a ValueError of its
    own, which the release's error says). The barrier after it that times out raises TimeoutError,
    not that stage's exception again."""
    import refusing_stage  # noqa: F401 - registers the kind test-no-negatives
    batched = paths.build_path(make_path(stage("batch", max_moves=100), stage("test-no-negatives"),
                                         stage("core", name="N", format="q")), pastset=space)
    seen = []

    def kernel(ctx):
        if ctx.thread == 1:
            return
        handle = ctx.acquire("N", "q")
        handle.move(-1)
        try:
            ctx.release(handle)
        except ValueError as e:
            seen.append(str(e))
        try:
            ctx.barrier(timeout=0.05)
        except Exception as e:  # noqa: BLE001 - which one is the point
            seen.append(type(e).__name__)

    run_kernel(Kernel("stale", kernel), [0, 1], 2, "here", {}, lambda thread, name, format: batched,
               lambda thread, handle: None)
    assert len(seen) == 2 and "no negatives here, got -1" in seen[0] and seen[1] == "TimeoutError", seen
