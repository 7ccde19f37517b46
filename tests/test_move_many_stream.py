"""move_many over the wire as one stream (wire.md, MOVE_MANY): its frames go out ahead of their
answers; the server runs a frame that continues a stream only when the frame before it took
effect whole, and ends the whole stream within its first frame's slice. So the tuples take effect
in order, each once, when a frame is cut short (here: by a full delta bound), and a stream never
waits longer than one slice."""

from __future__ import annotations

import struct
import threading
import time

import pytest
from refusing_stage import NoNegatives  # noqa: F401  (registers the kind test-no-negatives)
from wire_frames import (
    BATCH_PAYLOAD, MOVE_MANY, PS_EINVAL, PS_ESTATE, PS_ETIMEDOUT, PS_OK, STREAM_CONTINUES, STREAM_STARTS, TCP, ZMQ, Link,
    encode,
)

import paths
from paths import build_path, make_path, stage
from paths.runtime.server import PathServer

PATIENCE_S = 30
MS = 1_000_000


@pytest.fixture(params=[ZMQ, TCP], ids=["zmq", "tcp"])
def transport(request):
    return request.param


def frame(link: Link, request_id: int, values, argument: int, wait_ns: int) -> bytes:
    payload = b"".join(struct.pack("<q", v) for v in values)
    return encode(MOVE_MANY, payload, request_id=request_id, handle_id=link.id, argument=argument, value=wait_ns)


def reply(link: Link, request_id: int) -> tuple[int, int]:
    answer = link.answer()
    assert (answer["op"], answer["request_id"]) == (MOVE_MANY, request_id)
    return answer["status"], answer["value"]


def history(element) -> list[int]:
    return [element.observe(i)[0] for i in range(element.last())]


def test_a_frame_that_continues_a_cut_stream_is_not_run(space, zmq_context, transport):
    element = space.enter("W", "q")
    element.delta(4)
    element.move_many([(v,) for v in range(4)])  # full: 4 unread
    with PathServer("tcp://127.0.0.1:*", pastset=space).start() as server:
        link = Link(zmq_context, server.endpoint, "W", transport)
        link.send(frame(link, 2, [10, 11, 12], STREAM_STARTS, 20 * MS))
        assert reply(link, 2) == (PS_ETIMEDOUT, 0)  # no room in its slice: cut, nothing moved
        link.send(frame(link, 3, [13, 14], STREAM_CONTINUES, -1))
        assert reply(link, 3) == (PS_ESTATE, 0)  # continues a cut stream: not run
        link.send(frame(link, 4, [13], 2, -1))
        assert reply(link, 4) == (PS_EINVAL, 0)  # neither first nor continuing: malformed
        assert element.last() == 4
        for _ in range(4):
            element.observe()  # room for 4
        link.send(frame(link, 5, [10, 11], STREAM_STARTS, -1))
        link.send(frame(link, 6, [12, 13], STREAM_CONTINUES, -1))
        assert (reply(link, 5), reply(link, 6)) == ((PS_OK, 2), (PS_OK, 2))  # a new stream runs whole
        assert history(element) == [0, 1, 2, 3, 10, 11, 12, 13]
        link.close()


