"""The remote stage and the PastSet server, end to end over TCP loopback, on both kinds of link
(`proto`): tcp, a direct socket per link, and zmq, the link's own ZeroMQ socket. The paper's
Figure 1 between two real client processes, a remote element as a job queue for four worker
processes, errors that cross the wire as the same exceptions as local ones, clients that never
stall each other (nor does one slow BUILD), 32 concurrent connections, a failed pipelined move
that breaks its connection for good, move_many as one frame per batch, a caller whose leaving
releases its server link, and the `paths serve` command's signals and bind check.

Every child process is reaped by the fixtures, whatever happens; every wait is bounded."""

from __future__ import annotations

import gc
import json
import os
import re
import signal
import socket
import sys
import threading
import time

import pytest
from child_processes import ChildProcesses, counters, process_exists
from refusing_stage import NoNegatives  # noqa: F401  (registers the kind test-no-negatives)

import paths
from paths import _native, build_path, make_path, stage
from paths.runtime.server import PathServer
from paths.runtime.server_policy import ServerPolicy

TIMEOUT_MS = 5000     # remote stages' timeout_ms: generous, nothing here should come near it
PATIENCE_S = 30       # the longest any wait in this file may take before its test fails
PROTOS = ["tcp", "zmq"]


@pytest.fixture(scope="module")
def endpoint():
    """One `paths serve` for the tests that only need a server (each uses its own elements)."""
    with ChildProcesses() as children:
        _, address = children.paths_serve()
        yield address


@pytest.fixture
def local_server():
    """A PathServer in this process, for tests that look at its counters and elements."""
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as s:
        yield s


@pytest.fixture
def children():
    with ChildProcesses() as started:
        yield started


@pytest.fixture(params=PROTOS)
def proto(request):
    """Every test that takes it runs on each kind of link."""
    return request.param


def remote_path(address, element, proto, format="q", **remote):
    return make_path(stage("remote", host=address, proto=proto, timeout_ms=TIMEOUT_MS, **remote),
                     stage("core", name=element, format=format))


def test_a_process_forked_from_one_that_used_remote_paths_builds_its_own(endpoint, proto):
    """multiprocessing's default on Linux forks: the child had the parent's ZeroMQ context without
    its I/O thread, and every BUILD it sent waited out its timeout ('no answer to BUILD')."""
    parent = build_path(remote_path(endpoint, f"FORKED-{proto}", proto))
    parent.move((1,))
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only when its own path works
        code = 1
        try:
            child = build_path(remote_path(endpoint, f"FORKED-{proto}", proto))
            child.move((2,))
            code = 0 if child.last() == 2 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert parent.observe_range(0, 2, timeout=PATIENCE_S) == [(1,), (2,)]  # the parent's path works on


@pytest.mark.parametrize("transport", ["tcp", "ipc", "zmq"])
def test_a_forked_child_cannot_use_its_parents_handle_nor_break_it(endpoint, transport):
    """The child's copy of a handle is its parent's: a call on it is refused at once, and its
    release (the child's exit) sends nothing, so the parent's link goes on whole."""
    parent = build_path(remote_path(endpoint, f"INHERITED-{transport}", transport))
    parent.move((1,))
    pid = os.fork()
    if pid == 0:  # exit status 0 when the move was refused and sent nothing
        code = 1
        try:
            try:
                parent.move((99,), timeout=5)
            except RuntimeError as refused:
                code = 0 if "did not make the handle" in str(refused) else 1
            del parent
            gc.collect()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    for value in range(2, 200):
        parent.move((value,))
    assert parent.observe_range(0, 199, timeout=PATIENCE_S) == [(v,) for v in range(1, 200)]


# ---- Figure 1: two client processes, two threads each, one server ---------------------------


def test_figure1_two_client_processes_exact_totals(children, proto):
    rounds = 1000
    _, address = children.paths_serve()
    clients = [children.peer("figure1", address, proto, rounds) for _ in range(2)]
    results = [json.loads(client.expect("DONE ", timeout=PATIENCE_S)) for client in clients]
    assert [client.wait(PATIENCE_S) for client in clients] == [0, 0]
    # The kernel checks every round's total (4 * round) in C; check the element's history too.
    assert [r["rounds"] for r in results] == [rounds, rounds]
    element = build_path(remote_path(address, "F", proto))
    assert element.last() == rounds  # one move per round reached the server's element
    assert [element.observe(i)[0] for i in range(rounds)] == [4 * i for i in range(rounds)]


