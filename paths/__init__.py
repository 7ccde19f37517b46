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

Beyond the C core, names load on first use, so `import paths` (and the `paths` command, which
hears Ctrl-C once it runs) starts at once.
"""

import importlib

# The C core loads now: from `import paths` on, a program's own C extension module finds paths_*.
try:
    from ._native import AxedError, Element, Handle, PastSet, fence
except ImportError as e:  # Ctrl-C while the core initializes is the interrupt, not a broken install
    if isinstance(e.__cause__, KeyboardInterrupt):
        raise e.__cause__ from None
    raise
from .lazy_package import submodules_on_first_use

# Each public name and the module it lives in, loaded when the name is first read.
_HOMES = {
    ".runtime.acquire_hook": ("AcquireRequest", "acquire_hook", "release_hook"),
    ".runtime.build": ("BuildContext", "build_path", "default_pastset"),
    ".model.cluster_map": ("ClusterMap", "MapError", "builtin_map", "load_map"),
    ".runtime.compile_flags": ("get_include",),
    ".model.path_spec": ("PathSpec", "StageSpec", "make_path", "stage"),
    ".model.placement": ("PlacementWarning", "place"),
    ".model.reduction_tree": ("ReductionPlan", "plan_reduction"),
    ".runtime.process_context": ("acquire", "runtime_info"),
    ".runtime.server": ("PathServer", "read_key_pair"),
    ".runtime.server_policy": ("ServerPolicy",),
    ".model.stage_kinds": ("kinds", "stage_kind"),
    ".runtime.tree_view": ("render_tree", "show", "to_dot"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}
_submodule = submodules_on_first_use(__name__)  # paths.bench, paths.model, ...

__all__ = sorted(("AxedError", "Element", "Handle", "PastSet", "bench", "fence", *_HOME_OF))


def __getattr__(name: str):
    if name not in _HOME_OF:
        return _submodule(name)
    value = getattr(importlib.import_module(_HOME_OF[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