def test_a_frame_that_continues_a_refused_frame_or_none_is_not_run(space, zmq_context, transport):
    """A frame of a stream refused as malformed took no effect, so the frame after it is not run
    (else the stream's tuples would arrive with a gap); nor is a continuing frame with no frame of
    tuples before it on the link."""
    element = space.enter("W", "q")
    with PathServer("tcp://127.0.0.1:*", pastset=space).start() as server:
        link = Link(zmq_context, server.endpoint, "W", transport)
        link.send(frame(link, 2, [1, 2], STREAM_CONTINUES, -1))
        assert reply(link, 2) == (PS_ESTATE, 0)  # nothing before it to continue
        no_whole_tuples = encode(MOVE_MANY, bytes(17), handle_id=link.id, argument=STREAM_CONTINUES, value=-1)
        too_many = frame(link, 0, range(BATCH_PAYLOAD // 8 + 1), STREAM_CONTINUES, -1)  # direct: dropped unread
        # (a ZeroMQ link takes no message longer than its largest frame: it drops its sender's connection)
        refused_frames = (no_whole_tuples,) if transport == ZMQ else (no_whole_tuples, too_many)
        for n, refused in enumerate(refused_frames):
            link.send(frame(link, 10 * n + 3, [10, 11], STREAM_STARTS, -1))
            link.send(refused)
            link.send(frame(link, 10 * n + 4, [12, 13], STREAM_CONTINUES, -1))
            assert reply(link, 10 * n + 3) == (PS_OK, 2)
            assert link.answer()["status"] == PS_EINVAL
            assert reply(link, 10 * n + 4) == (PS_ESTATE, 0)
        assert history(element) == [10, 11] * len(refused_frames)
        link.close()


def test_a_stream_waits_no_longer_than_its_first_frame_allows(space, zmq_context, transport):
    """A continuing frame asks for 10 s, but its stream's slice (50 ms from the first frame) bounds
    it; without that bound the server would wait its own cap of 1 s."""
    element = space.enter("W", "q")
    element.delta(4)
    with PathServer("tcp://127.0.0.1:*", pastset=space).start() as server:
        link = Link(zmq_context, server.endpoint, "W", transport)
        started = time.monotonic()
        link.send(frame(link, 2, [1, 2, 3], STREAM_STARTS, 50 * MS))
        link.send(frame(link, 3, [4, 5], STREAM_CONTINUES, 10_000 * MS))
        link.send(frame(link, 4, [6], STREAM_CONTINUES, 10_000 * MS))
        assert reply(link, 2) == (PS_OK, 3)
        assert reply(link, 3) == (PS_ETIMEDOUT, 1)  # room for one, then the stream's slice ended
        assert time.monotonic() - started < 0.7
        assert reply(link, 4) == (PS_ESTATE, 0)  # after a cut frame: not run
        assert history(element) == [1, 2, 3, 4]
        link.close()


@pytest.mark.parametrize("proto", ["tcp", "zmq"])
def test_a_move_many_cut_by_a_full_bound_goes_on_in_order(proto):
    """20,000 tuples (10 frames) into a bound of 3,000 unread, whose reader pauses longer than a
    slice (0.5 s) twice: streams are cut and started again, and every tuple arrives once, in
    order."""
    count, pauses_every = 20_000, 8_000
    space = paths.PastSet()
    element = space.enter("BOUNDED", "q")
    element.delta(3_000)
    with PathServer("tcp://127.0.0.1:*", pastset=space).start() as server:
        h = build_path(make_path(stage("remote", host=server.endpoint, proto=proto, timeout_ms=1000),
                                 stage("core", name="BOUNDED", format="q")), pastset=paths.PastSet())
        h.last()  # connected
        taken: list[int] = []
        writing = threading.Event()
        writing.set()

        def take() -> None:
            while len(taken) < count and (writing.is_set() or element.last() > element.first()):
                try:
                    taken.append(element.observe(timeout=0.5)[0])
                except TimeoutError:
                    continue
                if len(taken) % pauses_every == 0:
                    time.sleep(0.6)

        reader = threading.Thread(target=take)
        reader.start()
        try:
            h.move_many([(i,) for i in range(count)], timeout=PATIENCE_S)
        finally:
            writing.clear()
            reader.join(PATIENCE_S)
        assert not reader.is_alive()
        assert taken == list(range(count))
        assert element.last() == count
        assert h.stage.counters()["streams_cut"] >= 2  # a stream was cut at each pause, and went on


@pytest.mark.parametrize("proto", ["tcp", "zmq"])
def test_with_a_window_move_many_goes_out_pipelined_and_every_callers_tuples_arrive_in_order(proto):
    """window > 1: a move_many returns once its frames are sent, its answers read by a later
    operation; four callers' streams of 1 to 3 frames each arrive whole, each caller's in order."""
    callers, rounds, sizes = 4, 12, (1, 100, 2048, 2049, 5000)
    space = paths.PastSet()
    with PathServer("tcp://127.0.0.1:*", pastset=space).start() as server:
        path = make_path(stage("remote", host=server.endpoint, proto=proto, window=4, timeout_ms=5000),
                         stage("core", name="PIPELINED", format="q"))
        handles = [build_path(path, pastset=paths.PastSet()) for _ in range(callers)]
        h = handles[0]
        h.last()  # connected
        before = h.stage.counters()
        h.move_many([(-1,)] * 5000)  # 3 frames, answered later
        sent = h.stage.counters()
        assert (sent["requests"] - before["requests"], sent["answers"] - before["answers"]) == (3, 0)
        h.last()
        assert h.stage.counters()["answers"] - sent["answers"] == 4

        def send(caller: int, handle) -> None:
            made = 0
            for r in range(rounds):
                count = sizes[(caller + r) % len(sizes)]
                handle.move_many([(caller << 32 | made + i,) for i in range(count)], timeout=PATIENCE_S)
                made += count
            handle.last()  # every answer read

        threads = [threading.Thread(target=send, args=(c, handles[c])) for c in range(callers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(PATIENCE_S)
        element = space.enter("PIPELINED", "q")
        moved = history(element)[5000:]
        for c in range(callers):
            own = [v & 0xFFFFFFFF for v in moved if v >> 32 == c]
            assert own == list(range(sum(sizes[(c + r) % len(sizes)] for r in range(rounds)))), c
        assert len(moved) == sum(len(own) for own in [[v for v in moved if v >> 32 == c] for c in range(callers)])


@pytest.mark.parametrize("proto", ["tcp", "zmq"])
def test_a_pipelined_move_many_that_fails_at_the_server_is_told_at_the_next_operation(proto):
    """Its call returned when sent; the next operation, not run, reads the failed answer and says
    so (its first tuple moved); nothing sent after it took effect, and the link goes on."""
    policy = paths.ServerPolicy(allow_kinds=frozenset({"test-no-negatives"}))
    space = paths.PastSet()
    with PathServer("tcp://127.0.0.1:*", pastset=space, policy=policy).start() as server:
        h = build_path(make_path(stage("remote", host=server.endpoint, proto=proto, window=4, timeout_ms=5000),
                                 stage("test-no-negatives"), stage("core", name="REFUSED", format="q")),
                       pastset=paths.PastSet())
        h.move_many([(1,), (-2,), (3,)])
        h.move(4)
        with pytest.raises(ValueError, match=r"a pipelined move sent before this call failed \(invalid argument: at "
                                             r"the server: .*got -2\); it and the 1 sent after it did not take "
                                             r"effect \(3 tuples\)"):
            h.last()
        h.move_many([(5,)])
        assert h.last() == 2
        assert history(space.enter("REFUSED", "q")) == [1, 5]
