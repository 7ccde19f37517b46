"""Cycles a `trace` stage adds to each operation: `python -m benchmarks.trace_overhead`.

Each run times a C loop of move+observe pairs through [core] and through [trace -> core] (a trace
big enough to record every operation), each on a fresh element. The overhead per operation is the
difference per pair, halved, converted to timestamp-counter ticks with the trace's own calibration
(read from a trace file's header). The median over the runs is compared with the target (issue
11's: at most 40 cycles). Beside it, what the two reads of the clock a traced operation makes cost
on this machine: on a virtual machine whose timestamp counter is emulated they alone can pass it.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile

import paths
import paths._native as native
from paths.runtime.trace_file import read_trace

from .core_ops import positive_int

TARGET_CYCLES = 40       # the paper measured 100-120 cycles per operation
CLOCK_READS = 10_000_000
MAX_EVENTS = 1 << 26     # the trace stage's largest capacity


def pair_ns(pairs: int, trace_file: str | None) -> float:
    """Nanoseconds per move+observe pair through [trace -> core], or [core] when trace_file is None."""
    space = paths.PastSet()
    top = native.create_stage("core", {"name": "overhead", "format": "q"}, None, space)
    core = top
    if trace_file:
        top = native.create_stage("trace", {"file": trace_file, "capacity": 2 * pairs}, core, space)
    handle = top.attach("thread 0")
    try:
        return native.bench.pairs_ns(handle, pairs)
    finally:  # also when interrupted: the trace writes its file before its folder goes
        del handle, top, core, space
        gc.collect()  # releases the trace, which writes its file


def ticks_per_ns(directory: str) -> float:
    """The trace stage's calibration, from the header of a one-event trace."""
    path = os.path.join(directory, "calibration.bin")
    pair_ns(1, path)
    return read_trace(path).ticks_per_ns


def trace_overhead_cycles(pairs: int, runs: int, show=None) -> float:
    """The median over `runs` of the cycles a trace adds per operation; show(run, plain ns,
    traced ns, cycles) is called after each run when given."""
    with tempfile.TemporaryDirectory(prefix="trace-overhead-") as directory:
        rate = ticks_per_ns(directory)
        trace_file = os.path.join(directory, "run.bin")
        overheads = []
        pair_ns(pairs, None)  # warm-up
        for run in range(1, runs + 1):
            plain = pair_ns(pairs, None)
            traced = pair_ns(pairs, trace_file)
            overheads.append((traced - plain) / 2 * rate)
            if show:
                show(run, plain, traced, overheads[-1])
    return statistics.median(overheads)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.trace_overhead",
        description="Measure the cycles a trace stage adds per operation: the time per move+observe pair "
                    "through [trace -> core] minus through [core], halved, in timestamp-counter ticks; "
                    f"median over the runs, against the target of {TARGET_CYCLES} cycles.")
    parser.add_argument("--pairs", type=int, default=1_000_000, help="move+observe pairs per run (default 1000000)")
    parser.add_argument("--runs", type=positive_int, default=5, help="runs; the median is reported (default 5)")
    args = parser.parse_args(argv)
    if not 1 <= args.pairs <= MAX_EVENTS // 2:
        parser.error(f"--pairs must be between 1 and {MAX_EVENTS // 2} (the trace records 2 events per pair)")

    print(f"{'run':>3}  {'core ns/pair':>12}  {'traced ns/pair':>14}  {'overhead cycles/op':>18}")

    def show(run: int, plain: float, traced: float, cycles: float) -> None:
        print(f"{run:>3}  {plain:>12.1f}  {traced:>14.1f}  {cycles:>18.1f}")

    try:
        median = trace_overhead_cycles(args.pairs, args.runs, show)
        with tempfile.TemporaryDirectory() as directory:
            clock_cycles = 2 * native.bench.clock_read_ns(CLOCK_READS) * ticks_per_ns(directory)
    except KeyboardInterrupt:
        print("benchmarks.trace_overhead: interrupted", file=sys.stderr)
        return 130
    verdict = "PASS" if median <= TARGET_CYCLES else "MISS"
    print(f"trace overhead: {median:.1f} cycles per operation (median of {args.runs}), "
          f"target <= {TARGET_CYCLES}: {verdict}")
    print(f"of which the clock: {clock_cycles:.1f} cycles (a traced operation reads it twice; on this machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
