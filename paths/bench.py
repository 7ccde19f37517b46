"""`import paths.bench` gives paths.experiments.bench itself, under this name too."""

import sys

from .experiments import bench

sys.modules[__name__] = bench
