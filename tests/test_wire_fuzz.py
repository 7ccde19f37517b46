"""The server against hostile frames (wrappers_c/wire.md): over 10,000 random and mutated frames at the
main endpoint and at a ZeroMQ link endpoint, from a raw pyzmq DEALER — random bytes, valid headers
with a bad version, op, length or handle id, truncated frames, oversized payload lengths, multipart
garbage, messages beyond the largest frame — and thousands more at a direct (tcp) link: garbage
instead of the link's secret on hundreds of connections, then, on the admitted connection, every
kind of misaddressed or ill-sized frame a stream can carry, frames too large for the link, and at
last a header that loses the stream's step. Then: a normal client still gets exact results on both
transports, the server counted each malformed frame (bad_frames) and each refused connection
(refused), exactly, answered every frame it could, and its resident memory did not grow (VmRSS,
< +50 MB).

The frame generator is seeded, so a failure repeats."""

from __future__ import annotations

import random
import time

import pytest
from child_processes import counters
from wire_frames import (BATCH_PAYLOAD, BEHIND, BREAK, BUILD, CONNECT, EXCHANGE, FIRST, GROUP_MAX, HEADER, IPC, LAST,
                         MAX_PAYLOAD, MOVE, MOVE_MANY, OBSERVE, OBSERVE_AT, OP_LIMIT, PART, PEER, PING, PS_EINVAL,
                         PS_ESTATE, PS_OK, RELEASE,
                         SPEC_MAX, TCP, TRANSPORTS,
                         VERSION, AXE, DELTA, Direct, dealer, decode, encode, open_link, zmq_answer)

import paths
from paths import build_path, make_path, stage
from paths.runtime.server import PathServer

TUPLE_SIZE = 8  # the fuzzed link's element has format "q"
SEED = 20240607
FRAMES_PER_ENDPOINT = 6000
DIRECT_FRAMES = 4000
REFUSED_CONNECTIONS = 200
PENDING_MAX = 8  # direct connections that may be presenting a secret at once
BATCH = 200
RSS_GROWTH_KB = 50 * 1024


def refused_by_server(parts: list[bytes], at_link: bool, link_id: int) -> bool:
    """Whether the server counts this message as a bad frame (server.c's rules)."""
    if len(parts) != 1:
        return True
    request = decode(parts[0])
    if request is None:
        return True
    if not at_link:  # a request here has status 0 and names no link; a PING, no payload; a PEER's group, no NUL
        build = request["op"] == BUILD and 0 < request["length"] <= SPEC_MAX and request["argument"] in TRANSPORTS
        peer = (request["op"] == PEER and 0 < request["length"] <= GROUP_MAX and 0 <= request["argument"] < 1 << 32
                and b"\0" not in parts[0][HEADER.size:])
        ping = request["op"] == PING and request["length"] == 0
        return request["status"] != 0 or request["handle_id"] != 0 or not (ping or build or peer)
    length = request["length"]
    if request["op"] == MOVE_MANY:  # argument: a stream's first frame (0) or one that continues it (1)
        payload_ok = length % TUPLE_SIZE == 0 and 0 < length <= BATCH_PAYLOAD and request["argument"] in (0, 1)
    else:
        payload_ok = length == (TUPLE_SIZE if request["op"] in (MOVE, EXCHANGE) else 0)
    return (request["handle_id"] != link_id or not payload_ok or request["op"] in (BUILD, CONNECT, PEER, PART, BREAK) or
            request["status"] not in (0, BEHIND))


def safe_at_link(parts, link_id) -> bool:
    """A well-formed request for the fuzzed link may only be a non-blocking read: no move, no
    release, no observe that would wait."""
    request = decode(parts[0]) if len(parts) == 1 else None
    return refused_by_server(parts, True, link_id) or request["op"] in (PING, FIRST, LAST)


