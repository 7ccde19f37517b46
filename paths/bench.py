"""The C benchmark kernels, with results as objects: `paths.bench.gsum` and `paths.bench.mcpi`.

Each kernel runs one C pthread per handle with the GIL released; Python only hands over the
handles and reads the results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from . import _native


@dataclass
class GSumResult:
    """Per-round latencies in microseconds, timed by thread 0 (as the paper's Figure 3)."""

    latencies: list[float]
    seconds: float
    bad_totals: int = 0
    threads: int = 0

    @property
    def median_us(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[len(ordered) // 2]


@dataclass
class MCPiResult:
    pi: float
    hits: int
    darts: int
    seconds: float
    threads: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def darts_per_second(self) -> float:
        return self.darts / self.seconds if self.seconds > 0 else float("inf")


def gsum(handles: Sequence, iters: int, contributors: int | None = None, timeout: float = 60.0,
         pin: bool = False) -> GSumResult:
    """Run GSum: each handle's thread does `move(i); observe()` for i < iters and checks every
    total against i * contributors (default: the number of handles). Raises on a wrong total.

    `pin=True` binds thread t of n to the (t * cpus // n)-th CPU this process may use: the
    threads of one group of a tree share a CPU, and no thread wanders between CPUs."""
    raw = _native.bench.gsum(list(handles), iters, contributors, timeout, pin)
    result = GSumResult(raw["latencies"], raw["seconds"], raw["bad_totals"], len(handles))
    if result.bad_totals:
        raise AssertionError(f"gsum: {result.bad_totals} rounds returned a wrong total")
    return result


def mcpi(handles: Sequence, darts: int, seed: int = 12345, timeout: float = 60.0,
         total_darts: int | None = None, pin: bool = False) -> MCPiResult:
    """Run MCPi: `darts` split evenly over the handles' threads, one global sum of the hits.
    `total_darts` is the darts of every process feeding the sum (default: `darts`); `pin` as
    for gsum."""
    raw = _native.bench.mcpi(list(handles), darts, seed, timeout, pin)
    everything = total_darts if total_darts is not None else darts
    return MCPiResult(4.0 * raw["hits"] / everything, raw["hits"], darts, raw["seconds"], len(handles))
