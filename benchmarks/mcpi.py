"""MCPi benchmark: darts per second through a global sum of hits, by thread count.

    python -m benchmarks.mcpi --threads 1,2 --darts 20000000

Prints pi, the error, seconds and darts per second per thread count (median of --repeat runs),
and the speed-up over one thread (measured first, whether listed or not); with 2 threads listed,
the target: at least 1.8x at 2 threads, PASS or MISS.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys

import paths

from .core_ops import positive_int
from .local_trees import parse_counts, tree_handles

TARGET_SPEEDUP = 1.8  # darts per second at 2 threads over 1 thread's, at least


def mcpi_run(n: int, darts: int) -> paths.bench.MCPiResult:
    return paths.bench.mcpi(tree_handles(n, "fanin4", paths.PastSet()), darts)


def mcpi_rate(n: int, darts: int, runs: int) -> float:
    return statistics.median(mcpi_run(n, darts).darts_per_second for _ in range(runs))


def mcpi_scaling(darts: int, runs: int) -> float:
    """Darts per second at 2 threads over darts per second at 1 thread."""
    return mcpi_rate(2, darts, runs) / mcpi_rate(1, darts, runs)


def report(args: argparse.Namespace) -> None:
    """The table of darts per second by threads, and the 2-thread target. The thread counts take
    turns, run by run, so that a machine that drifts drifts for each alike; a pi further from pi
    than its darts allow (six standard errors) is a wrong sum, not a measurement."""
    counts = [1] + [n for n in args.threads if n != 1]
    results: dict[int, list] = {n: [] for n in counts}
    for _ in range(args.repeat):
        for n in counts:
            results[n].append(mcpi_run(n, args.darts))
    rates = {}
    print(f"{'threads':>8} {'pi':>10} {'error':>10} {'seconds':>9} {'Mdarts/s':>9} {'speed-up':>9}")
    for n in counts:
        rates[n] = statistics.median(r.darts_per_second for r in results[n])
        pi = results[n][0].pi  # every run throws the same darts
        if abs(pi - math.pi) > 6 * math.sqrt(math.pi * (4 - math.pi) / args.darts):
            raise RuntimeError(f"{n} threads estimated pi as {pi}: the global sum of hits is wrong")
        print(f"{n:>8} {pi:>10.6f} {abs(pi - math.pi):>10.2e} {statistics.median(r.seconds for r in results[n]):>9.4f} "
              f"{rates[n] / 1e6:>9.1f} {rates[n] / rates[1]:>8.2f}x")
    if 2 in rates:
        ratio = rates[2] / rates[1]
        print(f"  {'PASS' if ratio >= TARGET_SPEEDUP else 'MISS'}  MCPi at 2 threads >= {TARGET_SPEEDUP:g}x darts/s of "
              f"1 thread: {ratio:.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mcpi", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=parse_counts, default=parse_counts("1,2"))
    parser.add_argument("--darts", type=positive_int, default=20_000_000)
    parser.add_argument("--repeat", type=positive_int, default=5)
    args = parser.parse_args(argv)
    try:
        report(args)
    except (RuntimeError, OSError, ValueError) as e:  # threads or handles this machine cannot give
        print(f"benchmarks.mcpi: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("benchmarks.mcpi: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
