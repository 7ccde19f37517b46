"""The direct transport (remote's proto tcp and ipc): a link's own connection, admitted only when it
presents the per-link secret that the BUILD answer handed over; the secret of one link opens no
other; a link admits one connection and then no more; a Unix-socket link from a TCP-bound server;
pipelined moves that leave together with what follows them, and batched moves that wait for the
caller's next request; the checks of `proto` itself; a connection that takes its time, waited for
until the timeout whatever signals come; a link a server names on another host, reached on the
server's own.

Raw connections speak the wire protocol by hand (tests/wire_frames.py); the server is a
remote_peer.py child that tells its counters."""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import threading
import time

import pytest
import zmq
from child_processes import counters
from wire_frames import (BUILD, CONNECT, HEADER, IPC, MOVE, OBSERVE, PING, PS_EINVAL, PS_OK, SECRET_BYTES, TCP, Direct,
                         decode, encode, open_link)

import paths
from paths import _native, build_path, make_path, stage

TIMEOUT_MS = 5000
PATIENCE_S = 30


def remote_path(address, element, **remote):
    return make_path(stage("remote", host=address, timeout_ms=TIMEOUT_MS, **remote),
                     stage("core", name=element, format="q"))


def admitted(endpoint, link_id, secret) -> Direct:
    connection = Direct(endpoint)
    connection.send(encode(CONNECT, secret, request_id=1, handle_id=link_id))
    reply = connection.answer()
    assert reply is not None and reply["status"] == PS_OK and reply["op"] == CONNECT, reply
    return connection


@pytest.mark.parametrize("transport", [TCP, IPC], ids=["tcp", "ipc"])
def test_a_direct_link_admits_only_the_connection_that_presents_its_secret(peer_server, zmq_context, transport):
    process, endpoint = peer_server
    link_id, link_endpoint, secret = open_link(zmq_context, endpoint, f"ADMIT-{transport}", transport)
    assert len(secret) == SECRET_BYTES
    assert link_endpoint.startswith("tcp://127.0.0.1:" if transport == TCP else "ipc://@")
    before = counters(process)
    wrong = bytes(b ^ 1 for b in secret)
    attempts = [encode(CONNECT, wrong, handle_id=link_id),            # a wrong secret
                encode(CONNECT, secret, handle_id=link_id + 1),       # another link's id
                encode(CONNECT, secret[:-1], handle_id=link_id),      # too short a secret
                encode(PING, handle_id=link_id),                      # no CONNECT first
                encode(MOVE, (7).to_bytes(8, "little"), handle_id=link_id)]
    for frame in attempts:
        intruder = Direct(link_endpoint)
        intruder.send(frame)
        reply = intruder.answer()
        assert reply["status"] == PS_EINVAL and b"refused" in reply["payload"], reply
        assert reply["handle_id"] == decode(frame)["handle_id"]  # the id it sent: none it did not know
        assert intruder.closed_by_server()
        intruder.close()
    refused = counters(process)
    assert refused["refused"] - before["refused"] == len(attempts)
    assert refused["bad_frames"] - before["bad_frames"] == len(attempts)

    client = admitted(link_endpoint, link_id, secret)  # the link was not used up by them
    client.send(encode(MOVE, (41).to_bytes(8, "little"), request_id=2, handle_id=link_id),
                encode(OBSERVE, request_id=3, handle_id=link_id, value=1_000_000_000))
    moved, observed = client.answer(), client.answer()
    assert (moved["request_id"], moved["status"]) == (2, PS_OK)
    assert (observed["request_id"], observed["status"], observed["payload"]) == (3, PS_OK, (41).to_bytes(8, "little"))
    if transport == TCP:  # the client is in: the link takes no other connection at all
        with pytest.raises(ConnectionRefusedError):
            Direct(link_endpoint)
    client.close()


