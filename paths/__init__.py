"""PATHS: Python-configured paths of stackable C stages over the PastSet tuple space.

    import paths
    ps = paths.PastSet()
    e = ps.enter("jobs", "qd")
    e.move((5, 2.5)); e.observe()      # -> (5, 2.5)
"""

from ._native import AxedError, Element, PastSet
from .path_spec import PathSpec, StageSpec, make_path, stage

__all__ = [
    "AxedError",
    "Element",
    "PastSet",
    "PathSpec",
    "StageSpec",
    "make_path",
    "stage",
]
