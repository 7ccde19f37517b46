"""Every operation kind of the C table (paths._native.operations()) as the Python call that makes
it, in one caller's turn with the results each call must give, for tests that run every kind
through a path; and `forwarding`, a stage kind written in Python that answers every kind itself.
tests/test_operation_table.py fails when a kind of the table is missing here.

A turn is four rounds of one caller among `callers`: with a fan-in (callers > 1, a reduce-sum)
every observe returns its round's total, otherwise the tuple itself; either way round r's value
is round_value(callers, r)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import paths

TIMEOUT_S = 10.0  # no call of a turn should come near it
ROUNDS = 4        # rounds a turn moves (a reduce-sum holds 4 ahead of a caller's observes)


def contribution(caller: int, r: int) -> int:
    return 100 * r + caller + 1


def round_value(callers: int, r: int) -> tuple:
    return (sum(contribution(c, r) for c in range(callers)),)


@dataclass(frozen=True)
class Step:
    op: str                           # the operation kind's name in the table
    call: Callable[[Any], Any]        # makes it on a handle
    expected: Any                     # what the call returns


def turn(caller: int, callers: int, start: int) -> list[Step]:
    """Caller `caller`'s turn after `start` rounds (the element then holds `start` tuples, all
    read): every kind of the table once, observe as often as the rounds need."""

    def mine(i):
        return (contribution(caller, start + i),)

    def value(i):
        return round_value(callers, start + i)

    return [
        Step("move", lambda h: h.move(mine(0), timeout=TIMEOUT_S), None),
        Step("observe", lambda h: h.observe(timeout=TIMEOUT_S), value(0)),
        Step("exchange", lambda h: h.exchange(mine(1), timeout=TIMEOUT_S), value(1)),
        Step("move_many", lambda h: h.move_many([mine(2), mine(3)], timeout=TIMEOUT_S), None),
        Step("observe", lambda h: h.observe(timeout=TIMEOUT_S), value(2)),
        Step("observe", lambda h: h.observe(timeout=TIMEOUT_S), value(3)),
        Step("observe_at", lambda h: h.observe(start, timeout=TIMEOUT_S), value(0)),
        Step("observe_range", lambda h: h.observe_range(start, ROUNDS, timeout=TIMEOUT_S),
             [value(i) for i in range(ROUNDS)]),
        Step("flush", lambda h: h.flush(timeout=TIMEOUT_S), None),
        Step("fence", lambda h: paths.fence(h, timeout=TIMEOUT_S), None),
        Step("first", lambda h: h.first(), start + ROUNDS),
        Step("last", lambda h: h.last(), start + ROUNDS),
        Step("delta", lambda h: h.delta(), 0),
        Step("axe", lambda h: h.axe(0), None),
    ]


def run_turn(handle, steps: list[Step]) -> list[tuple[str, Any]]:
    """[(op, what it returned)] for each step, in order."""
    return [(step.op, step.call(handle)) for step in steps]


def expected_turn(steps: list[Step]) -> list[tuple[str, Any]]:
    return [(step.op, step.expected) for step in steps]


@paths.stage_kind("forwarding")
class Forwarding:
    """Answers every operation kind itself, by the method named after it, through `below`; the
    kinds it was called for are recorded in `called` (one set for every instance)."""

    called: set = set()

    def move(self, below, t):
        self.called.add("move")
        below.move(t)

    def observe(self, below):
        self.called.add("observe")
        return below.observe()

    def observe_at(self, below, index):
        self.called.add("observe_at")
        return below.observe(index)

    def first(self, below):
        self.called.add("first")
        return below.first()

    def last(self, below):
        self.called.add("last")
        return below.last()

    def delta(self, below, bound):
        self.called.add("delta")
        return below.delta(bound)

    def axe(self, below, index):
        self.called.add("axe")
        below.axe(index)

    def exchange(self, below, t):
        self.called.add("exchange")
        return below.exchange(t)

    def move_many(self, below, tuples):
        self.called.add("move_many")
        below.move_many(tuples)

    def observe_range(self, below, index, count):
        self.called.add("observe_range")
        return below.observe_range(index, count)

    def flush(self, below):
        self.called.add("flush")
        below.flush()

    def fence(self, below):
        self.called.add("fence")
        paths.fence(below)
