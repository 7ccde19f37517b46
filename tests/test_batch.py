"""batch: each caller's moves go down in bulk, one move_many per buffer, on every trigger (a full
buffer by moves or by bytes, flush_us, another operation of the caller, its release), in order
and each once under many callers and processes; a caller always observes its own moves; a send
that fails is reported by the caller's next operation with how many of its moves took effect."""

from __future__ import annotations

import gc
import os
import re
import threading
import time

import pytest
from caller_threads import assert_each_callers_moves_once_in_order, goes_past_a_stuck_caller, run_callers
from child_processes import ChildProcesses

import paths
from paths import build_path, make_path, stage
from paths.model.cluster_map import load_map_text
from paths.model.reduction_tree import hop
from paths.runtime.server import PathServer
from refusing_stage import NoNegatives  # noqa: F401  (registers the kind test-no-negatives)

PATIENCE_S = 30  # the longest any wait here may take before its test fails


def batched(space, name="B", format="q", **params):
    return build_path(make_path(stage("batch", **params), stage("core", name=name, format=format)), pastset=space)


def eventually(condition, what: str, timeout: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.005)


def test_moves_wait_until_max_moves_are_buffered(space):
    h = batched(space, max_moves=4, buffers=1)
    element = space.enter("B", "q")
    for v in range(3):
        h.move(v)
    assert element.last() == 0
    h.move(3)
    assert element.observe_range(0, 10) == [(0,), (1,), (2,), (3,)]
    counters = h.stage.counters()
    assert (counters["sends"], counters["moves_sent"], counters["capacity"]) == (1, 4, 4)


def test_max_bytes_bounds_a_buffer_of_large_tuples(space):
    h = batched(space, format="16s", max_moves=100, max_bytes=40, buffers=1)  # two 16-byte tuples fit
    element = space.enter("B", "16s")
    h.move(b"a")
    assert element.last() == 0
    h.move(b"b")
    assert element.last() == 2
    assert h.stage.counters()["capacity"] == 2


@pytest.mark.parametrize("format, value", [("q", 7), ("qd", (7, 0.5)), ("256s", b"x")])
def test_a_map_links_batch_sends_that_many_moves_together_whatever_their_size(space, format, value):
    """`batch: 4096` on a link means 4096 moves a message: the stage's default max_bytes (8192)
    would cut a buffer at 1024 'q' tuples, and a map cannot say max_bytes."""
    cluster_map = load_map_text("name: two\nclusters:\n  a: {nodes: a0, cpus: 1}\n  b: {nodes: b0, cpus: 1}\nroot: a0\n"
                                "links:\n  - {between: [a, b], batch: 4096}\n")
    [batch] = [spec for spec in hop(cluster_map, "b0", "a0") if spec.kind == "batch"]
    h = build_path(make_path(batch, stage("core", name="B", format=format)), pastset=space)
    h.move_many([value] * 4096)
    assert h.last() == 4096  # after what the batch holds
    counters = h.stage.counters()
    assert (counters["capacity"], counters["sends"], counters["moves_sent"]) == (4096, 1, 4096)


@pytest.mark.parametrize("buffers", [1, 2])
def test_flush_us_sends_a_buffer_its_caller_left_alone(space, buffers):
    h = batched(space, max_moves=1000, flush_us=300_000, buffers=buffers)
    element = space.enter("B", "q")
    moved_at = time.monotonic()
    for v in range(3):
        h.move(v)
    assert element.last() == 0  # not yet: 0.3 s to go
    eventually(lambda: element.last() == 3, "the timer's send")
    assert time.monotonic() - moved_at >= 0.3
    assert h.stage.counters()["timed_sends"] == 1
    assert element.observe_range(0, 3) == [(0,), (1,), (2,)]


def test_a_caller_observes_its_own_moves(space):
    h = batched(space, max_moves=256)
    for v in range(5):
        h.move(v * 10)
    assert h.observe(4) == (40,)  # its moves went first, then the observe
    assert h.last() == 5
    assert h.observe() == (0,)
    assert h.exchange(50) == (10,)  # not buffered: a move and an observe, passed down as one
    assert h.last() == 6 and h.stage.counters()["moves_sent"] == 5


def test_release_sends_what_a_caller_holds(space):
    h = batched(space, max_moves=256)
    h.move_many([(v,) for v in range(10)])
    element = space.enter("B", "q")
    assert element.last() == 0
    del h
    assert element.observe_range(0, 20) == [(v,) for v in range(10)]