# ---- a job queue: every job taken exactly once ------------------------------------------------


def test_remote_element_as_job_queue_for_four_worker_processes(children, endpoint, proto):
    jobs, workers, element = 3000, 4, f"JOBS-{proto}"
    started = [children.peer("worker", endpoint, proto, element) for _ in range(workers)]
    for worker in started:
        worker.expect("READY")
    producer = build_path(remote_path(endpoint, element, proto, window=16))
    for job in range(jobs):
        producer.move(job)
    for _ in range(workers):
        producer.move(-1)  # one stop marker per worker
    took = [json.loads(worker.expect("TOOK ", timeout=PATIENCE_S)) for worker in started]
    assert [worker.wait(PATIENCE_S) for worker in started] == [0] * workers
    everything = [job for taken in took for job in taken]
    assert len(everything) == jobs, "a job was taken twice or not at all"
    assert sorted(everything) == list(range(jobs))
    for taken in took:
        assert taken == sorted(taken), "one worker saw the queue out of order"


# ---- errors cross the wire as the same exceptions --------------------------------------------


ERROR_CASES = {
    "wrong tuple": lambda h: h.move("not a number"),
    "wrong arity": lambda h: h.move((1, 2)),
    "observe timeout": lambda h: h.observe(timeout=0.05),
    "indexed observe timeout": lambda h: h.observe(50, timeout=0.05),
    "negative index": lambda h: h.observe(-1),
    "axed tuple": lambda h: (h.move(1), h.move(2), h.axe(2), h.observe(0)),
    "negative delta": lambda h: h.delta(-3),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_errors_are_the_same_exceptions_as_local(endpoint, proto, case):
    local = build_path(make_path(stage("core", name="E", format="q")), pastset=paths.PastSet())
    remote = build_path(remote_path(endpoint, f"errors-{case}-{proto}", proto))
    with pytest.raises(Exception) as local_error:
        ERROR_CASES[case](local)
    with pytest.raises(Exception) as remote_error:
        ERROR_CASES[case](remote)
    assert remote_error.type is local_error.type, f"remote: {remote_error.value!r}, local: {local_error.value!r}"
    assert remote_error.type in (TypeError, TimeoutError, IndexError, ValueError, paths.AxedError)
    remote.move(7)  # the connection still works after the error
    assert remote.observe(remote.last() - 1) == (7,)


@pytest.mark.parametrize("host", ["", "n0", "tcp://127.0.0.1", "tcp://127.0.0.1:port", "ipc://", "tcp://127.0.0.1:0",
                                  "tcp://127.0.0.1:70000", "127.0.0.1:123456", "udp://127.0.0.1:7000",
                                  "TCP://127.0.0.1:7000"])
def test_a_host_that_names_no_server_is_refused_at_build(host):
    """Outside a run a node's name (n0) is no server either: a ValueError before anything is sent."""
    with pytest.raises(ValueError, match=rf"^stage 'remote': host '{re.escape(host)}' names no server to reach: "
                                         r"expected tcp://HOST:PORT \(or HOST:PORT; PORT 1 to 65535\), ipc://NAME, "
                                         r"inproc://NAME, or in a run the name of a node of its map"):
        build_path(make_path(stage("remote", host=host), stage("core", name="X", format="q")),
                   pastset=paths.PastSet())


@pytest.mark.parametrize("key", ["~" * 40, "short"])
def test_a_server_key_that_is_no_z85_key_is_refused_at_build(key):
    with pytest.raises(ValueError, match=rf"^stage 'remote': curve_server_key must be 40 Z85 characters \(a public "
                                         rf"key that paths serve --keygen wrote\), got '{re.escape(key)}'"):
        build_path(make_path(stage("remote", host="tcp://127.0.0.1:7000", curve_server_key=key),
                             stage("core", name="X", format="q")), pastset=paths.PastSet())


def test_server_refusing_an_unknown_kind_is_value_error_with_its_message(endpoint, proto):
    # build_path checks kinds before sending anything, so send a remainder by hand.
    remainder = json.dumps({"version": 1, "path": [["no-such-kind", {}], ["core", {"name": "X", "format": "q"}]]})
    remote = _native.create_stage("remote", {"host": endpoint, "proto": proto, "timeout_ms": TIMEOUT_MS,
                                             "format": "q", "path": remainder}, None, paths.PastSet())
    with pytest.raises(ValueError) as refused:
        remote.attach("caller")
    message = str(refused.value)
    assert endpoint in message and "refused" in message
    assert "unknown stage kind 'no-such-kind'" in message and "paths serve --allow-kinds MODULE:NAME" in message


def test_server_refusing_a_used_up_fan_in_is_value_error_with_its_message(endpoint, proto):
    path = make_path(stage("remote", host=endpoint, proto=proto, timeout_ms=TIMEOUT_MS),
                     stage("reduce-sum", num_threads=1), stage("core", name=f"FANIN-{proto}", format="q"))
    first = build_path(path)
    with pytest.raises(ValueError, match=r"refused the path: .*fan-in 1 is used up"):
        build_path(path)
    first.move(5)
    assert first.observe() == (5,)


# ---- clients do not stall each other ----------------------------------------------------------


def test_a_blocked_observe_does_not_stall_another_client(endpoint, proto):
    blocked = build_path(remote_path(endpoint, f"WAITS-{proto}", proto))
    other = build_path(remote_path(endpoint, f"BUSY-{proto}", proto))
    feeder = build_path(remote_path(endpoint, f"WAITS-{proto}", proto))
    result = {}

    def wait_for_a_tuple():
        try:
            result["tuple"] = blocked.observe(timeout=PATIENCE_S)
        except Exception as e:  # reported by the assertion below
            result["error"] = e

    requests_before = blocked.stage.counters()["requests"]
    waiter = threading.Thread(target=wait_for_a_tuple)
    waiter.start()
    try:
        deadline = time.monotonic() + PATIENCE_S
        while blocked.stage.counters()["requests"] == requests_before:  # the observe went out
            assert time.monotonic() < deadline
            time.sleep(0.001)
        started = time.monotonic()
        for i in range(200):
            other.move(i)
            assert other.observe() == (i,)
        busy_seconds = time.monotonic() - started
        assert waiter.is_alive(), "the observe returned with nothing moved"
    finally:
        feeder.move(42)
        waiter.join(PATIENCE_S)
    assert result == {"tuple": (42,)}
    assert busy_seconds < 2.0, f"200 round trips took {busy_seconds:.2f} s beside a blocked observe"


def test_one_slow_build_delays_no_other_client():
    refused = []

    def slow_build():
        try:
            build_path(make_path(stage("remote", host=server.endpoint, timeout_ms=8000),
                                 stage("remote", host=silent.endpoint, timeout_ms=3000),
                                 stage("core", name="S", format="q")), pastset=paths.PastSet())
        except ValueError as e:  # the server refuses the path: its own build got no answer
            refused.append(str(e))

    trusting = ServerPolicy(allow_remote=("tcp://127.0.0.1:*",))  # it may build remote stages to loopback
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()) as silent, \
            PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), policy=trusting).start() as server:
        slow = threading.Thread(target=slow_build)  # `silent` never serves: builds there wait
        slow.start()
        deadline = time.monotonic() + 5
        while not server.native.counters()["frames"]:  # the server took the slow BUILD: it is being built
            assert time.monotonic() < deadline
            time.sleep(0.001)
        started = time.monotonic()
        quick = build_path(make_path(stage("remote", host=server.endpoint, timeout_ms=8000),
                                     stage("core", name="Q", format="q")), pastset=paths.PastSet())
        assert time.monotonic() - started < 1.0
        quick.move(1)
        assert quick.observe(timeout=5) == (1,)
        slow.join(15)
    assert len(refused) == 1 and "no answer to BUILD" in refused[0]


