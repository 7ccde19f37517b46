"""cache: repeated indexed observes are served locally and counted; everything else passes
through untouched, an index the cache cannot hold (a negative one a stage below answers) too.
With prefetch, a miss fetches a window of the history in one request (the history there is
at build with "all"), never serving an axed tuple, right under concurrent moves, in one
request per range bound."""

import contextlib
import signal
import threading
import time

import pytest
from child_processes import ChildProcesses

import paths
from paths import build_path, make_path, stage
from paths.runtime.server import PathServer


def cached(space, capacity=8, name="C"):
    return build_path(make_path(stage("cache", capacity=capacity), stage("core", name=name, format="qd")),
                      pastset=space)


def test_repeated_indexed_observes_hit(space):
    h = cached(space)
    for i in range(5):
        h.move((i, i / 2))
    assert [h.observe(i) for i in range(5)] == [(i, i / 2) for i in range(5)]
    assert [h.observe(i) for i in range(5)] == [(i, i / 2) for i in range(5)]
    counters = h.stage.counters()
    assert (counters["misses"], counters["hits"]) == (5, 5)


def test_direct_mapped_eviction_is_still_correct(space):
    h = cached(space, capacity=2)
    for i in range(6):
        h.move((i, 0.0))
    for _ in range(2):
        assert [h.observe(i)[0] for i in range(6)] == list(range(6))
    assert h.stage.counters()["hits"] == 0  # every index evicted the one two before it
    assert h.observe(5) == (5, 0.0)
    assert h.stage.counters()["hits"] == 1


def test_other_operations_pass_through(space):
    h = cached(space)
    h.move((1, 1.0))
    h.move((2, 2.0))
    assert h.observe() == (1, 1.0)
    assert (h.first(), h.last()) == (1, 2)
    h.axe(1)
    element = space.enter("C", "qd")
    with pytest.raises(IndexError):
        element.observe(0)
    assert h.stage.counters()["hits"] == 0


def test_axe_through_the_cache_stops_serving_freed_tuples(space):
    h = cached(space)
    h.move((7, 7.0))
    h.move((8, 8.0))
    assert h.observe(0) == (7, 7.0) and h.observe(1) == (8, 8.0)
    h.axe(1)
    with pytest.raises(paths.AxedError):
        h.observe(0)  # as without the cache
    assert h.observe(1) == (8, 8.0)
    assert h.stage.counters()["hits"] == 1


@pytest.mark.parametrize("between", [[], [("trace", {"file": "cache-axe.bin"})], [("batch", {"max_moves": 4})],
                                     [("cache", {"capacity": 4})], [("delay", {"ms": 0.1})]],
                         ids=["none", "trace", "batch", "cache", "delay"])
def test_an_axe_made_elsewhere_on_an_element_here_stops_the_copies_at_once(space, between, tmp_path, monkeypatch):
    """The element is in this process and the stages between pass indexed reads and axes down
    unchanged: the cache sees the element's axe point on every hit, whoever axed."""
    monkeypatch.chdir(tmp_path)  # where a trace is written
    h = build_path(make_path(stage("cache", capacity=8), *[stage(kind, **params) for kind, params in between],
                             stage("core", name="C", format="qd")), pastset=space)
    h.move((7, 7.0))
    h.move((8, 8.0))
    assert h.observe(0) == (7, 7.0) and h.observe(1) == (8, 8.0)
    space.enter("C", "qd").axe(1)  # not through the cache
    with pytest.raises(paths.AxedError, match="first live index is 1"):
        h.observe(0)
    assert h.observe(1) == (8, 8.0)
    assert h.stage.counters()["hits"] == 1


@paths.stage_kind("test-cache-own-reads")
class OwnIndexedReads:
    """Answers indexed observes itself (here: from below, unchanged)."""

    def observe_at(self, below, index):
        return below.observe(index)


def test_a_copy_outlives_an_axe_made_elsewhere_past_a_stage_with_its_own_indexed_reads(space):
    """A Python stage that answers observe(i) itself may not serve the element's indices: the
    cache does not take the element's axe point through it, and its copies stay what the tuples
    were until a read through it is refused as axed."""
    h = build_path(make_path(stage("cache", capacity=8), stage("test-cache-own-reads"),
                             stage("core", name="C", format="qd")), pastset=space)
    h.move((7, 7.0))
    assert h.observe(0) == (7, 7.0)
    space.enter("C", "qd").axe(1)
    assert h.observe(0) == (7, 7.0)  # tuples are immutable: the copy is still the tuple that was


