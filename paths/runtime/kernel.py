"""Kernels: what `paths run KERNEL` names, loaded and checked, and run on this process's threads.

    gsum, mcpi        the built-in kernels (benchmarks/gsum.c, mcpi.c, in libpaths_kernels.so)
    FILE.so:SYMBOL    a C kernel, `int SYMBOL(paths_kernel_ctx *c)`, compiled against paths.h
    pkg.mod:func      a kernel written in Python, `func(ctx)` with ctx.thread, ctx.threads,
                      ctx.node, ctx.arg(key), ctx.acquire(element, format), ctx.release(handle),
                      ctx.barrier(), ctx.report(name, value), returning None or a status (an int
                      of C's int range, as a C kernel returns): the slow path, for quick experiments

Before any node starts, the launcher loads a C kernel's library in a child process first: one
that crashes, ends the process or hangs as it loads is refused in one line, as a missing symbol
is, and the launcher goes on.

A kernel may declare the elements it reduces as sums: PATHS_SUMS(NAME, "TOTAL") in C, an
attribute `func.paths_sums = ("TOTAL",)` in Python. `paths run` plans their trees with no --sum.

A run of a kernel in this process (`run_kernel`) starts one thread per thread of the run placed
here; each calls the kernel once. A thread that returns a status other than PATHS_OK fails the
run: the error names the thread, its node, the status and what the thread said about it.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Union

from .. import _native
from ..model.named_function import body_not_run, import_function, takes_arguments
from ..model.shown import cut, shown

BUILTIN_LIBRARY = Path(_native.__file__).resolve().parent / "libpaths_kernels.so"


@dataclass(frozen=True)
class Builtin:
    """A kernel shipped in the package: its symbol, and what `paths run` makes of it."""

    symbol: str
    title: str  # in tables and plots
    setting: str  # the RunSettings field that becomes its argument of the same name
    unit: str  # what its first column means


BUILTINS = {
    "gsum": Builtin("gsum", "GSum", "rounds", "microseconds per global sum (median round per run)"),
    "mcpi": Builtin("mcpi", "MCPi", "darts", ""),
}


@dataclass(frozen=True)
class Kernel:
    """A loaded kernel: `code` is a C kernel (_native.CKernel) or a Python function."""

    name: str  # as given: gsum, ./libx.so:x, pkg.mod:func
    code: Union[_native.CKernel, Callable]
    builtin: Optional[Builtin] = None

    @property
    def location(self) -> str:
        """What loads this kernel anywhere: a C kernel's file by its absolute path."""
        if isinstance(self.code, _native.CKernel) and not self.builtin:
            return f"{self.code.path}:{self.code.symbol}"
        return self.name

    @property
    def title(self) -> str:
        return self.builtin.title if self.builtin else self.name

    @property
    def sums(self) -> tuple[str, ...]:
        """The elements the kernel declares as sums."""
        declared = self.code.sums if isinstance(self.code, _native.CKernel) else getattr(self.code, "paths_sums", ())
        return tuple(declared)


class KernelError(RuntimeError):
    """A kernel thread returned a failure; the message says which, where and why."""


_LOADED: dict[tuple[str, str], Kernel] = {}


def load_kernel(name: str, shown_as: Optional[str] = None, timeout: Optional[float] = None) -> Kernel:
    """The kernel `name` names (see the module docstring), loaded and checked: ValueError saying
    what to fix for a missing file, symbol, module or function, another API version, or (with a
    timeout, the launcher's check) a library that crashes or does not load within that many seconds.
    Messages and tables call it `shown_as` (default: name)."""
    key = (name, shown_as or name)
    if key not in _LOADED:
        _LOADED[key] = dataclasses.replace(_load(name, timeout), name=key[1])
    return _LOADED[key]