def test_a_full_bound_below_times_the_move_out_and_loses_nothing(space):
    element = space.enter("B", "q")
    element.delta(2)  # at most 2 unread tuples
    h = batched(space, max_moves=2, buffers=1)
    h.move(0)
    h.move(1)  # full: sent, and taken
    h.move(2)
    h.move(3)  # full again: sent, but the bound is full; the moves stay buffered
    with pytest.raises(TimeoutError):
        h.move(4, timeout=0.05)  # no room for it: nothing done
    assert element.observe() == (0,) and element.observe() == (1,)
    h.move(4, timeout=PATIENCE_S)  # the buffer went, so there is room
    assert element.observe() == (2,) and element.observe() == (3,)
    paths.fence(h, timeout=PATIENCE_S)
    assert element.observe() == (4,)
    assert h.stage.counters()["dropped"] == 0


def test_a_caller_going_is_not_held_up_by_another_callers_send_that_waits_below(space, capfd):
    """A caller that goes while its buffer cannot go down (a full bound nobody drains, where
    another caller's send, on the sender thread, waits too) still goes, after its 1 s: its move is
    said on stderr as not sent; the other's still go."""
    path = make_path(stage("batch", max_moves=1, buffers=2), stage("core", name="B", format="q"))
    waiting = goes_past_a_stuck_caller(space, path, "B", PATIENCE_S)
    assert waiting.stage.counters()["dropped"] == 1
    assert "batch: 0 of 1 moves sent down together took effect, then the send failed (timed out)" in capfd.readouterr().err


MANY_CALLERS = {
    "moves": dict(max_moves=7, buffers=1),
    "bytes": dict(max_moves=1000, max_bytes=80, buffers=2),  # 5 'qq' tuples
    "double-buffered": dict(max_moves=16, buffers=2),
    "triple-buffered-timer": dict(max_moves=32, buffers=3, flush_us=200),
    "timer-only": dict(max_moves=100_000, flush_us=100, buffers=1),
}


