"""A server that hostile clients cannot bend: each attack on `paths serve` (on loopback), then a
normal client that still gets exact results. The server's resident memory, threads and file
descriptors before and after each attack are printed (pytest -s: lines "FIGURES ...") and held
to what the attack may leave behind.

An attacker is another host: its BUILDs leave from a loopback address of its own (the remote
stage's host "tcp://127.0.0.2:0;127.0.0.1:PORT" chooses the source address), so the server
counts it as a client apart from the normal one, whose address is 127.0.0.1."""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq
from child_processes import ChildProcesses
from test_trace import full_disk  # noqa: F401  (a fixture: a folder on a full tmpfs)
from wire_frames import (BATCH_PAYLOAD, BUILD, LAST, MAX_PAYLOAD, MOVE, OBSERVE, OBSERVE_AT, PING, PS_EINVAL, PS_OK,
                         RELEASE, ZMQ, dealer, decode, encode, open_link, zmq_answer)

import paths
from paths import build_path, make_path, stage
from paths.runtime.build import BuildContext
from paths.model.path_spec import path_to_json
from paths.runtime.server import PathServer
from paths.runtime.server_policy import ServerPolicy

PROTOS = ["tcp", "zmq"]  # how the links' operations travel: a direct connection, or ZeroMQ
PROMPT_S = 1.0  # a normal client's BUILD and its operations, served while the attack goes on
PATIENCE_S = 30


def figures(pid: int) -> dict:
    """The server's resident memory (kB), threads and open file descriptors."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {"rss_kb": int(status["VmRSS"].split()[0]), "threads": int(status["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def settled(pid: int, before: dict, attack: str, rss_kb: int = 20_000) -> dict:
    """The server's figures once what the attack held is gone: back to where they were (a few
    descriptors of ZeroMQ's own aside), memory at most rss_kb above."""
    deadline = time.monotonic() + 10
    while True:
        after = figures(pid)
        back = after["threads"] <= before["threads"] and after["fds"] <= before["fds"] + 4
        if back or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    print(f"FIGURES {attack}: before {before}, after {after}")
    assert back and after["rss_kb"] <= before["rss_kb"] + rss_kb, (attack, before, after)
    return after


def from_host(endpoint: str, address: str) -> str:
    """The server's endpoint, reached from `address` (another loopback address: another host)."""
    return f"tcp://{address}:0;{endpoint[len('tcp://'):]}"


def path_to(endpoint: str, *rest, proto: str = "tcp", timeout_ms: int = 5000, element: str = "N"):
    return make_path(stage("remote", host=endpoint, proto=proto, timeout_ms=timeout_ms), *rest,
                     stage("core", name=element, format="q"))


def served_exactly(endpoint: str, proto: str, element: str = "NORMAL") -> float:
    """A normal client's whole visit: BUILD, 100 moves, 100 observes, exact; returns its seconds."""
    started = time.monotonic()
    h = build_path(path_to(endpoint, proto=proto, element=element), pastset=paths.PastSet())
    h.move_many([(i,) for i in range(100)], timeout=5)
    assert [h.observe(timeout=5)[0] for _ in range(100)] == list(range(100))
    assert h.last() == 100
    return time.monotonic() - started


@pytest.fixture
def children():
    with ChildProcesses() as started:
        yield started


@pytest.fixture
def listener():
    """A TCP port on loopback that accepts connections and never says a word."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock
    sock.close()


def accepted(sock: socket.socket, wait_s: float, count: int | None = None) -> list[socket.socket]:
    """The connections that come to the listener within wait_s (or until `count` have come)."""
    taken = []
    deadline = time.monotonic() + wait_s
    while len(taken) != count and (left := deadline - time.monotonic()) > 0 and select.select([sock], [], [], left)[0]:
        taken.append(sock.accept()[0])
    return taken


# ---- no connection on a client's say-so ----------------------------------------------------------

@pytest.mark.parametrize("proto", PROTOS)
def test_a_server_connects_only_where_it_was_told_to_trust(children, listener, proto):
    target = "tcp://127.0.0.1:%d" % listener.getsockname()[1]
    server, endpoint = children.paths_serve()
    before = figures(server.pid)
    attacker = from_host(endpoint, "127.0.0.2")
    with pytest.raises(ValueError, match=f"this server reaches only the endpoints it trusts .*'{target}' is not one"):
        build_path(path_to(attacker, stage("remote", host=target), proto=proto), pastset=paths.PastSet())
    assert accepted(listener, 0.3) == []  # the server never connected there
    assert served_exactly(endpoint, proto) < PROMPT_S
    settled(server.pid, before, f"remote to an untrusted endpoint ({proto})")


def test_a_pattern_and_a_remote_stage_both_written_as_a_bare_host_and_port_match(children):
    """The stage's host 127.0.0.1:PORT is tcp://127.0.0.1:PORT, and so is the pattern."""
    target, target_endpoint = children.paths_serve()
    bare = target_endpoint[len("tcp://"):]
    server, endpoint = children.paths_serve("--allow-remote", bare)
    handle = build_path(path_to(endpoint, stage("remote", host=bare), element="B"), pastset=paths.PastSet())
    handle.move(4)
    assert handle.observe(timeout=5) == (4,)


def test_a_patterns_star_stays_within_a_label_of_the_host_and_its_port(children, listener):
    """'tcp://127.0.0.*:PORT' is four labels and a port: it takes no host name that begins with
    them (a name resolves anywhere), not even one of four labels (a pattern of addresses takes
    addresses only), and no endpoint with a port after the port."""
    port = listener.getsockname()[1]
    server, endpoint = children.paths_serve("--allow-remote", f"tcp://127.0.0.*:{port}")
    attacker = from_host(endpoint, "127.0.0.2")
    for target in (f"tcp://127.0.0.example.invalid:{port}", f"tcp://127.0.0.localhost:{port}",
                   f"tcp://127.0.0.1x:{port}", f"tcp://127.0.0.1:{port}:{port}", f"tcp://127.0.0.1.2:{port}"):
        with pytest.raises(ValueError, match=f"this server reaches only the endpoints it trusts .*'{target}' is not one"):
            build_path(path_to(attacker, stage("remote", host=target)), pastset=paths.PastSet())
    assert accepted(listener, 0.3) == []
    assert served_exactly(endpoint, "tcp") < PROMPT_S


