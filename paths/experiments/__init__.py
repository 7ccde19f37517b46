"""Experiments: starting the processes of a run (launcher, nodes, ranks), running kernels
on a map, and measuring them.
"""

from ..lazy_package import submodules_on_first_use

__getattr__ = submodules_on_first_use(__name__)