@pytest.mark.parametrize("config", list(MANY_CALLERS))
def test_many_callers_keep_order_and_lose_nothing(space, config):
    callers, moves = 8, 2000
    element = space.enter("B", "qq")
    path = make_path(stage("batch", **MANY_CALLERS[config]), stage("core", name="B", format="qq"))
    handles = [build_path(path, pastset=space) for _ in range(callers)]
    seen_own = []

    def caller(i):
        h = handles[i]
        for seq in range(moves):
            h.move((i, seq))
            if seq % 301 == 300:  # another operation: everything it moved is in
                seen_own.append(h.last() >= (seq + 1))
        paths.fence(h, timeout=PATIENCE_S)

    run_callers(caller, callers, PATIENCE_S)
    assert_each_callers_moves_once_in_order(element, callers, moves)
    assert all(seen_own) and len(seen_own) == callers * (moves // 301)
    counters = handles[0].stage.counters()
    assert counters["moves_sent"] == callers * moves and counters["dropped"] == 0


@pytest.mark.parametrize("pipelined", [1, 0])
def test_above_a_pipelined_delay_callers_send_their_buffers_themselves(space, pipelined):
    """A pipelined delay takes moves without making them wait: buffers=2 then adds no sender
    thread's hand-off per buffer (only the timer hands one over), and nothing is lost or reordered."""
    callers, moves = 6, 600
    element = space.enter("B", "qq")
    path = make_path(stage("batch", max_moves=16, buffers=2, flush_us=300),
                     stage("delay", ms=0.2, pipelined=pipelined), stage("core", name="B", format="qq"))
    handles = [build_path(path, pastset=space) for _ in range(callers)]

    def caller(i):
        for seq in range(moves):
            handles[i].move((i, seq))
        paths.fence(handles[i], timeout=PATIENCE_S)

    run_callers(caller, callers, PATIENCE_S)
    assert_each_callers_moves_once_in_order(element, callers, moves)
    counters = handles[0].stage.counters()
    assert counters["moves_sent"] == callers * moves and counters["dropped"] == 0
    if pipelined:
        assert counters["handoffs"] == counters["timed_sends"]
    else:
        assert counters["handoffs"] >= callers * moves // 16 - callers


@pytest.mark.parametrize("proto", ["tcp", "zmq"])
def test_processes_batching_into_one_remote_element_keep_order_and_lose_nothing(proto):
    processes, moves = 4, 3000
    configs = [(50, 0, 1), (64, 0, 2), (1000, 500, 2), (256, 200, 3)]  # max_moves, flush_us, buffers
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server, ChildProcesses() as children:
        peers = [children.peer("batcher", server.endpoint, proto, "P", i, moves, *configs[i])
                 for i in range(processes)]
        for peer in peers:
            assert int(peer.expect("DONE ", PATIENCE_S)) >= moves
            assert peer.wait(PATIENCE_S) == 0
        assert_each_callers_moves_once_in_order(server.pastset.enter("P", "qq"), processes, moves)


def test_a_failed_send_is_reported_by_the_next_operation_with_what_took_effect():
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server:
        h = build_path(make_path(stage("batch", max_moves=100), stage("remote", host=server.endpoint, timeout_ms=2000),
                                 stage("core", name="F", format="q")))
        h.move(1)
        paths.fence(h, timeout=PATIENCE_S)
        for v in range(3):
            h.move(v)
    # The server is gone: the three moves cannot go. No answer says so, so the message cannot
    # either (see the next test).
    with pytest.raises(ConnectionError, match=r"batch: at least 0 of 3 moves sent down together took effect \(the "
                                              r"other 3 may have too: the answer was lost\), then the send failed "
                                              r"\(remote failure\): remote tcp://127\.0\.0\.1:\d+"):
        h.last()
    assert h.stage.counters()["dropped"] == 3


@pytest.mark.parametrize("buffers", [1, 2])
def test_sends_on_a_connection_broken_before_say_none_took_effect_and_only_their_own_drops(buffers):
    """The first send after the server went cannot know what became of its moves; the later ones
    are refused unsent (exactly 0 took effect), and each report counts only the moves dropped since
    the one before: together, the moves the stage dropped. With buffers=2 a report also counts the
    move made after the failed send, when the caller made it before it heard (as the sender's send
    fails, or not)."""
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server:
        h = build_path(make_path(stage("batch", max_moves=4, buffers=buffers),
                                 stage("remote", host=server.endpoint, timeout_ms=2000),
                                 stage("core", name="F", format="q")))
        h.move(0)
        paths.fence(h, timeout=PATIENCE_S)
    reports = []
    for _ in range(3):
        try:  # buffers=1: the caller's own send of the full buffer fails; else the sender's, heard of next
            h.move_many([(v,) for v in range(5)])
            h.observe()
        except ConnectionError as e:
            reports.append(str(e))
    after = r"(?:, and the (1) moves made after them were dropped)?" if buffers == 2 else "()"
    first = re.search(r"batch: at least 0 of 4 moves sent down together took effect \(the other 4 may have too: the "
                      rf"answer was lost\), then the send failed \(remote failure\){after}: remote ", reports[0])
    later = [re.search(rf"batch: 0 of 4 moves sent down together took effect, then the send failed \(remote "
                       rf"failure\){after}: remote tcp://127\.0\.0\.1:\d+: not sent: the connection broke earlier",
                       report) for report in reports[1:]]
    assert first and all(later) and len(reports) == 3, reports
    said_after = sum(int(m.group(1) or 0) for m in [first, *later])
    assert h.stage.counters()["dropped"] == 3 * 4 + said_after


@pytest.mark.parametrize("above, held", [
    (stage("batch", max_moves=100), "batch: this process did not make the handle: a forked child inherits its "
                                    "parent's buffers and sender thread"),
    (stage("batch", max_moves=100, buffers=1), "batch: this process did not make the handle: a forked child "
                                               "inherits its parent's buffers, which"),
    (stage("delay", ms=1, pipelined=1), "delay: this process did not make the handle: a forked child inherits its "
                                        "parent's wire and courier thread"),
], ids=["batch", "batch-buffers-1", "pipelined-delay"])
def test_a_forked_child_cannot_move_through_its_parents_stages_and_leaves_what_they_hold_to_the_parent(above, held):
    """The child's copy of a batch holds the parent's unsent moves, and its sender thread (a
    pipelined delay's courier) is not in the child: a move there raises RuntimeError at once, as
    the remote below does, and the child's release sends and says nothing; the parent's moves go
    at its fence. The same path built in the child is the child's own: new stages, new threads."""
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server:
        path = make_path(above, stage("remote", host=server.endpoint), stage("core", name="K", format="q"))
        h = build_path(path)
        h.move(1)
        paths.fence(h, timeout=PATIENCE_S)
        h.move(2)
        h.move(3)  # held by the batch when the child is made
        reader, writer = os.pipe()
        errors, error_writer = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(reader)
                os.dup2(error_writer, 2)
                said = []
                for call in (lambda: h.move(9), h.last):
                    try:
                        call()
                        said.append("no error")
                    except Exception as refused:  # noqa: BLE001  (what the child saw goes to the parent)
                        said.append(f"{type(refused).__name__}: {refused}")
                del h  # its release: nothing to send, nothing to say
                gc.collect()
                own = build_path(path)  # the same path: stages of its own, with their own threads
                own.move(9)
                paths.fence(own, timeout=PATIENCE_S)
                del own
                os.write(writer, "\n".join(said).encode())
            finally:
                os._exit(0)
        os.close(writer)
        os.close(error_writer)
        with os.fdopen(reader, "rb") as child, os.fdopen(errors, "rb") as child_errors:
            said, stderr = child.read().decode().split("\n"), child_errors.read().decode()
            os.waitpid(pid, 0)
        assert all(s.startswith("RuntimeError: ") and held in s for s in said), said
        assert stderr == ""
        paths.fence(h, timeout=PATIENCE_S)
        assert sorted(server.pastset.enter("K", "q").observe_range(0, 4)) == [(1,), (2,), (3,), (9,)]


ANSWER_LATE = """
import time

import paths


@paths.stage_kind("test-answer-late")
class AnswerLate:
    \"\"\"Applies a move_many, then holds its answer 10 s.\"\"\"

    def move_many(self, below, tuples):
        below.move_many(tuples)
        time.sleep(10)
"""


def test_a_send_whose_answer_is_lost_says_its_moves_may_have_taken_effect(user_module):
    """The server applies three moves of a batch, then dies while their answer is held (a stage
    there holds it): the message may not say that none took effect. A move_many with no answer
    says so too."""
    __import__(user_module("answer_late", ANSWER_LATE))
    with ChildProcesses() as children:
        server, endpoint = children.paths_serve("--allow-kinds", "answer_late:test-answer-late")
        to_server = [stage("remote", host=endpoint), stage("test-answer-late"), stage("core", name="L", format="q")]
        batched = build_path(make_path(stage("batch", max_moves=100, buffers=1), *to_server))
        plain = build_path(make_path(*to_server))
        at_server = build_path(make_path(stage("remote", host=endpoint), stage("core", name="L", format="q")))
        for v in range(3):
            batched.move(v)
        failed = []
        sender = threading.Thread(target=lambda: failed.append(pytest.raises(ConnectionError, batched.last).value))
        sender.start()  # flushes the three moves, then waits for their answer
        eventually(lambda: at_server.last() == 3, "the three moves at the server")
        server.signal(9)
        sender.join(PATIENCE_S)
        with pytest.raises(ConnectionError, match=re.escape("move_many (at least 0 of 3 tuples moved)")):
            plain.move_many([(3,), (4,), (5,)])
    assert re.search(r"batch: at least 0 of 3 moves sent down together took effect \(the other 3 may have too: the "
                     r"answer was lost\)", str(failed[0]))


def test_moves_sent_ahead_whose_answers_were_lost_are_said_to_may_not_have_taken_effect(user_module):
    """Above a pipelined remote, sends of three go ahead; the server applies the first, holds its
    answer, and dies. The send that then fails may not say that the moves sent before it did not
    take effect: three did."""
    __import__(user_module("answer_late", ANSWER_LATE))  # registered once per process, whichever test is first
    with ChildProcesses() as children:
        server, endpoint = children.paths_serve("--allow-kinds", "answer_late:test-answer-late")
        h = build_path(make_path(stage("batch", max_moves=3, buffers=1),
                                 stage("remote", host=endpoint, timeout_ms=5000, window=4),
                                 stage("test-answer-late"), stage("core", name="A", format="q")))
        at_server = build_path(make_path(stage("remote", host=endpoint), stage("core", name="A", format="q")))
        for v in range(6):  # two sends, pipelined: neither waits for its answer
            h.move(v)
        eventually(lambda: at_server.last() == 3, "the first send's moves at the server")
        server.signal(9)
        failed = None
        for v in range(6, 6 + 3 * 20):  # a send finds the connection gone
            try:
                h.move(v)
            except ConnectionError as e:
                failed = str(e)
                break
    assert failed and re.search(r"the \d+ moves sent down before them may not have taken effect", failed), failed


def test_a_send_failing_on_the_sender_thread_is_reported_by_the_next_move():
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server:
        h = build_path(make_path(stage("batch", max_moves=4, buffers=2),
                                 stage("remote", host=server.endpoint, timeout_ms=2000),
                                 stage("core", name="F", format="q")))
        h.move_many([(v,) for v in range(4)])  # handed to the sender thread
        paths.fence(h, timeout=PATIENCE_S)
    h.move_many([(v,) for v in range(4)])  # handed over; the sender finds the server gone
    eventually(lambda: h.stage.counters()["dropped"] == 4, "the sender's failed send")
    with pytest.raises(ConnectionError, match=r"batch: at least 0 of 4 moves sent down together took effect"):
        h.move(9)
    h.move(10)  # reported once: the next move is buffered again


@pytest.mark.parametrize("buffers", [1, 2])
def test_moves_a_pipelined_remote_below_dropped_are_counted_off_and_said(buffers):
    """A pipelined remote (window=2) answers a send before its moves took effect. The server's path
    refuses -2: the sends of [1, -2] and [3, 4] were counted as sent, but only 1 took effect. The
    send that hears of it, [5, 6], says that the 3 moves sent down before it did not take effect
    either, and the counters count them dropped, not sent, when the error comes. With buffers=1 the
    move of 6 sends [5, 6] and fails; with buffers=2 the sender's failure is heard by the caller's
    first move after the sender recorded it (each move looks first), 9 at the latest (which waits for
    the buffer of [5, 6]): 7, 8 or 9, as the sender's pace has it. That move is not taken, and what
    the caller made before it after [5, 6] (a buffer handed over, [7, 8], or the one filling) goes
    too."""
    policy = paths.ServerPolicy(allow_kinds=frozenset({"test-no-negatives"}))
    values = (1, -2, 3, 4, 5, 6, 7, 8, 9, 10)
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), policy=policy).start() as server:
        h = build_path(make_path(stage("batch", max_moves=2, buffers=buffers),
                                 stage("remote", host=server.endpoint, timeout_ms=5000, window=2),
                                 stage("test-no-negatives"), stage("core", name="P", format="q")),
                       pastset=paths.PastSet())
        failures = []
        for v in values:
            try:
                h.move(v)
            except ValueError as e:
                failures.append((v, str(e), h.stage.counters()))
        assert len(failures) == 1, failures
        v, message, counters = failures[0]
        assert v in ((6,) if buffers == 1 else (7, 8, 9)), failures
        made = values.index(v) + (buffers == 1)  # the failed move of 6 took its tuple into the buffer
        after = made - 1 - 5  # made before the caller heard, after the failed [5, 6]
        said = f", and the {after} moves made after them were dropped" if after else ""
        assert f"(batch: 0 of 2 moves sent down together took effect, then the send failed (invalid argument), and " \
               f"the 3 moves sent down before them did not take effect{said}: remote" in message, message
        assert (counters["moves_sent"], counters["dropped"]) == (1, made - 1), counters
        moved = [1] + [m for m in values if m > v]
        assert h.observe_range(0, h.last(), timeout=PATIENCE_S) == [(m,) for m in moved]
        counters = h.stage.counters()
        assert (counters["moves_sent"], counters["dropped"]) == (len(moved), made - 1)