@paths.stage_kind("test-cache-axe-answer-lost")
class AxeAnswerLost:
    """Passes an axe on, then fails as if its answer had been lost on the way back."""

    def axe(self, below, index):
        below.axe(index)
        raise TimeoutError("the axe's answer was lost")


def test_an_axe_through_the_cache_that_failed_but_may_have_freed_the_tuples_stops_the_copies(space):
    """An axe that fails may still have taken effect (its answer lost): the cache serves no copy it
    may have freed; reads of them go down, and the element says what they are."""
    h = build_path(make_path(stage("cache", capacity=8), stage("test-cache-axe-answer-lost"),
                             stage("core", name="C", format="qd")), pastset=space)
    h.move_many([(i, 0.0) for i in range(4)])
    assert [h.observe(i) for i in range(4)] == [(i, 0.0) for i in range(4)]
    with pytest.raises(TimeoutError):
        h.axe(2)
    with pytest.raises(paths.AxedError, match="first live index is 2"):
        h.observe(1)
    assert h.observe(2) == (2, 0.0) and h.stage.counters()["hits"] == 1


def test_an_axe_refused_for_its_index_leaves_the_copies_served(space):
    h = cached(space)
    h.move((0, 0.0))
    assert h.observe(0) == (0, 0.0)
    with pytest.raises(IndexError):
        h.axe(5)  # past the history: refused, nothing freed
    assert h.observe(0) == (0, 0.0) and h.stage.counters()["hits"] == 1


def test_across_remote_an_axe_whose_answer_was_lost_stops_the_copies_of_another_handle():
    """An axe sent through a remote stage whose answer never came (the server stopped until the
    client gave up, then went on and did it) stops the copies of a cache above that stage, for
    every handle that shares it."""
    with ChildProcesses() as children:
        server, endpoint = children.paths_serve()
        rest = [stage("remote", host=endpoint, timeout_ms=400), stage("core", name="C", format="qd")]
        axer = build_path(make_path(*rest))
        h = build_path(make_path(stage("cache", capacity=64), *rest))
        probe = build_path(make_path(stage("remote", host=endpoint, timeout_ms=401), stage("core", name="C",
                                                                                           format="qd")))
        axer.move_many([(i, 0.0) for i in range(10)])
        assert [h.observe(i) for i in range(10)] == [(i, 0.0) for i in range(10)]
        server.stop()
        try:
            with pytest.raises(ConnectionError):
                axer.axe(5)  # no answer within timeout_ms
        finally:
            server.signal(signal.SIGCONT)
        deadline = time.monotonic() + PATIENCE_S
        while True:  # the server reads the axe once it runs again (probe: another remote stage)
            try:
                probe.observe(4)
            except paths.AxedError:
                break
            assert time.monotonic() < deadline, "the server never did the axe"
            time.sleep(0.01)
        with pytest.raises(paths.AxedError, match="first live index is 5"):
            h.observe(4)
        assert h.observe(5) == (5, 0.0)


def test_missing_tuple_waits_and_times_out(space):
    h = cached(space)
    with pytest.raises(TimeoutError):
        h.observe(3, timeout=0.05)
    assert h.stage.counters()["misses"] == 1


@paths.stage_kind("python-index")
class PythonIndex:
    """Answers observe_at(-1) with the last tuple, as Python sequences do."""

    def observe_at(self, below, index):
        return below.observe(below.last() - 1 if index == -1 else index)


def test_cache_never_stores_a_negative_index(space):
    h = build_path(make_path(stage("cache", capacity=4), stage("python-index"), stage("core", name="N", format="q")),
                   pastset=space)
    for v in range(5):
        h.move(v)
    assert h.observe(-1) == (4,) and h.observe(-1) == (4,)
    assert [h.observe(i) for i in range(5)] == [(v,) for v in range(5)]
    assert h.stage.counters()["misses"] == 7  # the two negative ones were never cached


# ---- prefetch: a range of the history in one request -----------------------------------------

PATIENCE_S = 30


def prefetching(space, mode="window", name="C", format="qd", capacity=1024, **params):
    return build_path(make_path(stage("cache", capacity=capacity, prefetch=mode, **params),
                                stage("core", name=name, format=format)), pastset=space)


