"""The model: paths as specs, stage kinds and their roles, cluster maps, placement, plans.

Pure descriptions; nothing here builds a stage or starts a process.
"""

from ..lazy_package import submodules_on_first_use

__getattr__ = submodules_on_first_use(__name__)
