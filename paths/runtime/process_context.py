"""The runtime context of a process that takes part in a run: the map, the run's threads and
where each runs, its sum elements, its hooks, and the names its elements take.

A node process of `paths run` makes one per run of a kernel (each run works on fresh elements:
element NAME of the kernel is `NAME.<tag>` in the run with that tag). A program of its own (a
rank: one thread of the run, in a process of its own) gets one from paths_init
(`start_program`), or in Python from its first `paths.acquire` or `paths.runtime_info()`,
filled from its --paths-* options and its environment: `paths launch`'s, srun's or mpirun's
(paths/runtime/rank_discovery.py), with the node servers found as paths/runtime/rank_wiring.py says.
`paths.acquire(element, format)` asks the runtime of the calling kernel thread, or the program's.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional

from .. import _native
from . import program_failure
from .acquire_hook import AcquireRequest, default_acquire, default_release, named_hook, reachable_nodes
from .build import BuildContext, default_context
from ..model.cluster_map import ClusterMap, MapError, open_map
from ..model.named_function import raised_where
from .kernel import current_context, parse_kernel_args
from ..model.path_edit import confine_trace_files, with_traces
from ..model.path_spec import PathSpec, make_path, stage
from ..model.placement import canonical_policy, place, placement_warnings_said
from .rank_discovery import ACQUIRE, MAP, POLICY, RELEASE, SUMS, Discovered, RankError, discover
from .rank_wiring import wire
from .rendezvous import RendezvousError
from ..model.reduction_tree import plan_reduction
from ..model.shown import shown
from ..model.stage_kinds import kinds

BARRIER_ELEMENT = "paths.barrier"  # the sum paths_barrier goes through across processes


class Tracing(NamedTuple):
    """Trace every caller and every link (paths run --trace): files <prefix>-<tag>-... in directory."""

    directory: str
    prefix: str
    capacity: int  # events each trace stage holds


@dataclass
class Runtime:
    """One process's part in a run; see the module docstring."""

    cluster_map: ClusterMap
    placements: tuple[str, ...]  # the node of each thread of the run
    sums: frozenset[str] = frozenset()  # besides the map's `elements: NAME: {reduce: sum}`
    policy: Optional[str] = None
    max_fanin: Optional[int] = None
    acquire_hook: Callable = default_acquire
    release_hook: Callable = default_release
    hook_names: tuple[Optional[str], Optional[str]] = (None, None)  # as named, for messages
    tag: Optional[str] = None  # element NAME is NAME.tag (None: NAME)
    tracing: Optional[Tracing] = None
    tree_form: Optional[str] = None  # how the nodes' partial sums meet (None: the map's)
    via: Optional[str] = None  # a rank's node whose server holds the node's stages (paths/runtime/rank_wiring.py)
    trace_dir: Optional[str] = None  # where the servers the ranks host put trace files: so do a rank's own builds
    context: BuildContext = field(default_factory=default_context)  # where its paths are built
    _requests: dict = field(default_factory=dict, repr=False)  # handle -> its AcquireRequest
    _formats: dict = field(default_factory=dict, repr=False)  # element -> (format, first thread)
    _sums_held: set = field(default_factory=set, repr=False)  # (sum element, thread) of handles not released
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def threads(self) -> int:
        return len(self.placements)

    def for_run(self, placements: tuple[str, ...], tag: str) -> "Runtime":
        """The same context for a run of these threads, whose elements are NAME.tag."""
        return dataclasses.replace(self, placements=tuple(placements), tag=tag, _requests={}, _formats={},
                                   _sums_held=set(), _lock=threading.Lock())

    def nodes(self) -> list[str]:
        """The nodes the run starts: reachable_nodes of the barrier's tree (every sum's shape)."""
        with placement_warnings_said("", say=False):  # make_runtime's placement's, said where it ran
            plan = plan_reduction(self.cluster_map, self.threads, (BARRIER_ELEMENT, "q"), policy=self.policy,
                                  max_fanin=self.max_fanin, form=self.tree_form)
        return reachable_nodes(self.cluster_map, [plan])

    def request(self, element: str, format: str, thread: int) -> AcquireRequest:
        """What the hook is asked for (element, format) from `thread`."""
        if not 0 <= thread < self.threads:
            raise ValueError(f"thread {thread}: expected 0 <= thread < {self.threads}")
        declared = self.cluster_map.element(element)
        is_sum = element in self.sums or element == BARRIER_ELEMENT or bool(declared and declared.reduce == "sum")
        return AcquireRequest(element, format, thread, self.threads, self.placements[thread], self.cluster_map,
                              is_sum, self._home(element, declared), self.policy, self.max_fanin, self.tree_form,
                              self.tag)

    def _home(self, element: str, declared) -> str:
        name, at, owner = element.rpartition("@")
        if name and at and owner.isdigit() and not (declared is not None and declared.home):
            if int(owner) >= self.threads:
                raise ValueError(f"element {element!r}: homed with thread {owner}, but the run has "
                                 f"{self.threads} threads")
            return self.placements[int(owner)]
        return self.cluster_map.home_of(element)

    def acquire(self, element: str, format: str, thread: int) -> _native.Handle:
        """Ask the hook for the path of (element, format) from `thread`, build it, return the handle."""
        call = f"paths_acquire({element!r}, {format!r}) by thread {thread}"
        request = self.request(element, format, thread)
        with self._lock:  # the format is kept once a handle on it is built
            first = self._formats.get(element, (format, thread))
            again = request.sum and (element, thread) in self._sums_held
        if first[0] != format:
            raise ValueError(f"{call}: element {element!r} was acquired with format {first[0]!r} by thread "
                             f"{first[1]}: an element has one format")
        if again:  # a second handle would count the thread twice, and leave another thread none
            raise ValueError(f"{call}: the thread holds a handle on the sum {element!r} already, and a sum counts "
                             "each thread once: use that handle")
        hook = default_acquire if element == BARRIER_ELEMENT else self.acquire_hook
        try:
            path = hook(request)
        except BaseException as e:
            _raise_if_this_process_ends(e)
            raise ValueError(f"{call} on node {request.node}: acquire hook {self.hook_names[0]} raised "
                             f"{raised_where(e)}") from e
        if not isinstance(path, PathSpec):
            raise ValueError(f"{call}: acquire hook {self.hook_names[0]} returned {path!r:.200}, not a PathSpec "
                             "(make_path(...))")
        last = path.stages[-1]
        known = kinds()
        if self.tag is not None and last.kind in known and known[last.kind].ends_path:  # else building says why
            path = PathSpec(path.stages[:-1] + (last.replace(name=f"{last.param('name')}.{self.tag}"),))
        if self.tracing:
            prefix = "-".join(part for part in (self.tracing.prefix, self.tag) if part)
            path = with_traces(path, request.node, self.tracing.directory, prefix, self.tracing.capacity)
        first = known.get(path.stages[0].kind)
        if self.via and not (first and first.rest_at):  # the node's stages live in its server
            path = make_path(stage("remote", host=self.via), *path.stages)
        try:
            if self.trace_dir and not self.via:  # built here, with the node's server: its files go where the server's do
                path = confine_trace_files(path, self.trace_dir)
            handle = self.context.build(path, label=f"{request.node} thread {thread}")
        except (ValueError, TypeError) as e:
            raise ValueError(f"{call}: its path {path}: {e}") from None
        except ConnectionError as e:
            raise ConnectionError(f"{call}: its path {path}: {e}") from None
        with self._lock:
            self._requests[handle] = request
            self._formats.setdefault(element, (format, thread))
            if request.sum:
                self._sums_held.add((element, thread))
        return handle

    def release(self, handle: _native.Handle, thread: int) -> None:
        """The kernel is done with `handle`: the release hook sees it."""
        with self._lock:
            request = self._requests.pop(handle)
            self._sums_held.discard((request.element, thread))
        hook = default_release if request.element == BARRIER_ELEMENT else self.release_hook
        try:
            hook(request, handle)
        except BaseException as e:
            _raise_if_this_process_ends(e)
            raise ValueError(f"release of {request.element!r} by thread {thread}: release hook "
                             f"{self.hook_names[1]} raised {raised_where(e)}") from e


