"""The runtime: building paths, serving them, the acquire hook, kernels, traces, and how a
process of a run finds its map, its node servers and its peers.
"""

from ..lazy_package import submodules_on_first_use

__getattr__ = submodules_on_first_use(__name__)
