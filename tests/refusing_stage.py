"""A stage kind written in Python that refuses a move of a negative value, saying which: a failure
below a stage, for the tests of how it reaches the caller."""

import paths


@paths.stage_kind("test-no-negatives")
class NoNegatives:
    def move(self, below, t):
        if t[0] < 0:
            raise ValueError(f"no negatives here, got {t[0]}")
        below.move(t)
