"""Path specs: the plain, hashable description of a path before anything is built.

A path is a list of stage specs read from the calling thread down to the element, so list
order is call order (as in a middleware list).  `stage()` makes one spec, `make_path()` a whole
path.  Specs are values: two specs with the same kind and parameters are equal, which is what
lets `build_path` merge the paths of many threads into one tree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

from .shown import shown


@dataclass(frozen=True)
class StageSpec:
    """One stage of a path: a kind name and its keyword parameters (sorted, hashable)."""

    kind: str
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, name: str, default: Any = None) -> Any:
        for key, value in self.params:
            if key == name:
                return value
        return default

    def replace(self, **changes: Any) -> "StageSpec":
        """A copy with some parameters changed (None removes a parameter)."""
        merged = dict(self.params)
        for key, value in changes.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return StageSpec(self.kind, tuple(sorted(merged.items())))

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params)
        return f"{self.kind}({args})"


@dataclass(frozen=True)
class PathSpec:
    """A whole path: stages from the caller (index 0) down to the element (last)."""

    stages: tuple[StageSpec, ...]

    def __iter__(self):
        return iter(self.stages)

    def __len__(self) -> int:
        return len(self.stages)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return PathSpec(self.stages[index])
        return self.stages[index]

    def __str__(self) -> str:
        return " -> ".join(str(s) for s in self.stages)


def stage(kind: str, **params: Any) -> StageSpec:
    """Describe one stage: `stage("reduce-sum", num_threads=4, id="g0")`."""
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"stage(): kind must be a non-empty string, got {kind!r}")
    for key, value in params.items():
        try:
            hash(value)
        except TypeError:  # a spec is a key of the stages built from it (equal remainders merge)
            raise TypeError(f"stage {kind!r}: parameter {key!r}: expected a value that does not change (an int, "
                            f"float, str, bool, None, or a tuple of those), got a {type(value).__name__}: "
                            f"{shown(value)}") from None
    return StageSpec(kind, tuple(sorted(params.items())))


def make_path(*stages: StageSpec | Iterable[StageSpec]) -> PathSpec:
    """Compose stage specs, caller first and element last, into a path spec.

    Nested lists and other paths are flattened, so partial paths compose:
    `make_path(stage("trace", file="t.bin"), rest_of_path)`.
    """
    flat: list[StageSpec] = []
    for item in stages:
        if isinstance(item, StageSpec):
            flat.append(item)
        elif isinstance(item, (PathSpec, list, tuple)):
            flat.extend(make_path(*item).stages)
        else:
            raise TypeError(f"make_path(): expected stage(...) specs, got {item!r}")
    if not flat:
        raise ValueError("make_path(): a path needs at least one stage, ending in stage('core', ...)")
    return PathSpec(tuple(flat))


SPEC_VERSION = 1
_SCALARS = (int, float, str)
CROSSED_MAX = 64  # servers a path may go through, as a BUILD names them
PATH_STAGES_MAX = 256  # stages of a path (a tree's deepest path has a few dozen)
SERVER_ID_MAX = 64
_DOCUMENT_KEYS = frozenset({"version", "path", "crossed", "through"})


class _KeyTwice(ValueError):
    pass


def _object(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object whose keys are all different: one key given twice (which would silently
    keep its last value) makes the spec ambiguous."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _KeyTwice(f"key {key!r} given twice in one object")
        seen.add(key)
    return dict(pairs)


def path_to_json(path: PathSpec, crossed: tuple[str, ...] = (), through: tuple[str, ...] = ()) -> str:
    """The path as the text a remote stage sends to its server (data only: kinds and scalars),
    with the ids of the servers it went through on its way: since its last sum (`crossed`), and in
    all (`through`); none: not said."""
    stages = []
    for s in path.stages:
        for key, value in s.params:
            if isinstance(value, bool) or not isinstance(value, _SCALARS):
                raise TypeError(f"stage {s}: parameter {key!r} must be an int, float or str to cross a remote stage")
        stages.append([s.kind, dict(s.params)])
    document = {"version": SPEC_VERSION, "path": stages, **({"crossed": list(crossed)} if crossed else {}),
                **({"through": list(through)} if through else {})}
    return json.dumps(document, separators=(",", ":"))


def path_from_json(text: str | bytes) -> PathSpec:
    """Parse what path_to_json wrote; ValueError naming what is wrong for anything else."""
    return build_request_from_json(text)[0]


def build_request_from_json(text: str | bytes) -> tuple[PathSpec, tuple[str, ...], tuple[str, ...]]:
    """What path_to_json wrote: the path and the servers it went through (since its last sum, and
    in all); ValueError naming what is wrong for anything else."""
    try:
        document = json.loads(text, object_pairs_hook=_object)
    except _KeyTwice as e:
        raise ValueError(f"path spec: {e}") from None
    except (ValueError, RecursionError) as e:
        raise ValueError(f"path spec: not JSON ({e})") from None
    version = document.get("version") if isinstance(document, dict) else None
    if type(version) is not int or version != SPEC_VERSION:  # true and 1.0 equal 1 in Python, not here
        raise ValueError(f"path spec: expected an object with version {SPEC_VERSION}")
    if unknown := sorted(set(document) - _DOCUMENT_KEYS):
        raise ValueError(f"path spec: unknown key {shown(unknown[0])} (valid: {', '.join(sorted(_DOCUMENT_KEYS))})")
    stages = document.get("path")
    if not isinstance(stages, list) or not stages:
        raise ValueError("path spec: expected 'path': a non-empty list of [kind, {params}]")
    specs = []
    for item in stages:
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str)
                or not isinstance(item[1], dict)):
            raise ValueError(f"path spec: expected [kind, {{params}}], got {item!r:.80}")
        for key, value in item[1].items():
            if isinstance(value, bool) or not isinstance(value, _SCALARS):
                raise ValueError(f"path spec: stage {item[0]!r} parameter {key!r} must be an int, float or str")
        specs.append(StageSpec(item[0], tuple(sorted(item[1].items()))))  # a parameter may be named "kind"
    return make_path(*specs), _server_ids(document, "crossed"), _server_ids(document, "through")


def _server_ids(document: dict, field: str) -> tuple[str, ...]:
    ids = document.get(field, [])
    if (not isinstance(ids, list) or len(ids) > CROSSED_MAX
            or not all(isinstance(c, str) and 0 < len(c) <= SERVER_ID_MAX for c in ids)):
        raise ValueError(f"path spec: expected {field!r}: a list of at most {CROSSED_MAX} server ids (strings of 1 "
                         f"to {SERVER_ID_MAX} characters)")
    return tuple(ids)
