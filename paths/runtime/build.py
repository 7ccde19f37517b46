"""build_path: turn a path spec into C stages, merging the paths of many callers into one tree.

Two specs whose remainders down to the element are equal denote the same stage, so each stage
is identified by the tuple of specs from it down to the element (its *key*). A `BuildContext`
is everything building needs, passed explicitly to whatever builds (a server, a node, a
runtime): the PastSet the elements live in, the table of the stages built over it by key, and
how a stage whose rest is built elsewhere reaches there. Building a path reuses every stage
whose key is already live and creates the rest bottom-up, then attaches a new caller at the top.
Everything is checked before anything is built: kinds, parameters, the path's shape, and fan-in.
The builder reads each kind's roles (kinds()), never its name.

Stages live as long as a handle (or a stage above) needs them: the table only holds weak
references, so the last handle released releases the tree, and a trace writes its file.
"""

from __future__ import annotations

import atexit
import glob
import os
import threading
import traceback
import weakref
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from .. import _native
from ..model.path_spec import PATH_STAGES_MAX, PathSpec, StageSpec, make_path, path_to_json
from ..model.curve_key import is_curve_key
from ..model.named_function import raised_where
from ..model.stage_kinds import KindInfo, check_spec, kinds, native_params

if TYPE_CHECKING:
    from .client_ledger import ClientBuild

StageKey = tuple  # tuple[StageSpec, ...]: from a stage down to the element


class BuiltStage:
    """One live C stage, the Python object that keeps it (and the stages below it) alive."""

    __slots__ = ("key", "native", "below", "size", "__weakref__")

    def __init__(self, key: StageKey, native: _native.Stage, below: "BuiltStage | None", size: int):
        self.key = key
        self.native = native
        self.below = below
        self.size = size  # the bytes it holds (its kind's footprint): what a client that holds it pays

    @property
    def spec(self) -> StageSpec:
        return self.key[0]


def _unchanged(params: dict, info) -> dict:
    return params


