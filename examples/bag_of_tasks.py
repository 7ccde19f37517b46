"""Bag of tasks, PastSet's classic: pi by darts, with a master and workers as separate processes.

    paths launch --map local --threads 3 -- python examples/bag_of_tasks.py
    paths launch --map paper-4w --threads 6 --policy cyclic -- python examples/bag_of_tasks.py --tasks 24

Rank 0 is the master: it moves one work tuple (task, darts, seed) per task into element
`tasks`, then one stop tuple per worker. Every other rank is a worker: it takes work tuples with
next-observes (each tuple goes to exactly one worker, whichever is free), throws the darts, and
moves its result (task, hits, darts) into element `results`; the master takes the results back
and prints the estimate of pi. Both elements live at the map's home node; on a map of several
nodes the workers reach them through their nodes' servers. With one rank the master does the
work itself.
"""

import argparse
import math
import random
import sys

import paths

TIMEOUT = 120.0  # seconds any one wait may take


def throw(darts: int, seed: int) -> int:
    """How many of `darts` random points of the unit square fall inside the quarter circle."""
    rng = random.Random(seed)
    return sum(1 for _ in range(darts) if rng.random() ** 2 + rng.random() ** 2 <= 1.0)


def master(size: int, tasks: int, darts: int) -> None:
    work, results = paths.acquire("tasks", "qqq"), paths.acquire("results", "qqq")
    for task in range(tasks):
        work.move((task, darts, 1000 + task))
    for _ in range(max(size - 1, 1)):
        work.move((-1, 0, 0))  # a stop tuple per worker (the master itself, alone)
    if size == 1:
        worker(work, results)
    done, hits, thrown, by = set(), 0, 0, {}
    for _ in range(tasks):
        task, task_hits, task_darts = results.observe(timeout=TIMEOUT)
        done.add(task)
        hits, thrown = hits + task_hits, thrown + task_darts
    assert done == set(range(tasks)), "a task was lost or done twice"
    estimate = 4.0 * hits / thrown
    print(f"bag of tasks: {tasks} tasks of {darts} darts by {max(size - 1, 1)} workers: pi ~ {estimate:.6f} "
          f"(error {abs(estimate - math.pi):.6f})")


def worker(work, results) -> int:
    """Take tasks until a stop tuple; the number of tasks done."""
    count = 0
    while True:
        task, darts, seed = work.observe(timeout=TIMEOUT)
        if task < 0:
            return count
        results.move((task, throw(darts, seed), darts))
        count += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=16, help="work tuples (default 16)")
    parser.add_argument("--darts", type=int, default=50_000, help="darts per task (default 50000)")
    args = parser.parse_args()
    for option, value in (("--tasks", args.tasks), ("--darts", args.darts)):
        if value < 1:
            parser.error(f"{option}: expected at least 1, got {value}")
    info = paths.runtime_info()
    if info.rank == 0:
        master(info.size, args.tasks, args.darts)
    else:
        done = worker(paths.acquire("tasks", "qqq"), paths.acquire("results", "qqq"))
        print(f"worker {info.rank} on {info.node}: {done} tasks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