def test_a_pass_through_operation_that_hears_of_a_pipelined_remotes_drop_counts_it_off():
    """The moves went down to a pipelined remote (window=8), which answered them at once; the
    server refused -2. The last() that hears of it counts the 5 moves dropped, not sent."""
    policy = paths.ServerPolicy(allow_kinds=frozenset({"test-no-negatives"}))
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), policy=policy).start() as server:
        h = build_path(make_path(stage("batch", max_moves=2, buffers=2),
                                 stage("remote", host=server.endpoint, timeout_ms=5000, window=8),
                                 stage("test-no-negatives"), stage("core", name="P", format="q")),
                       pastset=paths.PastSet())
        for v in (1, -2, 3, 4, 5, 6):
            h.move(v)
        with pytest.raises(ValueError, match=r"it and the 2 sent after it did not take effect \(5 tuples\)"):
            h.last()
        counters = h.stage.counters()
        assert (counters["moves_sent"], counters["dropped"]) == (1, 5), counters


@pytest.mark.parametrize("below", ["remote window=8", "pipelined delay"])
def test_moves_sent_ahead_of_a_server_that_went_are_counted_off_and_said(below):
    """The server goes after one move took effect. Five more go down as one send, which a
    pipelined stage below (a remote with window=8, or a pipelined delay) takes without waiting for
    its answer, which never comes. The fence that hears of it says that those 5 may not have
    taken effect, and the batch counts them dropped, not sent."""
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server:
        ahead = [stage("remote", host=server.endpoint, timeout_ms=2000, window=8)] if below.startswith("remote") else \
                [stage("delay", ms=1, pipelined=1), stage("remote", host=server.endpoint, timeout_ms=2000)]
        h = build_path(make_path(stage("batch", max_moves=100), *ahead, stage("core", name="G", format="q")))
        h.move(1)
        assert h.last() == 1
    for v in range(5):
        h.move(v)
    said = r"the 5 tuples of pipelined moves sent before it were not answered \(they may not have taken effect\)" \
        if below.startswith("remote") else \
        r"delay: at least 0 of 5 moves sent ahead took effect \(the other 5 may have too: the answer was lost\)"
    with pytest.raises(ConnectionError, match=said):
        paths.fence(h, timeout=PATIENCE_S)
    counters = h.stage.counters()
    assert (counters["moves_sent"], counters["dropped"]) == (1, 5), counters


