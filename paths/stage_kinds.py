"""Stage kinds as Python sees them: the C registry, plus kinds written in Python, and the
checking of a stage spec against its kind before anything is built.

Every message names the stage, the parameter and the valid choices, so a broken path fails
before a single stage exists. `id` is accepted by every kind: it only keeps otherwise-equal
stages apart when paths merge, and never reaches the stage itself.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

from . import _native
from .path_spec import StageSpec

# Parameters every kind accepts that the builder uses itself rather than passing on.
BUILDER_PARAMS = ("id",)

# Parameters the builder fills in itself for some kinds; a user does not give them.
FILLED_BY_BUILDER = {"remote": ("format", "path")}

_PY_TYPES = {"int": (int,), "float": (int, float), "str": (str,)}


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


@dataclass(frozen=True)
class KindInfo:
    name: str
    doc: str
    params: dict[str, ParamInfo]
    pass_through: bool
    python_class: type | None = None  # set for kinds written in Python


def _native_kinds() -> dict[str, KindInfo]:
    kinds = {}
    for name, entry in _native.stage_kinds().items():
        params = {
            pname: ParamInfo(
                pname,
                p["type"],
                p["required"],
                p["default"],
                p["min"],
                p["max"],
                tuple(p["choices"]) if p["choices"] else None,
                p["doc"],
            )
            for pname, p in entry["params"].items()
            if pname not in FILLED_BY_BUILDER.get(name, ())
        }
        kinds[name] = KindInfo(name, entry["doc"], params, entry["pass_through"])
    return kinds


_KINDS: dict[str, KindInfo] = _native_kinds()

# Kinds the builder itself understands (for example `remote`) register here, so validation and
# `paths kinds` see them like any other.
_SPECIAL_KINDS: dict[str, KindInfo] = {}


def register_special_kind(info: KindInfo) -> None:
    _SPECIAL_KINDS[info.name] = info


def kinds() -> dict[str, KindInfo]:
    """Every known stage kind by name: built-in C kinds, special kinds and Python kinds."""
    return {**_KINDS, **_SPECIAL_KINDS}


def stage_kind(name: str) -> Callable[[type], type]:
    """Register a class as a stage kind written in Python (the slow path: every operation takes
    the GIL). The class is constructed with the stage's keyword parameters and may define
    move(below, t), observe(below), observe_at(below, index), first(below), last(below),
    delta(below, bound), axe(below, index); `below` is a handle on the caller's link to the next
    stage, whose blocking calls wait no longer than the caller's timeout (a TimeoutError they
    raise ends the caller's call as a timeout). Operations it does not define pass straight through.
    """

    def register(cls: type) -> type:
        if name in _KINDS or name in _SPECIAL_KINDS:
            raise ValueError(f"stage_kind({name!r}): a built-in stage kind has that name")
        for op, default in _PASS_THROUGH_DEFAULTS.items():
            if not hasattr(cls, op):
                setattr(cls, op, default)
        params = {}
        for pname, p in inspect.signature(cls.__init__).parameters.items():
            if pname == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            required = p.default is inspect.Parameter.empty
            params[pname] = ParamInfo(pname, "any", required, None if required else p.default)
        doc = inspect.getdoc(cls) or f"Python stage {cls.__name__}"
        _SPECIAL_KINDS[name] = KindInfo(name, doc, params, True, cls)
        return cls

    return register


_PASS_THROUGH_DEFAULTS = {
    "move": lambda self, below, t: below.move(t),
    "observe": lambda self, below: below.observe(),
    "observe_at": lambda self, below, index: below.observe(index),
    "first": lambda self, below: below.first(),
    "last": lambda self, below: below.last(),
    "delta": lambda self, below, bound: below.delta(bound),
    "axe": lambda self, below, index: below.axe(index),
}


def _describe(spec: StageSpec) -> str:
    return f"stage {spec}"


def check_spec(spec: StageSpec) -> KindInfo:
    """Check one spec against its kind; raise ValueError/TypeError naming stage and parameter."""
    known = kinds()
    info = known.get(spec.kind)
    if info is None:
        raise ValueError(
            f"unknown stage kind {spec.kind!r} in {_describe(spec)} "
            f"(valid kinds: {', '.join(sorted(known))})"
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
                f"{_describe(spec)}: missing parameter {name!r} ({param.type}: {param.doc})"
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