def test_a_patterns_star_in_an_ipc_path_takes_no_dot_dot(children, tmp_path):
    """'ipc://DIR/allowed/*/sock' takes a socket one folder down, not one that '..' leads out of
    the allowed folder to: the server never connects there."""
    outside = socket.socket(socket.AF_UNIX)
    outside.bind(str(tmp_path / "sock"))
    outside.listen(8)
    inside = tmp_path / "allowed" / "a"
    inside.mkdir(parents=True)
    server, endpoint = children.paths_serve("--allow-remote", f"ipc://{tmp_path}/allowed/*/sock")
    attacker = from_host(endpoint, "127.0.0.2")
    for target in (f"ipc://{tmp_path}/allowed/../sock", f"ipc://{tmp_path}/allowed/./../sock",
                   f"ipc://{tmp_path}/allowed/.hidden/sock"):
        with pytest.raises(ValueError, match=f"this server reaches only the endpoints it trusts .*'{target}' is not one"):
            build_path(path_to(attacker, stage("remote", host=target, timeout_ms=1000)), pastset=paths.PastSet())
    with pytest.raises(ValueError, match="allowed/a/sock: no answer to BUILD"):  # trusted: tried; nobody serves there
        build_path(path_to(attacker, stage("remote", host=f"ipc://{inside}/sock", timeout_ms=500)),
                   pastset=paths.PastSet())
    assert accepted(outside, 0.3) == []
    outside.close()


@pytest.mark.parametrize("proto", PROTOS)
def test_a_trusted_pattern_lets_no_source_address_or_loop_through(children, listener, proto):
    port = listener.getsockname()[1]
    server, endpoint = children.paths_serve("--allow-remote", "tcp://127.0.0.1:*")
    before = figures(server.pid)
    attacker = from_host(endpoint, "127.0.0.2")
    sourced = f"tcp://127.0.0.1:0;127.0.0.1:{port}"  # matches the pattern as text: the source makes it another
    with pytest.raises(ValueError, match=f"'{sourced}' is not one"):
        build_path(path_to(attacker, stage("remote", host=sourced), proto=proto), pastset=paths.PastSet())
    chain = [stage("remote", host=endpoint, proto=proto) for _ in range(6)]  # through this very server
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"it comes back into server [0-9a-f]{16} \(tcp://127\.0\.0\.1:\d+\), which "
                                         "it went through already; a path crosses each server once"):
        build_path(path_to(attacker, *chain, proto=proto), pastset=paths.PastSet())
    assert time.monotonic() - started < PROMPT_S  # refused at its second hop, not after a timeout
    assert accepted(listener, 0.3) == []
    assert served_exactly(endpoint, proto) < PROMPT_S
    settled(server.pid, before, f"a source address and a loop through the server ({proto})")


@pytest.mark.parametrize("proto", PROTOS)
def test_a_loop_through_a_remote_stage_an_earlier_build_made_is_refused(children, proto):
    """A remote stage that a server made for one path and reuses for another sends the servers the
    later path crossed: the later path cannot slip back into a server through it."""
    first, first_endpoint = children.paths_serve("--allow-remote", "tcp://127.0.0.1:*")
    second, second_endpoint = children.paths_serve("--allow-remote", "tcp://127.0.0.1:*")
    before = figures(second.pid)
    attacker = "127.0.0.2"
    onward = stage("remote", host=second_endpoint, proto=proto, timeout_ms=5000)
    # first -> second: the first server makes a remote stage to the second, and keeps it live.
    made = build_path(path_to(from_host(first_endpoint, attacker), onward, proto=proto), pastset=paths.PastSet())
    made.move((7,), timeout=5)
    # second -> first -> second: the first server reuses that stage for this path.
    back = stage("remote", host=first_endpoint, proto=proto, timeout_ms=5000)
    with pytest.raises(ValueError, match=r"it comes back into server [0-9a-f]{16} \(tcp://127\.0\.0\.1:\d+\), which "
                                         "it went through already"):
        build_path(path_to(from_host(second_endpoint, attacker), back, onward, proto=proto), pastset=paths.PastSet())
    assert made.observe(timeout=5) == (7,)  # the first path still works
    del made
    assert served_exactly(second_endpoint, proto) < PROMPT_S
    settled(second.pid, before, f"a loop through a reused remote stage ({proto})")


def test_a_chain_of_sums_between_two_servers_ends_at_a_third_entry(children):
    """A sum's link names the servers from the sum on, so a path may come back into a server past a
    sum (a tree whose element lives on a partial sum's node), but only once: a chain of sums
    between two servers is refused at once at its fifth hop, the third entry into the first
    server, not left to deadlock both servers' builds (it held them for minutes)."""
    first, first_endpoint = children.paths_serve("--allow-remote", "tcp://127.0.0.1:*")
    second, second_endpoint = children.paths_serve("--allow-remote", "tcp://127.0.0.1:*")
    before = figures(first.pid)
    hops = [stage("remote", host=endpoint, timeout_ms=30000) for endpoint in (first_endpoint, second_endpoint) * 3]
    chain = [part for i, hop in enumerate(hops) for part in (hop, stage("reduce-sum", num_threads=1, id=str(i)))]
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"it comes into server [0-9a-f]{16} \(tcp://127\.0\.0\.1:\d+\) a third time; "
                                         "a path comes back into a server at most once, past a sum"):
        build_path(make_path(*chain, stage("core", name="CHAIN", format="q")), pastset=paths.PastSet())
    assert time.monotonic() - started < PATIENCE_S / 3
    four = make_path(*chain[:8], stage("core", name="FOUR", format="q"))  # twice into each: a tree may
    h = build_path(four, pastset=paths.PastSet())
    h.move(5)
    assert h.observe(timeout=5) == (5,)
    del h
    assert served_exactly(first_endpoint, "tcp") < PROMPT_S and served_exactly(second_endpoint, "tcp") < PROMPT_S
    settled(first.pid, before, "a chain of sums between two servers")


# ---- builds never starve -------------------------------------------------------------------------

