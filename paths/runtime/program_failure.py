"""Whether a Python program of its own fails as it ends, and why (one line): what its rank tells
the others at the last barrier (paths/runtime/rendezvous.py), so that none waits for it.

A program fails when it ends on an exception it did not handle (the interpreter sets
sys.last_value, to another than before the program started: not one that an interactive
session or a test process handled before), or by sys.exit with a status other than 0 (or a
message). The end of a program (atexit) cannot see its exit status, so watch_exits() has
sys.exit keep what it raises in the main thread; the last such counts, also one the program
caught and went on from. A SystemExit the program raises itself is not seen: it ends as one
that succeeds.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Optional

from ..model.named_function import raised_where

_before = None  # sys.last_value when the program started
_exiting: Optional[SystemExit] = None  # what sys.exit raised last in the main thread, once watched


def watch() -> None:
    """The program starts: from now on an exception it does not handle is its failure."""
    global _before, _exiting
    _before, _exiting = getattr(sys, "last_value", None), None


def watch_exits() -> None:
    """From now on sys.exit in the main thread is seen too (a Python program's)."""
    exit = sys.exit
    if getattr(exit, "watched", False):
        return

    @functools.wraps(exit)
    def watched(*status):
        global _exiting
        try:
            exit(*status)
        except SystemExit as e:
            if threading.current_thread() is threading.main_thread():
                _exiting = e
            raise

    watched.watched = True
    sys.exit = watched


def failure() -> str:
    """Why the program fails as it ends, or "" when it does not."""
    value = getattr(sys, "last_value", None)
    if value is not _before:
        return raised_where(value)
    code = _exiting.code if _exiting is not None else None
    return "" if code is None or code == 0 else f"sys.exit({code!r})"