def test_32_concurrent_client_connections(children, proto):
    clients, pairs = 32, 100
    server, address = children.peer_server()
    barrier = threading.Barrier(clients + 1, timeout=PATIENCE_S)
    failures = []

    def client(n):
        try:
            handle = build_path(remote_path(address, f"MANY-{n}", proto))
            barrier.wait()  # every connection is open at once
            barrier.wait()
            for i in range(pairs):
                handle.move(n * pairs + i)
                assert handle.observe() == (n * pairs + i,)
        except Exception as e:
            failures.append(e)
            barrier.abort()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    try:
        barrier.wait()
        live = counters(server)
        assert live["live"] == clients and live["builds"] == clients
        assert live["direct"] == (clients if proto == "tcp" else 0)
        barrier.wait()
    finally:
        for thread in threads:
            thread.join(PATIENCE_S)
    assert not failures, failures[:3]
    assert not any(thread.is_alive() for thread in threads)


# ---- pipelined moves and move_many --------------------------------------------------------------


@pytest.mark.parametrize("calls", ["move", "move_many", "batch"])
def test_pipelined_moves_that_wait_past_their_slices_take_effect_in_order(local_server, proto, calls):
    """A bounded element: pipelined moves wait at the server past their slices (timeout_ms / 2)
    while a slow reader makes room. Each slice that ends sends the moves not run again, in order:
    every tuple lands once, in order, and nothing fails."""
    name = f"BOUNDED-{proto}-{calls}"
    reader = local_server.pastset.enter(name, "q")
    reader.delta(2)
    top = [stage("batch", max_moves=2)] if calls == "batch" else []
    h = build_path(make_path(*top, stage("remote", host=local_server.endpoint, proto=proto, timeout_ms=400, window=4),
                             stage("core", name=name, format="q")), pastset=paths.PastSet())
    done = threading.Event()

    def read_slowly():
        while not done.is_set():
            time.sleep(0.25)  # longer than a slice
            try:
                reader.observe(timeout=0.1)
            except TimeoutError:
                pass

    slow = threading.Thread(target=read_slowly)
    slow.start()
    try:
        for i in range(0, 16, 2):
            if calls == "move_many":
                h.move_many([(i,), (i + 1,)], timeout=PATIENCE_S)
            else:
                h.move(i, timeout=PATIENCE_S)
                h.move(i + 1, timeout=PATIENCE_S)
        if calls == "batch":
            paths.fence([h], timeout=PATIENCE_S)
        assert h.last() == 16
    finally:
        done.set()
        slow.join()
    assert reader.observe_range(0, 16, timeout=1) == [(i,) for i in range(16)]


