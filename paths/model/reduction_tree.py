"""Reduction plans: where each thread runs and the path spec each thread builds, so that the paths
of all threads merge into one reduction tree shaped by the cluster map.

Bottom up (a level with a single contributor adds no sum: there are no fan-in-1 sums):
  node     the threads of a node meet in one reduce-sum on that node, id "node:<node>"; more than
           max_fanin threads get a local sub-tree of sums under it, ids "node:<node>:<level>:<i>".
  cluster  the node partial sums of a cluster combine level by level in sums of fan-in at most
           max_fanin, ids "cluster:<cluster>:<level>:<i>", in groups of consecutive nodes in map
           order (the head's node among them where it stands).  The last level is ONE sum, id
           "cluster:<cluster>", on the cluster's head (default: its first node with threads); every
           other lives on the first node of its group that holds none yet: no node holds two.
  root     one sum of the cluster sums, id "root", on the root node; its fan-in is the number of
           clusters with threads (max_fanin does not split it), so each cluster crosses to the
           root exactly once.
  element  the core element on the home node.
With the map's tree form `allreduce` (or `allreduce-tree`) the node partial sums meet instead in
one `allreduce` stage, a member on each node with threads (the home's node first, then map order),
whose members send their partials to each other directly, by recursive doubling (or up and down a
tree of fan-in max_fanin); its group is the element's name. Every member's path then goes on to
the element (rank 0 moves the totals there). No cluster sums, no root sum: the hops between the
members must be direct (no delay or batch on their links, no zmq).
Between two stages on different nodes the path has `remote(host=<next node>)`, with the map's
`proto` for the hop when it sets one (ClusterMap.proto_between), preceded by `delay(ms,
jitter_ms)` when the hop crosses a link with a delay, and before that by `batch(max_moves,
max_bytes, flush_us)` when the link batches (a link's batch counts moves: max_bytes is the stage's
most, so that no tuple size cuts its buffers short). A thread's own hop (a thread alone on its
node) has `window=2` and a pipelined delay: its move and the observe after it share one round
trip, and cross a delayed link once each way. A batching link's hops have a pipelined delay and
a remote window of BATCHED_HOP_MOVES moves' worth of sends: no send waits for its answer.  A stage instance is
identified by the node it lives on and its specs down to the element.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterator, Optional, Union

from .cluster_map import MAX_FANIN, TREE_FORMS, ClusterMap, MapError, checked_map
from .path_spec import PathSpec, StageSpec, make_path, stage
from .placement import Policy, place, policy_name
from .shown import shown
from .stage_kinds import kinds

BATCH_BYTES_MOST = kinds()["batch"].params["max_bytes"].max  # a link's batch is counted in moves alone
WINDOW_MOST = kinds()["remote"].params["window"].max

StageKey = tuple[str, tuple[StageSpec, ...]]  # (node it lives on, specs from it to the element)
THREAD_HOP_WINDOW = 2  # a thread's move through its own hop does not wait for its answer
BATCHED_HOP_MOVES = 16384  # a batching link's remote keeps this many moves on their way (2 sends at least)


@dataclass(frozen=True)
class _Thread:
    index: int
    node: str


@dataclass(eq=False)
class _Sum:
    id: str
    node: str
    inputs: list[Union[_Sum, _Thread]]


@dataclass(frozen=True)
class ReductionPlan:
    """Where each thread runs and the path each thread builds; see the module docstring."""

    cluster_map: ClusterMap
    policy: str
    max_fanin: int
    placements: tuple[str, ...]  # node of each thread
    paths: tuple[PathSpec, ...]  # path spec of each thread
    form: str = TREE_FORMS[0]  # how the node partial sums meet (cluster_map.TREE_FORMS)

    def stages_by_node(self) -> dict[str, list[tuple[StageSpec, ...]]]:
        """The distinct stage instances on each node (in map order), as specs to the element."""
        found: dict[str, dict[tuple[StageSpec, ...], None]] = defaultdict(dict)
        for _, keys in self._keyed_paths():
            for node, specs in keys:
                found[node][specs] = None
        return {
            node.name: list(found[node.name])
            for node in self.cluster_map.nodes
            if node.name in found
        }

    def render(self) -> str:
        """A text tree from the element (top) down through the stages to the threads."""
        feeders: dict[StageKey, dict[StageKey, None]] = defaultdict(dict)
        threads_at: dict[StageKey, list[int]] = defaultdict(list)
        for thread, keys in self._keyed_paths():
            threads_at[keys[0]].append(thread)
            for child, parent in zip(keys, keys[1:]):
                feeders[parent][child] = None
        element = keys[-1]
        lines = [
            f"map {self.cluster_map.name}: {_counted(len(self.paths), 'thread')} on "
            f"{_counted(len(set(self.placements)), 'node')}, policy {self.policy}, max_fanin {self.max_fanin}"
            + ("" if self.form == TREE_FORMS[0] else f", form {self.form}"),
            _label(element),
        ]

        def draw(key: StageKey, indent: str) -> None:
            below = [(_label(child), child) for child in feeders[key]]
            if threads_at[key]:
                below.append((_thread_label(threads_at[key]), None))
            for i, (label, child) in enumerate(below):
                last = i == len(below) - 1
                lines.append(f"{indent}{'└── ' if last else '├── '}{label}")
                if child is not None:
                    draw(child, indent + ("    " if last else "│   "))

        draw(element, "")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """Graphviz DOT of the tree: a cluster box per node, edges from threads toward the element."""
        names: dict[StageKey, str] = {}
        by_node: dict[str, list[str]] = defaultdict(list)
        edges: dict[tuple[str, str], None] = {}
        for thread, keys in self._keyed_paths():
            for key in keys:
                if key not in names:
                    names[key] = f"s{len(names)}"
                    label = str(key[1][0]).replace('"', '\\"')
                    by_node[key[0]].append(f'    {names[key]} [label="{label}"];')
            by_node[self.placements[thread]].append(f'    t{thread} [shape=ellipse, label="thread {thread}"];')
            edges[(f"t{thread}", names[keys[0]])] = None
            for child, parent in zip(keys, keys[1:]):
                edges[(names[child], names[parent])] = None
        lines = ["digraph reduction {", "  rankdir=BT;", "  node [shape=box];"]
        for i, (node, body) in enumerate(by_node.items()):
            lines += [f"  subgraph cluster_{i} {{", f'    label="{node}";', *body, "  }"]
        lines += [f"  {a} -> {b};" for a, b in edges]
        lines.append("}")
        return "\n".join(lines)

    def _keyed_paths(self) -> Iterator[tuple[int, list[StageKey]]]:
        """Each thread with the stage instances of its path, first stage first: past a stage
        whose rest is built elsewhere, the node it names (a remote stage's host)."""
        known = kinds()
        for thread, (node, path) in enumerate(zip(self.placements, self.paths)):
            keys = []
            for index, spec in enumerate(path.stages):
                keys.append((node, path.stages[index:]))
                rest_at = known[spec.kind].rest_at
                if rest_at is not None:
                    node = spec.param(rest_at)
            yield thread, keys


def plan_reduction(
    cluster_map: ClusterMap,
    n_threads: int,
    element: tuple[str, str],
    *,
    policy: Union[str, Policy, None] = None,
    max_fanin: Optional[int] = None,
    form: Optional[str] = None,
) -> ReductionPlan:
    """Place the threads and give each its path of the reduction to `element` = (name, format).
    `max_fanin` and `form` (one of cluster_map.TREE_FORMS) override the map's."""
    checked_map(cluster_map, "plan_reduction")
    if not (isinstance(element, tuple) and len(element) == 2 and all(isinstance(part, str) for part in element)):
        raise TypeError(f"plan_reduction: element: expected (name, format), two strings, got {element!r:.100}")
    if max_fanin is None:
        max_fanin = cluster_map.max_fanin
    elif isinstance(max_fanin, bool) or not isinstance(max_fanin, int) or not 2 <= max_fanin <= MAX_FANIN:
        raise ValueError(f"max_fanin: expected an integer from 2 to {MAX_FANIN}, got {max_fanin!r}")
    form = cluster_map.tree_form if form is None else form
    if form not in TREE_FORMS:
        raise ValueError(f"tree form: expected one of {', '.join(TREE_FORMS)}, got {form!r}")
    placements = place(cluster_map, n_threads, policy)
    threads_on: dict[str, list[_Thread]] = defaultdict(list)
    for index, node in enumerate(placements):
        threads_on[node].append(_Thread(index, node))

    name, format_ = element
    element_stage = (stage("core", name=name, format=format_),)
    paths: dict[int, PathSpec] = {}

    def assign(part: Union[_Sum, _Thread], next_node: str, rest: tuple[StageSpec, ...]) -> None:
        """Give `part` the stages `rest` (starting on `next_node`) and the hop to reach them."""
        onward = hop(cluster_map, part.node, next_node, pipelined=isinstance(part, _Thread)) + rest
        if isinstance(part, _Thread):
            paths[part.index] = make_path(onward)
            return
        own = (stage("reduce-sum", num_threads=len(part.inputs), id=part.id),) + onward
        for child in part.inputs:
            assign(child, part.node, own)

    if form == TREE_FORMS[0]:
        assign(_sum_tree(cluster_map, threads_on, max_fanin), cluster_map.home, element_stage)
    else:
        members = [_combine(threads_on[node.name], max_fanin, f"node:{node.name}")
                   for node in cluster_map.nodes if threads_on[node.name]]
        members.sort(key=lambda part: part.node != cluster_map.home)  # rank 0 next to the element
        for rank, part in enumerate(members):
            group = _allreduce(cluster_map, name, [m.node for m in members], rank, form, max_fanin)
            assign(part, part.node, group + hop(cluster_map, part.node, cluster_map.home) + element_stage)
    return ReductionPlan(
        cluster_map,
        policy_name(cluster_map, policy),
        max_fanin,
        tuple(placements),
        tuple(paths[thread] for thread in range(n_threads)),
        form,
    )


def _unusable(cluster_map: ClusterMap, problem: str, *field: Union[str, int]) -> MapError:
    """A map that cannot carry a run's sums, named by its file and name, and by the line and the
    path of the field at fault (keys and list indexes) where its text says it."""
    line = cluster_map.line_of(*field) if field else None
    if line is None:
        return MapError(f"{cluster_map.source}: map {shown(cluster_map.name)}: {problem}")
    shown_field = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in field).lstrip(".")
    return MapError(f"{cluster_map.source}:{line}: {shown_field}: map {shown(cluster_map.name)}: {problem}")


