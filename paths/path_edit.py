"""Editing path specs by role, as tools that rewrite paths need: put a stage on top of a path,
or before every stage of a kind (a trace before each remote), or make a path that came from a
remote client safe to build here. Every function returns a new PathSpec; specs are values and
are never changed in place."""

from __future__ import annotations

import hashlib
import os

from .path_spec import PathSpec, StageSpec, stage


def insert_top(path: PathSpec, new: StageSpec) -> PathSpec:
    """`new` becomes the caller's first stage."""
    return PathSpec((new,) + path.stages)


def insert_before(path: PathSpec, kind: str, new: StageSpec) -> PathSpec:
    """`new` goes just before every stage of `kind` (e.g. a trace before each remote)."""
    stages: list[StageSpec] = []
    for spec in path.stages:
        if spec.kind == kind:
            stages.append(new)
        stages.append(spec)
    return PathSpec(tuple(stages))


def with_traces(path: PathSpec, node: str, directory: str, prefix: str, capacity: int) -> PathSpec:
    """`path`, from a caller on `node`, with a trace stage on top (its callers on the node) and
    one before each remote (the round trips of that link), each writing
    `<prefix>-<node>-callers|link-<hash of the rest>.bin`: equal rests (merging paths) share one.
    A trace built here writes into `directory`; one past a remote is built by that server and
    gets a bare name, which the server places in its own --trace-dir."""
    stages: list[StageSpec] = []
    built_here = True
    for i, spec in enumerate(path.stages):
        if i == 0 or spec.kind == "remote":
            rest = hashlib.sha1(repr(path.stages[i:]).encode()).hexdigest()[:8]
            name = f"{prefix}-{node}-{'callers' if i == 0 else 'link'}-{rest}.bin"
            stages.append(stage("trace", file=os.path.join(directory, name) if built_here else name, node=node,
                                capacity=capacity))
        stages.append(spec)
        if spec.kind == "remote":
            node, built_here = spec.param("host"), False
    return PathSpec(tuple(stages))


def confine_trace_files(path: PathSpec, directory: str | None) -> PathSpec:
    """The path with every trace file placed in `directory`. A path that comes from elsewhere
    (a remote client) must not choose where this process writes: a trace file must be a bare
    file name, and with no directory, trace stages are refused."""
    stages = []
    for spec in path.stages:
        if spec.kind == "trace":
            name = spec.param("file", "")
            if directory is None:
                raise ValueError(f"stage {spec}: this server writes no trace files (start it with --trace-dir DIR)")
            if not name or os.path.basename(name) != name or name in (".", ".."):
                raise ValueError(f"stage {spec}: a trace file sent to a server must be a bare file name, got {name!r}")
            spec = spec.replace(file=os.path.join(directory, name))
        stages.append(spec)
    return PathSpec(tuple(stages))


# What a path from a remote client may ask of this process at most.
CLIENT_LIMITS = {("remote", "timeout_ms"): 60_000, ("trace", "capacity"): 1 << 22}


def client_path(path: PathSpec, trace_dir: str | None) -> PathSpec:
    """A path a server received, made safe to build: trace files kept in trace_dir, and no
    stage asking for more than CLIENT_LIMITS (a longer wait for a server further down, a larger
    trace buffer) than the server grants."""
    stages = []
    for spec in confine_trace_files(path, trace_dir).stages:
        for (kind, param), most in CLIENT_LIMITS.items():
            value = spec.param(param)
            if spec.kind == kind and isinstance(value, int) and value > most:
                raise ValueError(f"stage {spec}: {param} may be at most {most} in a path sent to a server")
        stages.append(spec)
    return PathSpec(tuple(stages))