def test_each_link_has_its_own_secret(peer_server, zmq_context):
    process, endpoint = peer_server
    first_id, first_endpoint, first_secret = open_link(zmq_context, endpoint, "OWN-1", TCP)
    second_id, second_endpoint, second_secret = open_link(zmq_context, endpoint, "OWN-2", TCP)
    assert first_secret != second_secret and first_endpoint != second_endpoint
    before = counters(process)
    borrowed = Direct(second_endpoint)  # the first link's credentials at the second link
    borrowed.send(encode(CONNECT, first_secret, handle_id=first_id))
    assert borrowed.answer()["status"] == PS_EINVAL
    borrowed.close()
    assert counters(process)["refused"] - before["refused"] == 1
    admitted(second_endpoint, second_id, second_secret).close()
    admitted(first_endpoint, first_id, first_secret).close()


def test_a_unix_socket_link_from_a_tcp_server(peer_server):
    process, endpoint = peer_server
    before = counters(process)
    handle = build_path(remote_path(endpoint, "IPC-FROM-TCP", proto="ipc"))
    for i in range(200):
        handle.move(i)
        assert handle.observe() == (i,)
    after = counters(process)
    assert (after["builds"] - before["builds"], after["direct"] - before["direct"]) == (1, 1)


def test_a_pipelined_move_arrives_with_no_other_request_after_it(peer_server):
    """On tcp a pipelined move leaves marked 'more follows'; the kernel sends it within 200 ms
    even when nothing follows."""
    _, endpoint = peer_server
    writer = build_path(remote_path(endpoint, "TRAILING", proto="tcp", window=2))
    reader = build_path(remote_path(endpoint, "TRAILING", proto="tcp"))
    started = time.monotonic()
    writer.move(11)
    assert reader.observe(timeout=5) == (11,)
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("params, needs", [({"proto": "tcp"}, "window > 1"),
                                            ({"proto": "zmq", "window": 8}, "a direct transport: proto tcp or ipc, not zmq"),
                                            ({"proto": "inproc", "window": 8}, "proto tcp or ipc, not inproc")])
def test_a_remote_batch_that_would_do_nothing_is_refused(params, needs):
    """batch gathers pipelined moves into one write of a direct connection: without a window or
    over ZeroMQ it was taken and did nothing."""
    with pytest.raises(ValueError, match=f"^stage 'remote': batch=16 puts pipelined moves into one write, so it needs "
                                         f".*{re.escape(needs)}"):
        build_path(remote_path("inproc://nobody" if params["proto"] == "inproc" else "tcp://127.0.0.1:9", "NONE",
                               batch=16, **params), pastset=paths.PastSet())


def test_a_remote_batch_over_the_zmq_a_curve_key_implies_is_left_unused_not_refused():
    """A run's resolver adds its servers' CURVE keys, which make the proto zmq: a path written for
    a direct transport still builds (its batch unused, as on any ZeroMQ link)."""
    public, _ = _native.curve_keypair()
    with pytest.raises(ConnectionError, match="no answer to BUILD"):  # built, then finds no server
        build_path(remote_path("tcp://127.0.0.1:9", "NONE", window=8, batch=16, curve_server_key=public),
                   pastset=paths.PastSet())


def test_batched_moves_wait_for_the_callers_next_request_and_keep_their_order(peer_server):
    _, endpoint = peer_server
    writer = build_path(remote_path(endpoint, "BATCHED", proto="tcp", window=64, batch=16))
    reader = build_path(remote_path(endpoint, "BATCHED", proto="tcp"))
    writer.move(0)  # a move that comes alone leaves at once
    deadline = time.monotonic() + PATIENCE_S
    while reader.last() < 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert reader.last() == 1
    for i in range(1, 10):  # a burst, fewer than a batch: its moves but its first wait in the buffer
        writer.move(i)
    assert reader.last() < 10
    assert writer.first() == 0  # any other request sends them first, in order
    assert reader.last() == 10
    for i in range(10, 5000):
        writer.move(i)
    assert writer.last() == 5000  # answered once every move before it arrived
    assert [reader.observe(i)[0] for i in range(5000)] == list(range(5000))
    assert writer.stage.counters()["failures"] == 0


