"""reduce-sum: exact totals through flat and multi-level trees, multi-field tuples, rounds that
never mix however far contributors drift apart, waits that time out without losing a round, and
rounds a timeout left pending still going down when the last caller goes."""

import gc
import threading
import time

import pytest

import paths
from paths import build_path, make_path, stage
from paths.runtime.build import handle_tree


def level_paths(threads, fanins, element=("GSUM", "q")):
    """Paths for `threads` callers through sums of the given fan-ins, first level first:
    fanins=(4, 4) gives four sums of four, then one sum of four."""
    paths_out = []
    for t in range(threads):
        stages, group = [], t
        for level, fanin in enumerate(fanins):
            group //= fanin
            stages.append(stage("reduce-sum", num_threads=fanin, id=f"L{level}g{group}"))
        paths_out.append(make_path(*stages, stage("core", name=element[0], format=element[1])))
    return paths_out


@pytest.mark.parametrize("fanins", [(16,), (4, 4), (2, 2, 4)], ids=["flat", "two-level", "three-level"])
def test_gsum_16_threads_2000_rounds_exact(space, fanins):
    handles = [build_path(p, pastset=space) for p in level_paths(16, fanins)]
    result = paths.bench.gsum(handles, 2000)  # checks every total = 16 * round, in C
    assert len(result.latencies) == 2000 and min(result.latencies) > 0
    element = space.enter("GSUM", "q")
    assert element.last() == 2000  # one move per round reached the element
    assert [element.observe(i)[0] for i in (0, 1, 1999)] == [0, 16, 16 * 1999]


def test_multi_field_tuples_sum_field_by_field(space):
    threads, rounds = 16, 2000
    handles = [build_path(p, pastset=space) for p in level_paths(threads, (4, 4), ("QD", "qd"))]
    wrong = []

    def run(t):
        h = handles[t]
        for r in range(rounds):
            h.move((r + t, 0.5 * t))
            total = h.observe(timeout=60)
            if total != (threads * r + 120, 0.5 * 120):
                wrong.append((t, r, total))

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert wrong == []


def test_rounds_never_mix_when_contributors_drift(space):
    a, b = (build_path(make_path(stage("reduce-sum", num_threads=2), stage("core", name="D", format="q")),
                       pastset=space) for _ in range(2))
    for r in range(4):  # a runs four rounds ahead without observing
        a.move(100 + r)
    with pytest.raises(RuntimeError, match="4 it has not observed"):
        a.move(999)  # a fifth round ahead: only a's own observe could free its slot
    for r in range(4):
        b.move(r)
        assert b.observe(timeout=5) == (100 + 2 * r,)
    assert [a.observe(timeout=5) for _ in range(4)] == [(100 + 2 * r,) for r in range(4)]


def test_observe_times_out_and_the_round_completes_later(space):
    a, b = (build_path(make_path(stage("reduce-sum", num_threads=2), stage("core", name="T", format="q")),
                       pastset=space) for _ in range(2))
    a.move(1)
    with pytest.raises(TimeoutError):
        a.observe(timeout=0.05)
    b.move(2)
    assert a.observe(timeout=5) == (3,)
    assert b.observe(timeout=5) == (3,)


@pytest.mark.parametrize("sums", [1, 2], ids=["one-sum", "chain-of-two"])
def test_downward_timeout_leaves_the_round_pending(space, sums):
    element = space.enter("B", "q")
    element.delta(1)
    element.move(-1)  # the element is full: the (lowest) sum cannot go down yet
    chain = [stage("reduce-sum", num_threads=1) for _ in range(sums)]
    a = build_path(make_path(*chain, stage("core", name="B", format="q")), pastset=space)
    a.move(5, timeout=0.05)  # taken (and handed down the chain); going down times out inside
    with pytest.raises(TimeoutError):
        a.observe(timeout=0.05)
    assert element.observe() == (-1,)  # room again: the waiting observer drives the lowest sum
    assert a.observe(timeout=5) == (5,)
    assert element.last() == 2