def _raise_if_this_process_ends(e: BaseException) -> None:
    """A hook's SystemExit or KeyboardInterrupt on the main thread ends this process (a program
    of its own, as Python would); on a kernel's thread, where no Ctrl-C or exit is meant for it
    (signals reach the main thread alone), it is the hook's failure, said as any other."""
    if not isinstance(e, Exception) and threading.current_thread() is threading.main_thread():
        raise e


def make_runtime(cluster_map: ClusterMap, threads: Optional[int], *, sums=(), policy: Optional[str] = None,
                 max_fanin: Optional[int] = None, tree_form: Optional[str] = None, acquire: Optional[str] = None,
                 release: Optional[str] = None, tracing: Optional[Tracing] = None,
                 context: Optional[BuildContext] = None) -> Runtime:
    """A runtime for `threads` threads placed by the map (or `policy`), with the hooks named
    here or by the map, building its paths in `context` (default: the process's own). None for
    `threads`: none placed yet (a node's, whose runs come placed: Runtime.for_run)."""
    declared = cluster_map.element(BARRIER_ELEMENT)
    if BARRIER_ELEMENT in sums or (declared is not None and declared.reduce == "sum"):
        raise ValueError(f"sum {BARRIER_ELEMENT!r}: the run's own barrier (paths_barrier) is the element of that "
                         "name: give the sum another")
    acquire, release = acquire or cluster_map.acquire, release or cluster_map.release
    policy = canonical_policy(policy)
    placements = tuple(place(cluster_map, threads, policy)) if threads is not None else ()
    runtime = Runtime(cluster_map, placements, frozenset(sums), policy, max_fanin, named_hook(acquire, "acquire"),
                      named_hook(release, "release"), (acquire or "(default)", release or "(default)"),
                      tracing=tracing, tree_form=tree_form, context=context or default_context())
    if placements:
        runtime.nodes()  # a map whose sums cannot take these threads (MapError) fails here, before anything starts
    return runtime