def test_a_call_whose_time_ends_behind_waiting_pipelined_moves_times_out_and_they_go_on_later(local_server, proto,
                                                                                             capfd):
    """The element is full: pipelined moves wait at the server past their slices. An observe of
    0.1 s behind them times out, not run, and the moves are held back; the next call sends them
    again, and they land in order once there is room. A caller that goes while they still wait
    says on stderr how many did not take effect, and they never do."""
    name = f"FULL-{proto}"
    element = local_server.pastset.enter(name, "q")
    element.delta(1)
    element.move(-1)
    h = build_path(make_path(stage("remote", host=local_server.endpoint, proto=proto, timeout_ms=400, window=4),
                             stage("core", name=name, format="q")), pastset=paths.PastSet())
    h.move(1)
    h.move(2)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        h.observe(0, timeout=0.1)
    assert time.monotonic() - started < 1.5  # its own timeout, past it by one slice at most
    threading.Timer(0.5, lambda: [element.observe(timeout=5) for _ in range(3)]).start()
    assert h.last() == 3  # the held moves went again, and landed once there was room
    assert element.observe_range(0, 3, timeout=1) == [(-1,), (1,), (2,)]
    h.move(3)  # the room the reader made, one tuple ahead of it
    h.move(4)  # waits: nobody reads any more
    del h
    assert re.search(rf"paths: on release, remote {re.escape(local_server.endpoint)}: 1 tuples of pipelined moves did "
                     rf"not take effect: they still waited at the server 500 ms after release", capfd.readouterr().err)
    assert element.observe(timeout=1) == (3,)  # room again: nothing more comes
    time.sleep(0.5)
    assert element.last() == 4


