"""The benchmark kernels' `pin`: thread t of n runs only on the (t * cpus // n)-th CPU this
process may use, and the totals stay exact."""

import os
import threading
import time
from collections import Counter

import paths
from benchmarks.local_trees import tree_handles


def _single_cpu_threads() -> Counter:
    """CPU -> how many of this process's threads may run only on that CPU, right now."""
    bound = Counter()
    for tid in os.listdir("/proc/self/task"):
        try:
            cpus = os.sched_getaffinity(int(tid))
        except OSError:  # the thread ended meanwhile
            continue
        if len(cpus) == 1:
            bound[next(iter(cpus))] += 1
    return bound


def _expected_binding(threads: int) -> Counter:
    allowed = sorted(os.sched_getaffinity(0))
    return Counter(allowed[t * len(allowed) // threads] for t in range(threads))


def test_pinned_gsum_threads_sit_in_blocks_on_the_allowed_cpus():
    threads = 2 * len(os.sched_getaffinity(0)) + 1
    space = paths.PastSet()
    handles = tree_handles(threads, "fanin4", space)
    seen: list[Counter] = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            now = _single_cpu_threads()
            if sum(now.values()) == threads:
                seen.append(now)
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = paths.bench.gsum(handles, 300_000, pin=True, timeout=120)
    finally:
        done.set()
        watcher.join()
    assert len(result.latencies) == 300_000  # and the kernel checked every total
    element = space.enter("GSUM", "q")
    assert element.last() == 300_000 and element.observe(299_999) == (threads * 299_999,)
    assert seen, "the kernel's threads were never seen bound to one CPU each"
    assert seen[0] == _expected_binding(threads)


def test_unpinned_kernel_threads_keep_the_process_cpus():
    handles = tree_handles(3, "flat", paths.PastSet())
    seen: list[Counter] = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            seen.append(_single_cpu_threads())
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = paths.bench.mcpi(handles, 30_000_000)
    finally:
        done.set()
        watcher.join()
    assert abs(result.pi - 3.14159) < 0.01
    if len(os.sched_getaffinity(0)) > 1:
        assert all(sum(c.values()) == 0 for c in seen)


def test_pinned_mcpi_counts_every_dart():
    handles = tree_handles(4, "fanin2", paths.PastSet())
    result = paths.bench.mcpi(handles, 4_000_000, pin=True)
    assert 0 < result.hits <= 4_000_000 and abs(result.pi - 3.14159) < 0.01