class BuildContext:
    """What building needs besides the path: the PastSet, the table of the stages built over it
    (where the paths of many callers merge), and `resolve(params, info)`, which completes the
    parameters of a stage that reaches other nodes (`info`, its kind, says which parameters name
    them: where its rest is built, the nodes it reaches): a node's name becomes the endpoint of
    its server, a run's CURVE key is added; by default they stay as given. A process of a run
    sets `resolve` once it knows the run's servers (paths/runtime/node_servers.py), and with it
    `trusted_endpoints`, theirs, which builds for a server's clients may reach besides what the
    server allows. `curve_client` is the (public, secret) CURVE key pair its remote stages
    present to servers that authenticate their clients (None: a fresh pair per connection);
    `server_ids` name the servers that serve this context's stages, which every client's path
    sent on from here, and every joining stage's link from here, says it crossed."""

    def __init__(self, pastset: Optional[_native.PastSet] = None,
                 resolve: Optional[Callable[[dict, KindInfo], dict]] = None,
                 curve_client: Optional[tuple[str, str]] = None):
        if pastset is not None and not isinstance(pastset, _native.PastSet):
            raise TypeError(f"BuildContext: pastset: expected a paths.PastSet, got {pastset!r:.200}")
        if resolve is not None and not callable(resolve):
            raise TypeError(f"BuildContext: resolve: expected a function of (params, info), got {resolve!r:.200}")
        if curve_client is not None and not (isinstance(curve_client, tuple) and len(curve_client) == 2 and all(
                is_curve_key(key) for key in curve_client)):
            got = type(curve_client).__name__ + (f" of {len(curve_client)}" if isinstance(curve_client, tuple) else "")
            raise TypeError("BuildContext: curve_client: expected None or a (public, secret) pair of 40-character Z85 "
                            f"keys, got {got} (not shown: it may hold a secret key)")
        self.pastset = pastset if pastset is not None else _native.PastSet()
        self.resolve = resolve or _unchanged
        self.trusted_endpoints: tuple[str, ...] = ()
        self.curve_client = curve_client
        self.server_ids: tuple[str, ...] = ()
        self._callers = 0
        self._forget_stages()
        _ALL_CONTEXTS.add(self)

    def _forget_stages(self) -> None:
        """No stage to join yet: a new context's, and a forked child's, whose inherited stages are
        its parent's (a batch's sender thread, a delay's courier are not in the child)."""
        # The live stages by canonical key (_canonical); a stage that is gone leaves by itself.
        self._stages: "weakref.WeakValueDictionary[StageKey, BuiltStage]" = weakref.WeakValueDictionary()
        self._handles: list[tuple[weakref.ref, StageKey, str]] = []
        self._building: dict[StageKey, threading.Event] = {}  # canonical keys a build is creating now
        self._lock = threading.Lock()

    def live(self, key: StageKey) -> BuiltStage | None:
        """The live stage of `key`, or of a key equal to it once defaults are filled in."""
        return self._stages.get(_canonical(key))

    def stages(self) -> Iterator[BuiltStage]:
        yield from list(self._stages.values())

    def handles(self) -> Iterator[tuple[str, StageKey]]:
        for ref, key, label in list(self._handles):
            if ref() is not None:
                yield label, key

    def build(self, path: PathSpec, label: str | None = None, guard: ClientBuild | None = None) -> _native.Handle:
        """A new caller's handle at the top of `path`. `guard`: the path came from a server's
        client, and every stage it would create or go through here is checked and charged to that
        client, until the handle goes."""
        specs = check_path(path)
        local = _local_part(specs)
        if guard is not None:
            guard.admit_path(specs[:local])
        created: dict = {}  # keys this build marks as being built, filled as it marks them
        new_element = None
        try:  # a signal's exception (Ctrl-C) anywhere from here leaves no key marked
            specs, existing = self._reserve(specs, local, created)
            new_element = self._new_element(specs, local, existing)
            below, bottom = None, None
            for i in reversed(range(local)):
                if _abandoned.is_set():
                    raise RuntimeError(f"path {make_path(*specs)}: not built: this process is exiting")
                below = existing[i] or self._create(specs[i:], created.get(specs[i:]), below, guard)
                if existing[i] is not None and guard is not None:
                    guard.hold(_canonical(below.key), below.size, below.spec)
                bottom = bottom or below
                self._built(created, specs[i:])  # usable by other builds from now on
            with self._lock:
                label = label if label is not None else f"thread {self._callers}"
                self._callers += 1
            # Attaching (and creating a stage above a remote one) may wait for a server, maybe
            # one in this very process: the table is not locked meanwhile, and no other build
            # waits for this one's attach (a slow one holds only its own caller). A link that
            # this caller opens on the remote stage at the bottom names the servers this path
            # crossed, whoever made that stage.
            remote = bottom if kinds()[specs[local - 1].kind].rest_at is not None else None
            handle = below.native.attach(label, below, remote=remote and remote.native,
                                         remote_spec=remote and _remainder(remote.key, self._route(guard)))
        except BaseException as failure:
            if guard is not None:
                guard.let_go()
            if new_element is not None:  # a refused build leaves no element behind: its stages go first
                below = bottom = None
                traceback.clear_frames(failure.__traceback__)
                self.pastset._remove_unused(*new_element)
            raise
        finally:
            self._built_all(created)
        with self._lock:
            self._handles = [h for h in self._handles if h[0]() is not None]
            self._handles.append((weakref.ref(handle), below.key, label))
        _HANDLE_CONTEXTS[handle] = (self, below.key)
        if guard is not None:
            weakref.finalize(handle, guard.let_go)
        return handle

    def _new_element(self, specs: StageKey, local: int, existing: list) -> tuple[str, str] | None:
        """The element (name, format) the bottom stage this build creates would make, when there is
        none of that name yet."""
        bottom = specs[local - 1]
        if existing[local - 1] is not None or not kinds()[bottom.kind].ends_path:
            return None
        name, format = bottom.param("name"), bottom.param("format")
        return (name, format) if self.pastset.format_of(name) is None else None

    def _built(self, created: dict, key: StageKey) -> None:
        """A key this build marked as being built is built (or will not be): whoever waits for it
        looks again. Cut short by a signal's exception anywhere, it can be done again."""
        canonical = created.get(key)
        if canonical is not None:
            with self._lock:
                event = self._building.get(canonical)
                if event is not None:
                    event.set()
                    del self._building[canonical]
            created.pop(key, None)

    def _built_all(self, created: dict) -> None:
        """Every key this build still marks as being built is built, even when a signal's exception
        (Ctrl-C) comes between two: it is raised once all are, so that no other build of these
        keys waits for ever."""
        interrupted = None
        while created:
            try:
                for key in list(created):
                    self._built(created, key)
            except BaseException as e:  # noqa: BLE001 - raised below, once the table is right
                interrupted = interrupted or e
        if interrupted is not None:
            raise interrupted

    def _reserve(self, specs: StageKey, local: int, created: dict) -> tuple[StageKey, list]:
        """The path's specs as the live stages of its local part spell them, and those stages,
        after checking its fan-in; the keys still to create go into `created` (with their
        canonical keys), marked as being built, so that a concurrent build of the same key waits
        for this one instead of creating a twin. A key goes into `created` before its mark, so
        that a signal's exception between the two leaves nothing the caller cannot undo."""
        canonical = _canonical(specs)
        while True:
            with self._lock:
                busy = next((self._building[canonical[i:]] for i in range(local) if canonical[i:] in self._building),
                            None)
                if busy is None:
                    existing: list = [None] * local
                    for i in reversed(range(local)):
                        existing[i] = self._stages.get(canonical[i:])
                        if existing[i] is not None:  # the stages above it build on its spelling
                            specs = specs[:i] + existing[i].key
                    _check_fan_in(specs[:local], existing)
                    for i in range(local):
                        if existing[i] is None:
                            created[specs[i:]] = canonical[i:]
                            self._building[canonical[i:]] = threading.Event()
                    return specs, existing
            busy.wait()

    def _route(self, guard: ClientBuild | None, joining: bool = False) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The servers a link names when its path goes on from here, since its last sum and in all.
        A caller's own link: for a client's, those it came through, then this process's; none for a
        path that starts here (a program may reach the server it hosts: it did not come through it).
        A joining stage's one link is shared by all its callers, whichever way each came: since the
        sum, only this process's, whoever built it first; in all, those of the build that did."""
        through = (guard.through if guard is not None else ()) + self.server_ids
        if joining:
            return self.server_ids, through
        return (guard.crossed + self.server_ids, through) if guard is not None else ((), ())

    def _resolved(self, spec: StageSpec, params: dict, info: KindInfo) -> dict:
        """resolve(params, info), which must give the parameters back as a dict."""
        try:
            resolved = self.resolve(dict(params), info)
        except (ValueError, TypeError, ConnectionError):  # its own words for what is wrong
            raise
        except Exception as e:
            raise ValueError(f"stage {spec}: the build context's resolve raised {raised_where(e)}") from e
        if not isinstance(resolved, dict):
            raise TypeError(f"stage {spec}: the build context's resolve returned {resolved!r:.200}: expected the "
                            "stage's parameters as a dict")
        return resolved

    def _create(self, key: StageKey, canonical: StageKey, below: BuiltStage | None,
                guard: ClientBuild | None) -> BuiltStage:
        spec = key[0]
        info = check_spec(spec)
        params = native_params(spec)
        if info.rest_at is not None or info.node_params:
            params = self._resolved(spec, params, info)
        # A remote stage's own spec is what the link of a joining stage above it sends (a caller's
        # own link sends its own, at attach).
        params.update({name: _BUILT_PARAMS[name](key, self._route(guard, joining=True)) for name in info.built_params})
        below_native = below.native if below is not None else None
        def footprint() -> int:  # the bytes it holds; a Python kind's own memory is its own affair
            return 0 if info.python_class is not None else _native.stage_footprint(spec.kind, params,
                                                                                  key[-1].param("format"))

        # A client's stage is granted its bytes before it is created; another's is measured once made
        size = footprint() if guard is not None else None
        give_back = guard.create(canonical, size, spec) if guard is not None else None
        try:
            if info.python_class is not None:
                native = _native.create_python_stage(info.python_class(**params), spec.kind, below_native)
            else:
                trusted = None if guard is None else [*guard.trusted_endpoints, *map(glob.escape, self.trusted_endpoints)]
                native = _native.create_stage(spec.kind, params, below_native, self.pastset, trusted, self.curve_client)
        except BaseException:
            if give_back is not None:
                give_back()
            raise
        built = BuiltStage(key, native, below, footprint() if size is None else size)
        if give_back is not None:
            weakref.finalize(built, give_back)
        with self._lock:
            self._stages[canonical] = built
        return built


