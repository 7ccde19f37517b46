"""PastSet elements under concurrent Python threads: exactly-once next-observes in each producer's
order, identical indexed histories, delta back-pressure that really blocks and resumes, and axe
that returns memory without ever losing an unread tuple. Every wait is bounded: a bug fails a
test, it never hangs it."""

import subprocess
import sys
import textwrap
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor, wait

import pytest

import paths

PRODUCERS = 8
TUPLES_PER_PRODUCER = 50_000
OBSERVERS = 4
INDEXED_READERS = 4
TOTAL = PRODUCERS * TUPLES_PER_PRODUCER
END_OF_WORK = (-1, -1)   # one per observer, moved after every producer has finished
PATIENCE_S = 30          # the longest any call here may block before its test fails
BOUND = 8                # the delta bound of the back-pressure tests


def wait_until(condition, timeout=PATIENCE_S):
    """Polls a condition on C-side state (which has no event to wait on), for at most timeout."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached within the timeout"
        time.sleep(0.001)


def seqs_by_producer(tuples):
    """{producer: [seq, ...]} in the order the (producer, seq) tuples come."""
    seqs = defaultdict(list)
    for producer, seq in tuples:
        seqs[producer].append(seq)
    return seqs


# ---- many producers, next-observers and indexed readers on one element ----------------------


@pytest.fixture(scope="module")
def busy_run():
    """8 producers move (producer, seq) into one "qq" element while 4 next-observers and 4 indexed
    readers read it. Returns (what each observer took, what each reader read, final stats)."""
    e = paths.PastSet().enter("busy", "qq")

    def produce(producer):
        for seq in range(TUPLES_PER_PRODUCER):
            e.move((producer, seq), timeout=PATIENCE_S)

    def observe_until_end_of_work():
        taken = []
        while (t := e.observe(timeout=PATIENCE_S)) != END_OF_WORK:
            taken.append(t)
        return taken

    def read_history():
        return [e.observe(i, timeout=PATIENCE_S) for i in range(TOTAL)]

    with ThreadPoolExecutor(max_workers=PRODUCERS + OBSERVERS + INDEXED_READERS) as pool:
        observers = [pool.submit(observe_until_end_of_work) for _ in range(OBSERVERS)]
        readers = [pool.submit(read_history) for _ in range(INDEXED_READERS)]
        producers = [pool.submit(produce, p) for p in range(PRODUCERS)]
        for producer in producers:
            producer.result()
        for _ in range(OBSERVERS):
            e.move(END_OF_WORK)
        taken = [observer.result() for observer in observers]
        histories = [reader.result() for reader in readers]
    return taken, histories, e.stats()


def test_every_tuple_is_observed_exactly_once(busy_run):
    taken, _, _ = busy_run
    everything = [t for observer in taken for t in observer]
    assert len(everything) == TOTAL
    assert set(everything) == {(p, s) for p in range(PRODUCERS) for s in range(TUPLES_PER_PRODUCER)}


def test_each_observer_sees_each_producer_in_order(busy_run):
    taken, _, _ = busy_run
    for observer in taken:
        for producer, seqs in seqs_by_producer(observer).items():
            assert seqs == sorted(seqs), f"producer {producer} out of order"


def test_indexed_readers_see_one_whole_history_in_order(busy_run):
    _, histories, _ = busy_run
    reference = histories[0]
    assert all(history == reference for history in histories[1:])
    assert seqs_by_producer(reference) == {p: list(range(TUPLES_PER_PRODUCER)) for p in range(PRODUCERS)}


def test_stats_count_every_call(busy_run):
    _, _, stats = busy_run
    moved = TOTAL + OBSERVERS
    assert stats["moves"] == moved
    assert stats["live_tuples"] == moved
    assert stats["observes"] == moved + INDEXED_READERS * TOTAL


# ---- delta back-pressure ---------------------------------------------------------------------


def fill_to_bound(space):
    e = space.enter("flow", "q")
    e.delta(BOUND)
    for value in range(BOUND):
        e.move(value)
    return e


# name -> what lets a producer blocked at the bound go on
RELEASES = {
    "an observe": lambda e: e.observe(timeout=0),
    "a larger bound": lambda e: e.delta(BOUND + 1),
    "no bound": lambda e: e.delta(0),
}


@pytest.mark.parametrize("release", RELEASES.values(), ids=list(RELEASES))
def test_move_at_the_bound_blocks_until_released(space, release):
    e = fill_to_bound(space)
    with ThreadPoolExecutor(max_workers=1) as pool:
        blocked_move = pool.submit(e.move, BOUND, timeout=PATIENCE_S)
        wait_until(lambda: e.stats()["waits"] >= 1)
        finished, _ = wait([blocked_move], timeout=0.1)
        assert not finished, "the move went past the bound"
        assert e.last() == BOUND
        release(e)
        blocked_move.result(timeout=PATIENCE_S)
    assert e.last() == BOUND + 1
    assert e.observe(BOUND) == (BOUND,)


def test_bound_holds_while_many_producers_outpace_one_consumer(space):
    producers, per_producer = 4, 5_000
    e = space.enter("flow", "qq")
    e.delta(BOUND)

    def produce(producer):
        for seq in range(per_producer):
            e.move((producer, seq), timeout=PATIENCE_S)

    def consume():
        return [e.observe(timeout=PATIENCE_S) for _ in range(producers * per_producer)]

    most_unread = 0
    with ThreadPoolExecutor(max_workers=producers + 1) as pool:
        consumer = pool.submit(consume)
        for producer in [pool.submit(produce, p) for p in range(producers)]:
            while not producer.done():
                # last() before first(): a later first() can only understate the unread tuples.
                most_unread = max(most_unread, e.last() - e.first())
            producer.result()
        taken = consumer.result(timeout=PATIENCE_S)
    assert most_unread == BOUND, "the producers never filled the element up to its bound, or overfilled it"
    assert seqs_by_producer(taken) == {p: list(range(per_producer)) for p in range(producers)}


# ---- axe -------------------------------------------------------------------------------------


def test_axe_returns_the_memory_of_a_large_history_as_the_cursor_passes_it(space):
    history = 250_000
    e = space.enter("history", "qd")
    for i in range(history):
        e.move((i, i / 2))
    held = e.stats()
    assert held["live_tuples"] == history
    assert held["bytes_held"] >= history * 16

    e.axe(history - 1)  # nothing read yet: nothing freed, nothing lost
    assert e.stats() == held
    with pytest.raises(paths.AxedError):
        e.observe(0)
    for i in range(history // 2):
        assert e.observe() == (i, i / 2)
    half = e.stats()
    assert half["live_tuples"] == history - history // 2
    assert half["bytes_held"] < held["bytes_held"] * 0.6
    for i in range(history // 2, history):
        assert e.observe() == (i, i / 2)
    freed = e.stats()
    assert freed["live_tuples"] == 1
    assert freed["bytes_held"] < held["bytes_held"] // 20
    e.move((history, 0.0))
    assert e.observe() == (history, 0.0)


def test_axes_ahead_of_many_observers_lose_no_tuple(space):
    """Producers move, observers take tuples through the shared cursor, and an axer keeps axing
    everything moved so far: every tuple still reaches exactly one observer, in each producer's
    order, and the memory comes back as the cursor passes."""
    producers, per_producer, observers = 4, 20_000, 3
    e = space.enter("queue", "qq")
    total = producers * per_producer
    done = threading.Event()

    def produce(producer):
        for seq in range(per_producer):
            e.move((producer, seq), timeout=PATIENCE_S)

    def consume(_):
        taken = []
        while not done.is_set():
            try:
                taken.append(e.observe(timeout=0.01))
            except TimeoutError:
                pass
        return taken

    def axe():
        axes = 0
        while not done.is_set():
            e.axe(e.last())
            axes += 1
        return axes

    with ThreadPoolExecutor(max_workers=producers + observers + 1) as pool:
        takers = [pool.submit(consume, i) for i in range(observers)]
        axer = pool.submit(axe)
        for producer in [pool.submit(produce, p) for p in range(producers)]:
            producer.result(timeout=PATIENCE_S)
        wait_until(lambda: e.first() == total)
        done.set()
        taken = [t.result(timeout=PATIENCE_S) for t in takers]
        assert axer.result(timeout=PATIENCE_S) > 0
    everything = [t for one in taken for t in one]
    assert len(everything) == total, "a tuple was lost or taken twice"
    assert {p: sorted(seqs) for p, seqs in seqs_by_producer(everything).items()} == {
        p: list(range(per_producer)) for p in range(producers)}
    for one in taken:  # each observer sees each producer's tuples in order
        assert all(seqs == sorted(seqs) for seqs in seqs_by_producer(one).values())
    e.axe(total)
    assert e.stats()["live_tuples"] == 0


DAEMONS = textwrap.dedent("""
    import os, signal, sys, threading, time
    import paths

    @paths.stage_kind("test-daemon-pass")
    class Pass:
        def observe(self, below):
            return below.observe()

    ps = paths.PastSet()
    above = [paths.stage("test-daemon-pass")] if sys.argv[2] == "below-python" else []
    def path(name):
        return paths.build_path(paths.make_path(*above, paths.stage("core", name=name, format="q")), pastset=ps)
    def worker(i):
        h = path("E")
        while True:
            h.move((i,))
            h.observe()
    for i in range(4):
        threading.Thread(target=worker, args=(i,), daemon=True).start()
    threading.Thread(target=path("NEVER").observe, daemon=True).start()  # waits for good
    time.sleep(0.3)
    if sys.argv[1] == "ctrl-c":
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
""")


@pytest.mark.parametrize("where", ["stages", "below-python"])
@pytest.mark.parametrize("ending", ["return", "ctrl-c"])
def test_a_program_ends_while_its_daemon_threads_are_in_calls(ending, where):
    """Python ends daemon threads as the interpreter finalizes, from inside their wait for the GIL
    as a call returns: that ended the process with std::terminate (exit 134), every time; and
    below a stage kind written in Python, whose frames then ran without the GIL (exit 134 or 139)."""
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", DAEMONS, ending, where], capture_output=True, text=True,
                              timeout=60)
        assert "terminate called" not in done.stderr
        assert done.returncode == (0 if ending == "return" else -2), done.stderr  # Python ends by the SIGINT


LEFT_RUNNING = textwrap.dedent("""
    import os, signal, sys, threading
    from paths.runtime.kernel import Kernel, run_kernel

    def spin(ctx):
        while True:
            pass

    threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    try:
        run_kernel(Kernel("spin", spin), range(2), 2, "local", {}, lambda t, e, f: None, lambda t, h: None)
    except KeyboardInterrupt:
        sys.exit(130)
""")


def test_a_program_ends_while_the_python_kernel_ctrl_c_left_runs():
    """Ctrl-C leaves a run's kernel threads running: Python kernels, whose threads Python ended
    as it finalized, inside their own frames (exit 134, 'Fatal Python error')."""
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", LEFT_RUNNING], capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stderr) == (130, ""), done.stderr


FIRST_IMPORTED_ELSEWHERE = textwrap.dedent("""
    import _thread, time
    done = []
    def first():
        import paths  # threading is first imported here: its main thread is this one
        done.append(1)
    _thread.start_new_thread(first, ())
    while not done:
        time.sleep(0.01)
    import paths
    KEEP = paths.build_path(paths.make_path(paths.stage("core", name="X", format="q")), pastset=paths.PastSet())
""")


def test_the_thread_that_finalizes_goes_on_whichever_imported_paths():
    """The thread that finalizes the interpreter frees the handles left: it waited for ever where it
    was taken for another thread that came back too late."""
    done = subprocess.run([sys.executable, "-c", FIRST_IMPORTED_ELSEWHERE], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")