def test_a_move_many_whose_own_send_fails_counts_only_its_tuples_that_took_effect(space):
    """buffers=1: the move_many sends each buffer it fills itself. Its first buffer (a held move and
    two of its tuples) goes; its second (its last three) is refused at once by the sum below, which
    holds 4 rounds ahead of a caller's observes: two of its five tuples moved, not five."""
    path = make_path(stage("batch", max_moves=3, buffers=1), stage("reduce-sum", num_threads=2),
                     stage("core", name="S", format="q"))
    h = build_path(path, pastset=space)
    h.move(0)
    with pytest.raises(RuntimeError, match=r"\(2 of 5 tuples moved\).*batch: 0 of 3 moves sent down together took "
                                           r"effect"):
        h.move_many([(v,) for v in range(1, 6)])
    counters = h.stage.counters()
    assert (counters["moves_sent"], counters["dropped"]) == (3, 3)


def test_a_move_whose_buffer_a_sum_refuses_does_not_claim_four_moves_unobserved(space):
    """Three moves went down and were taken; the second buffer of three is refused whole by the sum
    (4 rounds ahead at most). The move that sent it is refused, and says the moves sent down
    together did not fit: the caller has 3 moves the sum holds, not 4."""
    h = build_path(make_path(stage("batch", max_moves=3, buffers=1), stage("reduce-sum", num_threads=2),
                             stage("core", name="S", format="q")), pastset=space)
    for v in range(5):
        h.move(v)
    with pytest.raises(RuntimeError) as refused:
        h.move(5)
    assert re.fullmatch(r"thread \d+ move \(batch: 0 of 3 moves sent down together took effect, then the send "
                        r"failed \(wrong state\): reduce-sum: a sum holds 4 rounds ahead of a caller's observes, and "
                        r"these 3 moves do not fit after the 3 this caller has not observed yet: observe first\): "
                        r"wrong state", str(refused.value)), refused.value
    alone = build_path(make_path(stage("reduce-sum", num_threads=2), stage("core", name="T", format="q")),
                       pastset=space)
    for v in range(4):
        alone.move(v)
    with pytest.raises(RuntimeError, match=r"^thread \d+ move \(reduce-sum: a sum holds 4 rounds ahead of a caller's "
                                           r"observes, and this caller has moved 4 it has not observed yet: observe "
                                           r"first\): wrong state$"):
        alone.move(4)