# What the builder fills in for a parameter a kind marks "built", from the stage's key and the
# servers the links its spec serves have crossed.
_BUILT_PARAMS: dict[str, Callable[[StageKey, tuple], object]] = {
    "format": lambda key, route: key[-1].param("format"),  # the element's format
    "path": lambda key, route: _remainder(key, route),  # the rest, for where it is built
}


def _remainder(key: StageKey, route: tuple[tuple[str, ...], tuple[str, ...]]) -> str:
    """What a stage whose rest is built elsewhere sends there: the rest of its key, and the
    servers its link went through (route: since its last sum, and in all)."""
    return path_to_json(PathSpec(key[1:]), *route)

# Set when the process exits: a build gives up at its next stage (abandon_builds).
_abandoned = threading.Event()


def abandon_builds() -> None:
    """Builds still running give up at their next stage, with a RuntimeError: the process is
    exiting, and no build thread may still run when the interpreter ends."""
    _abandoned.set()


# Every context, so that a forked child's builds make stages of its own (_forget_stages).
_ALL_CONTEXTS: "weakref.WeakSet[BuildContext]" = weakref.WeakSet()


def _forget_stages_in_child() -> None:
    """A forked child's builds: stages of its own, and the locks anew (another thread of the parent
    may have held one at the fork)."""
    global _DEFAULT_LOCK
    _DEFAULT_LOCK = threading.Lock()
    for context in list(_ALL_CONTEXTS):
        context._forget_stages()


