"""A stage kind written in Python, for a quick experiment: it scales every tuple moved through
it. Python stages are the slow path (each operation takes the GIL); the built-in stages are C.
"""

import paths
from paths import build_path, make_path, stage


@paths.stage_kind("scale")
class Scale:
    """Multiplies each moved value by `factor`; every other operation passes straight through."""

    def __init__(self, factor=2):
        self.factor = factor

    def move(self, below, t):
        below.move(tuple(v * self.factor for v in t))


handle = build_path(make_path(stage("scale", factor=10), stage("core", name="SCALED", format="qd")))
handle.move((4, 0.5))
print(f"moved (4, 0.5) through scale(factor=10): the element holds {handle.observe(0)}")
paths.show(handle, counters=True)
