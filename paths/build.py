"""build_path: turn a path spec into C stages, merging the paths of many callers into one tree.

Two specs whose remainders down to the element are equal denote the same stage, so each stage
is identified by the tuple of specs from it down to the element (its *key*). A `StageTable`
holds the live stages of one PastSet by key; building a path reuses every stage whose key is
already live and creates the rest bottom-up, then attaches a new caller at the top. Everything is
checked before anything is built: kinds, parameters, the path's shape, and fan-in.

Stages live as long as a handle (or a stage above) needs them: the table only holds weak
references, so the last handle released releases the tree, and a trace writes its file.
"""

from __future__ import annotations

import threading
import weakref
from typing import Iterator

from . import _native
from .path_spec import PathSpec, StageSpec, make_path, path_to_json
from .stage_kinds import check_spec, kinds, native_params

StageKey = tuple  # tuple[StageSpec, ...]: from a stage down to the element


class BuiltStage:
    """One live C stage, the Python object that keeps it (and the stages below it) alive."""

    __slots__ = ("key", "native", "below", "__weakref__")

    def __init__(self, key: StageKey, native: _native.Stage, below: "BuiltStage | None"):
        self.key = key
        self.native = native
        self.below = below

    @property
    def spec(self) -> StageSpec:
        return self.key[0]


class StageTable:
    """The stages built over one PastSet, found by key; where paths merge."""

    def __init__(self, pastset: _native.PastSet):
        self.pastset = pastset
        self._stages: dict[StageKey, weakref.ref] = {}
        self._handles: list[tuple[weakref.ref, StageKey, str]] = []
        self._building: dict[StageKey, threading.Event] = {}  # keys a build is creating now
        self._lock = threading.Lock()
        self._callers = 0

    def live(self, key: StageKey) -> BuiltStage | None:
        ref = self._stages.get(key)
        return ref() if ref is not None else None

    def stages(self) -> Iterator[BuiltStage]:
        for ref in list(self._stages.values()):
            built = ref()
            if built is not None:
                yield built

    def handles(self) -> Iterator[tuple[str, StageKey]]:
        for ref, key, label in list(self._handles):
            if ref() is not None:
                yield label, key

    def build(self, path: PathSpec, label: str | None = None) -> _native.Handle:
        specs = check_path(path)
        local = _local_part(specs)
        existing, created = self._reserve(specs, local)
        try:
            below = None
            for i in reversed(range(local)):
                below = existing[i] or self._create(specs[i:], below)
            with self._lock:
                label = label if label is not None else f"thread {self._callers}"
                self._callers += 1
            # Attaching (and creating a stage above a remote one) may wait for a server, maybe
            # one in this very process: the table is not locked meanwhile.
            handle = below.native.attach(label, below)
        finally:
            with self._lock:
                for key in created:
                    self._building.pop(key).set()
        with self._lock:
            self._handles = [h for h in self._handles if h[0]() is not None]
            self._handles.append((weakref.ref(handle), below.key, label))
        _HANDLE_TABLES[handle] = (self, below.key)
        return handle

    def _reserve(self, specs: StageKey, local: int) -> tuple[list, list]:
        """The live stages of the path's local part, after checking its fan-in; the keys still
        to create are marked as being built, so a concurrent build of the same key waits for
        this one instead of creating a twin."""
        while True:
            with self._lock:
                busy = next((self._building[specs[i:]] for i in range(local) if specs[i:] in self._building), None)
                if busy is None:
                    existing = [self.live(specs[i:]) for i in range(local)]
                    _check_fan_in(specs[:local], existing)
                    created = [specs[i:] for i in range(local) if existing[i] is None]
                    for key in created:
                        self._building[key] = threading.Event()
                    return existing, created
            busy.wait()

    def _create(self, key: StageKey, below: BuiltStage | None) -> BuiltStage:
        spec = key[0]
        info = check_spec(spec)
        below_native = below.native if below is not None else None
        if info.python_class is not None:
            native = _native.create_python_stage(info.python_class(**native_params(spec)), below_native)
        elif spec.kind == "remote":
            native = _native.create_stage("remote", _remote_params(key), None, self.pastset)
        else:
            native = _native.create_stage(spec.kind, native_params(spec), below_native, self.pastset)
        built = BuiltStage(key, native, below)
        with self._lock:
            self._stages = {k: r for k, r in self._stages.items() if r() is not None}
            self._stages[key] = weakref.ref(built)
        return built


