"""`paths serve`'s key options as a user meets them: a missing, empty, short or garbled
--curve-secret file, --keygen where no folder can be, --insecure, and the limits it
holds clients to (sizes with units): each one clear line on stderr, the right exit code, no
traceback. A server bound to an ipc path leaves no socket file behind, and takes no path that is
another's (a file, a live server's socket)."""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import stat
import subprocess
import sys

import pytest
from child_processes import ChildProcesses

import paths
from paths import build_path, make_path, stage
from paths.runtime.server import STOP_SECONDS, PathServer, _policy
from paths.runtime.server_policy import ServerPolicy, default_memory_budget

PATIENCE_S = 30


def paths_serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "paths", "serve", *args], capture_output=True, text=True,
                          timeout=PATIENCE_S)


@pytest.mark.parametrize("content, problem", [
    (None, "cannot read CURVE secret key '{path}': No such file or directory"),
    ("", "CURVE secret key '{path}': expected a 40-character Z85 key on its first line (as `paths serve "
         "--keygen` writes), got an empty line"),
    ("rJ5!kKEY\n", "CURVE secret key '{path}': expected a 40-character Z85 key on its first line (as `paths "
                   "serve --keygen` writes), got 8 characters"),
    ('"' * 40 + "\n", "CURVE secret key '{path}': expected a 40-character Z85 key on its first line (as `paths "
                      "serve --keygen` writes), got 40 characters, not all of them Z85 digits"),
    (b"\xff\xfe" * 20, "got 40 characters, not all of them Z85 digits"),
], ids=["missing", "empty", "short", "not Z85", "binary"])
def test_a_bad_curve_secret_file_is_one_line_and_exit_2(tmp_path, content, problem):
    path = tmp_path / "server.key"
    if isinstance(content, str):
        path.write_text(content)
    elif content is not None:
        path.write_bytes(content)
    done = paths_serve("--bind", "tcp://127.0.0.1:*", "--curve-secret", str(path))
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("paths serve: --curve-secret: "), done.stderr
    assert problem.format(path=path) in lines[0]
    assert done.stdout == ""


@pytest.mark.parametrize("given", ["server.pub", "copy.key"])
def test_a_public_key_given_as_the_curve_secret_is_one_line_and_exit_2(tmp_path, given):
    """A public key file looks like a secret one (one Z85 line): the server would start and no
    client could ever complete CURVE's handshake with it."""
    assert paths_serve("--keygen", str(tmp_path / "server")).returncode == 0
    (tmp_path / "copy.key").write_text((tmp_path / "server.pub").read_text())
    (tmp_path / "copy.pub").write_text((tmp_path / "server.pub").read_text())
    done = paths_serve("--bind", "tcp://127.0.0.1:*", "--curve-secret", str(tmp_path / given))
    assert done.returncode == 2
    assert done.stderr == (f"paths serve: --curve-secret: '{tmp_path / given}' holds a public key, not the secret "
                           "one: give the PREFIX.key file that `paths serve --keygen PREFIX` wrote beside PREFIX.pub\n")


def test_keygen_makes_a_missing_folder_its_owners_alone(tmp_path):
    """As docs/serving.md has it: `paths serve --keygen clients/alice` in a new folder."""
    prefix = tmp_path / "clients" / "alice"
    done = paths_serve("--keygen", str(prefix))
    assert (done.returncode, done.stderr) == (0, "")
    assert stat.S_IMODE(os.stat(prefix.parent).st_mode) == 0o700
    assert sorted(p.name for p in prefix.parent.iterdir()) == ["alice.key", "alice.pub"]


def test_keygen_where_no_folder_can_be_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "a file").write_text("")
    prefix = tmp_path / "a file" / "server"
    done = paths_serve("--keygen", str(prefix))
    assert done.returncode == 2
    assert done.stderr == f"paths serve: --keygen {prefix}: cannot make the folder '{prefix.parent}': File exists\n"