# ---- a program of its own ------------------------------------------------------------------------

@dataclass(frozen=True)
class RuntimeInfo:
    """What paths.runtime_info() says a program found about itself."""

    launcher: str  # paths launch, srun, mpirun, pmix, pmi; options (--paths-thread); "" alone
    rank: int
    size: int
    node: str
    map: str  # its name, and where it was read from
    rendezvous: str  # how the node servers were found
    servers: dict  # node -> endpoint

    def __str__(self) -> str:
        return (f"rank {self.rank} of {self.size} on node {self.node} of map {self.map}, started by "
                f"{self.launcher or 'nothing (alone)'}; servers: {self.rendezvous}")


_program: Optional[Runtime] = None
_program_thread = 0
_program_info: Optional[RuntimeInfo] = None
_program_wiring = None


class RunSetupError(ValueError):
    """What a program's --paths-* options or PATHS_* variables give cannot start its run (a policy,
    a hook, a --paths-arg): the message names the value and what was expected."""


def _say_run_errors_in_one_line() -> None:
    """Makes sys.excepthook, once, say a failed rendezvous, a rank its launcher's variables do not
    give, a map that cannot be used or a run that cannot start, not handled, in its one line (it
    names the rank, the variable, the file and field, or the value), without the traceback of the
    program's call that met it; anything else goes to the hook before."""
    before = sys.excepthook
    if getattr(before, "says_run_errors", False):
        return

    def excepthook(kind, value, trace):
        if issubclass(kind, (RendezvousError, RankError, MapError, RunSetupError)):
            print(value if str(value).startswith("paths: ") else f"paths: {value}", file=sys.stderr)
        else:
            before(kind, value, trace)
    excepthook.says_run_errors = True
    sys.excepthook = excepthook


def current(caller: str) -> Runtime:
    """The runtime of this process: a program of its own, after paths_init, or started from the
    environment its launcher gave it (paths launch, srun, mpirun; or PATHS_MAP)."""
    if _program is None and (_launched() or MAP in os.environ):
        _say_run_errors_in_one_line()
        start_program([])
        program_failure.watch_exits()
        atexit.register(_end_at_exit)
    if _program is None:
        raise ValueError(f"{caller}: this process takes part in no run (a program of its own calls "
                         "paths_init first, or runs under paths launch, srun or mpirun, or with PATHS_MAP; "
                         "a kernel runs in one)")
    return _program