@pytest.mark.parametrize("proto", PROTOS)
def test_builds_waiting_on_a_silent_server_hold_only_their_own_client(children, listener, proto):
    silent = "tcp://127.0.0.1:%d" % listener.getsockname()[1]
    server, endpoint = children.paths_serve("--allow-remote", "tcp://127.0.0.1:*")
    before = figures(server.pid)
    attacker = from_host(endpoint, "127.0.0.2")
    outcomes: list = []

    def attack(path) -> None:
        started = time.monotonic()
        try:
            handle = build_path(path, pastset=paths.PastSet())
            outcomes.append(("built", time.monotonic() - started, handle.last()))
        except (ValueError, ConnectionError) as e:
            outcomes.append(("refused", time.monotonic() - started, str(e)))

    slow = [threading.Thread(target=attack, args=(path_to(attacker, stage("remote", host=silent, timeout_ms=3000, id=i),
                                                          proto=proto, timeout_ms=20000),)) for i in range(8)]
    chain = path_to(attacker, *[stage("remote", host=endpoint, proto=proto)] * 6, proto=proto, timeout_ms=20000)
    ninth = path_to(attacker, proto=proto, timeout_ms=20000, element="NINTH")  # the attacker's own next build
    for thread in slow:
        thread.start()
    held = accepted(listener, 10, count=8)  # the eight builds reached the silent server: they wait for it
    assert len(held) == 8
    during = figures(server.pid)
    late = [threading.Thread(target=attack, args=(path,)) for path in (chain, ninth)]
    for thread in late:
        thread.start()
    assert served_exactly(endpoint, proto) < PROMPT_S  # while the attacker's builds wait
    for thread in slow + late:
        thread.join(PATIENCE_S)
    for sock in held:
        sock.close()
    kinds = sorted(outcome[0] for outcome in outcomes)
    assert kinds == ["built"] + ["refused"] * 9, outcomes
    assert all("no answer to BUILD" in text for kind, _, text in outcomes if kind == "refused" and "comes" not in text)
    assert sum("comes back into server" in str(text) for _, _, text in outcomes) == 1
    [(_, waited, last)] = [outcome for outcome in outcomes if outcome[0] == "built"]
    assert last == 0 and waited > 2.0  # served after the attacker's own slow builds, not before
    print(f"FIGURES eight builds on a silent server ({proto}), while they wait: {during}")
    settled(server.pid, before, f"eight builds on a silent server and a chain through itself ({proto})")


def cpu_seconds(pid: int) -> float:
    """The CPU time the process has used, user and system."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_build_that_waits_costs_its_server_no_cpu_meanwhile(children, listener):
    """While a build waits 2 s for a silent server further down, the server waits too: its loop for
    the next BUILD polled 0 ms at a time, about half a core, for as long as any build was on."""
    silent = "tcp://127.0.0.1:%d" % listener.getsockname()[1]
    server, endpoint = children.paths_serve("--allow-remote", "tcp://127.0.0.1:*")
    spent = cpu_seconds(server.pid)
    with pytest.raises(ValueError, match="no answer to BUILD: within 2000 ms"):
        build_path(path_to(endpoint, stage("remote", host=silent, timeout_ms=2000), timeout_ms=10000),
                   pastset=paths.PastSet())
    spent = cpu_seconds(server.pid) - spent
    assert spent < 0.5, f"the server used {spent:.2f} s of CPU while its one build waited 2 s"


def long_path(endpoint: str, stages: int, caller: int = 0):
    return path_to(endpoint, *[stage("reduce-sum", num_threads=1, id=f"{caller}.{i}") for i in range(stages)],
                   timeout_ms=5000, element=f"LONG{caller}")


def test_a_path_too_long_is_refused_at_once_and_a_long_one_builds_in_time(children, zmq_context):
    """A path has at most 256 stages: a BUILD of more is refused before anything is built (one of
    1,500 stages took the server minutes of CPU: every build rehashed the whole table for each
    stage it made). One of the most builds promptly."""
    server, endpoint = children.paths_serve()
    before = figures(server.pid)
    main = dealer(zmq_context, endpoint)
    too_long = make_path(*[stage("reduce-sum", num_threads=1, id=str(i)) for i in range(400)],
                         stage("core", name="LONG", format="q"))
    started = time.monotonic()
    main.send(encode(BUILD, path_to_json(too_long).encode(), request_id=1))
    reply = decode(zmq_answer(main))
    main.close()
    assert reply["status"] == PS_EINVAL and b"path of 401 stages: a path has at most 256" in reply["payload"], reply
    longest = build_path(long_path(endpoint, 254), pastset=paths.PastSet())
    longest.move(3)
    assert longest.observe(0, timeout=5) == (3,)
    assert time.monotonic() - started < PATIENCE_S / 3
    assert served_exactly(endpoint, "tcp") < PROMPT_S
    del longest
    settled(server.pid, before, "a path too long")


def test_a_server_stopped_while_clients_build_ends_at_once(children):
    """SIGTERM while eight clients build long paths: each build gives up at its next stage, and the
    server ends cleanly at once (it waited up to 2 s for each build in turn)."""
    server, endpoint = children.paths_serve()
    until = time.monotonic() + 3.0

    def build_on(caller: int) -> None:
        while time.monotonic() < until:
            try:
                build_path(long_path(endpoint, 250, caller), pastset=paths.PastSet())
            except (ValueError, ConnectionError, RuntimeError):
                pass

    builders = [threading.Thread(target=build_on, args=(c,)) for c in range(8)]
    for thread in builders:
        thread.start()
    time.sleep(1.0)
    stopped = time.monotonic()
    server.signal(signal.SIGTERM)
    assert server.wait(PATIENCE_S) == 0, server.stderr()
    assert time.monotonic() - stopped < 5.0  # eight builds at 2 s each took 16 s
    for thread in builders:
        thread.join(PATIENCE_S)


# ---- budgets before allocation -------------------------------------------------------------------

@pytest.mark.parametrize("proto", PROTOS)
def test_a_stage_beyond_the_memory_budget_is_refused_before_it_is_created(children, tmp_path, proto):
    server, endpoint = children.paths_serve("--trace-dir", str(tmp_path))
    before = figures(server.pid)
    attacker = from_host(endpoint, "127.0.0.2")
    budget = r"beyond the memory budget of client 127\.0\.0\.2: \d+ of its \d+ bytes are in use"
    huge_trace = stage("trace", file="t.bin", mode="operation", capacity=1 << 22)
    asked = paths._native.stage_footprint("trace", {"file": "t.bin", "mode": "operation", "capacity": 1 << 22},
                                          "256s")
    assert asked > 1_150_000_000  # what one 110-byte BUILD asked for before
    with pytest.raises(ValueError, match=rf"stage trace\(capacity=4194304, file='[^']*/t.bin', mode='operation'\): "
                                         rf"asks {asked} bytes, {budget}"):
        build_path(make_path(stage("remote", host=attacker, proto=proto), huge_trace,
                             stage("core", name="T", format="256s")), pastset=paths.PastSet())
    with pytest.raises(ValueError, match=rf"stage cache\(capacity=1048576\): asks \d{{10}} bytes, {budget}"):
        build_path(make_path(stage("remote", host=attacker, proto=proto), stage("cache", capacity=1 << 20),
                             stage("core", name="C", format="4096s")), pastset=paths.PastSet())
    assert not list(tmp_path.iterdir())  # nothing was created, so nothing is written either
    assert served_exactly(endpoint, proto) < PROMPT_S
    settled(server.pid, before, f"a 1.2 GB trace and a 4 GiB cache ({proto})", rss_kb=10_000)


def test_a_pipelined_delays_queue_counts_against_the_budget(children):
    """Its queue holds 64 messages of up to 16 KiB of tuples, or one larger tuple each: 64 MiB of
    1 MiB tuples, which a client's budget of 32 MiB refuses before anything is created."""
    server, endpoint = children.paths_serve("--client-memory-budget", "32M")
    before = figures(server.pid)
    wire = {"ms": 30000, "pipelined": 1}
    assert paths._native.stage_footprint("delay", wire, "1048576s") > 64 << 20
    assert paths._native.stage_footprint("delay", wire, "q") < 2 << 20
    with pytest.raises(ValueError, match=r"stage delay\(ms=30000, pipelined=1\): asks \d+ bytes, beyond the memory "
                                         r"budget of client 127\.0\.0\.2"):
        build_path(make_path(stage("remote", host=from_host(endpoint, "127.0.0.2")), stage("delay", **wire),
                             stage("core", name="D", format="1048576s")), pastset=paths.PastSet())
    settled(server.pid, before, "a delay's queue of 1 MiB tuples", rss_kb=10_000)