def test_keygen_makes_the_secret_the_owners_alone_and_never_replaces_a_key(tmp_path):
    prefix = tmp_path / "server"
    done = paths_serve("--keygen", str(prefix))
    assert done.returncode == 0, done.stderr
    secret, public = tmp_path / "server.key", tmp_path / "server.pub"
    assert secret.stat().st_mode & 0o777 == 0o600
    assert len(secret.read_text().strip()) == 40 and len(public.read_text().strip()) == 40
    keys = secret.read_text(), public.read_text()
    again = paths_serve("--keygen", str(prefix))
    assert again.returncode == 2
    assert again.stderr == (f"paths serve: --keygen {prefix}: '{prefix}.key' exists: a new key pair would replace "
                            "it; remove it first, or give another PREFIX\n")
    assert (secret.read_text(), public.read_text()) == keys


@pytest.mark.parametrize("args, problem", [
    (["--keygen", ""], "--keygen : expected a file prefix (PREFIX.key and PREFIX.pub are written), got ''"),
    (["--keygen", "keys/"], "--keygen keys/: expected a file prefix (PREFIX.key and PREFIX.pub are written), got a "
                            "folder: give FOLDER/NAME"),
    (["--keygen", "x" * 64], f"--keygen {'x' * 64}: its name '{'x' * 64}' is the client's name in a --curve-clients "
                             "folder: at most 63 bytes"),
    (["--keygen", "K", "--bind", "tcp://127.0.0.1:7100"],
     "--keygen K: it writes a key pair and exits, serving nothing: --bind has no use with it"),
])
def test_keygen_without_a_prefix_or_with_a_serving_option_is_one_line_and_exit_2(tmp_path, args, problem):
    done = subprocess.run([sys.executable, "-m", "paths", "serve", *args], capture_output=True, text=True,
                          timeout=PATIENCE_S, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (2, f"paths serve: {problem}\n")
    assert list(tmp_path.iterdir()) == []


def test_insecure_warns_and_serves():
    with ChildProcesses() as children:
        server = children.start([sys.executable, "-m", "paths", "serve", "--bind", "tcp://0.0.0.0:*",
                                 "--insecure"], name="paths serve --insecure")
        server.expect("READY ")
        server.signal(signal.SIGINT)
        assert server.wait(PATIENCE_S) == 0
    assert server.stderr().startswith("paths serve: warning: --insecure: tcp://0.0.0.0:* serves without CURVE: "
                                      "anyone who reaches it can build stages")


@pytest.mark.parametrize("args, problem", [
    (["--memory-budget", "lots"], "paths serve: --memory-budget: expected a size such as 268435456, 256M or 2G, "
                                  "got 'lots'"),
    (["--client-memory-budget", "0M"], "paths serve: --client-memory-budget: expected a size above 0, got '0M'"),
    (["--max-links-per-client", "0"], "paths serve: --max-links-per-client: expected a number of at least 1, got 0"),
    (["--max-builds-per-client", "64"], "paths serve: --max-builds-per-client: expected at most 63 (the server runs "
                                        "64 builds at once in all), got 64"),
    (["--memory-budget", "9" * 5000], "paths serve: --memory-budget: expected a size such as 268435456, 256M or 2G, "
                                      "got '" + "9" * 80 + "'"),
    (["--memory-budget", "1G", "--client-memory-budget", "2G"], "paths serve: --client-memory-budget: expected at "
                                                                 "most the server's --memory-budget (1G), got 2G"),
    (["--client-memory-budget", "100T"], "paths serve: --client-memory-budget: expected at most the server's "
                                         f"--memory-budget (by default {default_memory_budget()} bytes), got 100T"),
], ids=["size", "zero size", "links", "builds", "5000 digits", "a client's above the server's",
        "a client's above the server's default"])
def test_a_bad_limit_is_one_line_and_exit_2(args, problem):
    done = paths_serve("--bind", "tcp://127.0.0.1:*", *args)
    assert (done.returncode, done.stderr, done.stdout) == (2, problem + "\n", "")


@pytest.mark.parametrize("args, problem", [
    (["--bind", "tcp://localhost:*"], "paths serve: --bind tcp://localhost:*: HOST 'localhost' is no address to bind: "
                                      "expected an IP address (such as 127.0.0.1), * for every interface, or the name "
                                      "of a network interface (not a host name)"),
    (["--bind", "tcp://127.0.0.1:*", "--trace-dir", "/no/such/folder"],
     "paths serve: --trace-dir /no/such/folder: no such folder (trace files are written there)"),
    (["--bind", "ipc:///no/such/folder/server"], "paths serve: --bind: cannot bind 'ipc:///no/such/folder/server': "
                                                 "No such file or directory"),
    *[(["--bind", "tcp://127.0.0.1:*", "--allow-remote", pattern],
       "paths serve: --allow-remote: expected a pattern of endpoints, tcp://HOST:PORT (or HOST:PORT), ipc://NAME or "
       f"inproc://NAME, with * ? [...]; got {pattern!r}")
      for pattern in ("", "http://x:1", "tcp://10.1.2.*", "ipc://", "tcp://127.0.0.1:7001 ", "tcp://127.0.0.1:http",
                      "127.0.0.1:99999")],
], ids=["a host name", "a missing trace folder", "an ipc path in no folder", "an empty pattern",
        "a pattern of another scheme", "a pattern without a port", "an ipc pattern without a name",
        "a pattern with a space", "a port by its service's name", "a port past 65535"])
def test_a_bind_or_trace_folder_that_cannot_be_is_one_line_and_exit_2(args, problem):
    done = paths_serve(*args)
    assert (done.returncode, done.stderr, done.stdout) == (2, problem + "\n", "")


def test_sizes_take_units_and_the_limits_reach_the_server():
    args = argparse.Namespace(allow_kinds="", allow_remote=["tcp://10.0.0.*:*"], memory_budget="1.5G",
                              client_memory_budget="256M", max_links_per_client=7, max_builds_per_client=3)
    limits = _policy(args).limits()
    assert (limits.memory_budget, limits.client_memory_budget, limits.links_per_client) == (
        3 << 29, 256 << 20, 7)
    assert _policy(args).allow_remote == ("tcp://10.0.0.*:*",) and _policy(args).builds_per_client == 3


def test_a_pattern_written_as_a_bare_host_and_port_means_tcp_as_a_remote_stages_host_does():
    args = argparse.Namespace(allow_kinds="", allow_remote=["127.0.0.1:7001", "ipc:///run/paths/*"], memory_budget=None,
                              client_memory_budget=None, max_links_per_client=None, max_builds_per_client=3)
    assert _policy(args).allow_remote == ("tcp://127.0.0.1:7001", "ipc:///run/paths/*")


def test_a_size_is_exact_however_large():
    args = argparse.Namespace(allow_kinds="", allow_remote=[], memory_budget="9" * 400,
                              client_memory_budget="9007199254740993", max_links_per_client=None,
                              max_builds_per_client=3)
    limits = _policy(args).limits()
    assert (limits.memory_budget, limits.client_memory_budget) == (10 ** 400 - 1, 2 ** 53 + 1)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_server_on_an_ipc_path_removes_its_socket_files_as_it_stops(tmp_path, stop):
    """The main socket's file and each ZeroMQ link's go with the server, links still open."""
    endpoint = f"ipc://{tmp_path / 'server'}"
    with ChildProcesses() as children:
        server = children.start([sys.executable, "-m", "paths", "serve", "--bind", endpoint], name="paths serve")
        server.expect("READY ")
        handle = build_path(make_path(stage("remote", host=endpoint, proto="zmq", timeout_ms=5000),
                                      stage("core", name="E", format="q")), pastset=paths.PastSet())
        handle.move(5)
        link_file = sorted(p.name for p in tmp_path.iterdir())[1:]  # after the server's
        assert len(link_file) == 1 and re.fullmatch(r"server\.[0-9a-f]{16}", link_file[0])  # not the link's id
        server.signal(stop)
        assert server.wait(PATIENCE_S) == 0
    assert list(tmp_path.iterdir()) == []


STUCK_KIND = """
import threading

import paths

RELEASED = threading.Event()


@paths.stage_kind("{kind}")
class Stuck:
    \"\"\"Its move returns once RELEASED is set: a stage kind's code that hangs.\"\"\"

    def move(self, below, tuple):
        RELEASED.wait()
        return below.move(tuple)
"""


def stuck_kind(user_module, kind: str):
    """The module of a stage kind named `kind` whose move hangs, imported here too (a client
    checks its path's kinds)."""
    module = f"{kind.replace('-', '_')}_kind"
    return __import__(user_module(module, STUCK_KIND.format(kind=kind)))


def stuck_path(endpoint: str, kind: str):
    return make_path(stage("remote", host=endpoint, timeout_ms=300), stage(kind),
                     stage("core", name="S", format="q"))


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_server_stops_though_a_stage_it_serves_never_returns(user_module, stop):
    """It waited for the link's thread for ever, deaf to every signal but SIGKILL."""
    module = stuck_kind(user_module, "stuck-served").__name__
    with ChildProcesses() as children:
        server, endpoint = children.paths_serve("--allow-kinds", f"{module}:stuck-served")
        handle = build_path(stuck_path(endpoint, "stuck-served"), pastset=paths.PastSet())
        with pytest.raises(ConnectionError, match="no answer: within 300 ms"):
            handle.move(1)
        server.signal(stop)
        assert server.wait(STOP_SECONDS + PATIENCE_S) == 1
    assert server.stderr() == (f"paths serve: 1 link still in a stage's code {STOP_SECONDS:g} s after the stop (a stage "
                               "kind whose operation does not return): stopped without waiting for it\n")


def test_a_closed_server_keeps_what_a_link_still_in_a_stage_uses(user_module):
    """PathServer.close(timeout) gives up on the link; the stage's code, once it returns, finds
    its link and element still there, and its thread ends."""
    stuck = stuck_kind(user_module, "stuck-here")
    server = PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(),
                        policy=ServerPolicy(allow_kinds=frozenset({"stuck-here"}))).start()
    handle = build_path(stuck_path(server.endpoint, "stuck-here"), pastset=paths.PastSet())
    with pytest.raises(ConnectionError, match="no answer: within 300 ms"):
        handle.move(7)
    assert server.close(timeout=0.2) == 1
    stuck.RELEASED.set()
    core = server.pastset.enter("S", "q")
    assert core.observe_range(0, 1, timeout=PATIENCE_S) == [(7,)]  # the move went on, into the kept element
    assert PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).close(timeout=0) == 0


