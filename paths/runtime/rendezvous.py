"""The rendezvous of the ranks of a program started by srun or mpirun (no PATHS launcher): every
rank tells rank 0 which node servers it hosts, and rank 0 tells every rank all of them. A
barrier follows once every rank's servers know the run's servers (and, across hosts, admit the
run's client keys), so that no rank builds at a server that would still refuse it. At the end
(paths_finalize, or the end of a Python program) it is also the last barrier, so that no rank
closes a server that another still uses.

How the ranks find rank 0:
    PATHS_RENDEZVOUS=tcp://HOST:PORT   rank 0 listens there, the others connect there;
    otherwise                          rank 0 listens on a free port (loopback when the launcher
                                       says every rank is on this host, else every interface)
                                       and writes tcp://HOST:PORT to the file
                                       .paths-rendezvous-<launcher>-<job> in PATHS_RENDEZVOUS_DIR
                                       (default: the current folder), which the others read: a
                                       folder every rank sees, as a home folder on a cluster.
Every wait is bounded by PATHS_RENDEZVOUS_TIMEOUT seconds (default 60; inf: 30 days) and ends with a message
naming what is missing, or ends early when a rank (or rank 0) is gone; the last barrier waits
as long as the slowest rank runs, unless a rank fails or is gone: then it ends for every rank.

The messages are JSON lines over TCP: {"rank", "size", "check", "servers"} to rank 0, then
{"servers"} (or {"error"}) back; {"ready": true} to rank 0, then {"ready": true} (or {"error"})
back; at the end {"done": true} (or {"failed": why}) to rank 0, then {"done": true} (or
{"error"}) back. Across hosts, "servers" also holds each rank's CURVE client public key, the
ones the servers then admit.
"""

from __future__ import annotations

import json
import os
import select
import socket
import time
from typing import Mapping, Optional

from .rank_discovery import Discovered

ENDPOINT, FOLDER, TIMEOUT = "PATHS_RENDEZVOUS", "PATHS_RENDEZVOUS_DIR", "PATHS_RENDEZVOUS_TIMEOUT"
DEFAULT_TIMEOUT = 60.0
NO_LIMIT_SECONDS = 30 * 86400.0  # what inf, or any longer timeout, waits (a socket timeout stops short of inf)
POLL_SECONDS = 0.05
MESSAGE_BYTES = 1 << 20  # the most a message may take (a hello names a few servers)
# What a hello's servers hold: node -> endpoint, node -> the CURVE key proving its server, and
# (across hosts) rank -> the CURVE client key it presents, which every server admits.
SERVER_PARTS = ("endpoints", "keys", "clients")
READY, DONE = {"ready": True}, {"done": True}
FAILED = "failed"  # {"failed": why} from a rank that fails at its end
VERDICT_SECONDS = 5.0  # how much longer than rank 0 the others wait for its verdict (on their hello, on ready)


class RendezvousError(ValueError):
    """The rendezvous failed: the message names the rank, what it waited for and how to fix it."""


class _Peer:
    """A TCP connection that reads JSON lines."""

    def __init__(self, connection: socket.socket):
        self.socket = connection
        self.buffer = b""

    def send(self, message: dict) -> None:
        self.socket.sendall(json.dumps(message).encode() + b"\n")

    def receive(self, deadline: Optional[float]) -> Optional[dict]:
        """The next message; None when the other side is gone (or sent no JSON object);
        TimeoutError after deadline (None: no limit, waiting in slices so that Ctrl-C works)."""
        while b"\n" not in self.buffer:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            readable, _, _ = select.select([self.socket], [], [], 0.5 if left is None else min(left, 0.5))
            if readable and not self.read():
                return None
        return self.take()

    def read(self) -> bool:
        """Take what has come (the socket is readable); False when the other side is gone."""
        try:
            data = self.socket.recv(1 << 16)
        except OSError:
            data = b""
        self.buffer += data
        return bool(data) and len(self.buffer) <= MESSAGE_BYTES

    def take(self) -> Optional[dict]:
        """The message in the buffer (a whole line is there), or None if it is no JSON object."""
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except ValueError:
            return None
        return message if isinstance(message, dict) else None