def _sum_tree(cluster_map: ClusterMap, threads_on: dict[str, list[_Thread]], max_fanin: int) -> Union[_Sum, _Thread]:
    """The tree of sums of the form `sums`: nodes, clusters, root (see the module docstring)."""
    cluster_sums = []
    for cluster in cluster_map.clusters:
        node_sums = [
            _combine(threads_on[node.name], max_fanin, f"node:{node.name}")
            for node in cluster.nodes
            if threads_on[node.name]
        ]
        if node_sums:  # grouped in map order, the head's own with the nodes next to it
            cluster_sums.append(_combine(node_sums, max_fanin, f"cluster:{cluster.name}",
                                         cluster.head or node_sums[0].node))
    # One root sum takes every cluster sum, whatever max_fanin: one crossing per cluster.
    if len(cluster_sums) > MAX_FANIN:
        raise _unusable(cluster_map, f"threads on {len(cluster_sums)} clusters, and the root sum adds at most "
                                     f"{MAX_FANIN} cluster sums: use fewer threads or clusters")
    return _combine(cluster_sums, max(len(cluster_sums), 2), "root", cluster_map.root)


def _allreduce(cluster_map: ClusterMap, group: str, nodes: list[str], rank: int, form: str,
               max_fanin: int) -> tuple[StageSpec, ...]:
    """The allreduce stage of member `rank` of `nodes` (none for a group of one node), over
    direct hops: ipc where every hop between the members says ipc, else tcp. A hop that a link
    delays or batches, or that goes over zmq, cannot carry it: MapError naming the map's file and the
    link, or the cluster whose proto says zmq."""
    if len(nodes) == 1:
        return ()
    clusters = sorted({cluster_map.node(node).cluster for node in nodes})
    protos = set()
    for i, a in enumerate(clusters):
        for b in clusters[i:]:
            link = cluster_map.link_between(a, b)
            carrier = f"the link between clusters {a!r} and {b!r}" if a != b else f"cluster {a!r}"
            field = ("links", cluster_map.links.index(link)) if link is not None else ("clusters", a)
            if link is not None and (link.delay_ms is not None or link.batch is not None):
                raise _unusable(cluster_map, f"tree form {form}: {carrier} has a delay or a batch, which allreduce's "
                                             f"direct connections do not carry: use tree form sums on this map", *field)
            proto = cluster_map.proto_between(a, b)
            if proto == "zmq":
                raise _unusable(cluster_map, f"tree form {form}: {carrier} is on zmq (its proto), and allreduce's "
                                             f"members connect directly (tcp or ipc): use tree form sums on this map",
                                *field)
            protos.add(proto)
    params = {"group": group, "nodes": ",".join(nodes), "rank": rank}
    if form == "allreduce-tree":
        params.update(algorithm="tree", fanin=max_fanin)
    if protos == {"ipc"}:
        params["proto"] = "ipc"
    return (stage("allreduce", **params),)


