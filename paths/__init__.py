"""PATHS: Python-configured paths of stackable C stages over the PastSet tuple space.

    import paths
    ps = paths.PastSet()
    e = ps.enter("jobs", "qd")
    e.move((5, 2.5)); e.observe()      # -> (5, 2.5)

    from paths import stage, make_path, build_path
    p = make_path(stage("reduce-sum", num_threads=4), stage("core", name="GSUM", format="q"))
    h = build_path(p)                  # one handle per thread
    paths.show(h)

    m = paths.load_map("maps/paper-4w.yaml")       # or paths.builtin_map("paper-4w")
    paths.place(m, 12, policy="cyclic")             # the node of each thread
    paths.plan_reduction(m, 12, ("GSUM", "q")).paths  # every thread's path

    @paths.acquire_hook                               # how a thread reaches an element
    def traced(request): return paths.make_path(paths.stage("trace", file="t.bin"), request.default())

    paths.get_include()                               # the folder of paths.h, for C kernels
    paths.fence(handles)                              # held-back moves down and applied (batch)

    # in a program started by `paths launch`, srun or mpirun (one process per rank):
    h = paths.acquire("TOTAL", "q")                   # this rank's path, from the acquire hook
    paths.runtime_info()                              # launcher, rank, size, node, map, rendezvous
"""

import sys

from .experiments import bench
from ._native import AxedError, Element, Handle, PastSet, fence
from .runtime.acquire_hook import AcquireRequest, acquire_hook, release_hook
from .runtime.build import BuildContext, build_path, default_pastset
from .model.cluster_map import ClusterMap, MapError, builtin_map, load_map
from .runtime.compile_flags import get_include
from .model.path_spec import PathSpec, StageSpec, make_path, stage
from .model.placement import PlacementWarning, place
from .model.reduction_tree import ReductionPlan, plan_reduction
from .runtime.process_context import acquire, runtime_info
from .runtime.server import PathServer, read_key_pair
from .runtime.server_policy import ServerPolicy
from .model.stage_kinds import kinds, stage_kind
from .runtime.tree_view import render_tree, show, to_dot

# paths.bench is paths.experiments.bench: `import paths.bench` finds it under that name too.
sys.modules[f"{__name__}.bench"] = bench

__all__ = [
    "AcquireRequest",
    "AxedError",
    "BuildContext",
    "ClusterMap",
    "Element",
    "Handle",
    "MapError",
    "PastSet",
    "PathServer",
    "PathSpec",
    "PlacementWarning",
    "ReductionPlan",
    "ServerPolicy",
    "StageSpec",
    "acquire",
    "acquire_hook",
    "bench",
    "build_path",
    "builtin_map",
    "default_pastset",
    "fence",
    "get_include",
    "kinds",
    "load_map",
    "make_path",
    "place",
    "plan_reduction",
    "read_key_pair",
    "release_hook",
    "render_tree",
    "runtime_info",
    "show",
    "stage",
    "stage_kind",
    "to_dot",
]
