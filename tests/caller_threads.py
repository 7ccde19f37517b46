"""Many callers at once: a function per caller on threads of its own, the check that an
element's history of (caller, seq) pairs holds every caller's moves once, in order, and a caller
that goes while another's moves wait below."""

from __future__ import annotations

import threading
import time

import paths
from paths import build_path


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


def goes_past_a_stuck_caller(space, path, element_name: str, patience: float) -> object:
    """Through `path` (a stage with a helper thread that passes every caller's moves on, over an
    element bounded to 1 unread): one caller's second move waits below at the full bound, another
    caller's move waits behind it, and that other caller goes. Its release must end (after the
    stage's 1 s) while the bound is still full; then room is made and the first caller's moves all
    arrive. Returns the first caller's handle, for its stage's counters."""
    element = space.enter(element_name, "q")
    element.delta(1)
    waiting, going = build_path(path, pastset=space), build_path(path, pastset=space)
    waiting.move(0)
    waiting.move(1)  # once 0 is in, the bound is full: the helper thread waits below with 1
    deadline = time.monotonic() + patience
    while element.last() == 0:  # 0 in first: else the other caller's move might take its place
        assert time.monotonic() < deadline, "the first move never went down"
        time.sleep(0.001)
    going.move(2)  # behind it
    gone = threading.Event()

    def release():
        nonlocal going
        del going
        gone.set()

    threading.Thread(target=release, daemon=True).start()
    went_while_full = gone.wait(10)
    assert element.observe() == (0,)  # room for the waiting move, which goes on
    assert gone.wait(patience)
    assert went_while_full
    paths.fence(waiting, timeout=patience)
    assert element.observe_range(0, 10) == [(0,), (1,)]
    return waiting