def test_a_stopping_server_leaves_the_file_another_server_bound_at_its_path(tmp_path):
    endpoint = f"ipc://{tmp_path / 'server'}"
    first = PathServer(endpoint, pastset=paths.PastSet()).start()
    (tmp_path / "server").unlink()  # someone removed its file: the path is free for another
    with PathServer(endpoint, pastset=paths.PastSet()).start() as second:
        first.close()
        handle = build_path(make_path(stage("remote", host=endpoint, proto="zmq", timeout_ms=5000),
                                      stage("core", name="E", format="q")), pastset=second.pastset)
        handle.move(5)
        assert second.pastset.enter("E", "q").observe_range(0, 1, timeout=5) == [(5,)]
        del handle
    assert list(tmp_path.iterdir()) == []


def test_an_ipc_path_that_is_a_file_or_a_live_servers_is_refused_and_left_as_it_was(tmp_path):
    """ZeroMQ removes whatever is at the path before it binds: a user's file, or the socket of a
    server that still serves there, which then nobody could reach."""
    precious = tmp_path / "precious.txt"
    precious.write_text("precious data\n")
    done = paths_serve("--bind", f"ipc://{precious}")
    assert (done.returncode, done.stderr) == (2, f"paths serve: --bind: cannot bind 'ipc://{precious}': {precious} "
                                                 "exists and is not a socket (it would be removed)\n")
    assert precious.read_text() == "precious data\n"
    endpoint = f"ipc://{tmp_path / 'server'}"
    with PathServer(endpoint, pastset=paths.PastSet()).start() as first:
        done = paths_serve("--bind", endpoint)
        assert (done.returncode, done.stderr) == (2, f"paths serve: --bind: cannot bind '{endpoint}': a server "
                                                     f"listens on {tmp_path / 'server'} already\n")
        handle = build_path(make_path(stage("remote", host=endpoint, proto="zmq", timeout_ms=5000),
                                      stage("core", name="E", format="q")), pastset=paths.PastSet())
        handle.move(7)  # the first server still serves
        assert first.pastset.enter("E", "q").observe_range(0, 1, timeout=5) == [(7,)]
        del handle


