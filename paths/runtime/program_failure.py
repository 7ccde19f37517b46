"""Whether a Python program of its own fails as it ends, and why (one line): what its rank tells
the others at the last barrier (paths/runtime/rendezvous.py), so that none waits for it.

A program fails when it ends on an exception it did not handle (the interpreter sets
sys.last_value, to another than before the program started: not one that an interactive
session or a test process handled before), or by sys.exit, exit() or quit() with a status other
than 0 (or a message). The end of a program (atexit) cannot see its exit status, so watch_exits() has those
keep what they raise in the main thread; the last such counts, also one the program caught and
went on from. A SystemExit the program raises itself is not seen: it ends as one that succeeds.
"""

from __future__ import annotations

import builtins
import functools
import sys
import threading
from typing import Optional

from ..model.named_function import raised_where

_before = None  # sys.last_value when the program started
_exiting: Optional[tuple[str, SystemExit]] = None  # the exit that raised last in the main thread, and what


def watch() -> None:
    """The program starts: from now on an exception it does not handle is its failure."""
    global _before, _exiting
    _before, _exiting = getattr(sys, "last_value", None), None


class _Watched:
    """An exit function (sys.exit, the builtins exit and quit) that keeps the SystemExit it raises
    in the main thread; it shows as the function it wraps."""

    watched = True

    def __init__(self, exit, name: str):
        self._exit, self._name = exit, name
        functools.update_wrapper(self, exit, updated=())

    def __call__(self, *status):
        global _exiting
        try:
            self._exit(*status)
        except SystemExit as e:
            if threading.current_thread() is threading.main_thread():
                _exiting = self._name, e
            raise

    def __repr__(self) -> str:
        return repr(self._exit)


def watch_exits() -> None:
    """From now on sys.exit, exit() and quit() in the main thread are seen too (a Python program's)."""
    if not getattr(sys.exit, "watched", False):
        sys.exit = _Watched(sys.exit, "sys.exit")
    for name in ("exit", "quit"):  # the site module's; absent under python -S
        exit = getattr(builtins, name, None)
        if exit is not None and not getattr(exit, "watched", False):
            setattr(builtins, name, _Watched(exit, name))


def failure() -> str:
    """Why the program fails as it ends, or "" when it does not."""
    value = getattr(sys, "last_value", None)
    if value is not _before:
        return raised_where(value)
    if _exiting is None:
        return ""
    name, exiting = _exiting
    return "" if exiting.code is None or exiting.code == 0 else f"{name}({exiting.code!r})"