@pytest.mark.parametrize("buffers", [1, 2])
def test_a_move_many_counts_only_its_tuples_that_took_effect_whoever_sent_them(space, buffers):
    """Four buffers of three above a sum that holds 4 rounds ahead: the first goes, the second is
    refused whole. With buffers=2 the sender sends both while the move_many fills the third (which
    is dropped, if the move_many handed it over before it heard): 3 of 12 moved either way."""
    h = build_path(make_path(stage("batch", max_moves=3, buffers=buffers), stage("reduce-sum", num_threads=2),
                             stage("core", name="S", format="q")), pastset=space)
    after = r"(, and the 3 moves made after them were dropped)?" if buffers == 2 else ""
    with pytest.raises(RuntimeError, match=re.escape("(3 of 12 tuples moved)") + r".*batch: 0 of 3 moves sent down "
                       r"together took effect, then the send failed \(wrong state\)" + after + r": reduce-sum: a sum "
                       r"holds 4 rounds ahead of a caller's observes, and these 3 moves do not fit after the 3 this "
                       r"caller has not observed yet: observe first\)"):
        h.move_many([(v,) for v in range(12)])
    counters = h.stage.counters()
    assert counters["moves_sent"] == 3 and counters["dropped"] in ((3, 6) if buffers == 2 else (3,))


