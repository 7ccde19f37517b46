"""Edge cases found in review, each once a bug: a failed pipelined move, observe(i) through a
sum while its rounds go on, a cache over a stage that answers negative indexes, a server whose
one client's build waits long, client paths asking more than a server grants, and a stray
connection to a link before its client."""

import threading
import time

import pytest
import zmq

import paths
from paths import build_path, make_path, stage
from paths.server import PathServer
from paths.server_policy import ServerPolicy


@pytest.fixture
def server():
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as s:
        yield s


def test_a_failed_pipelined_move_breaks_the_connection_for_good(server):
    element = server.pastset.enter("FULL", "q")
    element.delta(1)
    element.move(-1)  # full: the pipelined moves wait at the server past their slices
    h = build_path(make_path(stage("remote", host=server.endpoint, timeout_ms=400, window=4),
                             stage("core", name="FULL", format="q")), pastset=paths.PastSet())
    h.move(1)
    h.move(2)
    with pytest.raises(ConnectionError, match="pipelined move failed"):
        h.last()
    with pytest.raises(ConnectionError):  # not a TimeoutError to retry forever
        h.last()


def test_observe_at_through_a_sum_lets_the_rounds_go_on():
    ps = paths.PastSet()
    p = make_path(stage("reduce-sum", num_threads=2), stage("core", name="O", format="q"))
    a, b = build_path(p, pastset=ps), build_path(p, pastset=ps)
    a.move(1)
    seen = {}
    reader = threading.Thread(target=lambda: seen.setdefault("t", a.observe(0, timeout=10)))
    reader.start()  # waits for tuple 0, which only the next round can bring
    b.move(2)
    assert b.observe(timeout=10) == (3,)
    reader.join(10)
    assert seen == {"t": (3,)} and a.observe(timeout=10) == (3,)


@paths.stage_kind("python-index")
class PythonIndex:
    """Answers observe_at(-1) with the last tuple, as Python sequences do."""

    def observe_at(self, below, index):
        return below.observe(below.last() - 1 if index == -1 else index)


def test_cache_never_stores_a_negative_index():
    h = build_path(make_path(stage("cache", capacity=4), stage("python-index"), stage("core", name="N", format="q")),
                   pastset=paths.PastSet())
    for v in range(5):
        h.move(v)
    assert h.observe(-1) == (4,) and h.observe(-1) == (4,)
    assert [h.observe(i) for i in range(5)] == [(v,) for v in range(5)]
    assert h.stage.counters()["misses"] == 7  # the two negative ones were never cached


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


@pytest.mark.parametrize("spec, words", [
    (stage("remote", host="tcp://127.0.0.1:1", timeout_ms=3_600_000), "timeout_ms may be at most 60000"),
    (stage("trace", file="t.bin", capacity=1 << 26), "capacity may be at most"),
])
def test_a_server_grants_client_paths_only_so_much(tmp_path, spec, words):
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), trace_dir=str(tmp_path)).start() as s:
        with pytest.raises(ValueError, match=words):
            build_path(make_path(stage("remote", host=s.endpoint, timeout_ms=5000), spec,
                                 stage("core", name="L", format="q")), pastset=paths.PastSet())


def test_a_stray_connection_before_the_client_is_not_the_client(server):
    """A connect-and-close to a link's socket before its client (a port scan) must not end the
    link; only the client's own going away does."""
    ctx = zmq.Context()
    try:
        main = ctx.socket(zmq.DEALER)
        main.linger = 0
        main.connect(server.endpoint)
        from test_wire_fuzz import BUILD, decode, encode  # the frame codec of the fuzz test
        spec = paths.path_spec.path_to_json(make_path(stage("core", name="STRAY", format="q"))).encode()
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


def test_a_remote_callers_leaving_releases_its_server_link(server):
    p = make_path(stage("remote", host=server.endpoint, timeout_ms=5000), stage("core", name="R", format="q"))
    ps = paths.PastSet()
    keeper = build_path(p, pastset=ps)  # keeps the remote stage alive
    for _ in range(3):
        h = build_path(p, pastset=ps)
        h.move(1)
        assert server.native.counters()["live"] == 2
        del h  # its link is released at once, not when the whole remote stage goes
        deadline = time.monotonic() + 5
        while server.native.counters()["live"] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.001)
    assert keeper.last() == 3
