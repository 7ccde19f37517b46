"""A server with a CURVE secret key: a client that has the server's public key works, through
the main endpoint and its own link socket, which is a ZeroMQ one (encrypted) unless the client
asks for a direct link by name; a client without a key, or with the wrong one, gets a
ConnectionError within its timeout_ms that names the server and hints at the CURVE keys."""

from __future__ import annotations

import sys
import time

import pytest
from child_processes import ChildProcesses, counters

import paths
from paths import build_path, make_path, stage

TIMEOUT_MS = 600
MARGIN_S = 0.6


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """{name: (secret key file, public key)} for the server's pair and an unrelated pair."""
    folder = tmp_path_factory.mktemp("curve")
    pairs = {}
    with ChildProcesses() as children:
        for name in ("server", "other"):
            prefix = folder / name
            keygen = children.start([sys.executable, "-m", "paths", "serve", "--keygen", str(prefix)], name="keygen")
            assert keygen.wait(30) == 0, keygen.stderr()
            pairs[name] = (prefix.with_suffix(".key"), prefix.with_suffix(".pub").read_text().strip())
    assert (pairs["server"][0].stat().st_mode & 0o077) == 0, "the secret key file is readable by others"
    return pairs


@pytest.fixture(scope="module")
def server(keys):
    """A CURVE server that tells its counters (tests/remote_peer.py serve)."""
    with ChildProcesses() as children:
        yield children.peer_server("--curve-secret", str(keys["server"][0]))


@pytest.fixture(scope="module")
def endpoint(server):
    return server[1]


def curve_path(address, element, key, **more):
    return make_path(stage("remote", host=address, timeout_ms=TIMEOUT_MS, curve_server_key=key, **more),
                     stage("core", name=element, format="q"))


def test_client_with_the_server_public_key_works(endpoint, keys):
    handle = build_path(curve_path(endpoint, "SECRET", keys["server"][1]))
    for i in range(100):
        handle.move(i)
        assert handle.observe() == (i,)
    path = make_path(stage("reduce-sum", num_threads=2), curve_path(endpoint, "SUM", keys["server"][1], window=2))
    paths.bench.gsum([build_path(path) for _ in range(2)], 200)  # checks every total
    element = build_path(curve_path(endpoint, "SUM", keys["server"][1]))
    assert [element.observe(i)[0] for i in range(element.last())] == [2 * r for r in range(200)]


@pytest.mark.parametrize("key", ["none", "other"], ids=["no key", "wrong key"])
def test_client_without_the_right_key_gets_connection_error_in_time(endpoint, keys, key):
    client_key = "" if key == "none" else keys["other"][1]
    started = time.monotonic()
    with pytest.raises(ConnectionError) as refused:
        build_path(curve_path(endpoint, "SECRET", client_key))
    waited = time.monotonic() - started
    assert waited < TIMEOUT_MS / 1000 + MARGIN_S, f"took {waited:.2f} s"
    message = str(refused.value)
    assert endpoint in message and "CURVE" in message, message


@pytest.mark.parametrize("proto, direct", [(None, 0), ("zmq", 0), ("tcp", 1)], ids=["no proto", "zmq", "tcp"])
def test_a_curve_key_keeps_links_on_zmq_unless_a_direct_one_is_asked_for(server, keys, proto, direct):
    process, address = server
    before = counters(process)
    handle = build_path(curve_path(address, f"CHOSEN-{proto}", keys["server"][1], **({"proto": proto} if proto else {})))
    for i in range(50):
        handle.move(i)
        assert handle.observe() == (i,)
    after = counters(process)
    assert after["builds"] - before["builds"] == 1
    assert after["direct"] - before["direct"] == direct