class Rendezvous:
    def __init__(self, found: Discovered, environ: Optional[Mapping[str, str]] = None):
        environ = os.environ if environ is None else environ
        self.found = found
        self.given = environ.get(ENDPOINT, "")
        folder = environ.get(FOLDER) or os.getcwd()
        self.file = os.path.join(folder, f".paths-rendezvous-{found.launcher}-{found.job or 'job'}")
        text = environ.get(TIMEOUT, str(DEFAULT_TIMEOUT))
        try:
            self.timeout = float(text)
        except ValueError:
            self.timeout = -1.0
        if not self.timeout > 0:
            raise RendezvousError(f"{TIMEOUT}={text!r}: expected a number of seconds > 0 (inf: no limit)")
        self.timeout = min(self.timeout, NO_LIMIT_SECONDS)
        self.endpoint = ""  # where rank 0 listens
        self.peers: dict[int, _Peer] = {}  # rank 0: every other rank, by its rank; else: rank 0

    def _fail(self, problem: str) -> RendezvousError:
        return RendezvousError(f"paths: {self.found.describe()}: {problem}")

    def exchange(self, servers: dict, check: str) -> dict:
        """This rank's servers ({"endpoints": {...}, "keys": {...}}) for everyone's. `check`
        (the map and the policy) must be the same in every rank."""
        deadline = time.monotonic() + self.timeout
        hello = {"rank": self.found.rank, "size": self.found.size, "check": check, "servers": servers}
        if self.found.rank == 0:
            return self._gather(hello, deadline)
        answer = self._check_in(hello, deadline)
        if "error" in answer:
            raise self._fail(answer["error"])
        return answer["servers"]

    # ---- rank 0 ---------------------------------------------------------------------------------

    def _gather(self, mine: dict, deadline: float) -> dict:
        """Every rank's hello, read as they come: a connection that says nothing, or nothing
        that is a hello of another rank of this run, is dropped and delays nobody. The ranks
        that checked in get every server, or what went wrong (a rank that never came)."""
        listener = self._listen()
        hellos = {0: mine}
        pending: dict[socket.socket, _Peer] = {}
        problem = ""
        try:
            while len(hellos) < self.found.size:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [str(r) for r in range(self.found.size) if r not in hellos]
                    problem = (f"ranks {', '.join(missing)} did not check in at {self.endpoint} within "
                               f"{self.timeout:g} s ({TIMEOUT} to wait longer)")
                    break
                readable, _, _ = select.select([listener, *pending], [], [], min(left, 0.5))
                for ready in readable:
                    if ready is listener:
                        connection, _ = listener.accept()
                        pending[connection] = _Peer(connection)
                        continue
                    peer = pending[ready]
                    if peer.read() and b"\n" not in peer.buffer:
                        continue  # the rest of its hello is still on its way
                    del pending[ready]
                    hello = peer.take() if b"\n" in peer.buffer else None
                    rank = hello.get("rank") if hello else None
                    if not isinstance(rank, int) or not 0 < rank < self.found.size or rank in hellos:
                        if isinstance(rank, int):  # a rank of another run, or a second one of the same rank
                            self._turn_away(peer, rank, rank in hellos)
                        ready.close()
                        continue
                    hellos[rank] = hello
                    self.peers[rank] = peer
        finally:
            listener.close()
            for connection in pending:
                connection.close()
            if not self.given:
                try:
                    os.unlink(self.file)
                except OSError:
                    pass
        problem = problem or self._problem(hellos)
        merged: dict = {"endpoints": {}, "keys": {}}
        for hello in hellos.values() if not problem else ():
            for part, found in hello["servers"].items():
                merged.setdefault(part, {}).update(found)
        for peer in self.peers.values():
            peer.send({"error": problem} if problem else {"servers": merged})
        if problem:
            raise self._fail(problem)
        return merged

    def _turn_away(self, peer: _Peer, rank: int, twice: bool) -> None:
        """Tell a hello that is no rank of this run why, so that its rank fails at once saying so."""
        why = (f"rank {rank} checked in already: the launcher's variables gave two processes rank {rank}" if twice
               else f"rank {rank} is no rank of rank 0's run of {self.found.size} ranks: the launcher's "
                    "variables disagree about the run's size")
        try:
            peer.send({"error": why})
        except OSError:
            pass  # gone already

    def _problem(self, hellos: dict) -> str:
        for rank, hello in sorted(hellos.items()):
            servers = hello.get("servers")
            if not (isinstance(servers, dict) and {"endpoints", "keys"} <= set(servers) <= set(SERVER_PARTS) and all(
                    isinstance(found, dict) and all(isinstance(v, str) for v in found.values())
                    for found in servers.values())):
                return (f"rank {rank} sent no servers {{\"endpoints\": {{node: endpoint}}, \"keys\": {{node: key}}"
                        f"[, \"clients\": {{name: key}}]}}")
            if hello.get("size") != self.found.size:
                return f"rank {rank} is one of {hello.get('size')} ranks, rank 0 of {self.found.size}"
            if hello.get("check") != hellos[0]["check"]:
                return f"rank {rank} runs {hello.get('check')}, rank 0 {hellos[0]['check']}: give every rank the same"
        return ""

    def _listen(self) -> socket.socket:
        if self.given:
            host, port = _host_port(self.given, ENDPOINT)
            bind, shown = host, self.given
        else:
            bind = "127.0.0.1" if self.found.one_host else "0.0.0.0"
            host, port = ("127.0.0.1" if self.found.one_host else socket.gethostname()), 0
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((bind, port))
        except OSError as e:
            listener.close()
            raise self._fail(f"cannot listen on {bind}:{port} for the rendezvous: {e.strerror}") from None
        listener.listen(min(self.found.size, 4096))
        self.endpoint = self.given or f"tcp://{host}:{listener.getsockname()[1]}"
        if not self.given:
            temporary = f"{self.file}.{os.getpid()}"
            try:
                with open(temporary, "w") as f:
                    f.write(self.endpoint + "\n")
                os.replace(temporary, self.file)  # the others never read half of it
            except OSError as e:
                listener.close()
                raise self._fail(f"cannot write the rendezvous file {self.file}: {e.strerror} (set {FOLDER} "
                                 f"to a folder every rank sees and may write)") from None
        return listener

    # ---- the other ranks --------------------------------------------------------------------------

    def _check_in(self, hello: dict, deadline: float) -> dict:
        """Find rank 0 (the given endpoint, or its file), say hello, and wait for the answer;
        a rank 0 not there yet (or a file left by an earlier run) is tried again until deadline."""
        tried, how = "", ""  # the endpoint of the file last tried, and how: "refused", or "silent" (no verdict)
        while True:
            endpoint = self.given or _read_endpoint(self.file)
            if not endpoint:  # none yet, or gone
                tried, how = "", ""
            if endpoint:
                self.endpoint = endpoint
                host, port = _host_port(endpoint, ENDPOINT if self.given else self.file)
                try:
                    connection = socket.create_connection((host, port), timeout=max(0.1, deadline - time.monotonic()))
                except OSError:
                    connection = None
                if connection is not None:
                    peer = _Peer(connection)
                    try:
                        peer.send(hello)
                        answer = peer.receive(deadline + VERDICT_SECONDS)  # rank 0 answers by its own deadline
                    except (OSError, TimeoutError):
                        answer = None
                    if answer is not None:
                        self.peers = {0: peer}
                        return answer
                    connection.close()
                tried, how = endpoint, "refused" if connection is None else "silent"
            if time.monotonic() >= deadline:
                if self.given:
                    where = f"expected {ENDPOINT}={self.given}"
                elif how == "refused":
                    where = (f"{self.file} names {tried}, where nobody answered (a file a rank 0 that ended "
                             "left, if this run's rank 0 has not written it yet)")
                elif how == "silent":
                    where = f"rank 0 at {tried} (from {self.file}) took this rank's hello, and gave no verdict"
                else:
                    where = (f"expected the endpoint rank 0 writes to {self.file} (set {FOLDER} to a folder every "
                             f"rank sees, or {ENDPOINT}=tcp://HOST:PORT for rank 0 to listen on)")
                raise self._fail(f"no rendezvous with rank 0 within {self.timeout:g} s: {where}")
            time.sleep(POLL_SECONDS)

    # ---- ready ------------------------------------------------------------------------------------

    def ready(self) -> None:
        """The barrier after the exchange, once this rank's servers know the run's servers (and
        admit its client keys): returns when every rank has come to it. Rank 0 waits for every
        rank at most the timeout, the others for rank 0's verdict (a little longer, so that its
        verdict, naming who was missing, comes first)."""
        if self.found.rank == 0:
            self._collect(READY, time.monotonic() + self.timeout, "before it was ready")
            return
        waited = self.timeout + VERDICT_SECONDS
        try:
            self.peers[0].send(READY)
            answer = self.peers[0].receive(time.monotonic() + waited)
        except TimeoutError:
            raise self._fail(f"rank 0 did not say that every rank is ready within {waited:g} s "
                             f"({TIMEOUT} to wait longer)") from None
        except OSError:
            answer = None
        self._verdict(READY, answer, "before every rank was ready")

    def _verdict(self, expected: dict, answer: Optional[dict], gone: str) -> None:
        """A rank but rank 0: rank 0's answer is `expected`, else it says what went wrong."""
        if answer is None:
            raise self._fail(f"rank 0 is gone {gone}")
        if answer != expected:
            raise self._fail(str(answer.get("error", f"rank 0 answered something other than {json.dumps(expected)}")))

    def _collect(self, expected: dict, deadline: Optional[float], gone: str) -> None:
        """Rank 0: `expected` from every rank, read as they come, until `deadline` (None: no
        limit, as long as the slowest rank takes); then the verdict to every rank, at once when
        a rank failed (it said so) or is gone: `expected`, or what went wrong, which it raises."""
        waiting = {peer.socket: rank for rank, peer in self.peers.items()}
        problem = ""
        while waiting and not problem:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                missing = ", ".join(str(r) for r in sorted(waiting.values()))
                problem = f"ranks {missing} did not get ready within {self.timeout:g} s ({TIMEOUT} to wait longer)"
                break
            readable, _, _ = select.select(list(waiting), [], [], 0.5 if left is None else min(left, 0.5))
            for connection in readable:
                rank = waiting[connection]
                peer = self.peers[rank]
                came = peer.read()
                if b"\n" not in peer.buffer:
                    if came:
                        continue  # the rest of its message is still on its way
                    problem = f"rank {rank} is gone {gone}"
                    break
                message = peer.take()
                if message != expected:
                    problem = (f"rank {rank} failed: {message[FAILED]}" if message and FAILED in message else
                               f"rank {rank} sent something other than {json.dumps(expected)}")
                    break
                del waiting[connection]
        self._tell_peers({"error": problem} if problem else expected)
        if problem:
            raise self._fail(problem)

    # ---- the end ----------------------------------------------------------------------------------

    def finish(self, failure: str = "") -> None:
        """The last barrier: returns when every rank has come to it. A rank that fails (`failure`
        says why, in one line) waits for none: the others may be waiting for it (its part of a
        sum). It tells rank 0 (rank 0: every rank), and rank 0 ends the barrier for every rank at
        once, as it does when a rank is gone: each raises a RendezvousError naming that rank."""
        try:
            if failure and self.found.rank == 0:
                self._tell_peers({"error": f"rank 0 failed: {failure}"})
            elif failure:
                self._tell_peers({FAILED: failure})
            elif self.found.rank == 0:
                self._collect(DONE, None, "before the last barrier")
            else:
                try:
                    self.peers[0].send(DONE)
                    answer = self.peers[0].receive(None)
                except OSError:
                    answer = None
                self._verdict(DONE, answer, "before the last barrier")
        finally:
            self.close()

    def _tell_peers(self, message: dict) -> None:
        """Rank 0: every other rank; the others: rank 0."""
        for peer in self.peers.values():
            try:
                peer.send(message)
            except OSError:
                pass  # that rank is gone

    def close(self) -> None:
        for peer in self.peers.values():
            peer.socket.close()


def _read_endpoint(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _host_port(endpoint: str, what: str) -> tuple[str, int]:
    scheme, _, rest = endpoint.partition("://")
    host, _, port = rest.rpartition(":")
    if scheme != "tcp" or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RendezvousError(f"{what}: expected tcp://HOST:PORT, got {endpoint!r}")
    return host, int(port)