def _combine(
    parts: list[Union[_Sum, _Thread]], max_fanin: int, top_id: str, top_node: Optional[str] = None
) -> Union[_Sum, _Thread]:
    """Sum `parts` level by level with fan-in <= max_fanin until one part is left.

    The final sum lives on `top_node` if given; every other sum on the first node of its group's
    parts (theirs, then those below them) that holds no sum of these yet, so that no node holds
    two where the parts span enough nodes (n parts on n nodes make at most n - 1 sums), else on
    its first part's node (parts on one node).
    """
    level = 0
    taken = {top_node}
    while len(parts) > 1:
        level += 1
        groups = _split(parts, max_fanin)
        final = len(groups) == 1
        summed: list[Union[_Sum, _Thread]] = []
        for index, group in enumerate(groups):
            if len(group) == 1:
                summed.append(group[0])
                continue
            if final and top_node:
                node = top_node
            else:
                node = next((n for part in group for n in _nodes_under(part) if n not in taken), group[0].node)
            taken.add(node)
            summed.append(_Sum(top_id if final else f"{top_id}:{level}:{index}", node, group))
        parts = summed
    return parts[0]


def _nodes_under(part: Union[_Sum, _Thread]) -> Iterator[str]:
    """The nodes of a part's sub-tree: its own first, then those of its inputs in order."""
    yield part.node
    for child in part.inputs if isinstance(part, _Sum) else ():
        yield from _nodes_under(child)


