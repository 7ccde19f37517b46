"""Who holds what at a server, client by client (paths/runtime/server_policy.py says who a client is):
the builds it has running and waiting, the links it holds and the bytes of the stages its builds
created, each held to the server's limits; and the guard one client's build carries through
BuildContext.build, which refuses what the server does not grant before anything is created.

A build that would pass a limit is refused with a message naming the limit and the option that
sets it, except that a client's builds beyond its share of running ones wait their turn: a slow
build holds its own client only. Links are also held to a fair share: a client may hold half of
the links the other clients leave free, so that each newcomer finds one while any is free.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Callable

from .. import _native
from ..model.path_spec import StageSpec
from .server_policy import ServerPolicy
from ..model.stage_kinds import KindInfo


class Refused(ValueError):
    """What a client asked and the server does not grant; the message says which limit."""


@dataclass
class _Account:
    running: int = 0
    waiting: collections.deque = field(default_factory=collections.deque)
    links: set = field(default_factory=set)
    bytes: int = 0

    def idle(self) -> bool:
        return not (self.running or self.waiting or self.links or self.bytes)


class ClientLedger:
    """The server's accounts of its clients. Builds and links are counted by the thread that
    serves the server; bytes are charged by build threads and given back when a stage goes."""

    def __init__(self, policy: ServerPolicy):
        self.policy = policy
        self.limits = policy.limits()
        self.running = 0  # builds of all clients
        self.links = 0
        self.bytes = 0
        self._accounts: dict[str, _Account] = {}
        self._owners: dict[int, str] = {}  # link id -> its client
        self._lock = threading.Lock()

    def arrive(self, client: str, request) -> bool:
        """A BUILD from `client`: True to run it now; False when it waits its turn (finished()
        hands it out); Refused when it may do neither."""
        policy, limits = self.policy, self.limits
        with self._lock:
            account = self._accounts.setdefault(client, _Account())
            coming = account.running + len(account.waiting)
            try:
                if len(account.links) + coming >= limits.links_per_client:
                    why = ("" if policy.links_per_client else f"by default half of the {limits.max_links} links this "
                           "server can hold, at most 256; ")
                    raise Refused(f"client {client} holds {len(account.links)} links and has {coming} more on the way: "
                                  f"at most {limits.links_per_client} per client ({why}paths serve "
                                  "--max-links-per-client)")
                share = self._share(account)
                if policy.fair_share and len(account.links) + coming >= share:
                    raise Refused(f"client {client} holds {len(account.links)} links and has {coming} more on the way: "
                                  f"at most {share} now, half of the {limits.max_links} links this server can hold "
                                  "that the other clients leave, so that another client is always served")
                if self.links + self.running >= limits.max_links:
                    raise Refused(f"this server holds {self.links} links, all it can serve (its file descriptors); "
                                  "try again later")
                if account.running >= policy.builds_per_client:
                    if len(account.waiting) >= policy.waiting_builds_per_client:
                        raise Refused(f"client {client} has {account.running} builds running and "
                                      f"{len(account.waiting)} waiting: the most this server takes from one client "
                                      "(paths serve --max-builds-per-client sets how many run)")
                    account.waiting.append(request)
                    return False
                if self.running >= policy.max_builds:
                    raise Refused(f"this server runs {self.running} builds already, all it runs at once; try again later")
            except Refused:
                self._forget_if_idle(client, account)
                raise
            account.running += 1
            self.running += 1
            return True

    def _share(self, account: _Account) -> int:
        """The links a client may hold (and have on the way) now: half of those the others leave, at
        least one while one is free."""
        others = self.links + self.running - len(account.links) - account.running
        return max(1, (self.limits.max_links - others) // 2)

    def finished(self, client: str):
        """A build of `client` has ended: the next of its waiting builds, to run now, or None."""
        with self._lock:
            account = self._accounts[client]
            if account.waiting:
                return account.waiting.popleft()
            account.running -= 1
            self.running -= 1
            self._forget_if_idle(client, account)
            return None

    def link_opened(self, client: str, link_id: int) -> None:
        with self._lock:
            self._accounts.setdefault(client, _Account()).links.add(link_id)
            self._owners[link_id] = client
            self.links += 1

    def link_closed(self, link_id: int) -> None:
        with self._lock:
            client = self._owners.pop(link_id, None)
            if client is None:
                return
            account = self._accounts[client]
            account.links.discard(link_id)
            self.links -= 1
            self._forget_if_idle(client, account)

    def charge(self, client: str, size: int, spec: StageSpec) -> Callable[[], None]:
        """Take `size` bytes of the client's and the server's budgets for creating `spec`;
        returns what gives them back. Refused when either budget would be passed."""
        limits = self.limits
        with self._lock:
            account = self._accounts.setdefault(client, _Account())
            if account.bytes + size > limits.client_memory_budget:
                self._forget_if_idle(client, account)
                raise Refused(f"stage {spec}: asks {size} bytes, beyond the memory budget of client {client}: "
                              f"{account.bytes} of its {limits.client_memory_budget} bytes are in use "
                              "(paths serve --client-memory-budget)")
            if self.bytes + size > limits.memory_budget:
                self._forget_if_idle(client, account)
                raise Refused(f"stage {spec}: asks {size} bytes, beyond this server's memory budget: {self.bytes} "
                              f"of its {limits.memory_budget} bytes are in use (paths serve --memory-budget)")
            account.bytes += size
            self.bytes += size

        def give_back() -> None:
            with self._lock:
                account.bytes -= size
                self.bytes -= size
                self._forget_if_idle(client, account)

        return give_back

    def clients(self) -> dict[str, dict]:
        """Every client with something held: {client: {running, waiting, links, bytes}}."""
        with self._lock:
            return {c: {"running": a.running, "waiting": len(a.waiting), "links": len(a.links), "bytes": a.bytes}
                    for c, a in self._accounts.items()}

    def _forget_if_idle(self, client: str, account: _Account) -> None:
        if account.idle() and self._accounts.get(client) is account:
            del self._accounts[client]


@dataclass(frozen=True)
class ClientBuild:
    """One client's build, as BuildContext.build carries it: the checks the server makes before
    each stage it would create, and where its remote stages may reach."""

    client: str
    crossed: tuple[str, ...]  # the servers its path went through on its way here, since its last sum
    through: tuple[str, ...]  # ... and in all
    trusted_endpoints: tuple[str, ...]  # shell patterns of the endpoints its remote stages may reach
    ledger: ClientLedger

    def admit_path(self, specs: tuple[StageSpec, ...]) -> None:
        """The stages this server would build of the path: only kinds it builds."""
        for spec in specs:
            if not self.ledger.policy.may_build(spec):
                raise Refused(f"stage {spec}: this server builds the C built-in stage kinds and those it was "
                              f"told to allow (paths serve --allow-kinds), not {spec.kind!r}")

    def admit(self, spec: StageSpec, info: KindInfo, params: dict, format: str) -> Callable[[], None]:
        """Before creating a stage: its bytes (its kind's footprint) are charged to the client;
        returns what gives them back. A Python kind's own memory is its own affair."""
        size = 0 if info.python_class is not None else _native.stage_footprint(spec.kind, params, format)
        return self.ledger.charge(self.client, size, spec)
