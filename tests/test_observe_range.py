"""observe_range: tuples index, index + 1, ... that exist, at most count of them, as one operation —
on an element, through stages, and over the wire as one request whose answer streams in frames
(wire.md, "Ranges"), at most 4 MiB of tuples: a larger range is refused, clearly, at each end."""

from __future__ import annotations

import struct

import pytest
from wire_frames import OBSERVE_RANGE, PING, PS_EINVAL, PS_OK, RANGE_MAX_BYTES, TCP, ZMQ, Link, encode

import paths
from paths import build_path, make_path, stage
from paths.runtime.server import PathServer

PATIENCE_S = 30
ROWS = 3000  # 'qd' tuples: 48,000 bytes, answered in 3 frames of at most 16 KiB


def filled(space, name="E", n=ROWS):
    element = space.enter(name, "qd")
    element.move_many([(i, i * 0.5) for i in range(n)])
    return element


def test_an_element_gives_what_exists_from_index(space):
    element = filled(space, n=10)
    assert element.observe_range(7, 100) == [(i, i * 0.5) for i in range(7, 10)]
    assert element.observe_range(0, 2) == [(0, 0.0), (1, 0.5)]
    with pytest.raises(TimeoutError):
        element.observe_range(10, 5, timeout=0.05)  # waits for its first tuple only
    with pytest.raises(IndexError, match=r"observe_range\(-1, 5\): expected an index >= 0"):
        element.observe_range(-1, 5)


def test_an_axed_start_names_the_axe_point(space):
    element = filled(space, n=10)
    element.axe(4)
    with pytest.raises(paths.AxedError, match=r"observe_range\(2, 3\): tuple 2 was freed by axe \(first live index "
                                              r"is 4\)"):
        element.observe_range(2, 3)
    assert element.observe_range(4, 2) == [(4, 2.0), (5, 2.5)]


def test_a_range_beyond_the_bound_is_refused_before_anything_is_sent(space):
    element = filled(space, n=1)
    most = RANGE_MAX_BYTES // 16
    with pytest.raises(ValueError, match=rf"observe_range\(0, {most + 1}\): expected a count from 1 to {most} "
                                         r"\(4 MiB of 16-byte tuples\): one range is bounded"):
        element.observe_range(0, most + 1)
    with pytest.raises(ValueError, match="expected a count from 1"):
        element.observe_range(0, 0)


@pytest.mark.parametrize("proto", ["tcp", "zmq", "ipc"])
def test_a_remote_range_is_one_request_streamed_back(space, proto):
    filled(space)
    with PathServer("tcp://127.0.0.1:*", pastset=space).start() as server:
        h = build_path(make_path(stage("remote", host=server.endpoint, proto=proto, timeout_ms=5000),
                                 stage("core", name="E", format="qd")))
        before = h.stage.counters()
        assert h.observe_range(5, ROWS) == [(i, i * 0.5) for i in range(5, ROWS)]
        after = h.stage.counters()
        assert after["requests"] - before["requests"] == 1
        assert after["answers"] - before["answers"] == 3  # the answer's frames
        assert h.observe_range(ROWS - 1, 10) == [(ROWS - 1, (ROWS - 1) * 0.5)]
        space.enter("E", "qd").axe(100)
        with pytest.raises(paths.AxedError, match="first live index is 100"):
            h.observe_range(50, 10)
        most = RANGE_MAX_BYTES // 16
        with pytest.raises(ValueError, match="expected a count from 1 to"):
            h.observe_range(0, most + 1)
        with pytest.raises(TimeoutError):
            h.observe_range(ROWS, 1, timeout=0.2)
        assert h.observe_range(100, 1) == [(100, 50.0)]  # the link goes on