os.register_at_fork(after_in_child=_forget_stages_in_child)

# Which context and stage each live handle belongs to, for show() and to_dot().
_HANDLE_CONTEXTS: "weakref.WeakKeyDictionary[_native.Handle, tuple[BuildContext, StageKey]]" = (
    weakref.WeakKeyDictionary()
)


def check_path(path: PathSpec | StageSpec | list) -> StageKey:
    """Check every stage and the path's shape; return the specs as a key."""
    if not isinstance(path, PathSpec):
        path = make_path(path)
    specs = tuple(path.stages)
    if len(specs) > PATH_STAGES_MAX:
        raise ValueError(f"path of {len(specs)} stages: a path has at most {PATH_STAGES_MAX} (its first stages: "
                         f"{make_path(*specs[:3])} -> ...)")
    infos = [check_spec(spec) for spec in specs]
    if not infos[-1].ends_path:
        raise ValueError(f"path {path}: the last stage must be {_enders()} (the element), got {specs[-1]}")
    for spec, info in zip(specs[:-1], infos):
        if info.ends_path:
            raise ValueError(f"path {path}: stage {spec} may only be the last stage")
    return specs


def _canonical(key: StageKey) -> StageKey:
    """A checked key without the parameters given their default: the identity of its stage, so that
    stage("cache") and stage("cache", capacity=1024) are one (shown as the first build spelled it)."""
    known = kinds()
    return tuple(StageSpec(spec.kind, tuple((name, value) for name, value in spec.params
                                            if (param := known[spec.kind].params.get(name)) is None
                                            or param.default is None or value != param.default))
                 for spec in key)


def _enders() -> str:
    """The kinds that end a path, as a message shows them: stage('core', name=..., format=...)."""
    return " or ".join(f"stage({name!r}, {', '.join(f'{p}=...' for p, param in info.params.items() if param.required)})"
                       for name, info in sorted(kinds().items()) if info.ends_path)