def test_many_pipelining_producers_on_a_bounded_element_lose_duplicate_and_reorder_nothing(local_server, proto):
    """Four producers, each its own pipelined link (window 8, slices of 0.2 s), move 300 tuples
    each into an element bounded to 8 ahead of its reader, which stops for longer than a slice
    every 100 tuples: slices end under load, requests go again, and every producer's tuples land
    once each, in its order."""
    name = f"CROWDED-{proto}"
    reader = local_server.pastset.enter(name, "q")
    reader.delta(8)
    producers, each = 4, 300
    handles = [build_path(make_path(stage("remote", host=local_server.endpoint, proto=proto, timeout_ms=400,
                                          window=8), stage("core", name=name, format="q")), pastset=paths.PastSet())
               for _ in range(producers)]
    failures = []

    def produce(p):
        try:
            for i in range(each):
                handles[p].move(p * 1000 + i, timeout=PATIENCE_S)
            handles[p].last()  # waits for the pipelined moves
        except Exception as e:  # noqa: BLE001 (reported below)
            failures.append(e)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    for t in threads:
        t.start()
    seen = []
    while len(seen) < producers * each:
        if len(seen) % 100 == 0:
            time.sleep(0.3)
        seen.append(reader.observe(timeout=PATIENCE_S)[0])
    for t in threads:
        t.join()
    assert failures == []
    for p in range(producers):
        assert [v for v in seen if v // 1000 == p] == [p * 1000 + i for i in range(each)]
    assert sum(h.stage.counters()["resent"] for h in handles) > 0  # slices did end


def test_a_batchs_timed_send_through_a_pipelined_remote_reaches_the_server_at_once(local_server):
    """flush_us bounds how long moves wait, also above a pipelined remote on tcp: the move_many the
    timer sends leaves at once, not held back for a request to follow it (200 ms)."""
    element = local_server.pastset.enter("TIMED", "q")
    arrivals = []
    for attempt in range(3):  # the quickest of three: one late turn of a busy machine is not the send
        h = build_path(make_path(stage("batch", max_moves=1000, flush_us=20000),
                                 stage("remote", host=local_server.endpoint, window=8),
                                 stage("core", name="TIMED", format="q")), pastset=paths.PastSet())
        before, started = element.last(), time.monotonic()
        for i in range(5):
            h.move(i)
        while element.last() < before + 5:
            time.sleep(0.001)
        arrivals.append(time.monotonic() - started)
        del h
    assert min(arrivals) < 0.15, arrivals


def test_a_failed_pipelined_move_drops_it_and_those_after_it_and_the_next_call_says_so(proto):
    """A move the server's path refuses: the server runs none of the caller's requests sent after
    it; the caller's next operation, not run, fails with that move's error, saying how many did not
    take effect; the link goes on."""
    policy = ServerPolicy(allow_kinds=frozenset({"test-no-negatives"}))
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), policy=policy).start() as server:
        h = build_path(make_path(stage("remote", host=server.endpoint, proto=proto, timeout_ms=5000, window=8),
                                 stage("test-no-negatives"), stage("core", name="PICKY", format="q")),
                       pastset=paths.PastSet())
        h.move(1)
        h.move(-2)
        h.move_many([(3,), (4,)])
        h.move(5)
        with pytest.raises(ValueError, match=re.escape(
                f"thread 0 last (remote {server.endpoint}: a pipelined move sent before this call failed (invalid "
                f"argument: at the server: test-no-negatives: ValueError: no negatives here, got -2); it and the 2 "
                f"sent after it did not take effect (4 tuples)): invalid argument")):
            h.last()
        h.move(6)
        assert h.observe_range(0, h.last(), timeout=5) == [(1,), (6,)]
        h.move(7)
        h.move(-8)
        h.move_many([(9,), (10,)])
        with pytest.raises(ValueError, match=r"got -8\); it and the 1 sent after it did not take effect \(3 tuples\)"):
            h.first()
        assert h.observe_range(0, h.last(), timeout=5) == [(1,), (6,), (7,)]


def test_an_exchange_whose_slice_ends_after_its_move_waits_on_for_its_observe_only(local_server, proto):
    """A slice (timeout_ms / 2) ends at the server with the exchange's move done and the round's
    total still missing: the client goes on with an observe, never a second move."""
    p = make_path(stage("remote", host=local_server.endpoint, proto=proto, timeout_ms=400),
                  stage("reduce-sum", num_threads=2), stage("core", name=f"SLOW-SUM-{proto}", format="q"))
    early, late = build_path(p, pastset=paths.PastSet()), build_path(p, pastset=paths.PastSet())
    with pytest.raises(TimeoutError, match="moved; its observe"):
        early.exchange((5,), timeout=0.7)  # slices of 0.2 s: three end while it waits
    assert late.exchange((7,), timeout=PATIENCE_S) == (12,)
    assert early.observe(timeout=PATIENCE_S) == (12,)
    totals = local_server.pastset.enter(f"SLOW-SUM-{proto}", "q")
    assert [totals.observe(i) for i in range(totals.last())] == [(12,)]


@pytest.mark.parametrize("format, tuples, frames", [("q", 5000, 3), ("20000s", 3, 3)], ids=["q", "20000s"])
def test_move_many_crosses_as_one_frame_per_16_kib_of_tuples(local_server, proto, format, tuples, frames):
    """2048 'q' tuples fit in a frame, so 5000 go in three frames, each acknowledged once; a tuple
    larger than 16 KiB goes alone."""
    element = f"MANY-{proto}-{format}"
    h = build_path(remote_path(local_server.endpoint, element, proto, format), pastset=paths.PastSet())
    values = [(i,) if format == "q" else (bytes([i + 1]) * 20000,) for i in range(tuples)]
    h.last()  # connected
    sent, served = h.stage.counters(), local_server.native.counters()["frames"]
    h.move_many(values)
    now = h.stage.counters()
    assert (now["requests"] - sent["requests"], now["answers"] - sent["answers"]) == (frames, frames)
    assert local_server.native.counters()["frames"] - served == frames
    moved = local_server.pastset.enter(element, format)
    assert [moved.observe(i) for i in range(moved.last())] == values