def test_a_miss_fetches_its_window_in_one_request(space):
    element = space.enter("C", "qd")
    element.move_many([(i, i / 2) for i in range(100)])
    h = prefetching(space, window=32)
    assert [h.observe(i) for i in range(100)] == [(i, i / 2) for i in range(100)]
    counters = h.stage.counters()
    assert (counters["misses"], counters["hits"], counters["ranges"], counters["fetched"]) == (4, 96, 4, 100)


def test_a_window_stops_where_the_history_does_and_waits_only_for_its_first_tuple(space):
    element = space.enter("C", "qd")
    element.move_many([(i, 0.0) for i in range(5)])
    h = prefetching(space, window=64)
    assert h.observe(3) == (3, 0.0)
    assert h.stage.counters()["fetched"] == 2  # tuples 3 and 4: what existed
    with pytest.raises(TimeoutError):
        h.observe(5, timeout=0.05)
    element.move((5, 0.0))
    assert h.observe(5, timeout=PATIENCE_S) == (5, 0.0)


def test_prefetch_all_reads_the_history_when_the_first_caller_attaches(space):
    element = space.enter("C", "qd")
    element.move_many([(i, 1.0) for i in range(300)])
    h = prefetching(space, mode="all", capacity=256)
    counters = h.stage.counters()
    assert (counters["ranges"], counters["fetched"]) == (1, 256)  # up to capacity
    assert [h.observe(i)[0] for i in range(256)] == list(range(256))
    assert h.stage.counters()["misses"] == 0
    assert h.observe(299) == (299, 1.0)  # beyond: a miss fetches its window
    assert h.stage.counters()["misses"] == 1


def test_prefetched_copies_before_an_axe_through_the_cache_are_never_served(space):
    element = space.enter("C", "qd")
    element.move_many([(i, 0.0) for i in range(50)])
    h = prefetching(space, window=50)
    assert h.observe(0) == (0, 0.0) and h.stage.counters()["fetched"] == 50
    h.axe(20)
    for i in (0, 10, 19):
        with pytest.raises(paths.AxedError):
            h.observe(i)
    assert h.observe(20) == (20, 0.0)


def test_a_range_refused_as_axed_teaches_the_cache_the_axe_point(space):
    element = space.enter("C", "qd")
    element.move_many([(i, 0.0) for i in range(50)])
    element.axe(30)  # not through the cache
    h = prefetching(space, mode="all", window=10)
    assert h.stage.counters()["fetched"] == 20  # from the axe point: tuples 30 .. 49
    with pytest.raises(paths.AxedError):
        h.observe(5)
    assert h.observe(30) == (30, 0.0) and h.stage.counters()["misses"] == 1


@pytest.mark.parametrize("mode", ["none", "window"])
def test_across_remote_a_read_refused_as_axed_stops_the_cache_serving_older_copies(space, mode):
    """Across a remote stage the element's axe point is not seen at once: an axe made at the element
    leaves the copies as they were until an answer shows it, here a read through the cache
    refused as axed."""
    with PathServer("tcp://127.0.0.1:*", pastset=space).start() as server:
        element = space.enter("C", "qd")
        element.move_many([(i, 0.0) for i in range(50)])
        h = build_path(make_path(stage("cache", capacity=1024, prefetch=mode, **({"window": 40} if mode == "window"
                                                                                  else {})),
                                 stage("remote", host=server.endpoint), stage("core", name="C", format="qd")))
        assert [h.observe(i) for i in range(40)] == [(i, 0.0) for i in range(40)]  # copies of 0 .. 39
        element.axe(30)  # at the element, past the remote stage: its copies stay
        assert h.observe(5) == (5, 0.0)
        with pytest.raises(paths.AxedError, match="first live index is 30"):
            h.observe_range(10, 5)  # passes through, refused: the cache learns the axe point
        for i in (5, 29):
            with pytest.raises(paths.AxedError):
                h.observe(i)
        assert h.observe(30) == (30, 0.0)
        element.axe(45)
        with pytest.raises(paths.AxedError, match="first live index is 45"):
            h.observe(44)  # not held: read below, refused
        with pytest.raises(paths.AxedError):
            h.observe(35)


