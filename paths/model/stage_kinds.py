"""Stage kinds as Python sees them: the C registry, plus kinds written in Python, and the
checking of a stage spec against its kind before anything is built.

Every message names the stage, the parameter and the valid choices, so a broken path fails
before a single stage exists. `id` is accepted by every kind: it only keeps otherwise-equal
stages apart when paths merge, and never reaches the stage itself.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable

from .. import _native
from .path_spec import StageSpec

# Parameters every kind accepts that the builder uses itself rather than passing on.
BUILDER_PARAMS = ("id",)

_PY_TYPES = {"int": (int,), "float": (int, float), "str": (str,)}

# A kind's name, as the built-in ones are: what a path, `paths kinds` and `--allow-kinds
# MODULE:KIND,...` can name.
KIND_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class ParamInfo:
    name: str
    type: str
    required: bool
    default: Any
    min: int | None = None
    max: int | None = None
    choices: tuple[str, ...] | None = None
    doc: str = ""
    role: str = "given"  # "given"; "built": filled in by the builder; "written file": a file the stage
    # writes; "wait ms": a wait in ms a server caps in its clients' paths; "nodes": nodes it reaches,
    # comma-separated, which a run's builder turns into their servers' endpoints


@dataclass(frozen=True)
class KindInfo:
    """A stage kind as its record says: its parameters and its roles, which is all a builder,
    a planner or an editor of paths reads (none of them tests a kind's name)."""

    name: str
    doc: str
    params: dict[str, ParamInfo]  # what a path's author gives
    role: str  # "joining": the stage is one caller below; "pass-through": its callers stay distinct
    needs_below: bool  # built above a stage; else it ends what is built here
    rest_at: str | None = None  # the parameter naming where the rest of the path is built (remote: host)
    built_params: tuple[str, ...] = ()  # filled in by the builder: "format", "path"
    python_class: type | None = None  # set for kinds written in Python

    @property
    def pass_through(self) -> bool:
        return self.role == "pass-through"

    @property
    def ends_path(self) -> bool:
        """The last stage of a path: the element itself (core)."""
        return not self.needs_below and self.rest_at is None

    @property
    def node_params(self) -> tuple[str, ...]:
        """The parameters that name nodes the stage reaches (an allreduce stage's members)."""
        return tuple(p.name for p in self.params.values() if p.role == "nodes")

    @property
    def written_files(self) -> tuple[str, ...]:
        """The parameters that name a file the stage writes."""
        return tuple(p.name for p in self.params.values() if p.role == "written file")


def _native_kinds() -> dict[str, KindInfo]:
    kinds = {}
    for name, entry in _native.stage_kinds().items():
        params = {
            pname: ParamInfo(pname, p["type"], p["required"], p["default"], p["min"], p["max"],
                             tuple(p["choices"]) if p["choices"] else None, p["doc"], p["role"])
            for pname, p in entry["params"].items()
        }
        built = tuple(pname for pname, p in params.items() if p.role == "built")
        kinds[name] = KindInfo(name, entry["doc"], {k: v for k, v in params.items() if k not in built}, entry["role"],
                               entry["needs_below"], entry["rest_at"], built)
    return kinds


_KINDS: dict[str, KindInfo] = _native_kinds()

# Kinds written in Python, registered by @stage_kind.
_PYTHON_KINDS: dict[str, KindInfo] = {}


def kinds() -> dict[str, KindInfo]:
    """Every known stage kind by name, with its role: built-in C kinds and Python kinds."""
    return {**_KINDS, **_PYTHON_KINDS}


def stage_kind(name: str) -> Callable[[type], type]:
    """Register a class as a pass-through stage kind written in Python (the slow path: every
    operation takes the GIL). The class is constructed with the stage's keyword parameters.
    Each operation kind it has a method named after (the table of paths._native.operations())
    is answered by that method, called with `below`, a handle on the caller's link to the next
    stage for that call only, whose blocking calls wait no longer than the caller's timeout:

        move(below, t), observe(below) -> t, observe_at(below, index) -> t, first(below) -> int,
        last(below) -> int, delta(below, bound or None) -> int, axe(below, index),
        exchange(below, t) -> t, move_many(below, [t, ...]),
        observe_range(below, index, count) -> [t, ...] (1 to count of them), flush(below), fence(below)

    The others pass straight through, except exchange and move_many without a method of their
    own, which come as the moves and observes they are made of when it has a method for one of
    those (a move_many as its moves to a move method); else they too pass through whole. A TimeoutError a method
    raises ends the caller's call as a timeout, and a NotImplementedError refuses the operation
    (PS_ENOTSUP); what the method moved through `below` before it raised counts as done (an
    exchange's move, a first part of a move_many), so a caller going on does not move it again.

    The name is a letter, then up to 63 letters, digits, '-', '_' or '.'. The stage's parameters
    are those __init__ names (each a keyword; one without a default is required): a path may give
    no other, so __init__ takes no **kwargs, and none named `id` (the builder's).
    """
    if not isinstance(name, str) or not KIND_NAME.fullmatch(name):
        raise ValueError(f"stage_kind({name!r}): expected a name of a letter, then up to 63 letters, digits, "
                         "'-', '_' or '.'")

    def register(cls: type) -> type:
        if not isinstance(cls, type):
            raise TypeError(f"stage_kind({name!r}): expected a class to register, got {cls!r:.200}")
        if name in _KINDS:
            raise ValueError(f"stage_kind({name!r}): a built-in stage kind has that name")
        if name in _PYTHON_KINDS:
            raise ValueError(f"stage_kind({name!r}): {_PYTHON_KINDS[name].python_class.__qualname__} is registered "
                             "under that name already")
        params = {}
        signature = inspect.signature(cls.__init__) if cls.__init__ is not object.__init__ else inspect.Signature()
        for pname, p in list(signature.parameters.items())[1:]:  # after the instance's own, whatever its name
            if p.kind == p.VAR_KEYWORD:
                raise TypeError(f"stage_kind({name!r}): {cls.__qualname__}.__init__ takes **{pname}: name each "
                                "parameter the stage takes in its signature (`paths kinds` lists them)")
            if p.kind == p.VAR_POSITIONAL:
                continue
            if p.kind == p.POSITIONAL_ONLY:
                raise TypeError(f"stage_kind({name!r}): {cls.__qualname__}.__init__'s parameter {pname!r} is "
                                "positional only: a path gives a stage its parameters by keyword")
            if pname in BUILDER_PARAMS:
                raise TypeError(f"stage_kind({name!r}): {cls.__qualname__}.__init__ names {pname!r}, which is the "
                                "builder's (it keeps otherwise-equal stages apart and never reaches a stage): "
                                "name the parameter otherwise")
            required = p.default is inspect.Parameter.empty
            params[pname] = ParamInfo(pname, "any", required, None if required else p.default)
        doc = inspect.getdoc(cls) or f"Python stage {cls.__name__}"
        _PYTHON_KINDS[name] = KindInfo(name, doc, params, "pass-through", True, python_class=cls)
        return cls

    return register


def _describe(spec: StageSpec) -> str:
    return f"stage {spec}"


def check_spec(spec: StageSpec) -> KindInfo:
    """Check one spec against its kind; raise ValueError/TypeError naming stage and parameter."""
    known = kinds()
    info = known.get(spec.kind)
    if info is None:
        raise ValueError(
            f"unknown stage kind {spec.kind!r} in {_describe(spec)} "
            f"(valid kinds: {', '.join(sorted(known))}; a kind written in Python is known where its module was "
            f"imported, at a server with paths serve --allow-kinds MODULE:NAME)"
        )
    given = dict(spec.params)
    for name, value in given.items():
        if name in BUILDER_PARAMS:
            continue
        param = info.params.get(name)
        if param is None:
            valid = ", ".join(sorted(info.params) + list(BUILDER_PARAMS))
            raise ValueError(f"{_describe(spec)}: unknown parameter {name!r} (valid: {valid})")
        _check_value(spec, param, value)
    for name, param in info.params.items():
        if param.required and name not in given:
            raise ValueError(
                f"{_describe(spec)}: missing parameter {name!r} ({param.type}{': ' + param.doc if param.doc else ''})"
            )
    return info


def _check_value(spec: StageSpec, param: ParamInfo, value: Any) -> None:
    if param.type == "any":
        return
    if isinstance(value, bool) or not isinstance(value, _PY_TYPES[param.type]):
        raise TypeError(
            f"{_describe(spec)}: parameter {param.name!r} must be {param.type}, "
            f"got {type(value).__name__} {value!r}"
        )
    if isinstance(value, str) and "\0" in value:  # C would cut the text there
        raise ValueError(f"{_describe(spec)}: parameter {param.name!r} must not contain a NUL byte, got {value!r}")
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: no C text holds it
            raise ValueError(f"{_describe(spec)}: parameter {param.name!r} must be text UTF-8 can hold (no lone "
                             f"surrogate), got {value!r}") from None
    if param.min is not None and not param.min <= value <= param.max:
        raise ValueError(
            f"{_describe(spec)}: parameter {param.name!r} must be between "
            f"{param.min} and {param.max}, got {value!r}"
        )
    if param.choices is not None and value not in param.choices:
        raise ValueError(
            f"{_describe(spec)}: parameter {param.name!r} must be one of "
            f"{', '.join(param.choices)}, got {value!r}"
        )


def native_params(spec: StageSpec) -> dict[str, Any]:
    """The parameters a stage itself receives (the builder's own, like `id`, removed)."""
    return {k: v for k, v in spec.params if k not in BUILDER_PARAMS}