def test_proto_inproc_reaches_only_a_server_in_this_process():
    with pytest.raises(ValueError, match=r"proto 'inproc' reaches a server in this process only: .*tcp://127.0.0.1:9"):
        _native.create_stage("remote", {"host": "tcp://127.0.0.1:9", "proto": "inproc", "format": "q",
                                        "path": "{}"}, None, paths.PastSet())
    with pytest.raises(ValueError, match=r"parameter 'proto' must be one of tcp, ipc, zmq, inproc, got 'udp'"):
        build_path(remote_path("tcp://127.0.0.1:9", "NEVER", proto="udp"))


def test_no_client_for_a_direct_link_ends_it_as_abandoned(peer_server, zmq_context):
    """A BUILD whose client never connects (it gave up, or died first) holds its link only for
    the 10 s a client has to come."""
    process, endpoint = peer_server
    before = counters(process)
    built = time.monotonic()
    open_link(zmq_context, endpoint, "NOBODY", TCP)
    while counters(process)["abandoned"] == before["abandoned"]:
        assert time.monotonic() < built + PATIENCE_S, "a link nobody came for is still served"
        time.sleep(0.1)
    assert time.monotonic() - built >= 9.0  # not before its client's time was up


@contextlib.contextmanager
def server_naming_link(zmq_context, link: str):
    """A server's main endpoint that answers one BUILD with a direct link at `link` (and a secret
    of zeros); yields its port."""
    main = zmq_context.socket(zmq.ROUTER)
    main.linger = 0
    main_port = main.bind_to_random_port("tcp://127.0.0.1")

    def answer_build() -> None:
        client, frame = main.recv_multipart()
        main.send_multipart([client, encode(BUILD, bytes(SECRET_BYTES) + link.encode(),
                                            request_id=decode(frame)["request_id"], handle_id=1)])

    server = threading.Thread(target=answer_build)
    server.start()
    try:
        yield main_port
    finally:
        server.join(PATIENCE_S)
        main.close()


def test_a_server_cannot_send_its_clients_connection_to_another_host(zmq_context):
    """A server (one the client trusts, gone hostile) answers BUILD with a link on another host:
    the client connects to the link's port on the server's own host, never to that other host."""
    elsewhere = socket.socket()
    elsewhere.bind(("127.0.0.2", 0))
    elsewhere.listen(4)
    port = elsewhere.getsockname()[1]
    try:
        with server_naming_link(zmq_context, f"tcp://127.0.0.2:{port}") as main_port, \
                pytest.raises(ConnectionError, match=re.escape(f"cannot connect to 'tcp://127.0.0.1:{port}'")):
            build_path(make_path(stage("remote", host=f"tcp://127.0.0.1:{main_port}", proto="tcp", timeout_ms=2000),
                                 stage("core", name="ELSEWHERE", format="q")), pastset=paths.PastSet())
        elsewhere.setblocking(False)
        with pytest.raises(BlockingIOError):
            elsewhere.accept()  # nobody came
    finally:
        elsewhere.close()


def test_an_answer_whose_tuple_is_the_wrong_size_breaks_the_connection_and_says_so(zmq_context):
    """A server (gone hostile) answers an observe of a 'q' element with 4 bytes: the call fails
    naming the answer, and the connection counts as broken, so the next call is not sent on it."""
    link = socket.socket()
    link.bind(("127.0.0.1", 0))
    link.listen(1)
    port = link.getsockname()[1]

    sent_on: list[bytes] = []

    def answer_short() -> None:
        connection, _ = link.accept()
        with connection:
            for answer in (b"", b"\0" * 4):  # CONNECT's, then the observe's
                request = decode(recv_frame(connection))
                connection.sendall(encode(request["op"], answer, request_id=request["request_id"], handle_id=1))
            connection.settimeout(1.0)
            with contextlib.suppress(TimeoutError):
                sent_on.append(connection.recv(65536))  # b"": the client closed

    def recv_frame(connection) -> bytes:
        frame = b""
        while len(frame) < HEADER.size or len(frame) < HEADER.size + HEADER.unpack_from(frame)[3]:
            frame += connection.recv(65536)
        return frame

    server = threading.Thread(target=answer_short)
    server.start()
    try:
        with server_naming_link(zmq_context, f"tcp://127.0.0.1:{port}") as main_port:
            host = f"tcp://127.0.0.1:{main_port}"
            h = build_path(make_path(stage("remote", host=host, proto="tcp", timeout_ms=2000),
                                     stage("core", name="SHORT", format="q")), pastset=paths.PastSet())
            with pytest.raises(ConnectionError, match=re.escape(
                    f"remote {host}: an answer whose tuple is not of the element's size: a malformed answer")):
                h.observe()
            with pytest.raises(ConnectionError, match=re.escape(f"remote {host}: not sent: the connection broke earlier "
                                                                "(an answer whose tuple is not of the element's size")):
                h.last()
    finally:
        server.join(PATIENCE_S)
        link.close()
    assert sent_on in ([], [b""])  # nothing more came on the broken connection


