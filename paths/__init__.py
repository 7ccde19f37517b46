"""PATHS: Python-configured paths of stackable C stages over the PastSet tuple space.

    import paths
    ps = paths.PastSet()
    e = ps.enter("jobs", "qd")
    e.move((5, 2.5)); e.observe()      # -> (5, 2.5)

    from paths import stage, make_path, build_path
    p = make_path(stage("reduce-sum", num_threads=4), stage("core", name="GSUM", format="q"))
    h = build_path(p)                  # one handle per thread
    paths.show(h)
"""

from . import bench
from ._native import AxedError, Element, Handle, PastSet
from .build import build_path, default_pastset
from .path_spec import PathSpec, StageSpec, make_path, stage
from .stage_kinds import kinds, stage_kind
from .tree_view import render_tree, show, to_dot

__all__ = [
    "AxedError",
    "Element",
    "Handle",
    "PastSet",
    "PathSpec",
    "StageSpec",
    "bench",
    "build_path",
    "default_pastset",
    "kinds",
    "make_path",
    "render_tree",
    "show",
    "stage",
    "stage_kind",
    "to_dot",
]