@pytest.mark.parametrize("sums", [1, 2], ids=["one-sum", "chain-of-two"])
def test_a_round_left_pending_goes_down_when_the_last_caller_goes(space, sums):
    element = space.enter("L", "q")
    element.delta(1)
    element.move(-1)  # full: the round's way down times out
    chain = [stage("reduce-sum", num_threads=1) for _ in range(sums)]
    a = build_path(make_path(*chain, stage("core", name="L", format="q")), pastset=space)
    a.move(5, timeout=0.05)  # taken: it returned, so it must reach the element
    assert element.observe() == (-1,)  # room again, but nobody observes through the sum
    del a
    gc.collect()  # the last release drives the pending round down
    assert element.last() == 2 and element.observe(1) == (5,)


def test_a_round_that_cannot_go_down_at_release_is_said_on_stderr(space, capfd):
    element = space.enter("F", "q")
    element.delta(1)
    element.move(-1)  # full, and nobody will make room
    a = build_path(make_path(stage("reduce-sum", num_threads=1), stage("core", name="F", format="q")), pastset=space)
    a.move(5, timeout=0.05)
    del a
    gc.collect()
    assert "stage 'reduce-sum': 1 round(s) summed when its last caller left did not go down" in capfd.readouterr().err
    assert element.last() == 1


def test_a_move_many_waits_below_no_longer_than_its_timeout_in_all(space):
    element = space.enter("W", "q")
    element.delta(1)
    element.move(-1)  # full: every round's way down waits for room that does not come
    h = build_path(make_path(stage("reduce-sum", num_threads=1), stage("core", name="W", format="q")), pastset=space)
    begun = time.monotonic()
    h.move_many([1, 2, 3, 4], timeout=0.2)  # four rounds, each driven down as it completes
    assert time.monotonic() - begun < 0.5  # not 0.2 s per round
    assert element.observe() == (-1,)  # room: the pending rounds go down when the handle goes


def test_observe_before_move_is_an_error(space):
    h = build_path(make_path(stage("reduce-sum", num_threads=1), stage("core", name="E", format="q")), pastset=space)
    with pytest.raises(RuntimeError, match="each observe answers one earlier move"):
        h.observe(timeout=1)


def test_formats_that_cannot_be_added_are_refused(space):
    with pytest.raises(ValueError, match="cannot be added"):
        build_path(make_path(stage("reduce-sum", num_threads=2), stage("core", name="S", format="8s")),
                   pastset=space)


def test_counters_report_rounds_and_operations(space):
    handles = [build_path(p, pastset=space) for p in level_paths(4, (2, 2))]
    paths.bench.gsum(handles, 50)
    top = handles[0].stage.counters()
    assert top["operations"] == 2 * 2 * 50  # two callers, a move and an observe per round
    assert top["rounds"] == 50 and top["fan_in"] == 2 and top["links"] == 2
    assert top["bytes"] == 8 * top["operations"]


def test_a_sum_below_a_sum_takes_only_moves(space):
    handles = [build_path(p, pastset=space) for p in level_paths(4, (2, 2))]
    paths.bench.gsum(handles, 50)
    table, top_key = handle_tree(handles[0])
    root = table.live(top_key).below.native.counters()
    assert root["operations"] == 2 * 50  # one move per round from each sum above; no observe
    assert root["rounds"] == 50 and root["links"] == 2
    assert space.enter("GSUM", "q").last() == 50


def test_the_total_is_what_the_element_answers_next(space):
    element = space.enter("N", "q")
    element.move(-1)  # an unread tuple already waits in the element
    h = build_path(make_path(stage("reduce-sum", num_threads=1), stage("core", name="N", format="q")),
                   pastset=space)
    h.move(5)  # goes down as a move and a next-observe in one call: the observe answers -1
    assert h.observe(timeout=5) == (-1,)
    h.move(6)
    assert h.observe(timeout=5) == (5,)
    assert [element.observe(i)[0] for i in range(element.last())] == [-1, 5, 6]
    assert element.first() == 2


def test_observe_at_through_a_sum_lets_the_rounds_go_on(space):
    p = make_path(stage("reduce-sum", num_threads=2), stage("core", name="O", format="q"))
    a, b = build_path(p, pastset=space), build_path(p, pastset=space)
    a.move(1)
    seen = {}
    reader = threading.Thread(target=lambda: seen.setdefault("t", a.observe(0, timeout=10)))
    reader.start()  # waits for tuple 0, which only the next round can bring
    b.move(2)
    assert b.observe(timeout=10) == (3,)
    reader.join(10)
    assert seen == {"t": (3,)} and a.observe(timeout=10) == (3,)