# Which table and stage each live handle belongs to, for show() and to_dot().
_HANDLE_TABLES: "weakref.WeakKeyDictionary[_native.Handle, tuple[StageTable, StageKey]]" = (
    weakref.WeakKeyDictionary()
)


def check_path(path: PathSpec | StageSpec | list) -> StageKey:
    """Check every stage and the path's shape; return the specs as a key."""
    if not isinstance(path, PathSpec):
        path = make_path(path)
    specs = tuple(path.stages)
    for spec in specs:
        check_spec(spec)
    if specs[-1].kind != "core":
        raise ValueError(
            f"path {path}: the last stage must be stage('core', name=..., format=...), "
            f"got {specs[-1]}"
        )
    for spec in specs[:-1]:
        if spec.kind == "core":
            raise ValueError(f"path {path}: stage {spec} may only be the last stage")
    return specs


def _local_part(specs: StageKey) -> int:
    """How many stages are built here: up to and including the first remote stage (the rest is
    built by the server it names)."""
    for i, spec in enumerate(specs):
        if spec.kind == "remote":
            return i + 1
    return len(specs)


def _unchanged(params: dict) -> dict:
    return params


_remote_resolver = _unchanged


def set_remote_resolver(resolve) -> None:
    """Set how a remote stage's parameters are completed before it is built: resolve(params)
    returns them with `host` turned from a node name into an endpoint (and, for a map run,
    the CURVE key added). None restores the parameters as given."""
    global _remote_resolver
    _remote_resolver = resolve or _unchanged


def _remote_params(key: StageKey) -> dict:
    """A remote stage's parameters: the user's, the resolved host, the element's format and
    the path remainder the server builds."""
    params = _remote_resolver(native_params(key[0]))
    params["format"] = key[-1].param("format")
    params["path"] = path_to_json(PathSpec(key[1:]))
    return params


def _check_fan_in(specs: StageKey, existing: list[BuiltStage | None]) -> None:
    """Refuse a path that would give an existing stage one caller more than its fan-in.

    The new caller arrives at the top stage, and continues down through every stage that is
    new (a new stage attaches to the one below) or passes each caller through (trace, cache).
    """
    known = kinds()
    for i, spec in enumerate(specs):
        built = existing[i]
        if built is not None and built.native.max_links:
            fan_in, attached = built.native.max_links, built.native.link_count
            if attached >= fan_in:
                raise ValueError(
                    f"stage {spec}: fan-in {fan_in} is used up ({attached} callers attached); "
                    f"this path would be caller {attached + 1}, one too many. Build at most "
                    f"{fan_in} paths through it, or keep stages apart with id=..."
                )
        if built is not None and not known[spec.kind].pass_through:
            return


_DEFAULT_LOCK = threading.Lock()
_default_pastset: _native.PastSet | None = None


def default_pastset() -> _native.PastSet:
    """The process's own PastSet, used when build_path is given none."""
    global _default_pastset
    with _DEFAULT_LOCK:
        if _default_pastset is None:
            _default_pastset = _native.PastSet()
        return _default_pastset


def stage_table(pastset: _native.PastSet) -> StageTable:
    """The table of stages built over `pastset` (one per PastSet)."""
    with _DEFAULT_LOCK:
        table = getattr(pastset, "_stage_table", None)
        if table is None:
            table = StageTable(pastset)
            pastset._stage_table = table
        return table


def build_path(
    path: PathSpec | StageSpec | list,
    pastset: _native.PastSet | None = None,
    label: str | None = None,
) -> _native.Handle:
    """Build (or join) the stages of `path` and return a new caller's handle at its top.

    Use each handle from one thread. Paths whose remainders are equal share those stages, so
    building the same path for four threads gives one tree with four leaves.
    """
    return stage_table(pastset if pastset is not None else default_pastset()).build(path, label)


def handle_tree(handle: _native.Handle) -> tuple[StageTable, StageKey]:
    """The table and top stage key of a handle made by build_path."""
    try:
        return _HANDLE_TABLES[handle]
    except (KeyError, TypeError):
        raise TypeError(f"expected a handle returned by build_path, got {handle!r}") from None