def _launched() -> bool:
    """Whether a launcher's variables say this process is a rank (RankError, said in one line if
    not handled, when they are wrong)."""
    try:
        return bool(discover().launcher)
    except RankError:
        _say_run_errors_in_one_line()
        raise


def acquire(element: str, format: str) -> _native.Handle:
    """A handle on (element, format) from the acquire hook: for the kernel thread that calls it
    (a kernel written in Python: as ctx.acquire), else for this process's thread of its run (a
    program of its own)."""
    for what, value in (("element", element), ("format", format)):
        if not isinstance(value, str):
            raise TypeError(f"paths.acquire: {what}: expected text (a str), got {value!r:.100}")
    context = current_context()
    if context is not None:
        return context.acquire(element, format)
    try:
        return current("paths.acquire").acquire(element, format, _program_thread)
    except (ValueError, ConnectionError) as e:  # said as a kernel's paths_acquire is: long values short,
        e.args = (_native.error_line(str(e), repr(element)[1:-1], repr(format)[1:-1]),)  # as quoted (repr)
        raise


def runtime_info() -> RuntimeInfo:
    """What this program found about itself: its launcher, rank, size, node, map, and how it
    found the node servers (starts its runtime from the environment, as paths.acquire does)."""
    current("paths.runtime_info")
    return _program_info


PROGRAM_OPTIONS = {  # --paths-X: (what it takes, whether it may repeat, the variable that gives it else)
    "--paths-map": ("a map", False, MAP), "--paths-thread": ("a whole number", False, None),
    "--paths-threads": ("a whole number", False, None), "--paths-policy": ("a policy", False, POLICY),
    "--paths-sum": ("an element name", True, SUMS), "--paths-arg": ("KEY=VALUE", True, None),
    "--paths-acquire": ("pkg.mod:func", False, ACQUIRE), "--paths-release": ("pkg.mod:func", False, RELEASE),
}


def program_options(argv: list[str], environ=None) -> tuple[dict[str, list[str]], list[int]]:
    """The --paths-* options in argv (`--paths-X VALUE` or `--paths-X=VALUE`) up to a `--`, each
    with its values, else from its variable in environ (PATHS_SUM: comma-separated), and the
    indices of the other arguments (the `--` and all after it among them: the program's own, for
    a program it starts, say); RunSetupError (a ValueError) for an unknown or incomplete one."""
    options: dict[str, list[str]] = {}
    others, i = [], 0
    while i < len(argv):
        if argv[i] == "--":
            others.extend(range(i, len(argv)))
            break
        name, equals, value = argv[i].partition("=")
        if not name.startswith("--paths-"):
            others.append(i)
            i += 1
            continue
        if name not in PROGRAM_OPTIONS:
            raise RunSetupError(f"{name}: unknown option (known: {', '.join(PROGRAM_OPTIONS)})")
        if not equals:
            if i + 1 == len(argv):
                raise RunSetupError(f"{name}: expected {PROGRAM_OPTIONS[name][0]} after it")
            i, value = i + 1, argv[i + 1]
        if options.get(name) and not PROGRAM_OPTIONS[name][1]:
            raise RunSetupError(f"{name}: given twice")
        if not value.strip():
            raise RunSetupError(f"{name}: expected {PROGRAM_OPTIONS[name][0]}, got {value!r}")
        options.setdefault(name, []).append(value)
        i += 1
    environ = os.environ if environ is None else environ
    for name, (what, many, variable) in PROGRAM_OPTIONS.items():
        if name not in options and variable and environ.get(variable):
            text = environ[variable]
            options[name] = [part.strip() for part in text.split(",")] if many else [text]
            if not all(options[name]):
                raise RunSetupError(f"{variable}={shown(text)}: expected {what} or several, separated by commas, "
                                    "none empty")
    return options, others