def _split(parts: list, max_fanin: int) -> list[list]:
    """Consecutive groups of at most max_fanin parts, as even in size as possible."""
    count = math.ceil(len(parts) / max_fanin)
    size, larger = divmod(len(parts), count)
    groups, start = [], 0
    for index in range(count):
        end = start + size + (index < larger)
        groups.append(parts[start:end])
        start = end
    return groups


def hop(cluster_map: ClusterMap, from_node: str, to_node: str, pipelined: bool = False) -> tuple[StageSpec, ...]:
    """The stages that carry an operation from one node to the next stage's node: none on the
    same node, else `remote` (with the map's `proto` for the hop, if it sets one), after a
    `delay` where the map lists the link with one, after a `batch` where the link batches (a
    buffer of moves crosses the link, and its delay, once). Every path the default acquire hook
    makes crosses nodes this way, sums and elements at their homes alike. `pipelined` (a thread's own
    hop to its sum, which always observes after it moves): window=2 and a pipelined delay, so that
    the move and the observe share one round trip and one crossing each way, as a sum's exchange
    does on the hops below it. A batching link's sends are asynchronous, as ARMI's aggregated calls
    are: its delay is a wire and its remote's window holds BATCHED_HOP_MOVES moves (at least two
    sends), so that a send waits for no answer."""
    if from_node == to_node:
        return ()
    ends = cluster_map.node(from_node).cluster, cluster_map.node(to_node).cluster
    proto = cluster_map.proto_between(*ends)
    link = cluster_map.link_between(*ends)
    batched = link is not None and link.batch is not None
    window = THREAD_HOP_WINDOW if pipelined else 1
    if batched:
        window = max(window, 2, min(BATCHED_HOP_MOVES // link.batch, WINDOW_MOST))
    remote = stage("remote", host=to_node, **({"proto": proto} if proto else {}),
                   **({"window": window} if window > 1 else {}))
    if link is None:
        return (remote,)
    timer = {"flush_us": link.flush_us} if link.flush_us else {}
    batch = (stage("batch", max_moves=link.batch, max_bytes=BATCH_BYTES_MOST, **timer),) if batched else ()
    wire = {"pipelined": 1} if pipelined or batched else {}  # moves cross as on a wire, not one at a time
    delay = (stage("delay", ms=link.delay_ms, jitter_ms=link.jitter_ms, **wire),) if link.delay_ms is not None else ()
    return batch + delay + (remote,)


def _counted(count: int, thing: str) -> str:
    return f"{count} {thing}{'s' if count != 1 else ''}"


def _label(key: StageKey) -> str:
    node, specs = key
    return f"{specs[0]}  on {node}"


def _thread_label(threads: list[int]) -> str:
    runs: list[list[int]] = []
    for thread in threads:
        if runs and thread == runs[-1][-1] + 1:
            runs[-1].append(thread)
        else:
            runs.append([thread])
    text = ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}" for run in runs)
    return f"thread{'s' if len(threads) > 1 else ''} {text}"
