"""What a server lets its clients ask of it: the stage kinds it builds, the endpoints a client's
path may make it connect to, and the limits each client, and all of them together, are held to:
builds in flight, links, and the bytes of the stages their paths make it create.

`paths serve` fills one from its options; a node of a run serves its map's other nodes with the
limits of `for_run_nodes()`. A client is who sent a BUILD: an authenticated client's key name,
else its address (every client of one host is one client), else "local" (ipc, inproc).
"""

from __future__ import annotations

import os
import re
import resource
from dataclasses import dataclass
from fractions import Fraction

from .. import _native
from ..model.path_spec import StageSpec
from ..model.shown import shown
from ..model.stage_kinds import kinds

GIB = 1 << 30
# A link holds at most this many file descriptors (its socket's mailbox, its monitor's two, its
# listener, its connection); the process keeps this many for everything else.
DESCRIPTORS_PER_LINK = 5
DESCRIPTORS_KEPT = 256


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def parse_size(text: str, what: str) -> int:
    """Bytes from "268435456", "256M", "1.5G", "64k" (powers of 1024); ValueError naming `what`."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", text)
    if not match:
        raise ValueError(f"{what}: expected a size such as 268435456, 256M or 2G, got {text[:80]!r}")
    number, unit = match.groups()
    try:  # exact: a float would round a large size, and overflow on one of hundreds of digits
        size = int(Fraction(number) * (1 << (10 * " KMGT".index(unit.upper() or " "))))
    except ValueError:  # more digits than Python converts
        raise ValueError(f"{what}: expected a size such as 268435456, 256M or 2G, got {text[:80]!r}") from None
    if size <= 0:
        raise ValueError(f"{what}: expected a size above 0, got {text[:80]!r}")
    return size


_PORT_PATTERN = re.compile(r"[0-9*?\[\]!^-]+")  # a port's digits, and the wildcards that may stand for some


def endpoint_pattern(pattern: str) -> str:
    """A pattern of endpoints a server may reach, as the endpoints it is matched against are
    written: a bare HOST:PORT is tcp://HOST:PORT, as a remote stage's bare host is. ValueError
    for one that no endpoint could match."""
    if not isinstance(pattern, str):
        raise ValueError(f"expected a pattern as text, got {shown(pattern)}")
    whole = pattern if "://" in pattern else f"tcp://{pattern}"
    scheme, _, rest = whole.partition("://")
    host, colon, port = rest.rpartition(":")
    printable = rest.isprintable() and " " not in rest  # as every endpoint is
    tcp = scheme == "tcp" and host and colon and ";" not in rest and _PORT_PATTERN.fullmatch(port) and \
        (not port.isdigit() or 1 <= int(port) <= 65535)
    if printable and (tcp or scheme in ("ipc", "inproc") and rest):
        return whole
    raise ValueError(f"expected a pattern of endpoints, tcp://HOST:PORT (or HOST:PORT), ipc://NAME or inproc://NAME, "
                     f"with * ? [...]; got {shown(pattern)}")


def most_links() -> int:
    """The links this process can serve at once: what its file descriptors (its soft limit, which
    the ZeroMQ context raises to the hard one) and its ZeroMQ sockets (three per ZeroMQ link)
    allow."""
    sockets = _native.zmq_max_sockets()  # makes the context, which raises the limit first
    descriptors = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if descriptors == resource.RLIM_INFINITY:
        descriptors = 1 << 20
    return max(1, min((descriptors - DESCRIPTORS_KEPT) // DESCRIPTORS_PER_LINK, sockets // 3))


def default_memory_budget() -> int:
    """A server's default budget: a quarter of this machine's memory, at most 2 GiB."""
    return min(2 * GIB, physical_memory() // 4)


@dataclass(frozen=True)
class ServerPolicy:
    """A server's rules for its clients. None for a limit: its default, as each field says."""

    allow_kinds: frozenset[str] = frozenset()  # kinds built besides the C built-in ones (Python kinds)
    allow_every_kind: bool = False  # every kind registered in this process (a run's node: the run's own code)
    allow_remote: tuple[str, ...] = ()  # patterns of the endpoints a client's remote stage may reach (endpoint_pattern)
    memory_budget: int | None = None  # the bytes all clients' stages may hold: default_memory_budget()
    client_memory_budget: int | None = None  # the bytes one client's stages may hold: a quarter of the above
    builds_per_client: int = 8  # builds of one client run at once; more wait their turn
    waiting_builds_per_client: int = 64  # builds of one client that may wait; more are refused
    max_builds: int = 64  # builds of all clients run at once (each on a thread); more are refused
    links_per_client: int | None = None  # links one client may hold: 256, at most half of max_links
    max_links: int | None = None  # links all clients may hold: most_links()
    fair_share: bool = True  # a client holds at most half of the links the others leave, so that a newcomer finds one

    def __post_init__(self) -> None:
        for name in ("builds_per_client", "waiting_builds_per_client", "max_builds"):
            if getattr(self, name) < 1:
                raise ValueError(f"server policy: {name} must be at least 1, got {getattr(self, name)}")
        if self.builds_per_client >= self.max_builds:
            raise ValueError(f"server policy: builds_per_client ({self.builds_per_client}) must be below "
                             f"max_builds ({self.max_builds}), so that one client cannot take every build")
        patterns = []
        for number, pattern in enumerate(self.allow_remote):
            try:
                patterns.append(endpoint_pattern(pattern))
            except ValueError as e:
                raise ValueError(f"server policy: allow_remote[{number}]: {e}") from None
        object.__setattr__(self, "allow_remote", tuple(patterns))
        unknown = sorted(set(self.allow_kinds) - set(kinds()))
        if unknown:
            raise ValueError(f"server policy: allow_kinds: unknown stage kind(s) {', '.join(map(repr, unknown))} "
                             f"(known: {', '.join(sorted(kinds()))})")

    @classmethod
    def for_run_nodes(cls) -> "ServerPolicy":
        """A node's server, whose clients are the other nodes and the ranks of its own run: what
        the run's map asks of it (traces on its links, Python kinds of its own code, a BUILD from
        every rank at once) is granted, up to half of this machine's memory."""
        budget = physical_memory() // 2
        return cls(allow_every_kind=True, memory_budget=budget, client_memory_budget=budget, builds_per_client=32,
                   waiting_builds_per_client=4096, max_builds=128, links_per_client=most_links(), fair_share=False)

    def limits(self) -> "Limits":
        """The numbers, defaults filled in."""
        memory = self.memory_budget or default_memory_budget()
        links = self.max_links or most_links()
        per_client = min(self.links_per_client or min(256, max(1, links // 2)), links)
        return Limits(memory, min(self.client_memory_budget or memory // 4, memory), links, per_client)

    def may_build(self, spec: StageSpec) -> bool:
        info = kinds().get(spec.kind)
        return info is not None and (info.python_class is None or self.allow_every_kind or spec.kind in self.allow_kinds)


@dataclass(frozen=True)
class Limits:
    memory_budget: int
    client_memory_budget: int
    max_links: int
    links_per_client: int
