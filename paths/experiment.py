"""A map run: GSum or MCPi on a cluster map, over a range of thread counts, repeated.

For each thread count the map gives a placement and every thread's path (reduction_tree); the
node processes (launcher) build those paths, which merge into one tree across the nodes, and
run the C kernel on them; the results come back here. The node processes are started once and
serve every thread count; each count gets its own element, so its tree is a fresh one.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from .cluster_map import ClusterMap
from .launcher import LaunchError, NodeProcesses
from .path_spec import PathSpec, path_to_json, stage
from .reduction_tree import ReductionPlan, plan_reduction

KERNELS = ("gsum", "mcpi")


@dataclass
class Measurement:
    """One run of one thread count. GSum: microseconds per global sum (the median round, timed
    by thread 0). MCPi: seconds, and the pi it found."""

    kernel: str
    threads: int
    repeat: int
    nodes: int
    value: float
    pi: Optional[float] = None


@dataclass
class RunReport:
    measurements: list[Measurement] = field(default_factory=list)
    counters: dict[int, dict[str, list]] = field(default_factory=dict)  # threads -> node -> stages


@dataclass
class RunSettings:
    kernel: str
    thread_counts: list[int]
    policy: Optional[str] = None
    max_fanin: Optional[int] = None
    repeat: int = 5
    rounds: int = 1000
    darts: int = 10_000_000
    launch: Optional[str] = None
    timeout: float = 120.0
    collect_counters: bool = False
    trace_dir: Optional[str] = None  # trace every caller and every link into this folder
    pin: bool = False  # bind threads to CPUs (and local node processes to shares of the CPUs)


def plans_for(cluster_map: ClusterMap, settings: RunSettings) -> dict[int, ReductionPlan]:
    """Every thread count's plan, made (and so checked) before any process starts."""
    return {n: plan_reduction(cluster_map, n, (f"{settings.kernel.upper()}.{n}", "q"),
                              policy=settings.policy, max_fanin=settings.max_fanin)
            for n in settings.thread_counts}


def darts_per_thread(darts: int, threads: int) -> list[int]:
    return [darts // threads + (1 if i < darts % threads else 0) for i in range(threads)]


def run_experiment(cluster_map: ClusterMap, settings: RunSettings,
                   progress: Callable[[int, int], None] = lambda threads, repeat: None) -> RunReport:
    plans = plans_for(cluster_map, settings)
    nodes = list(dict.fromkeys(node for plan in plans.values() for node in plan.stages_by_node()))
    report = RunReport()
    node_options = ("--trace-dir", os.path.abspath(settings.trace_dir)) if settings.trace_dir else ()
    with NodeProcesses(cluster_map, nodes, settings.launch, node_options, pin=settings.pin) as processes:
        for n, plan in plans.items():
            threads_of = {node: [i for i, p in enumerate(plan.placements) if p == node] for node in nodes}
            thread_paths = traced_paths(plan, settings) if settings.trace_dir else plan.paths
            processes.request_all({node: {"op": "build", "paths": [path_to_json(thread_paths[i]) for i in threads]}
                                   for node, threads in threads_of.items()}, settings.timeout)
            busy = [node for node in nodes if threads_of[node]]
            for r in range(settings.repeat):
                report.measurements.append(_measure(processes, settings, plan, threads_of, busy, r))
                progress(n, r)
            if settings.collect_counters:
                answers = processes.request_all({node: {"op": "counters"} for node in nodes})
                report.counters[n] = {node: a["stages"] for node, a in answers.items()}
            released = processes.request_all({node: {"op": "release", "settle": settings.timeout if settings.trace_dir
                                                      else 0} for node in nodes}, settings.timeout * 2)
            lost = [f"node {node}: {failure}" for node, a in released.items() for failure in a["trace_failures"]]
            if lost:
                raise LaunchError("traces lost:\n  " + "\n  ".join(lost))
    return report


def traced_paths(plan: ReductionPlan, settings: RunSettings) -> list[PathSpec]:
    """Every thread's path with a trace stage on top (one per node: its threads are its callers)
    and one before each remote stage (the link's round trips), each named after its node and
    place, written into settings.trace_dir when the tree is released."""
    n = len(plan.placements)
    capacity = min(1 << 22, 2 * n * max(settings.rounds, 1) * settings.repeat + 16)
    traced = []
    for thread, path in enumerate(plan.paths):
        node = plan.placements[thread]
        stages = []
        for i, spec in enumerate(path.stages):
            if i == 0 or spec.kind == "remote":
                rest = path.stages[i:]
                tag = hashlib.sha1(repr(rest).encode()).hexdigest()[:8]
                role = "callers" if i == 0 else "link"
                # Built here: a full path. Past a remote, a server builds it: a bare name,
                # which the server places in its own --trace-dir.
                built_here = all(s.kind != "remote" for s in path.stages[:i])
                directory = os.path.abspath(settings.trace_dir) if built_here else ""
                name = f"{settings.kernel}-n{n}-{node}-{role}-{tag}.bin"
                stages.append(stage("trace", file=os.path.join(directory, name) if directory else name,
                                    node=node, capacity=capacity))
            stages.append(spec)
            if spec.kind == "remote":
                node = spec.param("host")
        traced.append(PathSpec(tuple(stages)))
    return traced


def _measure(processes: NodeProcesses, settings: RunSettings, plan: ReductionPlan, threads_of: dict,
             busy: list[str], repeat: int) -> Measurement:
    n = len(plan.placements)
    if settings.kernel == "gsum":
        request = {"op": "gsum", "rounds": settings.rounds, "contributors": n, "timeout": settings.timeout,
                   "pin": settings.pin}
        answers = processes.request_all({node: request for node in busy}, settings.timeout * 2)
        timer = plan.placements[0]  # the node of thread 0, which times the rounds
        return Measurement("gsum", n, repeat, len(busy), answers[timer]["median_us"])
    share = darts_per_thread(settings.darts, n)
    requests = {node: {"op": "mcpi", "darts": sum(share[i] for i in threads_of[node]),
                       "total_darts": settings.darts, "seed": 12345 + 7919 * repeat + index,
                       "timeout": settings.timeout, "pin": settings.pin}
                for index, node in enumerate(busy)}  # a seed of its own per node: no repeated darts
    answers = processes.request_all(requests, settings.timeout * 2)
    first = answers[plan.placements[0]]
    seconds = max(a["seconds"] for a in answers.values())
    return Measurement("mcpi", n, repeat, len(busy), seconds, first["pi"])