def _local_part(specs: StageKey) -> int:
    """How many stages are built here: up to and including the first whose rest is built
    elsewhere (remote: by the server it names)."""
    known = kinds()
    for i, spec in enumerate(specs):
        if known[spec.kind].rest_at is not None:
            return i + 1
    return len(specs)


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
                joined = (f"{attached} callers attached" if known[spec.kind].pass_through else
                          f"{attached} callers have joined it, released ones included: its callers are "
                          "contributors, and one that went (released, or its process ended) is not "
                          "replaced")
                raise ValueError(
                    f"stage {spec}: fan-in {fan_in} is used up ({joined}); "
                    f"this path would be caller {attached + 1}, one too many. Build at most "
                    f"{fan_in} paths through it, or keep stages apart with id=..."
                )
        if built is not None and not known[spec.kind].pass_through:
            return


LABEL_MAX = 200  # characters of a handle's label: one line of a message, with the rest of it
_DEFAULT_LOCK = threading.Lock()
_default_context: BuildContext | None = None
# The context of each PastSet given to build_path alone, so that its builds merge.
_CONTEXTS: "weakref.WeakKeyDictionary[_native.PastSet, BuildContext]" = weakref.WeakKeyDictionary()


def default_context() -> BuildContext:
    """The process's own build context, over its own PastSet: what build_path uses when given
    neither a context nor a PastSet."""
    global _default_context
    with _DEFAULT_LOCK:
        if _default_context is None:
            _default_context = BuildContext()
        return _default_context


def default_pastset() -> _native.PastSet:
    """The process's own PastSet, used when build_path is given none."""
    return default_context().pastset


def context_of(pastset: _native.PastSet) -> BuildContext:
    """The build context of `pastset` given alone (one per PastSet, made on first use)."""
    if pastset is default_pastset():
        return default_context()
    with _DEFAULT_LOCK:
        context = _CONTEXTS.get(pastset)
        if context is None:
            context = _CONTEXTS[pastset] = BuildContext(pastset)
        return context


@atexit.register
def _release_at_exit() -> None:
    """A handle whose path holds a kind written in Python, kept in the globals of the module that
    defines the kind, is never freed when Python exits: the stage holds the kind's instance in C,
    out of the collector's sight, and the instance's methods hold those globals. So the handles
    build_path gave whose paths hold such a kind are released here, before the interpreter
    finalizes (what a batch holds goes down, a trace writes its file); one in an operation in
    another thread is left as it is."""
    contexts = [_default_context] if _default_context is not None else []
    for context in contexts + list(_CONTEXTS.values()):
        for ref, key, _ in list(context._handles):
            handle = ref()
            if handle is not None and any(kinds()[spec.kind].python_class for spec in key[:_local_part(key)]):
                handle._release_if_idle()


def build_path(
    path: PathSpec | StageSpec | list,
    pastset: _native.PastSet | None = None,
    label: str | None = None,
    context: BuildContext | None = None,
) -> _native.Handle:
    """Build (or join) the stages of `path` and return a new caller's handle at its top.

    Use each handle from one thread. Paths whose remainders are equal share those stages, so
    building the same path for four threads gives one tree with four leaves. The stages are built
    in `context` (a server's, a node's), else in that of `pastset`, else in the process's own.
    """
    if context is not None and not isinstance(context, BuildContext):
        raise TypeError(f"build_path: context: expected a paths.BuildContext, got {context!r:.200}")
    if pastset is not None and not isinstance(pastset, _native.PastSet):
        raise TypeError(f"build_path: pastset: expected a paths.PastSet, got {pastset!r:.200}")
    if label is not None and not (isinstance(label, str) and 0 < len(label) <= LABEL_MAX and label.isprintable()):
        raise (ValueError if isinstance(label, str) else TypeError)(
            f"build_path: label: expected None or text of 1 to {LABEL_MAX} printable characters (it names the "
            f"caller in messages, one line each), got {label!r:.200}")
    if context is None:
        context = context_of(pastset) if pastset is not None else default_context()
    elif pastset is not None and pastset is not context.pastset:
        raise ValueError("build_path: give a context or a pastset, not both")
    return context.build(path, label)


def handle_tree(handle: _native.Handle) -> tuple[BuildContext, StageKey]:
    """The build context and top stage key of a handle made by build_path."""
    try:
        return _HANDLE_CONTEXTS[handle]
    except (KeyError, TypeError):
        raise TypeError(f"expected a handle returned by build_path, got {handle!r}") from None