def _load(name: str, timeout: Optional[float]) -> Kernel:
    if name in BUILTINS:
        builtin = BUILTINS[name]
        return Kernel(name, _native.load_kernel(str(BUILTIN_LIBRARY), builtin.symbol, timeout), builtin)
    file, colon, symbol = name.rpartition(":")
    said = cut(name)  # as messages show it
    if not colon or not file or not symbol:
        raise ValueError(f"unknown kernel {shown(name)}: expected {', '.join(BUILTINS)}, FILE.so:SYMBOL (a C kernel) "
                         "or pkg.mod:func (a Python kernel)")
    if file.endswith(".so") or "/" in file:
        if not os.path.isfile(file):
            raise ValueError(f"kernel {said}: {cut(file)} is a folder, not a shared library" if os.path.isdir(file)
                             else f"kernel {said}: no file {cut(file)}")
        try:
            return Kernel(name, _native.load_kernel(os.path.abspath(file), symbol, timeout))
        except ValueError as e:
            raise ValueError(f"kernel {said}: {e}") from None
    function = import_function(name, "kernel")
    kind = body_not_run(function)
    func = name.rpartition(":")[2]
    if kind:
        raise ValueError(f"kernel {said}: {func} is {kind} (calling it runs none of its body): expected "
                         f"def {func}(ctx) returning None or a status")
    if not takes_arguments(function, 1):
        raise ValueError(f"kernel {said}: {func} cannot be called with one argument, the thread's context: expected "
                         f"def {func}(ctx) returning None or a status")
    return Kernel(name, function)


def parse_kernel_args(items: Iterable[str], option: str = "--arg") -> dict[str, str]:
    """['k=v', ...] -> {'k': 'v', ...} (a value may hold '='); ValueError naming the option for
    anything else, and for a key given twice."""
    args = {}
    for item in items:
        key, equals, value = item.partition("=")
        if not equals or not key.strip() or key != key.strip():
            raise ValueError(f"{option} {item!r}: expected KEY=VALUE")
        if key in args:
            raise ValueError(f"{option} {item!r}: {key} is given twice (first {key}={args[key]}): expected each KEY once")
        args[key] = value
    return args


@dataclass
class KernelRun:
    """What a run of a kernel in this process left: its seconds (from the start of its threads
    to the end of the last) and each thread's reports, [(name, value), ...] by global thread."""

    seconds: float
    reports: dict[int, list[tuple[str, float]]]


_running = threading.local()  # .context: the context of the Python kernel this thread runs


def current_context():
    """The context of the kernel written in Python that the calling thread runs, or None."""
    return getattr(_running, "context", None)


def _with_context(function: Callable) -> Callable:
    """A Python kernel that makes its context the thread's current one while it runs."""
    def kernel(ctx):
        _running.context = ctx
        try:
            return function(ctx)
        finally:
            _running.context = None
    return kernel


_STATUS_ERRORS = {_native.PATHS_ETIMEDOUT: TimeoutError, _native.PATHS_EREMOTE: ConnectionError,
                  _native.PATHS_ENOMEM: MemoryError}


def run_kernel(kernel: Kernel, thread_ids: Iterable[int], threads: int, node: str, args: dict,
               acquire: Callable, release: Callable, *, spans_processes: bool = False,
               pin: bool = False, until_failure: bool = False) -> KernelRun:
    """Run `kernel` on one thread per id in thread_ids (global indices of a run of `threads`),
    on `node`. acquire(thread, element, format) -> Handle and release(thread, handle) are how
    its threads get and give back handles. Raises the error of the thread that failed first
    (TimeoutError, ConnectionError, MemoryError by its status, else KernelError): with until_failure as soon as
    a thread fails, leaving the others to run on (for a process that ends next: they may be
    waiting for the failed one); else once every thread has ended. Ctrl-C leaves them too."""
    ids = list(thread_ids)
    code = kernel.code if isinstance(kernel.code, _native.CKernel) else _with_context(kernel.code)
    raw = _native.run_kernel(code, ids, threads, node, spans_processes,
                             {str(k): str(v) for k, v in args.items()}, acquire, release, pin, until_failure)
    failed = raw["failed"]
    if failed is not None:  # the first to fail: others may have failed waiting for it
        error = _STATUS_ERRORS.get(failed["status"], KernelError)
        why = f": {failed['error']}" if failed["error"] else ""
        raise error(f"kernel {kernel.name}: thread {failed['thread']} on node {node} returned "
                    f"{failed['status_name']}{why}")
    return KernelRun(raw["seconds"], {o["thread"]: o["reports"] for o in raw["threads"]})