class Fuzzer:
    """Random and mutated messages (lists of frames) for one endpoint."""

    def __init__(self, rng: random.Random, at_link: bool, link_id: int):
        self.rng, self.at_link, self.link_id = rng, at_link, link_id
        self.kinds = [self.random_bytes, self.bad_version, self.bad_op, self.bad_length, self.truncated,
                      self.oversized_length, self.multipart, self.wrong_handle, self.mutated, self.wrong_payload]

    def handle(self):
        return self.link_id if self.at_link else 0

    def any_op(self):
        return self.rng.randrange(1, OP_LIMIT)

    def valid(self):
        r = self.rng
        if self.at_link:
            return encode(r.choice([PING, FIRST, LAST]), request_id=r.getrandbits(64), handle_id=self.link_id)
        if r.random() < 0.5:
            return encode(PING, request_id=r.getrandbits(64))
        return encode(BUILD, b'{"version":1,"path":[]}', request_id=r.getrandbits(64))

    def random_bytes(self):
        return [self.rng.randbytes(self.rng.randrange(0, 120))]

    def bad_version(self):
        version = self.rng.choice([0, 2, 3, 0x7F, 0xFF])
        return [encode(self.any_op(), handle_id=self.handle(), version=version)]

    def bad_op(self):
        return [encode(self.rng.choice([0, OP_LIMIT, OP_LIMIT + 1, 0x80, 0xFF]), handle_id=self.handle())]

    def bad_length(self):
        payload = self.rng.randbytes(self.rng.randrange(0, 32))
        length = len(payload) + self.rng.choice([-1, 1, 7, 40, -len(payload) - 1])
        return [encode(self.any_op(), payload, handle_id=self.handle(), length=length % (1 << 32))]

    def truncated(self):
        frame = self.valid()
        return [frame[: self.rng.randrange(0, min(len(frame), HEADER.size))]]

    def oversized_length(self):
        length = self.rng.choice([MAX_PAYLOAD + 1, 1 << 24, 0x7FFFFFFF, 0xFFFFFFFF])
        return [encode(self.any_op(), self.rng.randbytes(16), handle_id=self.handle(), length=length)]

    def multipart(self):
        return [self.rng.choice([self.valid(), self.rng.randbytes(48)]) for _ in range(self.rng.randrange(2, 5))]

    def wrong_handle(self):
        handle = self.rng.choice([self.link_id + 1, self.link_id + 1000, (1 << 64) - 1, 0 if self.at_link else 5])
        op = self.rng.choice([FIRST, LAST, OBSERVE, MOVE, AXE, DELTA, RELEASE, PING] if not self.at_link else
                             [FIRST, LAST, OBSERVE, OBSERVE_AT, AXE, DELTA, RELEASE, PING])
        payload = self.rng.randbytes(TUPLE_SIZE) if op == MOVE else b""
        return [encode(op, payload, handle_id=handle)]

    def mutated(self):
        frame = bytearray(self.valid())
        for _ in range(self.rng.randrange(1, 5)):
            frame[self.rng.randrange(len(frame))] = self.rng.randrange(256)
        return [bytes(frame)]

    def wrong_payload(self):
        if self.at_link and self.rng.random() < 0.2:  # a move_many marked neither first nor continuing
            return [encode(MOVE_MANY, self.rng.randbytes(TUPLE_SIZE), handle_id=self.link_id,
                           argument=self.rng.choice([2, 3, -1, 1 << 40]))]
        if self.at_link:  # a move, exchange or move_many with tuples of the wrong size (a message longer
            # than the link's largest frame drops its peer unread: a test of its own, below)
            return [encode(self.rng.choice([MOVE, EXCHANGE, MOVE_MANY]),
                           self.rng.randbytes(self.rng.choice([0, 1, 7, 9, 63, BATCH_PAYLOAD - 1])),
                           handle_id=self.link_id)]
        return [encode(BUILD, self.rng.choice([b"", self.rng.randbytes(self.rng.randrange(1, 200))]))]

    def next(self):
        while True:
            parts = self.rng.choice(self.kinds)()
            if not self.at_link or safe_at_link(parts, self.link_id):
                return parts


# ---- the server and a raw socket ---------------------------------------------------------------


def exact_round_trips(endpoint, element, n=300):
    """A normal client's exact results, on each kind of link."""
    for proto in ("tcp", "zmq"):
        handle = build_path(make_path(stage("remote", host=endpoint, proto=proto, timeout_ms=5000),
                                      stage("core", name=f"{element}-{proto}", format="q")))
        for i in range(n):
            handle.move(i * 3)
            assert handle.observe() == (i * 3,)
        two = [build_path(make_path(stage("reduce-sum", num_threads=2),
                                    stage("remote", host=endpoint, proto=proto, timeout_ms=5000, window=2),
                                    stage("core", name=f"{element}-{proto}-sum", format="q"))) for _ in range(2)]
        paths.bench.gsum(two, 300)  # checks every total
        totals = build_path(make_path(stage("remote", host=endpoint, proto=proto, timeout_ms=5000),
                                      stage("core", name=f"{element}-{proto}-sum", format="q")))
        assert [totals.observe(i)[0] for i in range(totals.last())] == [2 * r for r in range(300)]