@pytest.mark.parametrize("transport", [ZMQ, TCP])
def test_the_wire_answer_counts_down_its_frames_and_bad_counts_are_refused(space, zmq_context, transport):
    space.enter("W", "q").move_many([(i,) for i in range(5000)])
    with PathServer("tcp://127.0.0.1:*", pastset=space).start() as server:
        link = Link(zmq_context, server.endpoint, "W", transport)
        link_id, ask, answer = link.id, link.send, link.answer
        ask(encode(OBSERVE_RANGE, struct.pack("<I", 4500), request_id=2, handle_id=link_id, argument=100, value=-1))
        got, values = [], []
        while not values or values[-1] != 0:
            reply = answer()
            assert (reply["op"], reply["status"], reply["request_id"]) == (OBSERVE_RANGE, PS_OK, 2)
            got += [v for (v,) in struct.iter_unpack("<q", reply["payload"])]
            values.append(reply["value"])
        assert got == list(range(100, 4600))
        assert values == [4500 - 2048, 4500 - 4096, 0]  # 2048 'q' tuples per 16 KiB frame
        most = RANGE_MAX_BYTES // 8
        for payload in (struct.pack("<I", 0), struct.pack("<I", most + 1), b"\x01\x00", b""):
            ask(encode(OBSERVE_RANGE, payload, request_id=3, handle_id=link_id, argument=0))
            reply = answer()
            assert (reply["op"], reply["status"], reply["payload"]) == (OBSERVE_RANGE, PS_EINVAL, b"")
        ask(encode(PING, request_id=4, handle_id=link_id))
        assert answer()["status"] == PS_OK  # the link goes on
        link.close()


SLICE = 4 * 2048  # 'q' tuples the server reads and sends at a time (4 frames of 16 KiB)


def read_range(connection, request_id):
    """The frames of one range's answer: (tuples, each frame's value)."""
    got, values = [], []
    while not values or values[-1] != 0:
        reply = connection.answer()
        assert (reply["op"], reply["status"], reply["request_id"]) == (OBSERVE_RANGE, PS_OK, request_id)
        got += [v for (v,) in struct.iter_unpack("<q", reply["payload"])]
        values.append(reply["value"])
    return got, values


@pytest.mark.parametrize("exist", [SLICE, 2 * SLICE + 5, 3 * SLICE])
def test_a_range_of_several_slices_counts_only_what_follows(space, zmq_context, exist):
    """The server reads a long range a slice at a time: a frame's value never promises more than
    follows it, only the last says 0, and a history that ends at a slice's end ends the answer."""
    space.enter("W", "q").move_many([(i,) for i in range(exist)])
    with PathServer("tcp://127.0.0.1:*", pastset=space).start() as server:
        connection = Link(zmq_context, server.endpoint, "W", TCP)
        link_id = connection.id
        asked = 3 * SLICE + 100
        connection.send(encode(OBSERVE_RANGE, struct.pack("<I", asked), request_id=2, handle_id=link_id, value=-1))
        got, values = read_range(connection, 2)
        assert got == list(range(exist))
        sizes = [2048] * (exist // 2048) + ([exist % 2048] if exist % 2048 else [])
        assert values[-1] == 0 and all(v > 0 for v in values[:-1])
        assert all(v <= sum(sizes[i + 1:]) for i, v in enumerate(values))
        connection.close()


def test_a_long_range_through_stages_at_the_server_comes_whole(space):
    """Past its first slice, a range goes as far as the history went when that slice was read,
    however long the stages at the server take to give it (here a delay's crossings)."""
    space.enter("W", "q").move_many([(i,) for i in range(3 * SLICE + 11)])
    with PathServer("tcp://127.0.0.1:*", pastset=space).start() as server:
        h = build_path(make_path(stage("remote", host=server.endpoint, timeout_ms=5000), stage("delay", ms=1),
                                 stage("core", name="W", format="q")))
        assert h.observe_range(5, 4 * SLICE) == [(i,) for i in range(5, 3 * SLICE + 11)]


def test_a_range_read_while_moves_arrive_is_consecutive(space):
    """Moves land while a long range streams: the answer is the tuples from its index on, in order,
    none missing, as many as existed when each slice was read."""
    element = space.enter("W", "q")
    element.move_many([(i,) for i in range(SLICE)])
    with PathServer("tcp://127.0.0.1:*", pastset=space).start() as server:
        h = build_path(make_path(stage("remote", host=server.endpoint, timeout_ms=5000), stage("core", name="W", format="q")))
        mover = build_path(make_path(stage("core", name="W", format="q")), pastset=space)
        moved = SLICE
        for _ in range(20):
            mover.move_many([(i,) for i in range(moved, moved + 3000)])
            moved += 3000
            got = h.observe_range(0, 12 * SLICE)
            assert got == [(i,) for i in range(len(got))] and SLICE <= len(got) <= moved


def test_a_python_stage_may_answer_a_range(space):
    filled(space, n=10)

    @paths.stage_kind("test-double-range")
    class Doubler:
        def observe_range(self, below, index, count):
            return [(i * 2, x * 2) for i, x in below.observe_range(index, count)]

    h = build_path(make_path(stage("test-double-range"), stage("core", name="E", format="qd")), pastset=space)
    assert h.observe_range(8, 5) == [(16, 8.0), (18, 9.0)]