@pytest.mark.parametrize("mode", ["none", "window", "all"])
def test_across_remote_any_answer_shows_an_axe_made_at_the_element(space, mode):
    """Every answer of the server carries the element's axe point: after an axe made there (here by
    the server's own process; another process's is alike), the next operation through the remote
    stage that goes down, of any kind and of any handle on it, stops the copies before it."""
    with PathServer("tcp://127.0.0.1:*", pastset=space).start() as server:
        element = space.enter("C", "qd")
        element.move_many([(i, 0.0) for i in range(200)])
        rest = [stage("remote", host=server.endpoint), stage("core", name="C", format="qd")]
        h = build_path(make_path(stage("cache", capacity=256, prefetch=mode,
                                       **({"window": 100} if mode == "window" else {})), *rest))
        other = build_path(make_path(*rest))
        assert [h.observe(i) for i in range(100)] == [(i, 0.0) for i in range(100)]
        element.axe(50)
        assert h.observe(10) == (10, 0.0)  # nothing went down since: the copy is served
        assert h.last() == 200  # passes down; its answer shows the axe point
        with pytest.raises(paths.AxedError, match="first live index is 50"):
            h.observe(10)
        element.axe(80)
        other.move((200, 0.0))  # another handle on the remote stage: its answer shows it too
        with pytest.raises(paths.AxedError, match="first live index is 80"):
            h.observe(79)
        assert h.observe(80) == (80, 0.0)
        element.axe(90)
        assert h.observe(200) == (200, 0.0)  # a read that misses (the other handle's move), answered
        with pytest.raises(paths.AxedError, match="first live index is 90"):
            h.observe(85)


@pytest.mark.parametrize("mode", ["none", "all"])
def test_across_remote_an_axe_by_another_handle_on_the_remote_stage_stops_the_copies_at_once(space, mode):
    """Handles of this process that reach the element through one remote stage share what its
    answers showed of the axe point: an axe made through any of them stops the cache's copies,
    and so does a read of one of them refused as axed."""
    with PathServer("tcp://127.0.0.1:*", pastset=space).start() as server:
        space.enter("C", "qd").move_many([(i, 0.0) for i in range(50)])
        rest = [stage("remote", host=server.endpoint), stage("core", name="C", format="qd")]
        h = build_path(make_path(stage("cache", capacity=1024, prefetch=mode), *rest))
        other = build_path(make_path(*rest))
        assert [h.observe(i) for i in range(40)] == [(i, 0.0) for i in range(40)]
        assert h.stage.counters()["misses"] == (40 if mode == "none" else 0)
        other.axe(30)
        for i in (0, 29):
            with pytest.raises(paths.AxedError, match="first live index is 30"):
                h.observe(i)
        assert h.observe(30) == (30, 0.0)
        space.enter("C", "qd").axe(35)  # at the element: seen by the next read that goes down
        with pytest.raises(paths.AxedError, match="first live index is 35"):
            other.observe(31)
        with pytest.raises(paths.AxedError, match="first live index is 35"):
            h.observe(33)  # a copy, stopped by what the other handle's read showed
        assert h.observe(36) == (36, 0.0)