def fuzz(socket, fuzzer: Fuzzer, frames: int):
    """Sends `frames` messages in batches, reading every answer the server owes; returns
    (messages sent, expected bad frames, expected answers, well-formed BUILDs sent)."""
    sent = bad = owed = builds = 0
    while sent < frames:
        batch = [fuzzer.next() for _ in range(min(BATCH, frames - sent))]
        for parts in batch:
            socket.send_multipart(parts)
        sent += len(batch)
        expected = 0
        for parts in batch:
            refused = refused_by_server(parts, fuzzer.at_link, fuzzer.link_id)
            bad += refused
            if not fuzzer.at_link and not refused and decode(parts[0])["op"] == BUILD:
                builds += 1
            expected += fuzzer.at_link or len(parts) == 1  # the main endpoint drops multipart unanswered
        for _ in range(expected):
            reply = zmq_answer(socket)
            header = HEADER.unpack_from(reply) if len(reply) >= HEADER.size else None
            assert header and header[0] == VERSION and header[3] == len(reply) - HEADER.size, reply[:64]
            assert header[2] in (PS_OK, PS_EINVAL), header
        owed += expected
    return sent, bad, owed, builds


def test_ten_thousand_hostile_frames(peer_server, zmq_context):
    process, endpoint = peer_server
    exact_round_trips(endpoint, "BEFORE")  # warm up, so memory is measured at its working size
    rss_before = process.rss_kb()
    link_id, link_endpoint, _ = open_link(zmq_context, endpoint, "FUZZ")
    before = counters(process)

    rng = random.Random(SEED)
    main_sent, main_bad, _, main_builds = fuzz(dealer(zmq_context, endpoint), Fuzzer(rng, False, link_id),
                                               FRAMES_PER_ENDPOINT)
    link_socket = dealer(zmq_context, link_endpoint)
    link_sent, link_bad, _, _ = fuzz(link_socket, Fuzzer(rng, True, link_id), FRAMES_PER_ENDPOINT)

    after = counters(process)
    assert main_sent + link_sent >= 10_000
    assert after["frames"] - before["frames"] == main_sent + link_sent
    assert after["bad_frames"] - before["bad_frames"] == main_bad + link_bad
    assert after["build_errors"] - before["build_errors"] == main_builds
    assert after["builds"] == before["builds"], "a hostile frame opened a link"

    # Messages beyond the largest frame (at the main endpoint: a BUILD of the largest path spec; at a
    # link: its own, one tuple beyond a full move_many): the server drops such a peer without reading
    # them.
    for target, beyond in ((endpoint, SPEC_MAX + 1), (link_endpoint, BATCH_PAYLOAD + TUPLE_SIZE)):
        flood = dealer(zmq_context, target)
        for _ in range(3):
            flood.send(encode(MOVE_MANY, b"\0" * beyond, handle_id=link_id))
        assert not flood.poll(200), "a message beyond the largest frame was answered"
        flood.close()

    # The fuzzed link still serves its owner, and lets go when released.
    link_socket.send(encode(PING, request_id=77, handle_id=link_id))
    assert decode(zmq_answer(link_socket))["status"] == PS_OK
    link_socket.send(encode(RELEASE, request_id=78, handle_id=link_id))
    assert decode(zmq_answer(link_socket))["status"] == PS_OK

    exact_round_trips(endpoint, "AFTER")
    grown = process.rss_kb() - rss_before
    assert grown < RSS_GROWTH_KB, f"server memory grew by {grown / 1024:.1f} MB"


