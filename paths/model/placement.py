"""Placement: which node runs each thread, from a cluster map and a thread count.

The built-in policies are Slurm's task distributions over the map's nodes, in map order:
`block` (fill a node up to its CPU count before the next) and `cyclic` (one thread per node in
turn, skipping nodes already full); the paper's names for them, `bucket` and `even`, are
aliases.  Nodes with `cpus: 0` get no threads.  With more threads than CPUs the same order starts over from the beginning, and a
`PlacementWarning` says the nodes are oversubscribed.

Any other policy is a function `func(cluster_map, n_threads) -> list[str]` (one node name per
thread), given directly or named `pkg.mod:func` / `pkg.mod.func`; its answer is checked.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence, Union

from .named_function import DOTTED_NAME, import_function, raised_where
from .shown import shown

if TYPE_CHECKING:
    from .cluster_map import ClusterMap, Node

Policy = Callable[["ClusterMap", int], Sequence[str]]


MAX_THREADS = 1 << 20  # threads of one run (placement deals them out one by one)


class PlacementWarning(UserWarning):
    """More threads than CPUs: some nodes run more threads than they have CPUs."""


@contextlib.contextmanager
def placement_warnings_said(who: str, say: bool = True) -> Iterator[None]:
    """The PlacementWarnings of what runs inside, each said once on stderr as one line
    `WHO: warning: ...` (none when not `say`: someone said them already)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PlacementWarning)
        yield
    for message in dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, PlacementWarning)):
        if say:
            print(f"{who}: warning: {message}", file=sys.stderr)


def bucket(cluster_map: ClusterMap, n_threads: int) -> list[str]:
    """Slurm *block*: fill each node up to its CPU count before the next one."""
    slots = [node.name for node in _runners(cluster_map) for _ in range(node.cpus)]
    return _deal(cluster_map, slots, n_threads)


def even(cluster_map: ClusterMap, n_threads: int) -> list[str]:
    """Slurm *cyclic*: one thread per node in turn, skipping nodes that are full."""
    runners = _runners(cluster_map)
    rounds = max(node.cpus for node in runners)
    slots = [node.name for turn in range(rounds) for node in runners if node.cpus > turn]
    return _deal(cluster_map, slots, n_threads)


BUILTIN_POLICIES: dict[str, Policy] = {"block": bucket, "cyclic": even, "bucket": bucket, "even": even}
SLURM_NAMES = {"bucket": "block", "even": "cyclic"}  # the names runs report and compare


def canonical_policy(name: Optional[str]) -> Optional[str]:
    """The name a run knows a policy by: a built-in one's Slurm name (bucket is block, even is
    cyclic), else the name given (None: none given)."""
    return SLURM_NAMES.get(name, name) if name else name


def resolve_policy(name: str) -> Policy:
    """The policy function named `name`: a built-in name or a dotted name, imported."""
    if name in BUILTIN_POLICIES:
        return BUILTIN_POLICIES[name]
    if not DOTTED_NAME.fullmatch(name):
        raise ValueError(
            f"unknown policy {shown(name)}: expected 'block', 'cyclic' (or their aliases 'bucket', 'even') "
            "or a function named 'pkg.mod:func' or 'pkg.mod.func'"
        )
    return import_function(name, "policy")


def place(
    cluster_map: ClusterMap, n_threads: int, policy: Union[str, Policy, None] = None
) -> list[str]:
    """The node name of each thread 0..n_threads-1; `policy` defaults to the map's."""
    from .cluster_map import checked_map  # which imports this module

    checked_map(cluster_map, "place")
    if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
        raise ValueError(f"n_threads: expected a positive integer, got {n_threads!r}")
    if n_threads > MAX_THREADS:
        raise ValueError(f"n_threads: expected at most {MAX_THREADS} threads, got {n_threads}")
    policy = cluster_map.policy if policy is None else policy
    func = resolve_policy(policy) if isinstance(policy, str) else policy
    try:
        placements = func(cluster_map, n_threads)
    except Exception as error:  # a policy of the user's own: say what it raised, and where
        raise ValueError(f"{_where(cluster_map, policy_name(cluster_map, policy))}: raised "
                         f"{raised_where(error)}") from error
    return _checked(cluster_map, n_threads, policy_name(cluster_map, policy), placements)


def policy_name(cluster_map: ClusterMap, policy: Union[str, Policy, None]) -> str:
    """How to call a policy in messages: its name, a function's qualified name, or the map's."""
    if policy is None:
        return cluster_map.policy
    return canonical_policy(policy) if isinstance(policy, str) else getattr(policy, "__qualname__", repr(policy))


def _runners(cluster_map: ClusterMap) -> list[Node]:
    return [node for node in cluster_map.nodes if node.cpus > 0]


def _deal(cluster_map: ClusterMap, slots: list[str], n_threads: int) -> list[str]:
    if n_threads > len(slots):
        warnings.warn(
            PlacementWarning(
                f"{n_threads} threads on map {shown(cluster_map.name)} with {len(slots)} CPUs: "
                "placement wraps around, nodes are oversubscribed"
            ),
            stacklevel=4,
        )
    return [slots[thread % len(slots)] for thread in range(n_threads)]


def _where(cluster_map: ClusterMap, policy_name: str) -> str:
    """Where a message about a policy points: the map's `policy:` line when it is the map's."""
    line = cluster_map.line_of("policy") if policy_name == cluster_map.policy else None
    if line is not None:
        return f"{cluster_map.source}:{line}: policy: {shown(policy_name)}"
    return f"policy {shown(policy_name)} (map {cluster_map.source})"


def _checked(
    cluster_map: ClusterMap, n_threads: int, policy_name: str, placements: object
) -> list[str]:
    where = _where(cluster_map, policy_name)
    if isinstance(placements, str) or not isinstance(placements, Sequence):
        raise ValueError(f"{where}: expected a list of node names, got {placements!r}")
    if len(placements) != n_threads:
        raise ValueError(
            f"{where}: expected {n_threads} node names (one per thread), got {len(placements)}"
        )
    cpus = {node.name: node.cpus for node in cluster_map.nodes}
    for thread, node in enumerate(placements):
        if not isinstance(node, str) or node not in cpus:
            raise ValueError(f"{where}: thread {thread} placed on {node!r}, not a node of the map")
        if cpus[node] == 0:
            raise ValueError(
                f"{where}: thread {thread} placed on {node!r}, which has cpus: 0 (runs no threads)"
            )
    return list(placements)
