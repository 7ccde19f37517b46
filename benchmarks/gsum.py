"""GSum latency benchmark: microseconds per global sum through a reduce-sum tree, against an
OpenMP reduction and an MPI_Allreduce at the same thread counts, in one run.

    python -m benchmarks.gsum --threads 1,2,4,8,16 --tree flat,fanin4

Each cell is the median over --repeat runs of the median round latency (thread 0 times each
round, as the paper's Figure 3); the runs of all columns take turns, so that a drifting machine
shifts them alike. The `outside` column runs the same GSum kernel (benchmarks/gsum.c, on paths.h
alone) built outside the package as a user builds a kernel, `cc -shared -fPIC -O2 -I<paths
include>`, on the first tree: a kernel of your own pays nothing for not being built in.
Threads are pinned by default (thread t of n on CPU t*cpus/n,
so the threads of one group of a tree share a CPU), and so are the OpenMP anchor's threads
(OMP_PLACES, OMP_PROC_BIND=close), and MPI ranks are then bound to cores; --no-pin lets the
scheduler place all of them. The OpenMP anchor runs with OMP_WAIT_POLICY=active and =passive in
turns and keeps the faster (column openmp_wait): spinning threads win while every thread has a
CPU, sleeping ones once threads outnumber CPUs. Trees: `flat` (one sum of all threads) and `faninK` (sums of
at most K contributors, then sums of those). The run ends with the issue's targets: GSum at
most 0.55x MPI_Allreduce at 4, 8 and 16 threads, fan-in 4 no slower than flat at 16, the kernel
built outside at most 1.05x the built-in one at every thread count (TIE when a difference is
within the runs' own spread), trace overhead at most 40 cycles per operation, MCPi at 2 threads
at least 1.8x the darts per second of 1 thread.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
from pathlib import Path

import paths
from paths.runtime.kernel import Kernel, load_kernel

from . import anchors
from .core_ops import positive_int
from .csv_rows import check_outputs
from .local_trees import parse_counts, parse_trees, tree_handles
from .mcpi import TARGET_SPEEDUP, mcpi_scaling
from .trace_overhead import TARGET_CYCLES, trace_overhead_cycles


SOURCE = Path(__file__).resolve().parent / "gsum.c"
OUTSIDE = Path(__file__).resolve().parent.parent / "build" / "gsum-outside" / "libgsum.so"


def gsum_us(n: int, tree: str, rounds: int, pin: bool, kernel: Kernel | None = None) -> float:
    pastset = paths.PastSet()
    handles = tree_handles(n, tree, pastset)
    return paths.bench.gsum(handles, rounds, pin=pin, kernel=kernel).median_us


def outside_kernel() -> Kernel:
    """The GSum kernel built as a user builds one (build/gsum-outside/libgsum.so), loaded."""
    header = Path(paths.get_include()) / "paths.h"
    if not OUTSIDE.exists() or OUTSIDE.stat().st_mtime < max(SOURCE.stat().st_mtime, header.stat().st_mtime):
        OUTSIDE.parent.mkdir(parents=True, exist_ok=True)
        compiler = os.environ.get("CC", "cc")
        built = subprocess.run([compiler, "-shared", "-fPIC", "-O2", f"-I{paths.get_include()}", str(SOURCE), "-o",
                                str(OUTSIDE)], capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"cannot build {SOURCE.name} as a user would ({compiler}, exit {built.returncode}): "
                               f"{built.stderr.strip()[-300:]}")
    return load_kernel(f"{OUTSIDE}:gsum")


def main(argv: list[str] | None = None) -> int:
    try:
        return measure(argv)
    except (anchors.AnchorUnavailable, RuntimeError, OSError) as e:  # an anchor or a kernel that cannot be built
        print(f"benchmarks.gsum: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the anchors' children are reaped on the way out
        print("benchmarks.gsum: interrupted", file=sys.stderr)
        return 130


def measure(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gsum", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=parse_counts, default=parse_counts("1,2,4,8,16"),
                        help="comma-separated thread counts (default 1,2,4,8,16)")
    parser.add_argument("--tree", type=parse_trees, default=parse_trees("flat,fanin4"),
                        help="comma-separated trees: flat, faninK (default flat,fanin4)")
    parser.add_argument("--rounds", type=positive_int, default=2000, help="global sums per run (default 2000)")
    parser.add_argument("--repeat", type=positive_int, default=5,
                        help="runs per cell; the median is shown (default 5)")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                        help="bind each thread (and each MPI rank) to a CPU (default: on)")
    parser.add_argument("--csv", help="also write the table to this CSV file")
    parser.add_argument("--no-targets", action="store_true", help="skip the trace and MCPi target checks")
    args = parser.parse_args(argv)
    if max(args.threads) > anchors.OPENMP_MAX_THREADS:
        parser.error(f"--threads: at most {anchors.OPENMP_MAX_THREADS} (the OpenMP anchor's largest team), "
                     f"got {max(args.threads)}")
    check_outputs(parser, {"--csv": args.csv})

    def interleaved_runs(measures: dict) -> dict:
        """--repeat runs of each measure, taken in turns (a, b, c, a, b, c, ...), so a machine
        that drifts between runs drifts for every column alike."""
        samples = {name: [] for name in measures}
        for _ in range(args.repeat):
            for name, measure in measures.items():
                samples[name].append(measure())
        return samples

    rows = []
    outside = outside_kernel()
    mpi_note = "" if anchors.mpi_available() else " (MPI not installed: apt-get install openmpi-bin libopenmpi-dev)"
    first = args.tree[0]
    header = ["threads"] + [f"gsum_{t}_us" for t in args.tree] + [f"outside_{first}_us", "openmp_us", "openmp_wait",
                                                                   "mpi_us"]
    header += [f"{t}/mpi" for t in args.tree] + [f"{t}/openmp" for t in args.tree] + ["outside/built_in"]
    placement = "threads (PATHS's, OpenMP's) and MPI ranks " + ("pinned" if args.pin else "placed by the scheduler")
    print(f"GSum, median of {args.repeat} runs x {args.rounds} rounds, microseconds per global sum, "
          f"{placement}; OpenMP: the faster of OMP_WAIT_POLICY=active and passive (openmp_wait){mpi_note}")
    cores = len(os.sched_getaffinity(0))
    if max(args.threads) > cores:
        print(f"this machine has {cores} cores: rows of more threads than that (PATHS's, OpenMP's and MPI's alike) "
              "also measure context switches, and so do their targets")
    print("  ".join(f"{h:>13}" for h in header))
    runs_at = {}
    for n in args.threads:
        measures = {t: (lambda t=t: gsum_us(n, t, args.rounds, args.pin)) for t in args.tree}
        measures["outside"] = lambda: gsum_us(n, first, args.rounds, args.pin, outside)
        for wait in anchors.OPENMP_WAIT_POLICIES:
            measures[f"openmp_{wait}"] = lambda wait=wait: anchors.openmp_sum_us(n, args.rounds, wait=wait,
                                                                                  pin=args.pin)
        if anchors.mpi_available():
            measures["mpi"] = lambda: anchors.mpi_allreduce_us(n, args.rounds, bind=args.pin)
        runs_at[n] = interleaved_runs(measures)
        cells = {name: statistics.median(values) for name, values in runs_at[n].items()}
        wait = min(anchors.OPENMP_WAIT_POLICIES, key=lambda w: cells[f"openmp_{w}"])
        omp, mpi = cells[f"openmp_{wait}"], cells.get("mpi")
        row = {"threads": n, **{f"gsum_{t}_us": cells[t] for t in args.tree}, f"outside_{first}_us": cells["outside"],
               "openmp_us": omp, "openmp_wait": wait, "mpi_us": mpi,
               "outside/built_in": cells["outside"] / cells[first]}
        for t in args.tree:
            row[f"{t}/mpi"] = cells[t] / mpi if mpi else None
            row[f"{t}/openmp"] = cells[t] / omp if omp else None
        rows.append(row)
        print("  ".join(f"{_fmt(row[h]):>13}" for h in header), flush=True)

    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=header)
            writer.writeheader()
            writer.writerows(rows)

    print("\nTargets")
    by_threads = {r["threads"]: r for r in rows}

    def over(n: int) -> str:
        return " (more threads than cores)" if n > cores else ""

    for n in (4, 8, 16):
        r = by_threads.get(n)
        if r and r["mpi_us"]:
            best = min(r[f"{t}/mpi"] for t in args.tree)
            _target(f"GSum <= 0.55x MPI_Allreduce at {n} threads{over(n)}", best, 0.55, f"{best:.2f}x")
    if 16 in runs_at and "flat" in args.tree and "fanin4" in args.tree:
        _not_slower(f"fan-in-4 tree <= flat at 16 threads{over(16)}", runs_at[16]["fanin4"], runs_at[16]["flat"])
    for n, runs in runs_at.items():
        _not_slower(f"kernel built outside <= 1.05x built-in at {n} threads", runs["outside"], runs[first], 1.05)
    if not args.no_targets:
        cycles = trace_overhead_cycles(pairs=200_000, runs=args.repeat)
        _target(f"trace overhead <= {TARGET_CYCLES} cycles per operation", cycles, float(TARGET_CYCLES),
                f"{cycles:.1f} cycles")
        ratio = mcpi_scaling(darts=20_000_000, runs=args.repeat)
        _target(f"MCPi at 2 threads >= {TARGET_SPEEDUP:g}x darts/s of 1 thread", TARGET_SPEEDUP / ratio, 1.0,
                f"{ratio:.2f}x")
    return 0


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, str)):
        return str(value)
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def _target(name: str, value: float, bound: float, shown: str) -> None:
    print(f"  {'PASS' if value <= bound else 'MISS'}  {name}: {shown}")


def _not_slower(name: str, runs: list[float], baseline_runs: list[float], factor: float = 1.0) -> None:
    """PASS when the median of `runs` is at most `factor` times the baseline's; TIE when it is
    above by less than the runs' own spread (half the wider min-max range), which this many runs
    cannot tell apart; MISS otherwise."""
    value, baseline = statistics.median(runs), statistics.median(baseline_runs)
    noise = max(max(runs) - min(runs), max(baseline_runs) - min(baseline_runs)) / 2
    verdict = "PASS" if value <= factor * baseline else "TIE " if value - factor * baseline <= noise else "MISS"
    print(f"  {verdict}  {name}: {value:.2f} us vs {baseline:.2f} us, {value / baseline:.3f}x "
          f"(runs spread +/- {noise:.2f} us)")


if __name__ == "__main__":
    sys.exit(main())
