"""How a rank of a program (a process of a run of many) reaches the servers of the run's nodes.

Under `paths launch` the node processes host the servers, and the launcher gives each rank
their endpoints (PATHS_SERVERS). Under srun or mpirun the ranks host them: the first rank the
map places on a node hosts that node's server in a thread, rank 0 also hosts every other node
the run needs (one that runs no rank but holds a sum or an element's home), and the rendezvous
with rank 0 (paths/runtime/rendezvous.py) tells every rank where all of them are. On one host the
servers listen on loopback; across hosts on every interface, each proved by a CURVE key of its
own, and admitting only the run's ranks: each rank presents a CURVE client key of its own,
whose public half the rendezvous hands every rank. A server admits no client until its rank has
the keys (a refused handshake is not tried again), and builds the rest of a path at another
node's server only once its rank knows where that server is (and trusts it): so the ranks meet
once more (Rendezvous.ready) once every server knows the run's servers and admits the keys, and
only then does any rank build.

A rank whose node's server is in another process reaches the stages of its node through it
(a remote hop to its own node): the ranks of a node then merge into one tree there, as the
threads of a kernel do in their node's process. The servers a rank hosts build in build contexts
of their own (its node's: the runtime's), each resolving node names by the servers found.
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass, field
from typing import Mapping, Optional

from .. import _native
from ..model.shown import shown
from .build import BuildContext
from .node_servers import NodeServers
from .rank_discovery import NODE, SERVERS, TRACE_DIR, Discovered
from .rendezvous import Rendezvous
from .server import PathServer
from .server_policy import ServerPolicy


@dataclass
class Wiring:
    servers: NodeServers
    via: Optional[str]  # the node whose server this rank goes through (None: its node is here)
    rendezvous: str  # how the servers were found, for runtime_info()
    hosted: list[PathServer] = field(default_factory=list)  # the servers this process runs
    meeting: Optional[Rendezvous] = None

    def close(self, failure: str = "") -> None:
        """At the end of the program: wait for every rank (the servers here may serve them), then
        close the servers. A program that fails (`failure` says why) waits for no rank: the
        others may be waiting for it (its part of a sum); it tells them (Rendezvous.finish).
        RendezvousError when another rank failed or is gone."""
        try:
            if self.meeting is not None:
                self.meeting.finish(failure)
        finally:
            for server in self.hosted:
                server.close()


def wire(runtime, found: Discovered, environ: Mapping[str, str]) -> Wiring:
    """The wiring of rank found.rank, whose run is `runtime` (its map, placements, policy)."""
    node = runtime.placements[found.rank]
    if found.launcher == "paths launch":
        if environ.get(NODE) != node:
            given = f"{NODE}={shown(environ[NODE])}" if NODE in environ else f"{NODE} is not set"
            raise ValueError(f"{given}, but map {shown(runtime.cluster_map.name)} places rank {found.rank} on "
                             f"{shown(node)}: the launcher and this rank read another map or policy")
        servers = NodeServers.from_json(environ.get(SERVERS, ""), SERVERS)
        runtime.context.resolve = servers.resolve
        runtime.context.curve_client = servers.client
        return Wiring(servers, node, "the node servers paths launch started")
    client = None if found.one_host else _native.curve_keypair()  # across hosts: who this rank is to the servers
    clients = {f"rank {found.rank}": client[0]} if client else {}
    runtime.trace_dir = os.path.abspath(environ[TRACE_DIR]) if environ.get(TRACE_DIR) else None
    if runtime.trace_dir:
        try:
            os.makedirs(runtime.trace_dir, exist_ok=True)
        except OSError as e:
            raise ValueError(f"{TRACE_DIR}={shown(environ[TRACE_DIR])}: expected a folder, and cannot make one there: "
                             f"{e.strerror}") from None
    hosted, servers = _host_servers(runtime, found, authenticate=client is not None, trace_dir=runtime.trace_dir)
    meeting = None
    rendezvous = "none: one rank"
    try:
        if found.size > 1:
            meeting = Rendezvous(found, environ)
            everyone = meeting.exchange({**servers.to_dict(), **({"clients": clients} if clients else {})},
                                        _check(runtime))
            servers = NodeServers(everyone["endpoints"], everyone["keys"])
            clients = everyone.get("clients", {})
            rendezvous = f"rank 0 at {meeting.endpoint}"
        for server in hosted if client else ():
            server.allow_clients(clients)
        for context in [runtime.context, *(server.context for server in hosted)]:
            context.resolve = servers.resolve
            context.trusted_endpoints = tuple(servers.endpoints.values())
            context.curve_client = client
        if meeting is not None:
            meeting.ready()  # no rank builds at a server that does not admit it or know the run's servers yet
    except BaseException:
        if meeting is not None:
            meeting.close()
        for server in hosted:
            server.close()
        raise
    via = None if any(server.context is runtime.context for server in hosted) else node
    return Wiring(servers, via, rendezvous, hosted, meeting)


def _host_servers(runtime, found: Discovered, authenticate: bool,
                  trace_dir: str | None) -> tuple[list[PathServer], NodeServers]:
    """The servers of the nodes this rank hosts: its node's when it is the node's first rank (in
    the runtime's build context, so its own paths merge with what other ranks send), and for rank 0
    every node the run needs that runs no rank (each in a context of its own). With
    `authenticate`, they admit no client until they are told the run's ranks' keys; trace files
    other ranks' paths ask for go to trace_dir (None: refused)."""
    placements = list(runtime.placements)
    mine = [n for n in runtime.nodes()
            if (n in placements and placements.index(n) == found.rank) or (n not in placements and found.rank == 0)]
    own = runtime.placements[found.rank]
    bind = "tcp://127.0.0.1:*" if found.one_host else "tcp://0.0.0.0:*"
    hosted, endpoints, keys = [], {}, {}
    try:
        for n in mine:
            public, secret = _native.curve_keypair() if not found.one_host else ("", "")
            server = PathServer(bind, secret, context=runtime.context if n == own else BuildContext(),
                                trace_dir=trace_dir, policy=ServerPolicy.for_run_nodes(),
                                curve_clients={} if authenticate else None).start()
            hosted.append(server)
            endpoints[n] = server.endpoint.replace("0.0.0.0", socket.gethostname())
            if public:
                keys[n] = public
    except BaseException:
        for server in hosted:
            server.close()
        raise
    return hosted, NodeServers(endpoints, keys)


def _check(runtime) -> str:
    """What every rank must agree on: the map (by its text), the placement policy and the elements
    reduced as sums (a rank that moves into a sum the others take for a plain element waits for
    ever)."""
    cluster_map = runtime.cluster_map
    digest = hashlib.sha1(cluster_map.text.encode()).hexdigest()[:10]
    sums = f", sums {','.join(sorted(runtime.sums))}" if runtime.sums else ", no sums but the map's"
    return f"map {cluster_map.name} ({digest}) with policy {runtime.policy or cluster_map.policy}{sums}"
