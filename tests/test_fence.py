"""fence: what the handles' paths hold back goes down, and paths.fence returns once every move made
through them before it is applied at its element — through a sum, once its round is complete, so
a fence through a sum tree of two processes returns only when the other process's moves of those
rounds are in too (ARMI's rmi_fence)."""

from __future__ import annotations

import json

import pytest
from child_processes import ChildProcesses

import paths
from paths import build_path, make_path, stage
from paths.runtime.server import PathServer

PATIENCE_S = 30


def test_fence_sends_what_a_batch_holds_and_returns_once_it_is_in(space):
    h = build_path(make_path(stage("batch", max_moves=100), stage("core", name="F", format="q")), pastset=space)
    element = space.enter("F", "q")
    h.move_many([(v,) for v in range(42)])
    assert element.last() == 0
    paths.fence([h])
    assert element.last() == 42
    paths.fence(h)  # a handle alone will do; nothing held back: nothing more
    assert element.last() == 42


@pytest.mark.parametrize("buffers", [2, 4])
def test_a_fence_that_times_out_has_put_what_a_batch_held_on_its_way(space, buffers):
    """The batch's send (through a 50 ms crossing) outlasts the fence's 10 ms: TimeoutError, and
    the moves go on all the same, with no later operation of the caller to take them."""
    h = build_path(make_path(stage("batch", max_moves=100, buffers=buffers), stage("delay", ms=50),
                             stage("core", name="FT", format="q")), pastset=space)
    element = space.enter("FT", "q")
    h.move_many([(v,) for v in range(10)])
    with pytest.raises(TimeoutError):
        paths.fence(h, timeout=0.01)
    assert element.observe(9, timeout=PATIENCE_S) == (9,)
    assert [element.observe(i) for i in range(10)] == [(v,) for v in range(10)]
    paths.fence(h, timeout=PATIENCE_S)
    assert element.last() == 10 and h.stage.counters()["moves_sent"] == 10


def test_fence_on_a_plain_path_and_on_an_element_is_immediate(space):
    h = build_path(make_path(stage("core", name="F", format="q")), pastset=space)
    h.move(1)
    paths.fence([h], timeout=0)
    assert space.enter("F", "q").last() == 1


def test_every_handle_is_flushed_before_any_fence_waits(space):
    """Two contributors of one sum, driven by one thread: the first handle's round needs the
    second's held-back move, which a fence of both sends first."""
    path = make_path(stage("batch", max_moves=16), stage("reduce-sum", num_threads=2), stage("core", name="S", format="q"))
    a, b = build_path(path, pastset=space), build_path(path, pastset=space)
    a.move(1)
    b.move(2)
    with pytest.raises(TimeoutError, match="fence of 1 handle"):
        paths.fence([a], timeout=0.05)  # a's round waits for b's move, which b's batch holds
    paths.fence([a, b], timeout=PATIENCE_S)
    assert space.enter("S", "q").observe_range(0, 2) == [(3,)]
    assert a.observe() == (3,) and b.observe() == (3,)


def test_fence_refuses_what_is_not_a_handle(space):
    with pytest.raises(TypeError, match="fence: expected handles, got 3 among them"):
        paths.fence([3])
    with pytest.raises(TypeError, match="fence: expected a Handle or handles, got None"):
        paths.fence(None)


def test_fence_through_a_sum_tree_of_two_processes():
    """This process and a child each reach the server's reduce-sum(2) through batch -> remote and
    move 3 contributions, held back. This process's fence sends its own, then waits for rounds
    that need the child's: it times out until the child fences too; then both return, and the
    element has the three totals."""
    moves = 3
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server, ChildProcesses() as children:
        mine = build_path(make_path(stage("batch", max_moves=64), stage("remote", host=server.endpoint, timeout_ms=5000),
                                    stage("reduce-sum", num_threads=2), stage("core", name="T", format="q")))
        child = children.peer("contributor", server.endpoint, "T", moves)
        for value in range(1, moves + 1):
            mine.move(10 * value)
        child.expect("MOVED", PATIENCE_S)
        element = server.pastset.enter("T", "q")
        with pytest.raises(TimeoutError):
            paths.fence([mine], timeout=0.3)
        assert element.last() == 0  # no round is complete: the child holds its moves back
        child.send("fence")
        child.expect("FENCED", PATIENCE_S)  # this process's moves went down with the first fence
        paths.fence([mine], timeout=PATIENCE_S)
        assert element.observe_range(0, 10) == [(11 * v,) for v in range(1, moves + 1)]
        assert [mine.observe(timeout=PATIENCE_S)[0] for _ in range(moves)] == [11 * v for v in range(1, moves + 1)]
        assert json.loads(child.expect("TOTALS", PATIENCE_S)) == [11 * v for v in range(1, moves + 1)]
        assert child.wait(PATIENCE_S) == 0


def test_fence_reports_a_send_that_failed():
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server:
        h = build_path(make_path(stage("batch", max_moves=100), stage("remote", host=server.endpoint, timeout_ms=2000),
                                 stage("core", name="F", format="q")))
        h.move(1)
    with pytest.raises(ConnectionError, match=r"fence of 1 handle \(batch: at least 0 of 1 moves sent down together "
                                              r"took effect \(the other 1 may have too: the answer was lost\), then "
                                              r"the send failed"):
        paths.fence(h, timeout=PATIENCE_S)


def test_a_fence_of_several_handles_names_the_one_that_failed_and_why(space):
    """The second handle's send fails; the first has an older failure explained (a sum refused its
    batch's send, reported already). The fence names the second handle and its failure, not the
    first handle's old one."""
    old = build_path(make_path(stage("batch", max_moves=3, buffers=1), stage("reduce-sum", num_threads=2),
                               stage("core", name="S", format="q")), pastset=space)
    old.move(0)
    with pytest.raises(RuntimeError, match="batch: 0 of 3 moves sent down together took effect"):
        old.move_many([(v,) for v in range(1, 6)])
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server:
        gone = build_path(make_path(stage("batch", max_moves=100),
                                    stage("remote", host=server.endpoint, timeout_ms=2000),
                                    stage("core", name="F", format="q")))
        gone.move(1)
        paths.fence(gone, timeout=PATIENCE_S)
        gone.move(2)
    with pytest.raises(ConnectionError, match=r"^fence of 2 handles, at handle 1 \(thread \d+\) \(batch: at least 0 of 1 "
                                              r"moves sent down together took effect \(the other 1 may have too: the "
                                              r"answer was lost\), then the send failed \(remote failure\): remote "
                                              r"tcp://127\.0\.0\.1:\d+"):
        paths.fence([old, gone], timeout=PATIENCE_S)
