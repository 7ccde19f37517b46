"""Many callers at once: a function per caller on threads of its own, and the check that an
element's history of (caller, seq) pairs holds every caller's moves once, in order."""

from __future__ import annotations

import threading


def run_callers(caller, count: int, timeout: float) -> None:
    """Runs caller(i) for i in range(count) on threads of their own; all must end within timeout."""
    threads = [threading.Thread(target=caller, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), f"callers still running after {timeout} s"


def assert_each_callers_moves_once_in_order(element, callers: int, moves: int) -> None:
    history = element.observe_range(0, callers * moves + 1)
    assert len(history) == callers * moves
    for i in range(callers):
        assert [seq for who, seq in history if who == i] == list(range(moves))
