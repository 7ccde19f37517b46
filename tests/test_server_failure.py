"""A server that dies or is not there: clients error out within their remote stage's
timeout_ms (plus a margin for a loaded 2-core machine), never hang, and leave no process behind;
on each kind of link (`proto`: tcp, a direct socket, where a dead server's closed connection is
seen at once, and zmq).

The server is a `paths serve` child killed with SIGKILL while clients are blocked in it: a
thread of this process in observe(), a GSum of two C threads, and a client process. A client
killed mid-run ends its link on the server (abandoned); a stray connection to a link before its
client does not, and one that stays does not keep the link of a client gone."""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
import time

import pytest
import zmq
from child_processes import ChildProcesses, process_exists
from wire_frames import BUILD, PING, ZMQ, dealer, decode, encode, open_link, zmq_answer

import paths
import paths.runtime.server
from paths import build_path, make_path, stage
from paths.runtime.build import handle_tree

TIMEOUT_MS = 600            # the remote stages' timeout_ms
MARGIN_S = 0.6              # scheduling slack on a loaded machine
PATIENCE_S = 30             # the longest any wait here may take before its test fails
HEARD_S = 5.0               # Ctrl-C is heard within this, the answer being overdue 1.5 s after its request


@pytest.fixture
def children():
    with ChildProcesses() as started:
        yield started


@pytest.fixture(params=["tcp", "zmq"])
def proto(request):
    return request.param


def remote(address, element, proto):
    return make_path(stage("remote", host=address, proto=proto, timeout_ms=TIMEOUT_MS),
                     stage("core", name=element, format="q"))


def remote_counters(handle):
    """The counters of the remote stage on the handle's path (handle.stage is its top stage)."""
    table, key = handle_tree(handle)
    remote_key = next(key[i:] for i, spec in enumerate(key) if spec.kind == "remote")
    return table.live(remote_key).native.counters()


def wait_for_requests(handle, more_than):
    """Until the remote stage on the handle's path has sent more than `more_than` requests."""
    deadline = time.monotonic() + PATIENCE_S
    while remote_counters(handle)["requests"] <= more_than:
        assert time.monotonic() < deadline, "the client never reached the server"
        time.sleep(0.001)


class Blocked:
    """Runs call() in a thread; remembers what it raised and when it returned."""

    def __init__(self, call):
        self.error: BaseException | None = None
        self.ended_at: float | None = None
        self.thread = threading.Thread(target=self._run, args=(call,))
        self.thread.start()

    def _run(self, call):
        try:
            call()
        except BaseException as e:  # the test looks at it
            self.error = e
        self.ended_at = time.monotonic()

    def join(self):
        self.thread.join(PATIENCE_S)
        assert not self.thread.is_alive(), f"still blocked {PATIENCE_S} s after the server died"


def kill(server):
    server.signal(9)
    killed_at = time.monotonic()
    assert server.wait(PATIENCE_S) == -9
    assert not process_exists(server.pid)
    return killed_at


def assert_failed_in_time(blocked: Blocked, killed_at: float, address: str | None):
    blocked.join()
    assert isinstance(blocked.error, (ConnectionError, TimeoutError)), repr(blocked.error)
    waited = blocked.ended_at - killed_at
    assert waited < TIMEOUT_MS / 1000 + MARGIN_S, f"noticed the dead server after {waited:.2f} s"
    if address and isinstance(blocked.error, ConnectionError):
        assert address in str(blocked.error)


def test_killed_server_ends_a_blocked_observe(children, proto):
    server, address = children.paths_serve()
    handle = build_path(remote(address, "NOTHING", proto))
    sent = remote_counters(handle)["requests"]
    blocked = Blocked(lambda: handle.observe(timeout=PATIENCE_S))
    wait_for_requests(handle, sent)  # the observe is at the server
    assert_failed_in_time(blocked, kill(server), address)
    with pytest.raises(ConnectionError):  # the connection stays broken, at once
        handle.move(1)