def test_the_socket_file_a_dead_server_left_is_bound_anew(tmp_path):
    path = tmp_path / "server"
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(str(path))
    left.close()  # its file stays, with nobody listening
    with PathServer(f"ipc://{path}", pastset=paths.PastSet()).start():
        assert stat.S_ISSOCK(path.stat().st_mode)


def test_the_link_files_a_killed_server_left_go_with_the_next_server_on_its_path(tmp_path):
    """SIGKILL leaves the main socket's file and each ZeroMQ link's: the next server on the path
    removes the links' too, and nothing else of that shape: a file that is no socket, a socket a
    server listens on, a dead one of another user (root only can make that one)."""
    endpoint, neighbour = f"ipc://{tmp_path / 'server'}", f"ipc://{tmp_path / 'other'}"
    zmq_path = lambda at: make_path(stage("remote", host=at, proto="zmq", timeout_ms=5000),
                                    stage("core", name="E", format="q"))
    kept = {"server.0123456789abcdef"}
    (tmp_path / "server.0123456789abcdef").write_text("not a socket\n")
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(tmp_path / "server.00000000000000aa"))
    listening.listen()
    kept.add("server.00000000000000aa")
    if os.geteuid() == 0:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as theirs:
            theirs.bind(str(tmp_path / "server.00000000000000bb"))
        os.chown(tmp_path / "server.00000000000000bb", 65534, 65534)
        kept.add("server.00000000000000bb")
    with listening, ChildProcesses() as children, PathServer(neighbour, pastset=paths.PastSet()).start():
        server = children.start([sys.executable, "-m", "paths", "serve", "--bind", endpoint], name="paths serve")
        server.expect("READY ")
        killed = build_path(zmq_path(endpoint), pastset=paths.PastSet())
        killed.move(5)
        live = build_path(zmq_path(neighbour), pastset=paths.PastSet())
        live.move(6)
        server.signal(signal.SIGKILL)
        server.wait(PATIENCE_S)
        left = {p.name for p in tmp_path.iterdir()}
        dead = [name for name in left - kept if re.fullmatch(r"server\.[0-9a-f]{16}", name)]
        assert len(dead) == 1, left  # the killed server's link
        with PathServer(endpoint, pastset=paths.PastSet()).start():
            assert {p.name for p in tmp_path.iterdir()} == left - set(dead)
        live.move(7)
        del live, killed
    assert {p.name for p in tmp_path.iterdir()} == kept


@pytest.mark.parametrize("bind", ["tcp://127.0.0.1:108993", "tcp://127.0.0.1:0", "tcp://127.0.0.1"])
def test_a_path_server_refuses_a_port_zeromq_would_take_as_another(bind):
    """libzmq would bind port 108993 as 43457 (its value modulo 65536), and clients of the port
    written would find nobody: refused as `paths serve --bind` refuses it."""
    with pytest.raises(ValueError, match=rf"PathServer\('{bind}'\): expected tcp://HOST:PORT with PORT from 1 to 65535"):
        PathServer(bind, pastset=paths.PastSet())


@pytest.mark.parametrize("bind", [b"tcp://127.0.0.1:7000", None, 7000])
def test_a_path_server_refuses_a_bind_endpoint_that_is_no_text(bind):
    with pytest.raises(TypeError, match=r"^PathServer: bind: expected an endpoint as text \(tcp://HOST:PORT, "):
        PathServer(bind, pastset=paths.PastSet())
