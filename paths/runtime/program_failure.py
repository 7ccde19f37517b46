"""Whether a Python program of its own fails as it ends, and why (one line): what its rank tells
the others at the last barrier (paths/runtime/rendezvous.py), so that none waits for it.

A program fails when it ends on an exception it did not handle: the interpreter sets
sys.last_value, to another than before the program started (not one that an interactive
session or a test process handled before).
"""

from __future__ import annotations

import sys

from ..model.named_function import raised_where

_before = None  # sys.last_value when the program started


def watch() -> None:
    """The program starts: from now on an exception it does not handle is its failure."""
    global _before
    _before = getattr(sys, "last_value", None)


def failure() -> str:
    """Why the program fails as it ends, or "" when it does not."""
    value = getattr(sys, "last_value", None)
    return "" if value is _before else raised_where(value)