def test_client_and_server_budgets_hold_each_client_and_all_of_them(children):
    cache = paths._native.stage_footprint("cache", {"capacity": 1 << 20}, "q")  # 8 MiB and a little
    server, endpoint = children.paths_serve("--client-memory-budget", str(cache * 5 // 2),
                                            "--memory-budget", str(cache * 7 // 2))
    before = figures(server.pid)

    def cache_of(address: str, number: int):
        return build_path(make_path(stage("remote", host=from_host(endpoint, address)),
                                    stage("cache", capacity=1 << 20, id=number), stage("core", name="B", format="q")),
                          pastset=paths.PastSet())

    a = [cache_of("127.0.0.2", 0), cache_of("127.0.0.2", 1)]
    with pytest.raises(ValueError, match=rf"stage cache\(capacity=1048576, id=2\): asks {cache} bytes, beyond the "
                                         r"memory budget of client 127\.0\.0\.2: \d+ of its \d+ bytes are in use "
                                         r"\(paths serve --client-memory-budget\)"):
        cache_of("127.0.0.2", 2)
    b = cache_of("127.0.0.3", 3)
    with pytest.raises(ValueError, match=rf"asks {cache} bytes, beyond this server's memory budget: \d+ of its "
                                         rf"{cache * 7 // 2} bytes are in use \(paths serve --memory-budget\)"):
        cache_of("127.0.0.3", 4)
    held = figures(server.pid)
    del a  # the client's stages go, and their bytes with them, before the release is answered
    b2 = cache_of("127.0.0.3", 4)
    assert served_exactly(endpoint, "tcp") < PROMPT_S
    print(f"FIGURES three caches of 8 MiB held: {held}")
    del b, b2
    settled(server.pid, before, "client and server memory budgets", rss_kb=40_000)


def test_a_client_that_joins_anothers_stages_pays_for_them_and_the_other_stops_paying_when_it_lets_go(children):
    """Paths merge: a client whose path is another's goes through the other's stages. It pays for
    them too, so it cannot hold them on the other's budget: once the client that built them lets
    them go, that client's budget is its own again, and the one that still holds them is refused
    past its own."""
    cache = paths._native.stage_footprint("cache", {"capacity": 1 << 20}, "q")
    server, endpoint = children.paths_serve("--client-memory-budget", str(cache * 5 // 2))

    def cache_of(address: str, number: int):
        return build_path(make_path(stage("remote", host=from_host(endpoint, address)),
                                    stage("cache", capacity=1 << 20, id=number), stage("core", name="J", format="q")),
                          pastset=paths.PastSet())

    builder = [cache_of("127.0.0.2", 0), cache_of("127.0.0.2", 1)]
    joiner = [cache_of("127.0.0.3", 0), cache_of("127.0.0.3", 1)]  # the same stages, paid for again
    twice = [cache_of("127.0.0.3", 1)]  # a stage it holds already costs nothing more
    with pytest.raises(ValueError, match=rf"stage cache\(capacity=1048576, id=2\): asks {cache} bytes, beyond the "
                                         r"memory budget of client 127\.0\.0\.3: \d+ of its \d+ bytes are in use"):
        cache_of("127.0.0.3", 2)
    del builder
    again = [cache_of("127.0.0.2", 2), cache_of("127.0.0.2", 3)]  # its budget is its own again
    joiner[0].move(5)
    assert joiner[0].observe(0) == (5,)
    # A client that holds nothing: what is in use is what this build's element took
    with pytest.raises(ValueError, match=r"client 127\.0\.0\.4: (\d+) of its \d+ bytes are in use, \1 of them by the "
                                         r"stages below it on this path \(paths serve --client-memory-budget\)"):
        build_path(make_path(stage("remote", host=from_host(endpoint, "127.0.0.4")), stage("cache", capacity=1 << 20),
                             stage("core", name="NEW", format="64s")), pastset=paths.PastSet())
    del joiner, twice, again


@pytest.mark.parametrize("proto", PROTOS)
def test_a_client_that_released_its_path_builds_the_next_at_once_within_its_limits(children, proto):
    """Room for one 8 MiB cache and one link: released, each is the client's again by the time
    its release is answered, so a build right after it is granted, every time."""
    cache = paths._native.stage_footprint("cache", {"capacity": 1 << 20}, "q")
    server, endpoint = children.paths_serve("--client-memory-budget", str(cache * 3 // 2), "--max-links-per-client",
                                            "1")
    for number in range(20):
        handle = build_path(make_path(stage("remote", host=endpoint, proto=proto), stage("cache", capacity=1 << 20,
                                                                                        id=number),
                                      stage("core", name="R", format="q")), pastset=paths.PastSet())
        handle.move(number)
        del handle


# ---- a fair share of links -----------------------------------------------------------------------

@pytest.mark.parametrize("proto", PROTOS)
def test_one_client_holds_at_most_its_share_of_links(children, proto):
    server, endpoint = children.paths_serve("--max-links-per-client", "40")
    before = figures(server.pid)
    attacker = path_to(from_host(endpoint, "127.0.0.2"), proto=proto, element="L")
    space = paths.PastSet()
    held = [build_path(attacker, pastset=space) for _ in range(40)]
    with pytest.raises(ValueError, match=r"client 127\.0\.0\.2 holds 40 links and has 0 more on the way: at most 40 "
                                         r"per client \(paths serve --max-links-per-client\)"):
        build_path(attacker, pastset=space)
    assert served_exactly(endpoint, proto) < PROMPT_S
    during = figures(server.pid)
    held[0].move(7)
    assert held[-1].observe(timeout=5) == (7,)
    print(f"FIGURES 40 links of one client ({proto}), held: {during}")
    del held
    settled(server.pid, before, f"40 links of one client ({proto})")


def test_each_newcomer_finds_a_link_while_any_is_free():
    """Clients that each take every link they may, however high their cap: the first holds half of
    the server's 12, the next half of what the first left, and so on, so that a newcomer gets one
    while one is free (a fixed half for each would let two clients take them all)."""
    policy = ServerPolicy(max_links=12, links_per_client=1000)
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), policy=policy).start() as server:
        space = paths.PastSet()
        held, got, refusals = [], [], []
        for host in range(2, 9):
            path = path_to(from_host(server.endpoint, f"127.0.0.{host}"), element="L")
            taken = 0
            while True:
                try:
                    held.append(build_path(path, pastset=space))
                    taken += 1
                except ValueError as e:
                    refusals.append(str(e))
                    break
            got.append(taken)
        assert got == [6, 3, 1, 1, 1, 0, 0]
        assert ("client 127.0.0.3 holds 3 links and has 0 more on the way: at most 3 now, half of "
                                    "the 12 links this server can hold that the other clients leave, so that another "
                                    "client is always served") in refusals[1], refusals[1]
        assert "this server holds 12 links, all it can serve" in refusals[-1]
        held[0].move(3)
        assert held[-1].observe(timeout=5) == (3,)


def test_a_client_held_to_the_default_cap_is_told_where_it_comes_from():
    """Without --max-links-per-client a client may hold half of the links the server can hold:
    the refusal says so, not only the option, which was not given."""
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), policy=ServerPolicy(max_links=12)).start() as server:
        path = path_to(from_host(server.endpoint, "127.0.0.2"), element="L")
        space = paths.PastSet()
        held = [build_path(path, pastset=space) for _ in range(6)]
        with pytest.raises(ValueError, match=r"client 127\.0\.0\.2 holds 6 links and has 0 more on the way: at most 6 "
                                             r"per client \(by default half of the 12 links this server can hold, at "
                                             r"most 256; paths serve --max-links-per-client\)"):
            build_path(path, pastset=space)
        del held


def test_connections_that_never_greet_are_closed_within_seconds(children):
    """TCP connections to the server's endpoint that send nothing hold a descriptor each: the
    server closes them once its handshake interval (3 s) passes, not ZeroMQ's default 30 s, so that
    a client that opens them by the thousand cannot keep newcomers out for long."""
    server, endpoint = children.paths_serve()
    host, port = endpoint[len("tcp://"):].rsplit(":", 1)
    idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(20)]
    started = time.monotonic()
    try:
        for sock in idle:
            while sock.recv(4096):  # ZeroMQ's greeting, then the end of the connection
                pass
        assert time.monotonic() - started < 8, "closed at the handshake interval"
    finally:
        for sock in idle:
            sock.close()
    assert served_exactly(endpoint, "tcp") < PROMPT_S


def greeted(endpoint: str) -> socket.socket:
    """A connection to the endpoint that greets as a ZeroMQ DEALER would (ZMTP 3.0, NULL), then
    says nothing."""
    host, port = endpoint[len("tcp://"):].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(b"\xff" + bytes(8) + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" + bytes(31))
    greeting = b""
    while len(greeting) < 64:
        chunk = sock.recv(64 - len(greeting))
        assert chunk, "the server closed the connection during its greeting"
        greeting += chunk
    ready = b"\x05READY\x0bSocket-Type" + (6).to_bytes(4, "big") + b"DEALER"
    sock.sendall(bytes([0x04, len(ready)]) + ready)
    return sock


def closed_by_server(sock: socket.socket, wait_s: float) -> bool:
    """Whether the server closed the connection within wait_s (what it sent before is read)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not sock.recv(4096):
                return True
        except TimeoutError:
            return False
        except ConnectionError:
            return True
    return False


@pytest.mark.parametrize("descriptors", [None, 400, 100])
def test_connections_that_greet_and_stay_silent_make_room_for_newcomers(children, descriptors):
    """A client that greets and then says nothing, on hundreds of connections, held a descriptor
    with each: at a limit of 400, 388 of them kept every other client out. Past 128 open (or a
    quarter of the server's descriptors), the oldest is closed, so the server's descriptors stay
    bounded and a newcomer is served."""
    serve = [sys.executable, "-m", "paths", "serve", "--bind", "tcp://127.0.0.1:*"]
    if descriptors:
        server = children.start(["sh", "-c", f'ulimit -n {descriptors} && exec "$@"', "sh", *serve],
                                name=f"paths serve ({descriptors} descriptors)")
        endpoint = server.expect("READY ")
    else:
        server, endpoint = children.paths_serve()
    before = figures(server.pid)
    idle = []
    try:
        for _ in range(450):
            idle.append(greeted(endpoint))
        assert served_exactly(endpoint, "tcp") < PROMPT_S
        assert served_exactly(endpoint, "zmq", element="NORMAL-ZMQ") < PROMPT_S
        during = figures(server.pid)
        print(f"FIGURES 450 greeted silent connections: before {before}, during {during}")
        assert during["fds"] <= before["fds"] + 128 + 16
        assert closed_by_server(idle[0], 5) and not closed_by_server(idle[-1], 0.2)
    finally:
        for sock in idle:
            sock.close()


def test_builds_go_through_while_a_peer_keeps_hundreds_of_connections_busy(children):
    """A peer that keeps 300 connections open and busy (a PING on each, over and over) cannot
    make a newcomer's connection, which has not sent its BUILD yet, the one to be closed: the
    oldest goes, not the one silent longest. Every one of 200 builds is answered."""
    server, endpoint = children.paths_serve()
    context = zmq.Context()
    busy = [dealer(context, endpoint) for _ in range(300)]
    stop = threading.Event()

    def keep_busy():
        while not stop.is_set():
            for sock in busy:
                try:
                    sock.send(encode(PING), zmq.NOBLOCK)
                    while sock.poll(0):
                        sock.recv()
                except zmq.ZMQError:
                    pass

    pinger = threading.Thread(target=keep_busy)
    pinger.start()
    try:
        for number in range(200):
            h = build_path(path_to(endpoint, proto="zmq", timeout_ms=5000, element="BUSY"), pastset=paths.PastSet())
            h.move(number)
            del h
    finally:
        stop.set()
        pinger.join()
        for sock in busy:
            sock.close()
        context.term()


def test_more_zmq_links_than_libzmq_allows_by_default(children):
    """Each ZeroMQ link takes three of the server's sockets: libzmq's default of 1023 ended at
    about 342 links. Two clients hold 400 between them, and a third is still served."""
    server, endpoint = children.paths_serve("--max-links-per-client", "300")
    before = figures(server.pid)
    space = paths.PastSet()
    held = [build_path(path_to(from_host(endpoint, address), proto="zmq", element="Z"), pastset=space)
            for address, count in (("127.0.0.2", 250), ("127.0.0.3", 150)) for _ in range(count)]
    assert served_exactly(endpoint, "zmq") < PROMPT_S
    during = figures(server.pid)
    held[0].move(1)
    assert held[-1].observe(timeout=5) == (1,)
    print(f"FIGURES 400 ZeroMQ links of two clients, held: {during}")
    assert during["fds"] > 1023
    del held
    settled(server.pid, before, "400 ZeroMQ links of two clients", rss_kb=60_000)


# ---- answers left unread ------------------------------------------------------------------------

def test_clients_that_flood_the_main_endpoint_and_never_read_neither_end_nor_swell_the_server(children,
                                                                                              zmq_context):
    """Eight connections send BUILDs of 64 KB (not a path: each is refused) as fast as they can and
    read no answer, then close, three times over. ZeroMQ queued 1000 of them per connection
    (about 60 MB each), and libzmq 4.3 aborted the server when a heartbeat fell due on a connection
    whose peer closed while its queue was full (most rounds)."""
    server, endpoint = children.paths_serve()
    before = figures(server.pid)
    frame = encode(BUILD, b"x" * 65_000, request_id=1)
    peak = before["rss_kb"]
    for _ in range(3):
        flooders = []
        for _ in range(8):
            sock = dealer(zmq_context, endpoint)
            sock.rcvhwm = 1
            sock.setsockopt(zmq.RCVBUF, 4096)
            flooders.append(sock)
        flooding_until = time.monotonic() + 3
        while time.monotonic() < flooding_until:
            for sock in flooders:
                try:
                    sock.send(frame, zmq.NOBLOCK)
                except zmq.Again:
                    pass
            peak = max(peak, figures(server.pid)["rss_kb"])
        for sock in flooders:
            sock.close()
        time.sleep(2.5)  # past a heartbeat's interval: when the server aborted, it had by then
        assert server.process.poll() is None, f"the server ended: {server.process.poll()} {server.stderr()[-300:]}"
    print(f"FIGURES 8 connections flooding the main endpoint, 3 rounds: before {before}, peak {peak} kB")
    assert peak - before["rss_kb"] < 32_000, (before, peak)
    assert served_exactly(endpoint, "tcp") < PROMPT_S


def test_answers_a_client_leaves_unread_hold_little_of_the_servers_memory(children, zmq_context):
    """A thousand requests of 40 bytes for a tuple of 1 MiB, whose answers the client never reads:
    ZeroMQ queued them all at the server (1 GB). A link holds its unread answers up to 8 MB."""
    server, endpoint = children.paths_serve()
    big = 1 << 20
    link_id, where, _ = open_link(zmq_context, endpoint, "BIG", ZMQ, format=f"{big}s")
    link = zmq_context.socket(zmq.DEALER)
    link.linger = 0
    link.rcvhwm = 1  # it takes one answer, and the system's buffers a few more, then reads nothing
    link.setsockopt(zmq.RCVBUF, 4096)
    link.connect(where)
    link.send(encode(MOVE, b"x" * big, request_id=1, handle_id=link_id, value=10**9))
    assert decode(zmq_answer(link))["status"] == PS_OK
    before = figures(server.pid)
    for request_id in range(2, 1002):
        link.send(encode(OBSERVE_AT, request_id=request_id, handle_id=link_id, value=10**9))
    time.sleep(3)  # the server answers them all well within this
    during = figures(server.pid)
    print(f"FIGURES 1000 answers of 1 MiB left unread: before {before}, during {during}")
    assert during["rss_kb"] - before["rss_kb"] < 64_000, (before, during)
    assert served_exactly(endpoint, "zmq") < PROMPT_S
    link.close()


def test_requests_that_come_while_a_link_waits_hold_little_of_the_servers_memory(children, zmq_context):
    """While the link waits in an observe, its client sends a thousand messages of 1 MB: ZeroMQ
    queued them all at the server (800 MB) for the link to refuse one by one. A link's socket takes
    no message longer than its largest frame, and queues what comes up to 8 MB."""
    server, endpoint = children.paths_serve()
    link_id, where, _ = open_link(zmq_context, endpoint, "FLOODED", ZMQ)
    link = dealer(zmq_context, where)
    link.sndhwm = 0  # the whole flood leaves, as fast as the server takes it
    before = figures(server.pid)
    grown = 0
    for junk in (BATCH_PAYLOAD, MAX_PAYLOAD):  # within the link's largest frame, then beyond it
        link.send(encode(OBSERVE, request_id=1, handle_id=link_id, value=10**9))
        message = zmq.Frame(encode(PING, b"\0" * junk, handle_id=link_id))
        for _ in range(1000):
            link.send(message, copy=False)
        time.sleep(0.9)  # the observe waits a second
        grown = max(grown, figures(server.pid)["rss_kb"] - before["rss_kb"])
    print(f"FIGURES a thousand 1 MB messages to a waiting link: before {before}, grew {grown} kB")
    assert grown < 64_000
    assert served_exactly(endpoint, "zmq") < PROMPT_S
    link.close()


# ---- only allowed kinds --------------------------------------------------------------------------

WRITER = """
import paths

@paths.stage_kind("file-writer")
class FileWriter:
    \"\"\"Writes `text` to `file` when built: what a client must not make a server do.\"\"\"

    def __init__(self, file, text="pwned"):
        with open(file, "w") as f:
            f.write(text)
"""


def test_a_server_builds_a_python_kind_only_when_told_to(children, tmp_path, user_module):
    module = user_module("writer_kind", WRITER)
    target = tmp_path / "written"
    path = [stage("file-writer", file=str(target))]
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server:  # a process that registered it
        __import__(module)
        with pytest.raises(ValueError, match=r"stage file-writer\(.*\): this server builds the C built-in stage kinds "
                                             r"and those it was told to allow \(paths serve --allow-kinds\), not "
                                             "'file-writer'"):
            build_path(path_to(server.endpoint, *path), pastset=paths.PastSet())
    assert not target.exists()
    allowing = ServerPolicy(allow_kinds=frozenset({"file-writer"}))
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), policy=allowing).start() as server:
        build_path(path_to(server.endpoint, *path), pastset=paths.PastSet())
    assert target.read_text() == "pwned"
    target.unlink()
    # paths serve: the same, with the kind's module named on its command line
    server, endpoint = children.paths_serve()
    before = figures(server.pid)
    with pytest.raises(ValueError, match="unknown stage kind 'file-writer'"):
        build_path(path_to(from_host(endpoint, "127.0.0.2"), *path), pastset=paths.PastSet())
    assert not target.exists() and served_exactly(endpoint, "tcp") < PROMPT_S
    settled(server.pid, before, "a Python kind it was not told to build")
    allowed, endpoint = children.paths_serve("--allow-kinds", f"{module}:file-writer,cache")
    build_path(path_to(endpoint, *path), pastset=paths.PastSet())
    assert target.read_text() == "pwned"


@pytest.mark.parametrize("kinds, problem", [
    ("nosuch", "paths serve: --allow-kinds: 'nosuch': no stage kind 'nosuch' (known: allreduce, batch, cache, core, "),
    ("no_such_module:x", "paths serve: --allow-kinds: 'no_such_module:x': cannot import 'no_such_module': "
                         "ModuleNotFoundError: No module named 'no_such_module'"),
])
def test_allow_kinds_naming_no_kind_is_one_line_and_exit_2(kinds, problem):
    done = serve_and_end("--allow-kinds", kinds)
    assert done.returncode == 2 and done.stderr.startswith(problem) and done.stderr.count("\n") == 1, done.stderr


# ---- clients authenticated -----------------------------------------------------------------------

def keygen(prefix: Path) -> tuple[str, str]:
    public, secret = paths._native.curve_keypair()
    prefix.with_suffix(".pub").write_text(public + "\n")
    prefix.with_suffix(".key").write_text(secret + "\n")
    return public, secret


@pytest.mark.parametrize("proto", PROTOS)
def test_only_clients_with_a_listed_key_are_served(children, tmp_path, proto, zmq_context):
    (tmp_path / "clients").mkdir()
    server_public, _ = keygen(tmp_path / "server")
    alice = keygen(tmp_path / "clients" / "alice")
    server, endpoint = children.paths_serve("--curve-secret", str(tmp_path / "server.key"),
                                            "--curve-clients", str(tmp_path / "clients"))
    before = figures(server.pid)
    keyed = dict(curve_server_key=server_public, proto=proto)
    path = make_path(stage("remote", host=endpoint, timeout_ms=1000, **keyed), stage("core", name="K", format="q"))
    for stranger in (paths.PastSet(), BuildContext(curve_client=paths._native.curve_keypair())):
        with pytest.raises(ConnectionError, match="no answer to BUILD: within 1000 ms"):
            build_path(path, **({"pastset": stranger} if isinstance(stranger, paths.PastSet) else {"context": stranger}))
    h = build_path(make_path(stage("remote", host=endpoint, timeout_ms=5000, **keyed),
                             stage("core", name="K", format="q")), context=BuildContext(curve_client=alice))
    h.move_many([(i,) for i in range(100)], timeout=5)
    assert [h.observe(timeout=5)[0] for _ in range(100)] == list(range(100))
    # a ZeroMQ link admits only a listed key too: the link alice was handed, tried with another key
    main = curve_dealer(zmq_context, endpoint, server_public, alice)
    main.send(encode(BUILD, path_to_json(make_path(stage("core", name="K", format="q"))).encode(), request_id=1))
    reply = decode(zmq_answer(main))
    assert reply["status"] == PS_OK
    stranger_link = curve_dealer(zmq_context, reply["payload"].decode(), server_public, paths._native.curve_keypair())
    stranger_link.send(encode(LAST, request_id=2, handle_id=reply["handle_id"]))
    assert not stranger_link.poll(1000)
    alices_link = curve_dealer(zmq_context, reply["payload"].decode(), server_public, alice)
    alices_link.send(encode(LAST, request_id=3, handle_id=reply["handle_id"]))
    assert decode(zmq_answer(alices_link))["value"] == 100
    alices_link.send(encode(RELEASE, request_id=4, handle_id=reply["handle_id"]))
    assert decode(zmq_answer(alices_link))["status"] == PS_OK
    del h
    settled(server.pid, before, f"clients without a listed key ({proto})")


def test_a_zmq_link_serves_only_the_key_that_built_it(children, tmp_path, zmq_context):
    """Bob, a listed client too, finds the ZeroMQ link alice built and sends on it with her handle
    id: the link refused him as misaddressed and still serves alice, unreleased."""
    (tmp_path / "clients").mkdir()
    server_public, _ = keygen(tmp_path / "server")
    alice, bob = keygen(tmp_path / "clients" / "alice"), keygen(tmp_path / "clients" / "bob")
    server, endpoint = children.paths_serve("--curve-secret", str(tmp_path / "server.key"),
                                            "--curve-clients", str(tmp_path / "clients"))
    main = curve_dealer(zmq_context, endpoint, server_public, alice)
    main.send(encode(BUILD, path_to_json(make_path(stage("core", name="A", format="q"))).encode(), request_id=1))
    reply = decode(zmq_answer(main))
    assert reply["status"] == PS_OK
    link_id, where = reply["handle_id"], reply["payload"].decode()
    alices_link = curve_dealer(zmq_context, where, server_public, alice)
    alices_link.send(encode(MOVE, (7).to_bytes(8, "little"), request_id=2, handle_id=link_id))
    assert decode(zmq_answer(alices_link))["status"] == PS_OK
    bobs_link = curve_dealer(zmq_context, where, server_public, bob)
    for request_id, op in ((3, LAST), (4, RELEASE)):
        bobs_link.send(encode(op, request_id=request_id, handle_id=link_id))
        answer = decode(zmq_answer(bobs_link), answer=True)
        assert (answer["request_id"], answer["status"], answer["value"]) == (request_id, PS_EINVAL, 0), answer
    alices_link.send(encode(LAST, request_id=5, handle_id=link_id))
    assert decode(zmq_answer(alices_link))["value"] == 1
    alices_link.send(encode(RELEASE, request_id=6, handle_id=link_id))
    assert decode(zmq_answer(alices_link))["status"] == PS_OK


def test_a_zmq_links_id_cannot_be_guessed(children, zmq_context):
    """On a server that does not authenticate its clients anyone may reach a ZeroMQ link's port:
    frames naming the first ids a server could hand out are refused unrun (the id is random),
    and the link still serves its client."""
    _, endpoint = children.paths_serve()
    main = zmq_context.socket(zmq.DEALER)
    main.linger = 0
    main.connect(endpoint)
    main.send(encode(BUILD, path_to_json(make_path(stage("core", name="A", format="q"))).encode(), request_id=1))
    reply = decode(zmq_answer(main))
    assert reply["status"] == PS_OK
    link_id, where = reply["handle_id"], reply["payload"].decode()
    stranger = zmq_context.socket(zmq.DEALER)
    stranger.linger = 0
    stranger.connect(where)
    for guess in range(1, 65):
        stranger.send(encode(RELEASE, request_id=guess, handle_id=guess))
        answer = decode(zmq_answer(stranger), answer=True)
        assert (answer["request_id"], answer["status"]) == (guess, PS_EINVAL), answer
    assert link_id > 1 << 32  # not one of the first ids of a count
    clients = zmq_context.socket(zmq.DEALER)
    clients.linger = 0
    clients.connect(where)
    clients.send(encode(MOVE, (7).to_bytes(8, "little"), request_id=2, handle_id=link_id))
    assert decode(zmq_answer(clients))["status"] == PS_OK


def curve_dealer(ctx: zmq.Context, endpoint: str, server_public: str, pair: tuple[str, str]) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.curve_serverkey = server_public.encode()
    sock.curve_publickey, sock.curve_secretkey = pair[0].encode(), pair[1].encode()
    sock.connect(endpoint)
    return sock


def serve_and_end(*args: str):
    import subprocess

    return subprocess.run([sys.executable, "-m", "paths", "serve", "--bind", "tcp://127.0.0.1:*", *args],
                          capture_output=True, text=True, timeout=PATIENCE_S)


@pytest.mark.parametrize("make, problem", [
    (lambda d: None, "paths serve: --curve-clients: cannot read folder '{d}': No such file or directory"),
    (lambda d: d.mkdir(), "paths serve: --curve-clients: folder '{d}' holds no NAME.pub file: expected the public "
                          "keys of the clients to admit, one per file (paths serve --keygen NAME writes one)"),
    (lambda d: (d.mkdir(), (d / "bob.pub").write_text("short\n")),
     "paths serve: --curve-clients: client public key '{d}/bob.pub': expected a 40-character Z85 key on its first line"),
    (lambda d: (d.mkdir(), (d / ".pub").write_text(paths._native.curve_keypair()[0] + "\n")),
     "paths serve: --curve-clients: '{d}/.pub': a client is named by its file's name before .pub, of 1 to 63 bytes"),
], ids=["missing", "empty", "bad key", "no name"])
def test_a_bad_client_key_folder_is_one_line_and_exit_2(tmp_path, make, problem):
    keygen(tmp_path / "server")
    folder = tmp_path / "clients"
    make(folder)
    done = serve_and_end("--curve-secret", str(tmp_path / "server.key"), "--curve-clients", str(folder))
    assert done.returncode == 2 and done.stderr.startswith(problem.format(d=folder)), done.stderr
    assert done.stderr.count("\n") == 1


def test_client_keys_without_a_server_key_is_exit_2(tmp_path):
    (tmp_path / "clients").mkdir()
    keygen(tmp_path / "clients" / "alice")
    done = serve_and_end("--curve-clients", str(tmp_path / "clients"))
    assert (done.returncode, done.stderr) == (2, "paths serve: --curve-clients needs --curve-secret (clients are "
                                                 "authenticated by CURVE)\n")


# ---- trace files that cannot be written ----------------------------------------------------------

def test_a_trace_a_server_could_not_write_fails_its_exit_status(children, full_disk):  # noqa: F811
    server, endpoint = children.paths_serve("--trace-dir", str(full_disk))
    h = build_path(make_path(stage("remote", host=endpoint), stage("trace", file="lost.bin"),
                             stage("core", name="T", format="q")), pastset=paths.PastSet())
    for i in range(100):
        h.move(i)
    del h  # the server's trace stage goes, and its file cannot be written
    assert served_exactly(endpoint, "tcp") < PROMPT_S
    server.signal(signal.SIGINT)
    assert server.wait(PATIENCE_S) == 1
    message = f"stage 'trace': cannot write trace file '{full_disk}/lost.bin': No space left on device"
    assert f"paths serve: traces lost:\n  {message}\n" in server.stderr()
    assert "Traceback" not in server.stderr()