def test_a_signal_does_not_cut_short_the_wait_for_a_direct_connection(zmq_context):
    """A connection that takes its time (here: to a listener whose queue is full, which drops the
    handshake) is waited for until the remote stage's timeout, however many signals the caller's
    thread takes meanwhile; each used to end the wait at once, as if the time were up."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = [socket.socket() for _ in range(4)]  # fill the listener's queue: later handshakes go unanswered
    for connection in queued:
        connection.setblocking(False)
        connection.connect_ex(("127.0.0.1", port))
    handler = signal.signal(signal.SIGALRM, lambda *_: None)
    started = time.monotonic()
    try:  # a server whose link's endpoint is that listener
        with server_naming_link(zmq_context, f"tcp://127.0.0.1:{port}") as main_port, \
                pytest.raises(ConnectionError, match="direct connection: cannot connect"):
            signal.setitimer(signal.ITIMER_REAL, 0.02, 0.02)
            build_path(make_path(stage("remote", host=f"tcp://127.0.0.1:{main_port}", proto="tcp", timeout_ms=2000),
                                 stage("core", name="SLOW", format="q")), pastset=paths.PastSet())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
        for connection in queued + [listener]:
            connection.close()
    assert time.monotonic() - started >= 1.5  # not before its timeout (2 s) was up


def test_ctrl_c_ends_the_wait_for_a_direct_connection(zmq_context):
    """The same slow connection, with a timeout of 20 s: a signal whose handler raises (Ctrl-C)
    ends the wait within a slice, and the build raises what the handler raised."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = [socket.socket() for _ in range(4)]
    for connection in queued:
        connection.setblocking(False)
        connection.connect_ex(("127.0.0.1", port))

    def interrupt(*_):
        raise KeyboardInterrupt

    handler = signal.signal(signal.SIGALRM, interrupt)
    try:
        with server_naming_link(zmq_context, f"tcp://127.0.0.1:{port}") as main_port, \
                pytest.raises(KeyboardInterrupt):
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            started = time.monotonic()
            build_path(make_path(stage("remote", host=f"tcp://127.0.0.1:{main_port}", proto="tcp", timeout_ms=20_000),
                                 stage("core", name="SLOW", format="q")), pastset=paths.PastSet())
        heard = time.monotonic() - started
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
        for connection in queued + [listener]:
            connection.close()
    assert heard < 3.0, f"heard after {heard:.1f} s"


def test_a_zmq_links_answers_to_a_stranger_tell_it_nothing_of_the_links_id(peer_server, zmq_context):
    """Without CURVE, a ZeroMQ link serves any connection that names its id: the id is its client's
    secret, so an answer to a frame naming another id (or none it can read) names that one."""
    process, endpoint = peer_server
    link_id, link_endpoint, _ = open_link(zmq_context, endpoint, "STRANGER", 0)
    stranger = zmq_context.socket(zmq.DEALER)
    stranger.linger = 0
    stranger.connect(link_endpoint)
    try:
        for frame, named in ((encode(OBSERVE, request_id=1, handle_id=12345, value=10**9), 12345),
                             (b"not a frame", 0)):
            stranger.send(frame)
            assert stranger.poll(10_000), "no answer"
            reply = decode(stranger.recv(), answer=True)
            assert (reply["status"], reply["handle_id"]) == (PS_EINVAL, named) and named != link_id, reply
    finally:
        stranger.close()