BREAKING_SPECS = {
    "lone surrogate in a name": '{"version":1,"path":[["core",{"name":"\\ud800","format":"q"}]]}',
    "lone surrogate in a kind": '{"version":1,"path":[["\\ud800",{}],["core",{"name":"x","format":"q"}]]}',
    "lone surrogate in a parameter's name": '{"version":1,"path":[["core",{"name":"x","format":"q","\\udfff":1}]]}',
    "deep nesting": "[" * 10_000 + "]" * 10_000,
    "huge number": '{"version":1,"path":[["reduce-sum",{"num_threads":1e999}],["core",{"name":"x","format":"q"}]]}',
    "not UTF-8": b'{"version":1,"path":[["core",{"name":"\xff\xfe","format":"q"}]]}',
    "wrong version": '{"version":2,"path":[["core",{"name":"x","format":"q"}]]}',
    "version true": '{"version":true,"path":[["core",{"name":"x","format":"q"}]]}',
    "version 1.0": '{"version":1.0,"path":[["core",{"name":"x","format":"q"}]]}',
    "unknown key": '{"version":1,"path":[["core",{"name":"x","format":"q"}]],"crosed":["a"]}',
}


@pytest.mark.parametrize("spec", list(BREAKING_SPECS))
def test_a_build_that_breaks_the_builder_is_refused_and_the_server_lives(peer_server, zmq_context, spec):
    process, endpoint = peer_server
    payload = BREAKING_SPECS[spec]
    payload = payload if isinstance(payload, bytes) else payload.encode()
    main = dealer(zmq_context, endpoint)
    main.send(encode(BUILD, payload, request_id=5))
    reply = decode(zmq_answer(main))
    assert reply["op"] == BUILD and reply["status"] == PS_EINVAL and reply["payload"], reply
    exact_round_trips(endpoint, f"LIVES-{spec}", n=20)  # the server still serves


MISNAMED_SPECS = {
    "a parameter named kind": ('{"version":1,"path":[["cache",{"capacity":16,"kind":"x"}],["core",{"name":"x","format":"q"}]]}',
                               "stage cache(capacity=16, kind='x'): unknown parameter 'kind' (valid: "),
    "a trace file that is no text": ('{"version":1,"path":[["trace",{"file":5}],["core",{"name":"x","format":"q"}]]}',
                                     "stage trace(file=5): a trace file sent to a server must be a bare file name, "
                                     "got 5"),
    "a parameter given twice": ('{"version":1,"path":[["core",{"name":"x","format":"q","name":"y"}]]}',
                                "path spec: key 'name' given twice in one object"),
}


@pytest.mark.parametrize("spec", list(MISNAMED_SPECS))
def test_a_build_of_a_wrong_name_or_type_is_refused_naming_the_stage(zmq_context, tmp_path, spec):
    payload, reason = MISNAMED_SPECS[spec]
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), trace_dir=str(tmp_path)).start() as server:
        main = dealer(zmq_context, server.endpoint)
        main.send(encode(BUILD, payload.encode(), request_id=5))
        reply = decode(zmq_answer(main))
        assert reply["op"] == BUILD and reply["status"] == PS_EINVAL, reply
        assert reply["payload"].decode().startswith(reason), reply["payload"]
        assert server.build_errors == 1 and server.ledger.clients() == {}
        exact_round_trips(server.endpoint, "LIVES", n=20)
    assert not list(tmp_path.iterdir())


# ---- a direct link ----------------------------------------------------------------------------


def judged_at_once(parts) -> bool:
    """A message whose first bytes tell the server all it needs: one frame whose header is
    malformed, or whose payload is all there."""
    if len(parts) != 1 or len(parts[0]) < HEADER.size:
        return False
    version, op, _, length = HEADER.unpack_from(parts[0])[:4]
    return version != VERSION or not 1 <= op < OP_LIMIT or length > MAX_PAYLOAD or length == len(parts[0]) - HEADER.size


def in_step(parts) -> bool:
    """A message a stream can carry without losing its step: one frame, as long as its header says."""
    return len(parts) == 1 and decode(parts[0]) is not None


def too_large(rng: random.Random, link_id: int) -> list[bytes]:
    """A well-formed frame far larger than anything the link takes (read whole, and dropped)."""
    return [encode(rng.choice([MOVE, PING, EXCHANGE]), rng.randbytes(rng.choice([20_000, 70_000])),
                   request_id=rng.getrandbits(64), handle_id=link_id)]


