"""GSum and MCPi on handles you built, with results as objects: `paths.bench.gsum` and
`paths.bench.mcpi`.

Both run the kernels of `paths run` (benchmarks/gsum.c and mcpi.c, on paths.h alone), one C
thread per handle with the GIL released: thread t's paths_acquire gets handles[t]. Python only
hands over the handles and reads the results. `kernel=` runs another build of the same kernel
(paths.runtime.kernel.load_kernel("FILE.so:gsum")).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from .. import _native
from ..runtime.build import build_path
from ..runtime.kernel import Kernel, load_kernel, run_kernel
from ..model.path_spec import make_path, stage
from .experiment import KERNEL_TIMEOUT_MAX

LATENCIES = "gsum.latencies"  # where the GSum kernel's thread 0 leaves each round's latency


@dataclass
class GSumResult:
    """Per-round latencies in microseconds, timed by thread 0 (as the paper's Figure 3). A run
    with a wrong total raises instead of returning."""

    latencies: list[float]
    seconds: float
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


def _whole(function: str, name: str, value, least: int = -2**63) -> None:
    """ValueError naming `function`'s parameter `name` unless value is a whole number from least
    to 2**63-1 (the kernels' int64_t), so that no caller is told about an --arg."""
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value < 2**63:
        low = "-2**63" if least == -2**63 else least
        raise ValueError(f"{function}: expected {name}, a whole number from {low} to 2**63-1, got {value!r}")


def _timeout(function: str, timeout) -> None:
    """ValueError naming `function`'s timeout unless it is None or seconds >= 0."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not timeout >= 0):
        raise ValueError(f"{function}: expected timeout, None or a number of seconds >= 0, got {timeout!r}")


def _listed(function: str, handles) -> list:
    """The handles given as a list (any iterable but text), or TypeError naming `function`."""
    try:
        if not isinstance(handles, (str, bytes, _native.Handle)):
            return list(handles)
    except TypeError:
        pass
    raise TypeError(f"{function}: expected handles, a list of Handles (build_path gives them), got {handles!r:.100}")


def _on_handles(kernel: Kernel, handles: list, args: dict, pin: bool, others: Optional[dict] = None,
                format: Optional[str] = None):
    """Run `kernel` with thread t's acquire answered by handles[t] (or by others[element]); a
    timeout of None (forever) is the kernels' -1, a longer one than KERNEL_TIMEOUT_MAX is cut to
    it (as paths run's). `format`: the tuples the handles must carry (a built-in kernel's sum)."""
    if not handles:
        raise ValueError(f"{kernel.name}: expected at least one handle")
    for i, handle in enumerate(handles):
        if not isinstance(handle, _native.Handle):
            raise TypeError(f"{kernel.name}: handles[{i}] is {handle!r}, not a Handle (build_path gives them)")
        first = next(j for j, other in enumerate(handles) if other is handle)
        if first < i:
            raise ValueError(f"{kernel.name}: handles[{i}] is handles[{first}] again: each thread needs a handle "
                             "of its own (one build_path each)")
        if format is not None and handle.stage.format != format:
            raise ValueError(f"{kernel.name}: handles[{i}] is a path to format {handle.stage.format!r}: the kernel "
                             f"sums {format!r} tuples")
    timeout = args["timeout"]
    args = dict(args, timeout=-1 if timeout is None else min(timeout, KERNEL_TIMEOUT_MAX))
    given = dict(others or {})
    n = len(handles)

    def acquire(thread: int, element: str, format: str):
        return given[element] if element in given else handles[thread]

    return run_kernel(kernel, range(n), n, "local", args, acquire, lambda thread, handle: None, pin=pin)


def gsum(handles: Sequence, iters: int, contributors: int | None = None, timeout: float = 60.0,
         pin: bool = False, kernel: Optional[Kernel] = None) -> GSumResult:
    """Run GSum: each handle's thread does `move(i); observe()` for i < iters and checks every
    total against i * contributors (default: the number of handles). Raises on a wrong total,
    or the first thread's failure; each wait of a thread lasts at most `timeout` seconds, so the
    others of a thread that failed (a stage of its path raised) wait that long for its part of
    the round before the failure is raised: a short timeout says it sooner.

    `pin=True` binds thread t of n to the (t * cpus // n)-th CPU this process may use: the
    threads of one group of a tree share a CPU, and no thread wanders between CPUs."""
    _whole("gsum", "iters", iters, 1)
    if contributors is not None:
        _whole("gsum", "contributors", contributors, 1)
    _timeout("gsum", timeout)
    handles = _listed("gsum", handles)
    out = build_path(make_path(stage("core", name=LATENCIES, format="d")), pastset=_native.PastSet())
    args = {"rounds": iters, "contributors": contributors or len(handles), "timeout": timeout,
            "latencies": LATENCIES}
    run = _on_handles(kernel or load_kernel("gsum"), handles, args, pin, {LATENCIES: out},
                      format=None if kernel else "q")
    return GSumResult([out.observe(i)[0] for i in range(iters)], run.seconds, len(handles))


def mcpi(handles: Sequence, darts: int, seed: int = 12345, timeout: float = 60.0,
         total_darts: int | None = None, pin: bool = False, kernel: Optional[Kernel] = None) -> MCPiResult:
    """Run MCPi: `darts` split evenly over the handles' threads, one global sum of the hits.
    `total_darts` is the darts of every process feeding the sum (default: `darts`); `pin` as
    for gsum."""
    _whole("mcpi", "darts", darts, 1)
    everything = total_darts if total_darts is not None else darts
    _whole("mcpi", "total_darts", everything, darts)
    _whole("mcpi", "seed", seed)
    _timeout("mcpi", timeout)
    args = {"darts": darts, "total_darts": everything, "seed": seed, "timeout": timeout}
    run = _on_handles(kernel or load_kernel("mcpi"), _listed("mcpi", handles), args, pin,
                      format=None if kernel else "q")
    reported = dict(run.reports[0])
    return MCPiResult(reported["pi"], round(reported["pi"] * everything / 4), darts, reported["seconds"],
                      len(handles))