# ---- callers come and go ----------------------------------------------------------------------


def test_a_remote_callers_leaving_releases_its_server_link(local_server):
    p = make_path(stage("remote", host=local_server.endpoint, timeout_ms=5000), stage("core", name="R", format="q"))
    ps = paths.PastSet()
    keeper = build_path(p, pastset=ps)  # keeps the remote stage alive
    for _ in range(3):
        h = build_path(p, pastset=ps)
        h.move(1)
        assert local_server.native.counters()["live"] == 2
        del h  # its link is released at once, not when the whole remote stage goes
        deadline = time.monotonic() + 5
        while local_server.native.counters()["live"] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.001)
    assert keeper.last() == 3


# ---- Ctrl-C ------------------------------------------------------------------------------------

DAEMON_BUILDS = """
import socket, sys, threading, time
from paths import build_path, make_path, stage

hole = socket.socket()  # takes connections, never answers
hole.bind(("127.0.0.1", 0))
hole.listen(8)
above = [stage("reduce-sum", num_threads=1)] if sys.argv[1] == "sum" else []
path = make_path(*above, stage("remote", host=f"tcp://127.0.0.1:{hole.getsockname()[1]}", timeout_ms=30000),
                 stage("core", name="D", format="q"))
threading.Thread(target=build_path, args=(path,), daemon=True).start()
time.sleep(0.5)
print("ENDING", flush=True)
"""


@pytest.mark.parametrize("shape", ["remote", "sum"])
def test_a_program_ends_while_a_daemon_threads_build_waits_for_its_server(shape):
    """The wait's checks for Ctrl-C took the GIL on any thread, also while the interpreter ended
    around it: abort, exit 134. Only the main thread hears signals."""
    with ChildProcesses() as children:
        child = children.start([sys.executable, "-c", DAEMON_BUILDS, shape], name=f"daemon build {shape}")
        child.expect("ENDING")
        assert child.wait(PATIENCE_S) == 0, child.stderr()
    assert child.stderr() == ""


SERVER_SLICE_S = 1.0  # the longest a server waits before it answers (its cap on a client's slice)
INTERRUPTED = """
import socket, sys, time
import paths
from paths import build_path, make_path, stage
from paths.runtime.server import PathServer

call = sys.argv[1]
if call.endswith("build"):  # an endpoint nobody serves: the BUILD's answer never comes
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    endpoint = f"tcp://127.0.0.1:{free.getsockname()[1]}"
    free.close()
    above = [stage("reduce-sum", num_threads=1)] if call == "sum build" else []  # its link set up as it is made
    go = lambda: build_path(make_path(*above, stage("remote", host=endpoint, timeout_ms=60000),
                                      stage("core", name="B", format="q")))
else:  # pipelined moves that wait at the server (a full element) come before it
    server = PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start()
    h = build_path(make_path(stage("remote", host=server.endpoint, timeout_ms=60000, window=8),
                             stage("core", name="W", format="q")))
    h.delta(2)
    for value in range(6):
        h.move(value)
    go = {"last": h.last, "first": h.first, "axe": lambda: h.axe(0)}[call]
print("READY", flush=True)
started = time.monotonic()
try:
    go()
except KeyboardInterrupt:
    print(f"INTERRUPTED {time.monotonic() - started:.3f}", flush=True)
if call.endswith("build"):  # the interrupted build left nothing that keeps the path from being built
    server = PathServer(endpoint, pastset=paths.PastSet()).start()
    h = go()
    h.move(5)
    print(f"BUILT {h.observe(timeout=10)[0]}", flush=True)
sys.exit(130)
"""


@pytest.mark.parametrize("call", ["build", "sum build", "last", "first", "axe"])
def test_ctrl_c_interrupts_a_remote_stage_that_waits_for_its_server(call):
    """A BUILD's answer held Ctrl-C for the stage's timeout_ms (here a minute), and a sum's link
    to it, set up as the sum is made, then left the path marked as being built, so that the
    next build of it waited for ever; last(), first() and axe() behind pipelined moves held it
    10 s, then timed out."""
    with ChildProcesses() as children:
        child = children.start([sys.executable, "-c", INTERRUPTED, call], name=f"remote {call}")
        child.expect("READY")
        time.sleep(0.3)  # well into the wait
        child.signal(signal.SIGINT)
        waited = float(child.expect("INTERRUPTED ", timeout=PATIENCE_S))
        if call.endswith("build"):
            assert child.expect("BUILT ", timeout=PATIENCE_S) == "5"
        assert child.wait(PATIENCE_S) == 130
    assert waited < 0.3 + SERVER_SLICE_S + 0.5  # heard at the end of the slice the server waits in