def test_a_call_on_a_connection_broken_before_says_none_of_it_was_sent(children, proto):
    """The call that finds the server gone cannot know what became of its tuples (at least 0);
    every later call is refused unsent: exactly 0, and the message says why, not the first
    call's news again."""
    server, address = children.paths_serve()
    handle = build_path(remote(address, "GONE", proto))
    handle.move(1)
    kill(server)
    with pytest.raises(ConnectionError, match=re.escape("move_many (at least 0 of 2 tuples moved)")):
        handle.move_many([(2,), (3,)])
    refused = rf"remote {re.escape(address)}: not sent: the connection broke earlier \((no answer|cannot send): "
    for _ in range(2):
        with pytest.raises(ConnectionError, match=re.escape("move_many (0 of 2 tuples moved)")) as later:
            handle.move_many([(2,), (3,)])
        assert re.search(refused, str(later.value)), later.value
        for call in (lambda: handle.move(4), handle.observe, handle.last):
            with pytest.raises(ConnectionError, match=refused):
                call()


def test_killed_server_ends_a_gsum_in_c_threads(children, proto):
    server, address = children.paths_serve()
    path = make_path(stage("reduce-sum", num_threads=2), remote(address, "G", proto))
    handles = [build_path(path) for _ in range(2)]
    blocked = Blocked(lambda: paths.bench.gsum(handles, 10_000_000, timeout=PATIENCE_S))
    wait_for_requests(handles[0], 200)  # well into the run
    # (the kernel's message names the failed thread, not the server: it does not say more yet)
    assert_failed_in_time(blocked, kill(server), None)


def test_killed_server_ends_a_client_process(children, proto):
    server, address = children.paths_serve()
    client = children.peer("observe", address, proto, "NOTHING", TIMEOUT_MS)
    client.expect("OBSERVING")
    killed_at = kill(server)
    raised = client.expect("RAISED ", timeout=PATIENCE_S)
    waited = time.monotonic() - killed_at
    assert raised.split()[0] in ("ConnectionError", "TimeoutError"), raised
    assert waited < TIMEOUT_MS / 1000 + MARGIN_S, f"the client noticed after {waited:.2f} s"
    assert client.wait(PATIENCE_S) == 1
    assert not process_exists(client.pid)


@pytest.mark.parametrize("call", ["observe", "move", "move_many", "last", "fence", "move_many_unread"])
def test_ctrl_c_is_heard_while_a_stopped_server_owes_an_answer(children, proto, call):
    """A server that stops answering (SIGSTOP, a hang) while a Python call waits for its answer:
    Ctrl-C is heard once the answer is overdue (a live server answers within its 1 s slice), not
    after the remote's timeout_ms (60 s here), when the server would be taken as gone. So it is
    while a send waits for the stopped server to read (move_many_unread: pipelined further ahead
    than the sockets' buffers hold)."""
    server, address = children.paths_serve()
    client = children.peer("interrupted", address, proto, call)
    client.expect("READY")
    server.stop()
    try:
        client.send("go")
        client.expect("CALLING")
        time.sleep(0.2)  # the call is on its way
        client.signal(signal.SIGINT)
        interrupted_at = time.monotonic()
        raised = client.expect("RAISED ", timeout=PATIENCE_S)
        heard = time.monotonic() - interrupted_at
    finally:
        server.signal(signal.SIGCONT)
    assert raised == "KeyboardInterrupt", client.stderr()
    assert heard < HEARD_S, f"Ctrl-C heard after {heard:.2f} s"
    assert client.wait(PATIENCE_S) == 1


def test_server_down_at_build_time_is_connection_error_within_timeout(proto):
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    started = time.monotonic()
    with pytest.raises(ConnectionError) as refused:
        build_path(remote(address, "NOWHERE", proto))
    waited = time.monotonic() - started
    assert TIMEOUT_MS / 1000 * 0.9 <= waited < TIMEOUT_MS / 1000 + MARGIN_S
    assert address in str(refused.value) and "no answer" in str(refused.value)


