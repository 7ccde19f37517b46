"""The `paths` command line: one module per subcommand family.
"""

from ..lazy_package import submodules_on_first_use

__getattr__ = submodules_on_first_use(__name__)
