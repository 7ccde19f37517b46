"""A map run: a kernel (GSum, MCPi or your own) on a cluster map, over a range of thread counts,
repeated.

For each thread count the map gives a placement; the node processes (launcher) each run the
kernel on their threads, and every thread acquires its elements through the acquire hook, so
the paths of all threads merge into trees across the nodes. Each run (a thread count, a repeat)
works on fresh elements: element NAME of the kernel is NAME.<threads>.<repeat>. The node
processes are started once and serve every run; a count's handles are dropped after its runs.
What the threads report (paths_report) comes back here, as each run's columns.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..runtime.acquire_hook import named_hook, reachable_nodes
from ..model.cluster_map import ClusterMap
from ..runtime.kernel import Kernel, load_kernel
from .launcher import LaunchError, NodeProcesses, trace_dir_options
from ..model.reduction_tree import ReductionPlan, plan_reduction
from ..runtime.process_context import BARRIER_ELEMENT, Tracing


@dataclass
class Measurement:
    """One run of one thread count: the columns its threads reported (each the mean over the
    threads that reported it), `value` the first of them. GSum: microseconds per global sum
    (the median round, timed by thread 0). MCPi: seconds, and the pi it found."""

    kernel: str
    threads: int
    repeat: int
    nodes: int
    value: float
    columns: dict[str, float] = field(default_factory=dict)

    @property
    def pi(self) -> Optional[float]:
        return self.columns.get("pi")


@dataclass
class RunReport:
    measurements: list[Measurement] = field(default_factory=list)
    counters: dict[int, dict[str, list]] = field(default_factory=dict)  # threads -> node -> stages


@dataclass
class RunSettings:
    kernel: str  # gsum, mcpi, FILE.so:SYMBOL or pkg.mod:func
    thread_counts: list[int]
    policy: Optional[str] = None
    max_fanin: Optional[int] = None
    repeat: int = 5
    rounds: int = 1000  # gsum's argument
    darts: int = 10_000_000  # mcpi's argument
    launch: Optional[str] = None
    timeout: float = 120.0
    collect_counters: bool = False
    trace_dir: Optional[str] = None  # trace every caller and every link into this folder
    pin: bool = False  # bind threads to CPUs (and local node processes to shares of the CPUs)
    args: dict[str, str] = field(default_factory=dict)  # --arg key=value, what paths_arg returns
    sums: tuple[str, ...] = ()  # elements to reduce as sums, besides the map's and the kernel's own
    acquire: Optional[str] = None  # the acquire hook, pkg.mod:func (default: the map's)
    release: Optional[str] = None  # the release hook
    tree_form: Optional[str] = None  # how the nodes' partial sums meet (cluster_map.TREE_FORMS; default: the map's)


def plans_for(cluster_map: ClusterMap, settings: RunSettings) -> dict[int, ReductionPlan]:
    """Every thread count's placement and sum tree (the barrier's: the shape of every sum of the
    run), made (and so checked) before any process starts."""
    return {n: plan_reduction(cluster_map, n, (BARRIER_ELEMENT, "q"), policy=settings.policy,
                              max_fanin=settings.max_fanin, form=settings.tree_form)
            for n in settings.thread_counts}


# The most seconds a kernel is given as its timeout: about 31 years, whose nanoseconds (what a
# C kernel waits for, as int64_t) still fit; a longer --timeout (inf: none) is no limit to it.
KERNEL_TIMEOUT_MAX = 1e9

def still_running(kernel: Kernel, hooks: tuple[str, ...] = ()) -> str:
    """What a user can do about a run whose nodes did not answer in time; `hooks`: the run's own
    acquire and release hooks (the kernel's calls run them), which may be what waits."""
    in_hooks = f", or in the hook {' or '.join(hooks)} that its paths_acquire or paths_release runs" if hooks else ""
    if kernel.builtin:
        return (f"the kernel was still running (a run may take twice --timeout){in_hooks}: raise --timeout, or give "
                f"it less to do (--{kernel.builtin.setting})")
    return (f"the kernel was still running (a run may take twice --timeout), perhaps in a call that waits with no "
            f"timeout{in_hooks}: give its waits the timeout it gets as arg 'timeout' (--timeout, in seconds), or "
            "raise --timeout")


def kernel_args(kernel: Kernel, settings: RunSettings, repeat: int) -> dict[str, str]:
    """What paths_arg gives the kernel: the run's timeout (at most KERNEL_TIMEOUT_MAX) and repeat
    (0, 1, ...: MCPi seeds its darts with it), a built-in kernel's setting (--rounds, --darts),
    then --arg, which wins."""
    args = {"timeout": str(min(settings.timeout, KERNEL_TIMEOUT_MAX)), "repeat": str(repeat)}
    if kernel.builtin:
        args[kernel.builtin.setting] = str(getattr(settings, kernel.builtin.setting))
    return {**args, **settings.args}


def tracing(kernel: Kernel, settings: RunSettings) -> Optional[Tracing]:
    """With --trace: every caller and link traced, into files named after the kernel and the run,
    each holding what a run of GSum of the largest thread count records (2 events per round and
    thread)."""
    if not settings.trace_dir:
        return None
    capacity = min(1 << 22, 2 * max(settings.thread_counts) * max(settings.rounds, 1) + 16)
    return Tracing(os.path.abspath(settings.trace_dir), trace_prefix(kernel), capacity)


def trace_prefix(kernel: Kernel) -> str:
    """The kernel's trace files start with this: its name, or its symbol or function."""
    return kernel.name.rpartition(":")[2]


def checked_kernel(cluster_map: ClusterMap, settings: RunSettings) -> Kernel:
    """The kernel, with the hooks checked, before any process starts (a C kernel's library must
    load within the run's timeout)."""
    kernel = load_kernel(settings.kernel, timeout=min(settings.timeout, KERNEL_TIMEOUT_MAX))
    named_hook(settings.acquire or cluster_map.acquire, "acquire")
    named_hook(settings.release or cluster_map.release, "release")
    return kernel


def run_experiment(cluster_map: ClusterMap, settings: RunSettings,
                   progress: Callable[[int, int], None] = lambda threads, repeat: None,
                   report: Optional[RunReport] = None) -> RunReport:
    """Runs the kernel for every thread count and repeat; `report` (a new one when None) holds
    each run's measurement as soon as it is made, so a run that fails or is interrupted later
    keeps those made before."""
    kernel = checked_kernel(cluster_map, settings)
    plans = plans_for(cluster_map, settings)
    nodes = reachable_nodes(cluster_map, plans.values())
    hooks = tuple(hook for hook in (settings.acquire or cluster_map.acquire, settings.release or cluster_map.release)
                  if hook)
    report = RunReport() if report is None else report
    node_options = trace_dir_options(settings.trace_dir)
    context = {"op": "context", "map": cluster_map.text, "source": cluster_map.source,
               "kernel": kernel.location, "kernel_name": kernel.name,
               "sums": sorted(set(settings.sums) | set(kernel.sums)), "policy": settings.policy,
               "max_fanin": settings.max_fanin, "tree_form": settings.tree_form, "acquire": settings.acquire,
               "release": settings.release,
               "tracing": tracing(kernel, settings)}
    with NodeProcesses(cluster_map, nodes, settings.launch, node_options, pin=settings.pin,
                       start_timeout=settings.timeout) as processes:
        processes.request_all({node: context for node in nodes}, settings.timeout)
        for n, plan in plans.items():
            threads_of = {node: [i for i, p in enumerate(plan.placements) if p == node] for node in nodes}
            busy = [node for node in nodes if threads_of[node]]
            for r in range(settings.repeat):
                requests = {node: {"op": "run", "threads": threads_of[node], "placements": plan.placements,
                                   "tag": f"{n}.{r}", "args": kernel_args(kernel, settings, r), "pin": settings.pin,
                                   "spans_processes": len(busy) > 1} for node in busy}
                answers = processes.request_all(requests, settings.timeout * 2, what=f"for kernel {kernel.name} to end",
                                                if_late=still_running(kernel, hooks))
                report.measurements.append(_measurement(kernel, n, r, len(busy), answers))
                progress(n, r)
            if settings.collect_counters:
                tags = [f"{n}.{r}" for r in range(settings.repeat)]  # those of this count's runs
                answers = processes.request_all({node: {"op": "counters", "tags": tags} for node in nodes})
                report.counters[n] = {node: a["stages"] for node, a in answers.items()}
            released = processes.request_all({node: {"op": "release", "settle": settings.timeout if settings.trace_dir
                                                      else 0} for node in nodes}, settings.timeout * 2)
            lost = [f"node {node}: {failure}" for node, a in released.items() for failure in a["trace_failures"]]
            if lost:
                raise LaunchError("traces lost:\n  " + "\n  ".join(lost))
    return report


def mean(values: list[float]) -> float:
    """The mean of reported values, exact where fsum is; inf or nan where the values hold them, and
    the mean of values whose sum passes the largest float, never an exception."""
    try:
        return math.fsum(values) / len(values)
    except OverflowError:  # their sum passes the largest float; their mean, of values scaled to 1 or less, not
        largest = max(abs(v) for v in values)
        return largest * (math.fsum(v / largest for v in values) / len(values))
    except ValueError:  # inf and -inf among them
        return math.nan


def _measurement(kernel: Kernel, threads: int, repeat: int, nodes: int, answers: dict) -> Measurement:
    """The run's columns: each the mean over the threads that reported it, in the order of the
    threads and of their reports."""
    reported: dict[str, list[float]] = {}
    for thread, reports in sorted((int(t), r) for answer in answers.values() for t, r in answer["reports"].items()):
        for name, value in reports:
            reported.setdefault(name, []).append(value)
    columns = {name: mean(values) for name, values in reported.items()}
    value = next(iter(columns.values()), math.nan)
    return Measurement(kernel.name, threads, repeat, nodes, value, columns)