# ---- the paths serve command ------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_paths_serve_exits_0_on_signal_even_with_a_blocked_client(children, proto, sig):
    server, address = children.paths_serve()
    client = children.peer("observe", address, proto, "NEVER", 1000)
    client.expect("OBSERVING")
    handle = build_path(remote_path(address, "SERVED", proto))
    handle.move(1)
    assert handle.observe() == (1,)
    server.signal(sig)
    assert server.wait(timeout=10) == 0, server.stderr()
    assert not process_exists(server.pid)
    assert client.expect("RAISED ", timeout=PATIENCE_S).split()[0] in ("ConnectionError", "TimeoutError")
    assert client.wait(PATIENCE_S) == 1
    assert not process_exists(client.pid)


@pytest.mark.parametrize("bind", ["tcp://0.0.0.0:*", "tcp://*:*"])
def test_paths_serve_refuses_a_non_loopback_bind_without_curve(children, bind):
    server = children.start([sys.executable, "-m", "paths", "serve", "--bind", bind], name="paths serve")
    assert server.wait(timeout=PATIENCE_S) == 2
    assert "--curve-secret" in server.stderr() and bind in server.stderr()



@pytest.mark.parametrize("proto", ["tcp", "zmq", "ipc", "inproc"])
def test_a_program_reaches_the_server_it_hosts_and_a_loop_is_still_refused(tmp_path, proto):
    """A path that starts in a program has crossed no server, not even the one the program hosts
    (in the same context): it reaches it, and the element is the program's own. A path through
    that server and back into it is still refused, at its second entry."""
    where = {"ipc": f"ipc://{tmp_path / 'own.sock'}", "inproc": f"inproc://paths-own-{tmp_path.name}"}
    pastset = paths.PastSet()
    trusting = ServerPolicy(allow_remote=("tcp://127.0.0.1:*",))
    with PathServer(where.get(proto, "tcp://127.0.0.1:*"), pastset=pastset, policy=trusting).start() as server:
        own = stage("remote", host=server.endpoint, proto=proto, timeout_ms=5000)
        handle = build_path(make_path(own, stage("core", name="OWN", format="q")), pastset=pastset)
        handle.move(5)
        assert pastset.enter("OWN", "q").observe_range(0, 1, timeout=5) == [(5,)]
        del handle
        if proto in ("tcp", "zmq"):
            with pytest.raises(ValueError, match=r"it comes back into server [0-9a-f]{16} .*which it went through "
                                                 "already"):
                build_path(make_path(own, own, stage("core", name="OWN", format="q")), pastset=pastset)


@pytest.mark.parametrize("proto", ["tcp", "zmq"])
def test_a_sums_link_names_the_servers_from_the_sum_on_whoever_built_it(proto):
    """A sum's one link below is shared by all its callers, whichever way each came: it names the
    servers from the sum on. A tree whose element lives on the node of a partial sum that goes on
    to a root elsewhere (near -> top -> back to near's server) is built every time, by a client's
    build as by the node's own thread, and a chain of remote stages back into a server is still
    refused."""
    trusting = ServerPolicy(allow_remote=("tcp://127.0.0.1:*",))
    near_set = paths.PastSet()
    with PathServer("tcp://127.0.0.1:*", pastset=near_set, policy=trusting).start() as near, \
            PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), policy=trusting).start() as top:
        def hop(server):
            return stage("remote", host=server.endpoint, proto=proto, timeout_ms=5000)
        rest = (stage("reduce-sum", num_threads=2, id="top"), hop(near), stage("core", name="TOTALS", format="q"))
        # Both of near's callers come from a client, so near's sum is made by a client's build.
        through_near = make_path(hop(near), stage("reduce-sum", num_threads=2, id="near"), hop(top), *rest)
        handles = [build_path(through_near, pastset=paths.PastSet()) for _ in range(2)]
        handles.append(build_path(make_path(hop(top), *rest), pastset=paths.PastSet()))
        totals: list = []
        callers = [threading.Thread(target=lambda h, v: totals.append(h.exchange((v,), timeout=PATIENCE_S)),
                                    args=(h, v)) for h, v in zip(handles, (1, 2, 4))]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(PATIENCE_S)
        assert totals == [(7,)] * 3
        assert near_set.enter("TOTALS", "q").observe_range(0, 1, timeout=5) == [(7,)]
        with pytest.raises(ValueError, match=r"it comes back into server [0-9a-f]{16} .*which it went through "
                                             "already"):
            build_path(make_path(hop(near), hop(top), hop(near), stage("core", name="LOOP", format="q")),
                       pastset=paths.PastSet())