def _whole(options: dict, name: str, default: int) -> int:
    text = options.get(name, [str(default)])[0]
    try:
        return int(text)
    except ValueError:
        raise RunSetupError(f"{name} {text}: expected a whole number") from None


def start_program(argv: list[str]) -> list[int]:
    """paths_init: read the program's --paths-* options from argv (argv[1:] of main) and its
    environment, find its rank and the node servers, make its runtime, and give it the program's
    NULL context. Returns the indices (in main's argv) of the arguments that are the program's
    own. With --paths-thread/--paths-threads the program says its rank itself, and nothing is
    started or found: its paths stay in this process."""
    global _program, _program_thread, _program_info, _program_wiring
    program_failure.watch()
    options, others = program_options(argv)
    if "--paths-thread" in options or "--paths-threads" in options:
        thread, threads = _whole(options, "--paths-thread", 0), _whole(options, "--paths-threads", 1)
        if threads < 1:
            raise RunSetupError(f"--paths-threads {threads}: expected a whole number >= 1")
        if not 0 <= thread < threads:
            said = f"--paths-threads {threads}" if "--paths-threads" in options else "--paths-threads, 1 when not given"
            raise RunSetupError(f"--paths-thread {thread}: expected 0 <= thread < {threads} ({said})")
        found = Discovered("options", thread, threads, one_host=True)
    else:
        found = discover()
    one = {name: values[0] for name, values in options.items()}
    try:
        cluster_map = open_map(one.get("--paths-map"))
    except MapError as e:  # named by an option, or by the variable a launcher or the user set
        given = "--paths-map" if any(arg.partition("=")[0] == "--paths-map" for arg in argv) else MAP
        raise MapError(f"{given}: {e}") from None
    said = found.rank == 0 and found.launcher != "paths launch"  # once, by rank 0; paths launch said it already
    try:
        with placement_warnings_said(f"paths: rank 0 of {found.size}", said):
            runtime = make_runtime(cluster_map, found.size, sums=options.get("--paths-sum", []),
                                   policy=one.get("--paths-policy"), acquire=one.get("--paths-acquire"),
                                   release=one.get("--paths-release"))
        args = parse_kernel_args(options.get("--paths-arg", []), "--paths-arg")
    except MapError:
        raise
    except ValueError as e:
        raise RunSetupError(str(e)) from None
    try:
        wiring = wire(runtime, found, os.environ) if found.launcher != "options" else None
    except (RendezvousError, RunSetupError):
        raise
    except ValueError as e:  # a variable the launcher (or the user) set wrong
        raise RunSetupError(str(e)) from None
    runtime = dataclasses.replace(runtime, via=wiring.via) if wiring else runtime
    node = runtime.placements[found.rank]
    try:
        _native.serve_process(found.rank, runtime.threads, node, args,
                              lambda t, element, format: runtime.acquire(element, format, t),
                              lambda t, handle: runtime.release(handle, t))
    except BaseException as e:
        if wiring:
            wiring.close(raised_where(e))
        raise
    cluster_map = runtime.cluster_map
    _program, _program_thread, _program_wiring = runtime, found.rank, wiring
    _program_info = RuntimeInfo(found.launcher, found.rank, found.size, node,
                                f"{cluster_map.name} ({cluster_map.source})",
                                wiring.rendezvous if wiring else "none: this process alone",
                                dict(wiring.servers.endpoints) if wiring else {})
    return [i + 1 for i in others]


def end_program(failure: str = "") -> None:
    """paths_finalize: give back the program's handles; with other ranks, wait for all of them
    (the servers this process hosts may serve them) and close its servers. A program that fails
    (`failure` says why, else paths/runtime/program_failure.py) waits for none: it tells the
    others, and its launcher then ends the run. RendezvousError when another rank failed."""
    global _program, _program_wiring
    if _program is None:
        return
    _native.end_process()
    _program = None
    wiring, _program_wiring = _program_wiring, None
    if wiring is not None:
        wiring.close(failure or program_failure.failure())


def _end_at_exit() -> None:
    """end_program at the end of a Python program: another rank's failure in one line."""
    try:
        end_program()
    except RendezvousError as e:
        print(e, file=sys.stderr, flush=True)
