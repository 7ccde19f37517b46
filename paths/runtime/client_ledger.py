"""Who holds what at a server, client by client (paths/runtime/server_policy.py says who a client is):
the builds it has running and waiting, the links it holds and the bytes of the stages its links
go through, each held to the server's limits; and the guard one client's build carries through
BuildContext.build, which refuses what the server does not grant before anything is created.

A client pays for every stage its paths hold, whether its build created the stage or found it
built (paths merge): once per stage, however many of its links go through it, until the last of
them goes. So a client that joins another's stages pays for them too, and the one that created
them stops paying when it lets them go. The server's budget counts each stage once, while it lives.

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

from ..model.path_spec import StageSpec
from .server_policy import ServerPolicy


class Refused(ValueError):
    """What a client asked and the server does not grant; the message says which limit."""


@dataclass
class _Account:
    running: int = 0
    waiting: collections.deque = field(default_factory=collections.deque)
    links: set = field(default_factory=set)
    bytes: int = 0
    stages: dict = field(default_factory=dict)  # a stage's canonical key -> the client's holds of it

    def idle(self) -> bool:
        return not (self.running or self.waiting or self.links or self.bytes or self.stages)


class ClientLedger:
    """The server's accounts of its clients. Builds and links are counted by the thread that
    serves the server; bytes are charged by build threads, and given back to a client when its
    last hold of a stage goes, to the server when the stage goes."""

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

    def hold(self, client: str, stage: tuple, size: int, spec: StageSpec,
             building: int) -> tuple[Callable[[], None], int]:
        """One more hold of the stage `stage` (its canonical key, `size` bytes) by `client`, whose
        build has charged `building` bytes so far: the client pays for the stage unless it holds it
        already. Returns what lets the hold go, and the bytes charged now. Refused when the client's
        budget would be passed."""
        limits = self.limits
        with self._lock:
            account = self._accounts.setdefault(client, _Account())
            charged = 0 if stage in account.stages else size
            if account.bytes + charged > limits.client_memory_budget:
                self._forget_if_idle(client, account)
                own = f", {building} of them by the stages below it on this path" if building else ""
                raise Refused(f"stage {spec}: asks {size} bytes, beyond the memory budget of client {client}: "
                              f"{account.bytes} of its {limits.client_memory_budget} bytes are in use{own} "
                              "(paths serve --client-memory-budget)")
            account.stages[stage] = account.stages.get(stage, 0) + 1
            account.bytes += charged

        def let_go() -> None:
            with self._lock:
                holds = account.stages.pop(stage) - 1
                if holds:
                    account.stages[stage] = holds
                else:
                    account.bytes -= size
                self._forget_if_idle(client, account)

        return let_go, charged

    def reserve(self, size: int, spec: StageSpec) -> Callable[[], None]:
        """Take `size` bytes of the server's budget for creating `spec`; returns what gives them
        back. Refused when the budget would be passed."""
        with self._lock:
            if self.bytes + size > self.limits.memory_budget:
                raise Refused(f"stage {spec}: asks {size} bytes, beyond this server's memory budget: {self.bytes} "
                              f"of its {self.limits.memory_budget} bytes are in use (paths serve --memory-budget)")
            self.bytes += size

        def give_back() -> None:
            with self._lock:
                self.bytes -= size

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
    each stage it would create or go through, and where its remote stages may reach."""

    client: str
    crossed: tuple[str, ...]  # the servers its path went through on its way here, since its last sum
    through: tuple[str, ...]  # ... and in all
    trusted_endpoints: tuple[str, ...]  # shell patterns of the endpoints its remote stages may reach
    ledger: ClientLedger
    held: list = field(default_factory=list, compare=False)  # (let go, bytes charged) of each stage held

    def admit_path(self, specs: tuple[StageSpec, ...]) -> None:
        """The stages this server would build of the path: only kinds it builds."""
        for spec in specs:
            if not self.ledger.policy.may_build(spec):
                raise Refused(f"stage {spec}: this server builds the C built-in stage kinds and those it was "
                              f"told to allow (paths serve --allow-kinds), not {spec.kind!r}")

    def hold(self, stage: tuple, size: int, spec: StageSpec) -> None:
        """The build's path goes through the stage (its canonical key): the client holds it."""
        let_go, charged = self.ledger.hold(self.client, stage, size, spec, sum(c for _, c in self.held))
        self.held.append((let_go, charged))

    def create(self, stage: tuple, size: int, spec: StageSpec) -> Callable[[], None]:
        """Before creating a stage: the client holds it, and the server's budget grants its bytes;
        returns what gives those back when the stage goes."""
        self.hold(stage, size, spec)
        return self.ledger.reserve(size, spec)

    def let_go(self) -> None:
        """The build's holds go: its handle went, or it failed."""
        while self.held:
            self.held.pop()[0]()
