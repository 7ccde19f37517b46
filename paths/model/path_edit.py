"""Editing path specs by role, as tools that rewrite paths need: put a stage on top of a path,
or before every stage of a kind or a role (a trace before each stage whose rest is built
elsewhere: each remote), or make a path that came from a remote client safe to build here.
Roles are read from kinds(), never from kind names. Every function returns a new PathSpec;
specs are values and are never changed in place."""

from __future__ import annotations

import hashlib
import os
from typing import Callable, Union

from .path_spec import PathSpec, StageSpec, stage
from .stage_kinds import KindInfo, kinds


def insert_top(path: PathSpec, new: StageSpec) -> PathSpec:
    """`new` becomes the caller's first stage."""
    return PathSpec((new,) + path.stages)


def insert_before(path: PathSpec, where: Union[str, Callable[[KindInfo], bool]], new: StageSpec) -> PathSpec:
    """`new` goes just before every stage of kind `where`, or (a function of a KindInfo) of the
    role it picks: insert_before(p, rest_elsewhere, trace) puts a trace before each remote."""
    picks = (lambda info: info.name == where) if isinstance(where, str) else where
    known = kinds()
    stages: list[StageSpec] = []
    for spec in path.stages:
        if picks(known[spec.kind]):
            stages.append(new)
        stages.append(spec)
    return PathSpec(tuple(stages))


def rest_elsewhere(info: KindInfo) -> bool:
    """The role of a stage whose rest of the path is built elsewhere (remote)."""
    return info.rest_at is not None


def with_traces(path: PathSpec, node: str, directory: str, prefix: str, capacity: int) -> PathSpec:
    """`path`, from a caller on `node`, with a trace stage on top (its callers on the node) and
    one before each stage whose rest is built elsewhere (the round trips of that link), each
    writing `<prefix>-<node>-callers|link-<hash of the rest>.bin`: equal rests (merging paths)
    share one. A trace built here writes into `directory`; one past such a stage is built where
    that stage names (a server) and gets a bare name, which the server places in its own
    --trace-dir."""
    known = kinds()
    stages: list[StageSpec] = []
    built_here = True
    for i, spec in enumerate(path.stages):
        rest_at = known[spec.kind].rest_at
        if i == 0 or rest_at is not None:
            rest = hashlib.sha1(repr(path.stages[i:]).encode()).hexdigest()[:8]
            name = f"{prefix}-{node}-{'callers' if i == 0 else 'link'}-{rest}.bin"
            stages.append(stage("trace", file=os.path.join(directory, name) if built_here else name, node=node,
                                capacity=capacity))
        stages.append(spec)
        if rest_at is not None:
            node, built_here = spec.param(rest_at), False
    return PathSpec(tuple(stages))


def confine_trace_files(path: PathSpec, directory: str | None) -> PathSpec:
    """The path with every file a stage built here writes (a trace's) placed in `directory`; the
    stages past the first whose rest is built elsewhere (a remote) are the server's there to
    place. A path that comes from elsewhere (a remote client) must not choose where this process
    writes: such a file must be a bare file name, and with no directory, stages that write files
    are refused."""
    known = kinds()
    stages = []
    for i, spec in enumerate(path.stages):
        before = known.get(path.stages[i - 1].kind) if i else None
        if before and before.rest_at is not None:
            return PathSpec(tuple(stages) + path.stages[i:])
        for param in known[spec.kind].written_files if spec.kind in known else ():
            name = spec.param(param, "")
            if directory is None:
                raise ValueError(f"stage {spec}: this server writes no trace files: name a folder for them "
                                 "(paths serve --trace-dir DIR, paths launch --trace-dir DIR, paths run --trace DIR; "
                                 "servers the ranks host under srun or mpirun: PATHS_TRACE_DIR)")
            if not isinstance(name, str) or not name or os.path.basename(name) != name or name in (".", ".."):
                raise ValueError(f"stage {spec}: a trace file sent to a server must be a bare file name, got {name!r}")
            spec = spec.replace(**{param: os.path.join(directory, name)})
        stages.append(spec)
    return PathSpec(tuple(stages))


# The longest wait (a parameter whose role is "wait ms") a path from a remote client may ask of
# this process: the remote stage's timeout_ms, for one, holds a build of this server that long.
CLIENT_WAIT_MS = 60_000


def client_path(path: PathSpec, trace_dir: str | None) -> PathSpec:
    """A path a server received, made safe to build: trace files kept in trace_dir (those of the
    stages it builds: past its next remote, the server there keeps them), and no wait longer than
    CLIENT_WAIT_MS. (What a stage holds in memory is the server's budget's to refuse.)"""
    stages = []
    for spec in confine_trace_files(path, trace_dir).stages:
        info = kinds().get(spec.kind)
        for name, param in (info.params.items() if info else ()):
            value = spec.param(name)
            if param.role == "wait ms" and isinstance(value, int) and value > CLIENT_WAIT_MS:
                raise ValueError(f"stage {spec}: {name} may be at most {CLIENT_WAIT_MS} in a path sent to a server")
        stages.append(spec)
    return PathSpec(tuple(stages))
