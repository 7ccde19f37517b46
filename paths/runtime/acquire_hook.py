"""The acquire and release hooks: the paper's two overloadable functions.

When a kernel thread calls `paths_acquire(ctx, element, format)` (or `ctx.acquire`, or
`paths.acquire` in a program of its own), the process's runtime asks its acquire hook for the path
from that thread to the element, builds it and hands out the handle. Once per handle: nothing in
Python runs per operation.

    import paths
    from paths import make_path, stage

    @paths.acquire_hook
    def traced(request):                 # -> the PathSpec from request.thread to the element
        return make_path(stage("trace", file=f"t{request.thread}.{request.tag}.bin"), request.default())

    @paths.release_hook
    def done(request, handle):           # the kernel is done with the handle
        print(request.element, handle.stage.counters())

A map names them (`acquire: pkg.mod:traced`, `release: pkg.mod:done`), or `paths run --acquire
pkg.mod:traced --release pkg.mod:done`. The decorator marks a function as a hook; it installs
nothing by itself.

The default (`request.default()`): a sum element (the map's `elements: NAME: {reduce: sum}`, or
`paths run --sum NAME`) gets the planned reduction tree of plan_reduction, with its element at
the element's home; any other element lives at its home and is reached directly there and through
`remote` (the same hop a reduction tree takes) from other nodes. An element's home is the map's
`elements: NAME: {home: node}`, else, for a name `NAME@T`, the node of thread T (a thread's own
data, as a halo: homed where its owner runs), else the map's `home`.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from ..model.cluster_map import ClusterMap
from ..model.named_function import HOOK_MARK, import_function
from ..model.path_spec import PathSpec, make_path, stage
from ..model.placement import placement_warnings_said
from ..model.reduction_tree import ReductionPlan, hop, plan_reduction
from ..model.stage_kinds import KindInfo


@dataclass(frozen=True)
class AcquireRequest:
    """What a hook is asked: a path from `thread` (on `node`) to (element, format)."""

    element: str
    format: str
    thread: int  # 0 .. threads-1 over the whole run
    threads: int
    node: str  # the thread's node
    map: ClusterMap
    sum: bool  # the element is a sum: its paths form a reduction tree
    home: str  # the node the element lives on
    policy: Optional[str] = None  # the run's placement policy, fan-in and tree form (None: the map's)
    max_fanin: Optional[int] = None
    tree_form: Optional[str] = None
    tag: Optional[str] = None  # the run's: its elements are NAME.tag (paths run: "<threads>.<repeat>"; None: NAME)

    def default(self) -> PathSpec:
        """The path the default hook gives."""
        return default_acquire(self)


def default_acquire(request: AcquireRequest) -> PathSpec:
    """A sum: this thread's path in the reduction tree, down to the element at its home. Any
    other element: the hop from the thread's node to the element's home, then the element."""
    element = (request.element, request.format)
    if request.sum:
        at_home = dataclasses.replace(request.map, home=request.home)
        plan = _run_plan(at_home, request.threads, element, request.policy, request.max_fanin, request.tree_form)
        return plan.paths[request.thread]
    return make_path(*hop(request.map, request.node, request.home),
                     stage("core", name=request.element, format=request.format))


@functools.lru_cache(maxsize=16)
def _run_plan(cluster_map: ClusterMap, threads: int, element: tuple[str, str], policy: Optional[str],
              max_fanin: Optional[int], form: Optional[str]) -> ReductionPlan:
    """plan_reduction, made once for all the threads of a run that ask for paths to one sum (each
    plan places every thread: made per thread, a run's start-up would grow with its square)."""
    with placement_warnings_said("", say=False):  # the run's placement's, said where make_runtime ran
        return plan_reduction(cluster_map, threads, element, policy=policy, max_fanin=max_fanin, form=form)


def reachable_nodes(cluster_map: ClusterMap, plans: Iterable[ReductionPlan]) -> list[str]:
    """The nodes a run starts, in map order, and so the nodes a hook's paths may go through:
    those that run threads or host a sum of the planned trees, and every element's home."""
    plans = list(plans)
    homes = {cluster_map.home} | {element.home for element in cluster_map.elements if element.home}
    return [node.name for node in cluster_map.nodes
            if node.name in homes or any(node.name in plan.placements or node.name in plan.stages_by_node()
                                         for plan in plans)]


def served_only(resolve: Callable[[dict, KindInfo], dict], cluster_map: ClusterMap,
                served: Iterable[str]) -> Callable[[dict, KindInfo], dict]:
    """A run's `resolve` (a stage's nodes to their servers, paths/runtime/build.py) that refuses a
    node of the map the run did not start (the `served` ones, reachable_nodes): ValueError naming
    the node and those that are served, where the stage would only find no server by that name."""
    served, unserved = list(served), {node.name for node in cluster_map.nodes} - set(served)

    def resolve_served(params: dict, info: KindInfo) -> dict:
        named = [params[info.rest_at]] if info.rest_at is not None else []
        named += [node for param in info.node_params for node in (params.get(param) or "").split(",")]
        for node in named:
            if node in unserved:
                raise ValueError(f"stage '{info.name}': node {node} of map {cluster_map.name} has no server in this "
                                 f"run, which starts only the nodes its threads run on, those of its sums and its "
                                 f"elements' homes: {', '.join(served)}")
        return resolve(params, info)
    return resolve_served


def default_release(request: AcquireRequest, handle) -> None:
    """Nothing: the handle goes when the run drops it (the last one released frees the tree)."""


def acquire_hook(func: Callable[[AcquireRequest], PathSpec]) -> Callable[[AcquireRequest], PathSpec]:
    """Mark `func(request) -> PathSpec` as an acquire hook (name it in a map or with --acquire)."""
    setattr(func, HOOK_MARK, "acquire")
    return func


def release_hook(func: Callable[[AcquireRequest, object], None]) -> Callable[[AcquireRequest, object], None]:
    """Mark `func(request, handle)` as a release hook (name it in a map or with --release)."""
    setattr(func, HOOK_MARK, "release")
    return func


def named_hook(name: Optional[str], kind: str) -> Callable:
    """The hook `name` ('pkg.mod:func') names, checked to be marked as a `kind` hook ("acquire" or
    "release"); the default when name is None."""
    if name is None:
        return default_acquire if kind == "acquire" else default_release
    return import_function(name, f"{kind} hook", hook=kind)