def test_moves_after_a_failed_send_are_dropped_until_the_caller_hears_of_it(space):
    """What took effect of a caller's moves is a prefix of them. The sender's send of a's moves 4-6
    is refused (the sum holds 4 rounds ahead); move 7, made before a heard of it and sent by the
    timer, is dropped too: it must not become a's fourth contribution. Once a heard, its next move
    is."""
    path = make_path(stage("batch", max_moves=3, buffers=3, flush_us=50000), stage("reduce-sum", num_threads=2),
                     stage("core", name="S", format="q"))
    a, b = build_path(path, pastset=space), build_path(path, pastset=space)
    a.move_many([(v,) for v in range(1, 8)])  # 1-3 and 4-6 handed to the sender, 7 left to the timer
    eventually(lambda: a.stage.counters()["dropped"] == 4, "the refused send and the move after it")
    for r in range(1, 5):
        b.move(100 * r)
    element = space.enter("S", "q")
    eventually(lambda: element.last() == 3, "three rounds")
    with pytest.raises(RuntimeError, match=r"batch: 0 of 3 moves sent down together took effect, then the send "
                                           r"failed \(wrong state\), and the 1 moves made after them were dropped"):
        a.last()
    a.move(8)
    paths.fence([a, b], timeout=PATIENCE_S)
    assert [element.observe(i) for i in range(4)] == [(101,), (202,), (303,), (408,)]


def test_a_move_many_waiting_in_slices_counts_off_what_an_earlier_slice_took_and_the_batch_dropped():
    """Python waits in slices of 0.1 s. The element is full (a delta bound nobody drains): the
    move_many's first call takes 4 tuples into the buffer, whose send times out, and keeps them
    there; later calls try again. The server then dies: the buffer is dropped, and the message
    may not count the 4 tuples the first call took."""
    with ChildProcesses() as children:
        server, endpoint = children.paths_serve()
        to_server = [stage("remote", host=endpoint), stage("core", name="D", format="q")]
        full = build_path(make_path(*to_server))
        full.delta(2)
        full.move_many([(0,), (1,)])
        h = build_path(make_path(stage("batch", max_moves=4, buffers=1), *to_server))
        failed = []
        mover = threading.Thread(target=lambda: failed.append(
            pytest.raises(ConnectionError, h.move_many, [(v,) for v in range(8)], timeout=PATIENCE_S).value))
        mover.start()
        eventually(lambda: h.stage.counters()["operations"] > 3, "the move_many's calls, slice after slice")
        server.signal(9)
        mover.join(PATIENCE_S)
    assert "move_many (at least 0 of 8 tuples moved)" in str(failed[0]), failed


GATE, AT_GATE = threading.Event(), threading.Event()


@paths.stage_kind("test-batch-gate")
class Gate:
    """Holds the moves of caller 0 (the first field) until GATE opens."""

    def move_many(self, below, tuples):
        if tuples[0][0] == 0:
            AT_GATE.set()
            GATE.wait(PATIENCE_S)
        below.move_many(tuples)


def test_one_callers_slow_send_holds_up_no_other_callers(space):
    """The sender thread is stuck sending caller 0's buffer; caller 1, whose fence would wait for
    its own buffer behind it, sends it itself, and its moves are applied while caller 0's wait."""
    path = make_path(stage("batch", max_moves=2, buffers=2), stage("test-batch-gate"), stage("core", name="G", format="qq"))
    slow, fast = build_path(path, pastset=space), build_path(path, pastset=space)
    GATE.clear()
    AT_GATE.clear()
    try:
        slow.move_many([(0, 0), (0, 1)])  # handed to the sender, which waits at the gate
        assert AT_GATE.wait(PATIENCE_S)
        fast.move_many([(1, 0), (1, 1)])
        paths.fence([fast], timeout=5.0)
        assert space.enter("G", "qq").observe_range(0, 2) == [(1, 0), (1, 1)]
    finally:
        GATE.set()
    paths.fence([slow], timeout=PATIENCE_S)
    assert space.enter("G", "qq").observe_range(2, 2) == [(0, 0), (0, 1)]


def test_a_timer_does_not_poll_a_caller_blocked_in_an_operation(space):
    """With flush_us, a caller blocked in an observe holds its buffer, empty (the observe sent what
    it held). Another caller's move wakes the sender, which finds the blocked one busy: it does not
    look at it again and again while it waits (it did, every 100 us: most of a CPU)."""
    h, other = batched(space, max_moves=16, flush_us=1000000), batched(space, max_moves=16, flush_us=1000000)
    assert h.stage is other.stage
    timed_out = []

    def observe():
        try:
            h.observe(5, timeout=2.0)
        except TimeoutError:
            timed_out.append(True)

    started = time.process_time()
    blocked = threading.Thread(target=observe)
    blocked.start()
    time.sleep(0.2)
    other.move(1)
    blocked.join()
    assert timed_out and time.process_time() - started < 0.3