@pytest.mark.parametrize("proto", ["tcp", "zmq"])
def test_a_stage_failure_at_the_server_is_explained_at_the_caller(proto):
    """What the server's path says about a failure comes back with it: the caller's error shows a
    Python stage's exception behind remote, for a move and for a move_many, and then goes on."""
    policy = ServerPolicy(allow_kinds=frozenset({"test-no-negatives"}))
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), policy=policy).start() as server:
        h = build_path(make_path(stage("remote", host=server.endpoint, proto=proto, timeout_ms=5000),
                                 stage("test-no-negatives"), stage("core", name="PICKY", format="q")),
                       pastset=paths.PastSet())
        h.move(1)
        at_server = f"remote {server.endpoint}: at the server: test-no-negatives: ValueError: no negatives here, got -"
        with pytest.raises(ValueError, match=re.escape(f"thread 0 move ({at_server}2): invalid argument")):
            h.move(-2)
        with pytest.raises(ValueError, match=re.escape(f"{at_server}3")):
            h.move_many([(2,), (-3,), (4,)])
        h.move(5)
        assert [h.observe(i) for i in range(h.last())] == [(1,), (2,), (5,)]
        # another client through the same stage: a failure the server's path does not explain while
        # it runs comes back without the first client's explanation
        other = build_path(make_path(stage("remote", host=server.endpoint, proto=proto, timeout_ms=5000),
                                     stage("reduce-sum", num_threads=1, id="other"), stage("test-no-negatives"),
                                     stage("core", name="PICKY", format="q")), pastset=paths.PastSet())
        with pytest.raises(RuntimeError) as refused:
            other.observe()  # a sum's observe before its move: wrong state, at the server
        assert "no negatives" not in str(refused.value) and "wrong state" in str(refused.value), refused.value


@pytest.mark.parametrize("proto", ["ipc", "inproc"])
def test_ipc_and_inproc_transports(tmp_path, proto):
    name = str(tmp_path / "server.sock") if proto == "ipc" else f"paths-test-{tmp_path.name}"
    with PathServer(f"{proto}://{name}", pastset=paths.PastSet()).start():
        handle = build_path(make_path(stage("remote", host=name, proto=proto, timeout_ms=5000),
                                      stage("core", name="T", format="q")), pastset=paths.PastSet())
        handle.move(7)
        assert handle.observe(timeout=5) == (7,)
        assert (handle.first(), handle.last()) == (1, 1)
        time.sleep(0.5)  # idle for several of the link's slices: its client is still there
        handle.move(8)
        assert (handle.observe(1), handle.last()) == ((8,), 2)
        del handle


def test_an_inproc_link_whose_server_closed_fails_within_its_timeout(tmp_path):
    server = PathServer(f"inproc://paths-test-{tmp_path.name}", pastset=paths.PastSet()).start()
    handle = build_path(make_path(stage("remote", host=f"inproc://paths-test-{tmp_path.name}", proto="inproc",
                                        timeout_ms=500), stage("core", name="T", format="q")),
                        pastset=paths.PastSet())
    handle.move(1)
    server.close()
    started = time.monotonic()
    with pytest.raises(ConnectionError, match="cannot send: the connection closed"):
        handle.last()  # inproc does not reconnect: the send has nowhere to go
    assert time.monotonic() - started < 5
    del handle


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback (::1) to bind")
def test_a_server_on_the_ipv6_loopback_serves_every_proto(children, proto):
    server = children.start([sys.executable, "-m", "paths", "serve", "--bind", "tcp://[::1]:*"], name="paths serve")
    endpoint = server.expect("READY ").strip()
    assert endpoint.startswith("tcp://[::1]:")
    handle = build_path(make_path(stage("remote", host=endpoint, proto=proto, timeout_ms=TIMEOUT_MS),
                                  stage("core", name="V6", format="q")), pastset=paths.PastSet())
    handle.move(5)
    assert handle.observe(0) == (5,)