@pytest.mark.parametrize("transport", [TCP, IPC], ids=["tcp", "ipc"])
def test_thousands_of_hostile_frames_at_a_direct_link(peer_server, zmq_context, transport):
    process, endpoint = peer_server
    exact_round_trips(endpoint, f"DIRECT-BEFORE-{transport}")
    rss_before = process.rss_kb()
    link_id, link_endpoint, secret = open_link(zmq_context, endpoint, f"DIRECT-FUZZ-{transport}", transport)
    before = counters(process)
    rng = random.Random(SEED + transport)
    garbage = Fuzzer(rng, True, link_id)

    # Before the client is in: connections that present anything but the secret are turned away,
    # told why when the server could read a frame (or a header it knows to be malformed) ...
    told = 0
    for n in range(REFUSED_CONNECTIONS):
        intruder = Direct(link_endpoint)
        parts = [encode(CONNECT, rng.randbytes(32), handle_id=link_id)] if n % 4 == 0 else garbage.next()
        while n % 4 and not judged_at_once(parts):
            parts = garbage.next()
        intruder.send(*parts)
        reply = intruder.answer()
        assert reply is not None and reply["status"] == PS_EINVAL and b"refused" in reply["payload"], (reply, parts)
        assert intruder.closed_by_server()
        intruder.close()
        told += 1
    # ... and, silently, those that present part of a frame and stop, or come beyond the 8 that
    # may be presenting at once (all of these at the same time: each has 1 s).
    stalled = [Direct(link_endpoint) for _ in range(PENDING_MAX + 2)]
    for intruder in stalled:
        part = encode(CONNECT, secret, handle_id=link_id)[:rng.randrange(1, HEADER.size + 32)]
        try:
            intruder.send(part)
        except (BrokenPipeError, ConnectionResetError):
            pass  # one beyond the 8 may be closed before it sends
    for intruder in stalled:
        assert intruder.closed_by_server()
        intruder.close()
    refused = counters(process)
    assert refused["refused"] - before["refused"] == REFUSED_CONNECTIONS + len(stalled)
    assert refused["bad_frames"] - before["bad_frames"] == told

    # The client presents the secret; every frame after it that keeps the stream in step is
    # answered in order, and the malformed ones are counted.
    client = Direct(link_endpoint)
    client.send(encode(CONNECT, secret, request_id=1, handle_id=link_id))
    assert client.answer()["status"] == PS_OK
    sent = bad = 0
    while sent < DIRECT_FRAMES:
        batch = []
        while len(batch) < BATCH:
            parts = too_large(rng, link_id) if rng.random() < 0.01 else garbage.next()
            if in_step(parts):
                batch.append(parts[0])
        client.send(*batch)
        for frame in batch:
            request = decode(frame)
            reply = client.answer()
            assert reply is not None, "the server closed an in-step connection"
            refused_frame = refused_by_server([frame], True, link_id)
            bad += refused_frame
            # no frame of tuples ran before: one sent behind others is not run
            not_run = request["status"] == BEHIND and request["op"] not in (PING, RELEASE)
            assert reply["status"] == (PS_EINVAL if refused_frame else PS_ESTATE if not_run else PS_OK), (request, reply)
            # a frame too large is dropped whole, and its refusal answers its header all the same
            assert (reply["op"], reply["request_id"]) == (request["op"], request["request_id"]), (request, reply)
        sent += len(batch)
    after = counters(process)
    assert after["bad_frames"] - refused["bad_frames"] == bad
    assert after["frames"] - refused["frames"] == sent + 1  # and the CONNECT

    # A header that loses the step is answered, then the connection is closed: the link ends,
    # taken as abandoned by its client.
    client.send(encode(PING, handle_id=link_id, version=VERSION + 1))
    assert client.answer()["status"] == PS_EINVAL
    assert client.closed_by_server()
    client.close()
    deadline = time.monotonic() + 10
    while counters(process)["abandoned"] == before["abandoned"]:
        assert time.monotonic() < deadline, "the link lost its client and still runs"
        time.sleep(0.01)
    assert counters(process)["abandoned"] - before["abandoned"] == 1
    exact_round_trips(endpoint, f"DIRECT-AFTER-{transport}")
    grown = process.rss_kb() - rss_before
    assert grown < RSS_GROWTH_KB, f"server memory grew by {grown / 1024:.1f} MB"