def test_a_killed_client_does_not_outlive_itself_on_the_server(children, proto):
    """A client killed mid-run holds a caller slot of the server's reduce-sum; its link ends
    when its connection closes, the server's tree goes with it, and a new run can build the
    same tree again (instead of finding the fan-in used up)."""
    with paths.runtime.server.PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server:
        doomed = children.peer("figure1", server.endpoint, proto, 10_000_000)
        doomed.expect("BUILT")
        assert server.native.counters()["live"] == 1
        first_request = 3 if proto == "tcp" else 2  # BUILD, CONNECT on a direct link, the first exchange
        deadline = time.monotonic() + PATIENCE_S
        while server.native.counters()["frames"] < first_request:  # mid-run: its link is served
            assert time.monotonic() < deadline, "the client never reached its link"
            time.sleep(0.001)
        doomed.signal(9)
        deadline = time.monotonic() + PATIENCE_S
        while server.native.counters()["live"]:
            assert time.monotonic() < deadline, "the dead client's link is still served"
            time.sleep(0.01)
        assert server.native.counters()["abandoned"] == 1
        pair = [children.peer("figure1", server.endpoint, proto, 200) for _ in range(2)]
        for client in pair:  # the GSum kernel checks every total: a wrong one fails the client
            assert json.loads(client.expect("DONE ", timeout=PATIENCE_S))["rounds"] == 200
            assert client.wait(PATIENCE_S) == 0
        element = server.pastset.enter("F", "q")  # the doomed run completed no round
        assert [element.observe(i)[0] for i in range(element.last())] == [4 * r for r in range(200)]


def test_a_stray_connection_before_the_client_is_not_the_client():
    """A connect-and-close to a link's socket before its client (a port scan) must not end the
    link; only the client's own going away does."""
    ctx = zmq.Context()
    try:
        with paths.runtime.server.PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server:
            main = ctx.socket(zmq.DEALER)
            main.linger = 0
            main.connect(server.endpoint)
            spec = paths.model.path_spec.path_to_json(make_path(stage("core", name="STRAY", format="q"))).encode()
            main.send(encode(BUILD, spec, request_id=1))
            assert main.poll(5000)
            link_endpoint = decode(main.recv())["payload"].decode()
            stray = ctx.socket(zmq.DEALER)
            stray.linger = 0
            stray.connect(link_endpoint)
            stray.send(b"x")
            assert stray.poll(5000)  # answered: the connection was made
            stray.close()
            time.sleep(0.3)  # nothing to wait for: the link must NOT end; give the disconnect time to land
            assert server.native.counters()["abandoned"] == 0 and server.native.counters()["live"] == 1
    finally:
        ctx.destroy(linger=0)


def test_a_stray_connection_that_stays_does_not_keep_the_link_of_a_client_gone():
    """A connection to a link's socket that is not the client's (a port scan that holds on, a
    client of another server that reconnects to the port its server had) is still open when
    the client goes away: the link ends all the same, as its client's connection closed."""
    ctx = zmq.Context()
    try:
        with paths.runtime.server.PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server:
            link_id, where, _ = open_link(ctx, server.endpoint, "STAYS", ZMQ)
            client, stray = dealer(ctx, where), dealer(ctx, where)
            client.send(encode(PING, request_id=2, handle_id=link_id))
            assert decode(zmq_answer(client), answer=True)["status"] == 0  # served: the client's link
            stray.send(encode(PING, request_id=3))
            zmq_answer(stray)  # answered (a frame of no link of its): the stray is connected
            client.close()  # as when its process ends
            deadline = time.monotonic() + PATIENCE_S
            while server.native.counters()["live"]:
                assert time.monotonic() < deadline, "the stray keeps the link of a client gone"
                time.sleep(0.01)
            assert server.native.counters()["abandoned"] == 1
            stray.close()
    finally:
        ctx.destroy(linger=0)


