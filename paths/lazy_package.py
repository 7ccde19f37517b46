"""Packages whose submodules load when a program first names them: after `import paths`,
`paths.model.placement.place` reaches its module as it did when the package loaded every module
at once, and the `paths` command starts without loading what it does not run."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def submodules_on_first_use(package: str) -> Callable[[str], object]:
    """A module's __getattr__ for `package`: an attribute it lacks is its submodule of that name,
    loaded now (AttributeError when there is none)."""
    def __getattr__(name: str):
        if not name.startswith("__"):
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"{package}.{name}":
                    raise  # the submodule is there, and something it imports is not
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
