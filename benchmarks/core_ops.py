"""Cost of one move+observe pair on a PastSet element, single thread, from C and from Python.

The C side is the kernel paths._native.bench.core_pairs_ns (a tight loop with no Python on its
path, on the element itself); "C, through a link" is the same pairs from C as operation values
through a handle on the path [core] (paths._native.bench.axed_pairs_ns: what paths_move and
paths_observe cost a kernel); the Python side times `e.move(i); e.observe()` on a "q" element.
Each side axes the log every 4096 pairs, within its timing, as a long-running consumer would. A C loop
runs at most CHUNK_PAIRS pairs a call, so that Ctrl-C is heard between calls (a second or so
apart). Each side runs --runs times; the median is compared
with its target. A MISS is a finding, not an error: the exit code is 0 after any report, 2 on bad
arguments.

    python -m benchmarks.core_ops [--pairs N] [--runs N] [--csv FILE]
"""

import argparse
import csv
import gc
import statistics
import sys
import time

import paths
from paths._native import bench

TARGET_NS = {"C": 150.0, "C, through a link": 150.0, "Python": 2000.0}  # upper bounds on the median ns per pair
AXE_EVERY = 4096                              # pairs between axes, as in benchmarks/core_ops_loop.c
CHUNK_PAIRS = 10_000_000                      # the most pairs one C loop runs (it hears no Ctrl-C)
CSV_COLUMNS = ["side", "pairs", "runs", "median_ns", "min_ns", "max_ns", "target_ns", "result"]


def python_pairs_ns(pairs):
    """Nanoseconds per e.move(i); e.observe() pair on a fresh "q" element (GC paused, as timeit)."""
    e = paths.PastSet().enter("core-ops", "q")
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        started = time.perf_counter_ns()
        for block_start in range(0, pairs, AXE_EVERY):
            block_end = min(block_start + AXE_EVERY, pairs)
            for i in range(block_start, block_end):
                e.move(i)
                e.observe()
            e.axe(block_end)
        elapsed = time.perf_counter_ns() - started
    finally:
        if gc_was_enabled:
            gc.enable()
    return elapsed / pairs


def in_chunks(pairs, measure):
    """ns per pair of `pairs`, run CHUNK_PAIRS at a time by measure(n) (ns per pair of n)."""
    total, left = 0.0, pairs
    while left:
        n = min(left, CHUNK_PAIRS)
        total += measure(n) * n
        left -= n
    return total / pairs


def c_pairs_ns(pairs):
    def measure(n):
        ns = bench.core_pairs_ns(n)
        if ns < 0:
            raise RuntimeError("the C kernel failed (it could not set up or its checksum was wrong)")
        return ns

    return in_chunks(pairs, measure)


def c_link_pairs_ns(pairs):
    handle = paths.build_path(paths.make_path(paths.stage("core", name="core-ops", format="q")),
                              pastset=paths.PastSet())

    def measure(n):
        ns = bench.axed_pairs_ns(handle, n)  # raises if an operation fails or returns a wrong tuple
        handle.axe(handle.last())  # the log of the chunk's pairs goes, untimed
        return ns

    return in_chunks(pairs, measure)


SIDES = {"C": c_pairs_ns, "C, through a link": c_link_pairs_ns, "Python": python_pairs_ns}


def measure(side, pairs, runs):
    """One report row: the median, min and max ns per pair of `runs` runs against the target."""
    samples = [SIDES[side](pairs) for _ in range(runs)]
    median = statistics.median(samples)
    target = TARGET_NS[side]
    return {
        "side": side,
        "pairs": pairs,
        "runs": runs,
        "median_ns": round(median, 1),
        "min_ns": round(min(samples), 1),
        "max_ns": round(max(samples), 1),
        "target_ns": target,
        "result": "PASS" if median <= target else "MISS",
    }


def print_report(rows, pairs, runs):
    print(f"PastSet move+observe pair, one thread, one 'q' element: median of {runs} runs x {pairs} pairs")
    print(f"{'side':<19}{'median ns':>11}{'min ns':>10}{'max ns':>10}{'target ns':>12}  result")
    for row in rows:
        print(
            f"{row['side']:<19}{row['median_ns']:>11.1f}{row['min_ns']:>10.1f}{row['max_ns']:>10.1f}"
            f"{'<= ' + format(row['target_ns'], 'g'):>12}  {row['result']}"
        )


def positive_int(text):
    """A count an option gives: a whole number from 1 to 2**63-1 (what the C loops count in)."""
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 < value < 2**63:
        raise argparse.ArgumentTypeError(f"expected a number from 1 to 2**63-1, got {value}")
    return value


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.core_ops",
        description=(
            "Measure nanoseconds per move+observe pair on one PastSet element, single thread: "
            "from C (a loop with no Python on its path; on the element, and through a link of the path [core]) and "
            "from Python (e.move(i); e.observe()). "
            "Targets, by row: " + ", ".join(f'"{side}" <= {ns:g} ns' for side, ns in TARGET_NS.items())
            + " per pair; "
            "each row says PASS or MISS. Exits 0 after a report, even with a MISS; 2 on bad arguments."
        ),
    )
    parser.add_argument("--pairs", type=positive_int, default=200_000, metavar="N",
                        help="move+observe pairs per run, on each side (default: %(default)s)")
    parser.add_argument("--runs", type=positive_int, default=5, metavar="N",
                        help="runs per side; the median is reported (default: %(default)s)")
    parser.add_argument("--csv", metavar="FILE",
                        help="also write the rows to FILE (columns: " + ", ".join(CSV_COLUMNS) + ")")
    arguments = parser.parse_args(argv)
    return parser, arguments


def main(argv=None):
    parser, arguments = parse_arguments(argv)
    csv_file = None
    if arguments.csv:
        try:
            csv_file = open(arguments.csv, "w", newline="")
        except OSError as error:
            parser.error(f"--csv: cannot write {arguments.csv!r}: {error.strerror}")
    try:
        rows = [measure(side, arguments.pairs, arguments.runs) for side in SIDES]
    except KeyboardInterrupt:
        print("benchmarks.core_ops: interrupted", file=sys.stderr)
        return 130
    print_report(rows, arguments.pairs, arguments.runs)
    if csv_file:
        with csv_file:
            writer = csv.DictWriter(csv_file, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {arguments.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