def test_a_stray_connection_whose_descriptor_the_client_then_gets_is_not_the_client_going():
    """A stray that connects and closes just before the client connects leaves its descriptor
    free, and the client's connection gets it: the stray's close, read after the client's first
    request, is not the client's. The link still serves its client after its next idle slices.
    Several links, so that on one at least the stray's close is read after the request."""
    ctx = zmq.Context()
    try:
        with paths.runtime.server.PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server:
            clients = []
            for n in range(6):
                link_id, where, _ = open_link(ctx, server.endpoint, f"REUSED{n}", ZMQ)
                stray = dealer(ctx, where)
                stray.send(encode(PING, request_id=1))
                zmq_answer(stray)  # answered: the stray's connection was accepted
                stray.close()
                time.sleep(0.005)  # its close reaches the server, which frees the descriptor
                client = dealer(ctx, where)
                client.send(encode(PING, request_id=2, handle_id=link_id))
                assert decode(zmq_answer(client), answer=True)["status"] == 0
                clients.append((link_id, client))
            time.sleep(0.5)  # idle slices: every link has read its connections' comings and goings
            for link_id, client in clients:
                client.send(encode(PING, request_id=3, handle_id=link_id))
                assert decode(zmq_answer(client), answer=True)["status"] == 0
            assert server.native.counters()["abandoned"] == 0
            assert server.native.counters()["live"] == len(clients)
    finally:
        ctx.destroy(linger=0)


def test_a_failure_is_told_in_its_own_words_not_in_an_older_refusals():
    """A reduce-sum over a remote: its refusal of an observe with no move first, heard, then the
    server gone. The failure says the remote's reason, not the sum's older refusal (which its
    stage still keeps, above the remote's)."""
    with paths.runtime.server.PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server:
        handle = build_path(make_path(stage("reduce-sum", num_threads=1),
                                      stage("remote", host=server.endpoint, timeout_ms=TIMEOUT_MS),
                                      stage("core", name="OWNWORDS", format="q")))
        with pytest.raises(RuntimeError, match="move first"):
            handle.observe()
        handle.move((1,))
        assert handle.observe() == (1,)
    with pytest.raises(ConnectionError) as failed:
        handle.move((2,))
        handle.observe()
    assert "remote tcp://127.0.0.1:" in str(failed.value) and "move first" not in str(failed.value)


def test_a_shared_sums_failed_round_is_explained_to_every_contributor(children):
    """Two clients share a sum on a server, whose round goes down through a remote to a second
    server, killed. The client whose move completes the round drives it down (its move itself
    succeeds); each contributor's observe then fails, told in the driving call's words: the second
    server's remote, named."""
    first, first_endpoint = children.paths_serve("--allow-remote", "tcp://127.0.0.1:*")
    second, second_endpoint = children.paths_serve()
    path = make_path(stage("remote", host=first_endpoint, timeout_ms=5000), stage("reduce-sum", num_threads=2),
                     stage("remote", host=second_endpoint, timeout_ms=TIMEOUT_MS),
                     stage("core", name="SHARED", format="q"))
    one, other = build_path(path, pastset=paths.PastSet()), build_path(path, pastset=paths.PastSet())
    one.move(1)
    other.move(2)
    assert one.observe(timeout=5) == (3,) and other.observe(timeout=5) == (3,)
    second.signal(signal.SIGKILL)
    assert second.wait(PATIENCE_S) == -signal.SIGKILL
    one.move(1)
    other.move(2)  # completes the round: its link's thread on the first server drives it down
    for handle in (one, other):
        with pytest.raises(ConnectionError) as failed:
            handle.observe(timeout=5)
        assert f"remote {second_endpoint}" in str(failed.value), str(failed.value)