def test_prefetch_with_concurrent_moves_serves_every_tuple_right(space):
    element_name, n = "W", 5000
    writer_handle = build_path(make_path(stage("core", name=element_name, format="qd")), pastset=space)
    readers = [prefetching(space, name=element_name, window=97, id=f"reader {r}") for r in range(3)]
    seen = [[] for _ in readers]

    def write():
        for i in range(n):
            writer_handle.move((i, i * 0.25))

    def read(r):
        seen[r] = [readers[r].observe(i, timeout=PATIENCE_S) for i in range(n)]

    threads = [threading.Thread(target=write)] + [threading.Thread(target=read, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PATIENCE_S)
    assert not any(t.is_alive() for t in threads)
    for r, reader in enumerate(readers):
        assert seen[r] == [(i, i * 0.25) for i in range(n)]
        assert reader.stage.counters()["ranges"] < n


def test_a_window_beyond_the_range_bound_goes_in_several_requests(space):
    element = space.enter("K", "1024s")  # 1 KiB tuples: a range carries at most 4096 of them
    element.move_many([(b"%d" % i,) for i in range(5000)])
    h = prefetching(space, name="K", format="1024s", capacity=6000, window=6000)
    assert h.observe(0)[0].rstrip(b"\0") == b"0"
    counters = h.stage.counters()
    assert (counters["ranges"], counters["fetched"]) == (2, 5000)
    assert [h.observe(i)[0].rstrip(b"\0") for i in range(0, 5000, 499)] == [b"%d" % i for i in range(0, 5000, 499)]
    assert h.stage.counters()["misses"] == 1


def test_window_larger_than_capacity_is_refused(space):
    with pytest.raises(ValueError, match=r"stage 'cache': window \(9\) must not exceed capacity \(8\)"):
        prefetching(space, capacity=8, window=9)
    with pytest.raises(ValueError, match="parameter 'prefetch' must be one of none, all, window, got 'some'"):
        prefetching(space, mode="some")


def test_a_window_without_prefetch_is_refused(space):
    with pytest.raises(ValueError, match=r"stage 'cache': window \(4\) needs prefetch 'window' or 'all'"):
        prefetching(space, mode="none", window=4)
    with pytest.raises(ValueError, match=r"window \(4\) needs prefetch"):
        build_path(make_path(stage("cache", window=4), stage("core", name="C", format="qd")), pastset=space)


@pytest.mark.parametrize("mode", ["window", "all"])
def test_a_window_not_given_is_at_most_the_capacity(space, mode):
    space.enter("C", "qd").move_many([(i, 0.0) for i in range(20)])
    h = prefetching(space, mode=mode, capacity=8)  # the default window, 64, would push itself out
    assert h.observe(12) == (12, 0.0)
    assert h.observe(15) == (15, 0.0)
    counters = h.stage.counters()
    assert counters["misses"] == 1 and counters["fetched"] == (8 if mode == "window" else 16)


def test_a_window_over_remote_is_one_request(space):
    with PathServer("tcp://127.0.0.1:*", pastset=space).start() as server:
        space.enter("R", "qd").move_many([(i, 2.0) for i in range(1500)])  # 24 KB: answered in 2 frames
        h = build_path(make_path(stage("cache", capacity=2048, prefetch="window", window=2048),
                                 stage("remote", host=server.endpoint), stage("core", name="R", format="qd")))
        requests_before = server.native.counters()["frames"]
        assert [h.observe(i) for i in range(1500)] == [(i, 2.0) for i in range(1500)]
        assert server.native.counters()["frames"] - requests_before == 1
        assert h.stage.counters()["ranges"] == 1


@pytest.mark.parametrize("across", ["here", "remote"])
def test_readers_through_caches_never_get_a_tuple_once_an_axe_past_it_returned(space, across):
    """An axer frees the history 50 tuples at a time while readers go over it through caches that
    hold copies of all of it: each read is the right tuple or AxedError, and a read begun after an
    axe returned never gets a tuple that axe freed. Across remote, the axer and the readers reach
    the element through one remote stage."""
    n, step = 2000, 50
    element = space.enter("A", "qd")
    element.move_many([(i, i * 0.5) for i in range(n)])
    with contextlib.ExitStack() as stack:
        if across == "here":
            readers = [prefetching(space, name="A", mode="all", capacity=n, window=64) for _ in range(3)]
            axer = element
        else:
            server = stack.enter_context(PathServer("tcp://127.0.0.1:*", pastset=space).start())
            rest = [stage("remote", host=server.endpoint), stage("core", name="A", format="qd")]
            readers = [build_path(make_path(stage("cache", capacity=n, prefetch="all", window=64, id=f"reader {r}"),
                                            *rest)) for r in range(3)]
            axer = build_path(make_path(*rest))
        axed = [0]  # what the axer has finished: a floor for any read begun later
        wrong = []

        def axe():
            for point in range(step, n + 1, step):
                axer.axe(point)
                axed[0] = point

        def read(h):
            for sweep in range(5):
                for i in range(0, n, 7):
                    floor = axed[0]
                    try:
                        got = h.observe(i, timeout=PATIENCE_S)
                    except paths.AxedError:
                        continue
                    if got != (i, i * 0.5) or i < floor:
                        wrong.append((i, got, floor))

        threads = [threading.Thread(target=axe)] + [threading.Thread(target=read, args=(h,)) for h in readers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert wrong == []
        assert all(h.stage.counters()["fetched"] == n for h in readers)
        for h in readers:
            with pytest.raises(paths.AxedError):
                h.observe(n - 1)