@pytest.mark.parametrize("transport", [TCP, IPC], ids=["tcp", "ipc"])
def test_stalled_connections_do_not_keep_a_direct_links_client_out(peer_server, zmq_context, transport):
    """As many connections as may present a secret at once, each stalled in its first frame: the
    client that comes after them is still let in (the oldest makes room), and the stalled ones
    are refused."""
    process, endpoint = peer_server
    link_id, link_endpoint, secret = open_link(zmq_context, endpoint, f"DIRECT-STALLED-{transport}", transport)
    stalled = [Direct(link_endpoint) for _ in range(PENDING_MAX)]
    for intruder in stalled:
        intruder.send(encode(CONNECT, secret, handle_id=link_id)[:HEADER.size - 1])
    time.sleep(0.1)  # the server has taken them all in
    client = Direct(link_endpoint)
    client.send(encode(CONNECT, secret, request_id=1, handle_id=link_id))
    reply = client.answer()
    assert reply is not None and reply["status"] == PS_OK, f"the client was kept out: {reply}"
    client.send(encode(PING, request_id=2, handle_id=link_id))
    assert client.answer()["status"] == PS_OK
    for intruder in stalled:
        assert intruder.closed_by_server()
        intruder.close()
    client.send(encode(RELEASE, request_id=3, handle_id=link_id))
    assert client.answer()["status"] == PS_OK
    client.close()
    exact_round_trips(endpoint, f"DIRECT-STALLED-AFTER-{transport}")


def test_another_peers_frames_on_a_zmq_link_do_not_stop_the_clients_pipeline(peer_server, zmq_context):
    """Anyone who reaches a ZeroMQ link's port may send it frames: each is refused as misaddressed,
    and the client's requests sent behind its earlier ones (status 1) and its streams go on as
    if nothing came between."""
    _, endpoint = peer_server
    link_id, link_endpoint, _ = open_link(zmq_context, endpoint, "PIPELINED")
    client, stranger = dealer(zmq_context, link_endpoint), dealer(zmq_context, link_endpoint)

    def tuple_of(value: int) -> bytes:
        return value.to_bytes(8, "little", signed=True)

    client.send(encode(MOVE, tuple_of(1), request_id=1, handle_id=link_id))
    assert decode(zmq_answer(client))["status"] == PS_OK
    for junk in (encode(PING, handle_id=link_id + 1), encode(MOVE, tuple_of(9), handle_id=link_id ^ 1), b"junk"):
        stranger.send(junk)
        assert HEADER.unpack_from(zmq_answer(stranger))[2] == PS_EINVAL  # refused, answered
    client.send(encode(MOVE, tuple_of(2), request_id=2, handle_id=link_id, status=BEHIND))
    assert decode(zmq_answer(client))["status"] == PS_OK
    client.send(encode(MOVE_MANY, tuple_of(3), request_id=3, handle_id=link_id, argument=0))
    assert decode(zmq_answer(client))["status"] == PS_OK
    stranger.send(encode(PING, handle_id=0))
    assert decode(zmq_answer(stranger))["status"] == PS_EINVAL
    client.send(encode(MOVE_MANY, tuple_of(4), request_id=4, handle_id=link_id, argument=1))
    assert decode(zmq_answer(client))["status"] == PS_OK
    client.send(encode(LAST, request_id=5, handle_id=link_id))
    assert decode(zmq_answer(client))["value"] == 4


@pytest.mark.parametrize("frame", [encode(PING, b"x"), encode(PING, status=5), encode(PEER, b"g\0h", argument=1),
                                   encode(BUILD, b"{}", status=BEHIND),
                                   encode(BUILD, b'{"version":1,"path":[["core",{"name":"x","format":"q"}]]}',
                                          request_id=7, handle_id=5),
                                   encode(PING, request_id=8, handle_id=5)],
                         ids=["PING with a payload", "PING with a status", "PEER of a group with a NUL",
                              "BUILD sent behind", "BUILD naming a link", "PING naming a link"])
def test_the_main_endpoint_refuses_what_a_link_refuses_too(peer_server, zmq_context, frame):
    _, endpoint = peer_server
    main = dealer(zmq_context, endpoint)
    main.send(frame)
    answer = zmq_answer(main)
    assert HEADER.unpack_from(answer)[2] == PS_EINVAL
    asked, told = decode(frame), decode(answer, answer=True)
    if asked is not None:  # a request it could read: its refusal says which
        assert (told["op"], told["request_id"]) == (asked["op"], asked["request_id"])
    main.send(encode(PING, request_id=9))
    assert decode(zmq_answer(main))["status"] == PS_OK
    main.close()