def test_an_observe_that_reports_a_failed_send_says_so_and_not_that_it_moved_nothing(space):
    """The sender's second buffer does not fit in the sum's 4 rounds ahead: the caller's observe
    fails with the sum's status, explained as that send's failure and the sum's reason for it, not
    as an observe that answers no move of its caller (it made six)."""
    h = build_path(make_path(stage("batch", max_moves=3, buffers=2), stage("reduce-sum", num_threads=2),
                             stage("core", name="S", format="q")), pastset=space)
    h.move_many([(v,) for v in range(6)])
    eventually(lambda: h.stage.counters()["dropped"] == 3, "the sender's refused send")
    with pytest.raises(RuntimeError) as refused:
        h.observe()
    assert re.fullmatch(r"thread \d+ observe \(batch: 0 of 3 moves sent down together took effect, then the send "
                        r"failed \(wrong state\): reduce-sum: a sum holds 4 rounds ahead of a caller's observes, and "
                        r"these 3 moves do not fit after the 3 this caller has not observed yet: observe first\): "
                        r"wrong state", str(refused.value)), refused.value


@paths.stage_kind("test-batch-breaker")
class Breaker:
    """Takes `after` moves, then refuses every other with an OSError."""

    def __init__(self, after: int):
        self.after, self.taken = after, 0

    def move(self, below, t):
        if self.taken >= self.after:
            raise OSError("disk full")
        below.move(t)
        self.taken += 1


@pytest.mark.parametrize("above", [stage("batch", max_moves=5, buffers=1), stage("batch", max_moves=5, buffers=2),
                                   stage("delay", ms=1, pipelined=1)],
                         ids=["batch-caller-sends", "batch-sender-thread-sends", "pipelined-delay-courier-sends"])
def test_a_python_stages_exception_from_a_send_reaches_the_caller_as_itself_with_a_note(space, above):
    """The caller gets the Python stage's own exception, of its own type, noted with the call and
    what took effect, whichever thread made the send: the caller's, or the stage's own (a
    batch's sender, a delay's courier), whose failure the caller hears of later."""
    h = build_path(make_path(above, stage("test-batch-breaker", after=3), stage("core", name="B", format="q")),
                   pastset=space)
    with pytest.raises(OSError) as refused:
        for v in range(5):
            h.move(v)  # with buffers=1 the fifth is the caller's own send
        eventually(lambda: h.stage.counters()["dropped"] > 0, "the send of the stage's own thread")
        h.last()  # hears of it
    assert str(refused.value) == "disk full" and refused.type is OSError
    assert "test-batch-breaker: OSError: disk full" in refused.value.__notes__[-1], refused.value.__notes__
    assert space.enter("B", "q").observe_range(0, 3) == [(0,), (1,), (2,)]


def test_contributors_batched_above_a_sum_get_every_round_total(space):
    """A contributor's observe sends its held-back move first (a lone move: a sum takes it as one
    contribution), so rounds go on; a held-back move of another contributor is what a round waits for."""
    path = make_path(stage("batch", max_moves=8), stage("reduce-sum", num_threads=2), stage("core", name="S", format="q"))
    h = [build_path(path, pastset=space) for _ in range(2)]
    totals = [[], []]

    def contributor(i):
        for r in range(200):
            h[i].move(r * (1 if i == 0 else 100))
            totals[i].append(h[i].observe(timeout=PATIENCE_S)[0])

    threads = [threading.Thread(target=contributor, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PATIENCE_S)
    assert totals[0] == totals[1] == [101 * r for r in range(200)]
    h[0].move(1)
    with pytest.raises(TimeoutError):
        h[0].observe(timeout=0.05)  # the other contributor's move of the round is not there


def test_bad_parameters_name_the_parameter(space):
    with pytest.raises(ValueError, match="parameter 'buffers' must be between 1 and 8, got 9"):
        batched(space, buffers=9)
    with pytest.raises(ValueError, match="parameter 'max_moves' must be between 1 and 1048576, got 0"):
        batched(space, max_moves=0)
    with pytest.raises(ValueError, match="stage 'batch': needs a stage below it"):
        paths._native.create_stage("batch", {}, None, space)
