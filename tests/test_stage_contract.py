"""The stage contract (DESIGN.md, docs/semantics.md), checked for every registered stage kind and
for kinds written in Python: a new kind gets these tests by being registered.

Each kind's smallest path is made from its record alone (paths.kinds()): its required parameters
filled in by their roles — where the rest is built: a loopback PathServer of this process; a file
it writes: one in the test's folder; a number: 2 (a reduce-sum's fan-in), within its range — then
the stage that ends every path. A kind with a fan-in gets that many callers, each in a thread of
its own; every other kind one. The kinds written in Python: `forwarding` (tests/operation_calls.py),
which answers every operation kind itself, and one here that answers none. What is checked, for
each kind:

- its callers reach the stage below as its role says: a pass-through stage above a reduce-sum of
  3 gives the sum 3 contributors (link_count), a joining stage is one caller below;
- every operation kind of the table is accepted with the results it must give (tests/
  operation_calls.py), or refused as NotImplementedError with a message (shown with a Python kind
  that refuses), which changes nothing;
- a call that times out changes nothing: first and last unchanged, and the next call gets what
  the timed-out one waited for;
- release flushes and frees: when its last handle goes, the files it writes appear, the stage
  leaves the build table, the links it held below are detached (seen from a pass-through stage
  below it, kept alive by the test), and nothing holds the element any more (it can be removed);
- counters only grow;
- move_many equals its moves in effect: the same history, first and last, and observes;
- idle, it holds no core: a thread of its (a sender, a courier, a server's) that waits sleeps.
"""

from __future__ import annotations

import gc
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from operation_calls import (ROUNDS, TIMEOUT_S, Forwarding, contribution, expected_turn, round_value, run_turn,
                             turn)

import paths
from paths import build_path, make_path, stage
from paths.runtime.build import BuildContext, handle_tree
from paths.runtime.server import PathServer
from paths.runtime.server_policy import ServerPolicy

FAN_IN = 2           # a required number's value (a reduce-sum's fan-in), when its range allows
SHORT_S = 0.05       # a call meant to time out
SETTLE_S = 10.0      # the longest a release may take to reach the server's side


@paths.stage_kind("contract-python-passing")
class ContractPythonPassing:
    """Answers nothing itself: every kind passes down whole."""


@paths.stage_kind("contract-python-refusing")
class ContractPythonRefusing:
    """Refuses every operation kind (NotImplementedError: PS_ENOTSUP)."""

    def __getattr__(self, name):
        if name not in {op["name"] for op in paths._native.operations()}:
            raise AttributeError(name)

        def refuse(below, *args):
            raise NotImplementedError(f"contract-python-refusing refuses {name}")

        return refuse


@paths.stage_kind("contract-python-refusing-observe")
class ContractPythonRefusingObserve:
    """Refuses observe only: an exchange, which it does not take whole, is its move and then that."""

    def observe(self, below):
        raise NotImplementedError("contract-python-refusing-observe refuses observe")


KINDS = [name for name, info in paths.kinds().items() if info.python_class is None] + \
    ["forwarding", "contract-python-passing"]


@pytest.fixture(scope="module")
def server():
    """A loopback server that also builds this file's Python kinds (a server builds only the C
    kinds unless told otherwise)."""
    mine = (Forwarding, ContractPythonPassing, ContractPythonRefusing, ContractPythonRefusingObserve)
    python_kinds = frozenset(name for name, info in paths.kinds().items() if info.python_class in mine)
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), policy=ServerPolicy(allow_kinds=python_kinds)) \
            as served:
        served.start()
        yield served


class Tree:
    """A kind's smallest path over a fresh element, and its callers' handles."""

    def __init__(self, kind: str, server: PathServer, tmp_path, name: str, below=()):
        self.info = paths.kinds()[kind]
        self.server = server
        self.context = BuildContext(paths.PastSet())
        self.files = []
        self.name = name
        ender = next(k for k, i in paths.kinds().items() if i.ends_path)
        element = stage(ender, name=name, format="q")
        if self.info.ends_path:
            self.path = make_path(element)
        else:
            params = {p.name: self._value(p, tmp_path) for p in self.info.params.values() if p.required}
            self.path = make_path(stage(kind, **params), *below, element)
        # Where the element lives: past a stage whose rest is built elsewhere, on that server.
        self.home = server.context if self.info.rest_at else self.context
        self.handles = [build_path(self.path, context=self.context)]
        fan_in = self.handles[0].stage.max_links
        callers = fan_in if not self.info.pass_through and fan_in > 1 else 1
        self.handles += [build_path(self.path, context=self.context) for _ in range(callers - 1)]

    def _value(self, param, tmp_path):
        if param.name == self.info.rest_at:
            return self.server.endpoint
        if param.role == "written file":
            self.files.append(tmp_path / f"{self.name}-{param.name}.out")  # each tree its own file
            return str(self.files[-1])
        if param.type in ("int", "float"):
            value = min(max(FAN_IN, param.min), param.max)
            return float(value) if param.type == "float" else value
        if param.choices:
            return param.choices[0]
        raise AssertionError(f"stage kind {self.info.name!r}: no role says what its required parameter "
                             f"{param.name!r} is: give it one in the kind's record")

    @property
    def callers(self) -> int:
        return len(self.handles)

    def element(self):
        return self.home.pastset.enter(self.name, "q")

    def stage_below(self):
        """The stage the kind's callers reach below it (built here, or on the server)."""
        key = handle_tree(self.handles[0])[1]
        below = self.server.context.live(key[1:]) if self.info.rest_at else self.context.live(key).below
        assert below is not None, f"no stage below {key[0]}"
        return below.native

    def each_caller(self, work):
        """work(caller index, handle) in a thread per caller; their results in caller order."""
        with ThreadPoolExecutor(self.callers) as pool:
            return list(pool.map(work, range(self.callers), self.handles))

    def stages(self):
        """Every live stage of this tree: built here, and on the server for its rest."""
        return list(self.context.stages()) + (list(self.server.context.stages()) if self.info.rest_at else [])


@pytest.fixture(params=KINDS)
def tree(request, server, tmp_path):
    def make(name="E", below=()):
        return Tree(request.param, server, tmp_path, f"{request.node.name}-{name}", below)

    return make


def wait_until(check, what):
    deadline = time.monotonic() + SETTLE_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_callers_reach_the_stage_below_as_the_role_says(tree):
    t = tree()
    assert t.handles[0].stage.link_count == t.callers
    if t.info.ends_path:
        return  # nothing below: its callers are the element's
    if not t.info.pass_through:
        assert t.stage_below().link_count == 1, "a joining stage is one caller of the stage below"
        return
    t = tree("over-a-sum", below=[stage("reduce-sum", num_threads=3)])
    t.handles += [build_path(t.path, context=t.context) for _ in range(2)]
    assert t.stage_below().link_count == 3, "a pass-through stage keeps its callers distinct below"
    totals = t.each_caller(lambda c, h: (h.move((c + 1,), timeout=TIMEOUT_S), h.observe(timeout=TIMEOUT_S))[1])
    assert totals == [(6,)] * 3
    assert t.element().last() == 1


def test_every_operation_is_accepted_with_its_results(tree):
    t = tree()
    for start in (0, ROUNDS):
        results = t.each_caller(lambda c, h: run_turn(h, turn(c, t.callers, start)))
        assert results == [expected_turn(turn(c, t.callers, start)) for c in range(t.callers)]
    element = t.element()
    assert [element.observe(i) for i in range(element.last())] == \
        [round_value(t.callers, r) for r in range(2 * ROUNDS)]


def test_a_refused_operation_is_not_implemented_with_a_message_and_changes_nothing(server):
    for above in ([], [stage("remote", host=server.endpoint, timeout_ms=5000)]):
        context = BuildContext(paths.PastSet())
        name = f"refused-{len(above)}"
        h = build_path(make_path(*above, stage("contract-python-refusing"), stage("core", name=name, format="q")),
                       context=context)
        for step in turn(0, 1, 0):
            with pytest.raises(NotImplementedError) as refused:
                step.call(h)
            # A Python stage's own exception reaches a caller in its process; through a remote
            # stage the status does, and the message names the operation.
            words = f"refuses {step.op}" if not above else "not supported"
            assert words in str(refused.value)
        element = (server.context if above else context).pastset.enter(name, "q")
        assert (element.first(), element.last(), element.delta()) == (0, 0, 0)


def test_an_exchange_whose_observe_is_refused_says_its_move_stays(server):
    for above in ([], [stage("remote", host=server.endpoint, timeout_ms=5000)]):
        context = BuildContext(paths.PastSet())
        name = f"refused-observe-{len(above)}"
        h = build_path(make_path(*above, stage("contract-python-refusing-observe"),
                                 stage("core", name=name, format="q")), context=context)
        with pytest.raises(NotImplementedError) as refused:
            h.exchange((5,), timeout=TIMEOUT_S)
        said = " ".join([str(refused.value), *getattr(refused.value, "__notes__", [])])
        assert "exchange (moved; its observe)" in said, said
        element = (server.context if above else context).pastset.enter(name, "q")
        assert (element.last(), element.observe(0)) == (1, (5,))


def test_a_timed_out_observe_changes_nothing(tree):
    t = tree()
    element = t.element()
    waiting, *others = t.handles
    if others:  # a fan-in: the observe waits for the round, which the last contributor completes
        waiting.move((contribution(0, 0),), timeout=TIMEOUT_S)
        for c, h in enumerate(others[:-1], start=1):
            h.move((contribution(c, 0),), timeout=TIMEOUT_S)
    with pytest.raises(TimeoutError):
        waiting.observe(timeout=SHORT_S)
    assert (element.first(), element.last()) == (0, 0)
    if others:
        others[-1].move((contribution(len(others), 0),), timeout=TIMEOUT_S)
    else:
        element.move(round_value(1, 0))
    assert t.each_caller(lambda c, h: h.observe(timeout=TIMEOUT_S)) == [round_value(t.callers, 0)] * t.callers
    assert (element.first(), element.last()) == (1, 1)


def test_a_timed_out_move_changes_nothing(tree):
    t = tree()
    element = t.element()
    element.delta(1)
    element.move((-1,))  # full: nothing more goes in until it is read
    taken = False  # a stage that holds moves back (batch) takes the move: its flush is what waits
    if t.callers == 1:
        with pytest.raises(TimeoutError):
            t.handles[0].move((contribution(0, 0),), timeout=SHORT_S)
            taken = True
            t.handles[0].flush(timeout=SHORT_S)
    else:  # a fan-in takes the contributions; the round's move down is what waits, and times out
        t.each_caller(lambda c, h: h.move((contribution(c, 0),), timeout=TIMEOUT_S))
        with pytest.raises(TimeoutError):
            t.handles[0].observe(timeout=SHORT_S)
    assert (element.first(), element.last()) == (0, 1)
    assert element.observe() == (-1,)
    if t.callers == 1:
        if not taken:
            t.handles[0].move((contribution(0, 0),), timeout=TIMEOUT_S)
        t.handles[0].flush(timeout=TIMEOUT_S)
        assert element.observe(timeout=TIMEOUT_S) == round_value(1, 0)
    else:
        assert t.each_caller(lambda c, h: h.observe(timeout=TIMEOUT_S)) == [round_value(t.callers, 0)] * t.callers
    assert (element.first(), element.last()) == (2, 2)


def test_release_flushes_and_frees(tree):
    # A pass-through Python stage just below shows the links the kind holds there: its callers are
    # counted while attached, and this test keeps it alive after the kind is gone.
    t = tree(below=[stage("contract-python-passing")])
    probe = None if t.info.ends_path else t.stage_below()
    t.each_caller(lambda c, h: run_turn(h, turn(c, t.callers, 0)))
    assert not any(f.exists() for f in t.files), "a file is written when the stage is released"
    top = handle_tree(t.handles[0])[1]
    t.handles.clear()
    gc.collect()
    assert t.context.live(top) is None, f"{top[0]} outlived its last handle"
    assert all(f.exists() and f.stat().st_size > 0 for f in t.files), "release writes the stage's files"
    if probe is not None:
        wait_until(lambda: probe.link_count == 0, f"{top[0]} kept its links below after its last handle went")
    del probe
    gc.collect()
    # Nothing built over the element holds it any more: it can be removed.
    wait_until(lambda: _removed(t.home.pastset, t.name), f"element {t.name!r} still held after {top[0]} went")


def _removed(pastset, name) -> bool:
    try:
        pastset.remove(name, "q")
        return True
    except RuntimeError:  # in use
        return False


def test_counters_only_grow(tree):
    t = tree()

    def reading():
        return {(id(s), name): value for s in t.stages() for name, value in s.native.counters().items()}

    before = reading()
    for start in (0, ROUNDS):
        t.each_caller(lambda c, h: run_turn(h, turn(c, t.callers, start)))
        after = reading()
        shrunk = {key: (before[key], value) for key, value in after.items() if key in before and value < before[key]}
        assert not shrunk, f"counters went back: {shrunk}"
        assert t.handles[0].stage.counters()["operations"] > before.get((id(t.handles[0].stage), "operations"), 0)
        before = after


def test_move_many_equals_its_moves_in_effect(tree):
    batches, per_batch = 3, 3  # a reduce-sum holds 4 rounds ahead of its caller's observes

    def drive(t, one_by_one):
        def work(c, h):
            seen = []
            for b in range(batches):
                tuples = [(contribution(c, b * per_batch + i),) for i in range(per_batch)]
                if one_by_one:
                    for one in tuples:
                        h.move(one, timeout=TIMEOUT_S)
                else:
                    h.move_many(tuples, timeout=TIMEOUT_S)
                seen += [h.observe(timeout=TIMEOUT_S) for _ in tuples]
            return seen

        observed = t.each_caller(work)
        element = t.element()
        return observed, [element.observe(i) for i in range(element.last())], element.first(), element.last()

    moved = drive(tree("moves"), True)
    assert moved == drive(tree("move_many"), False)
    assert moved[1] == [round_value(len(moved[0]), r) for r in range(batches * per_batch)]


IDLE_S = 0.5         # how long an idle tree is watched ...
IDLE_CPU_S = 0.1     # ... and the processor time all of this process's threads may take meanwhile


def test_an_idle_tree_holds_no_core(tree):
    t = tree()
    t.each_caller(lambda c, h: run_turn(h, turn(c, t.callers, 0)))
    time.sleep(0.1)  # a wait that has just begun may spin and yield a little before it sleeps
    started = time.process_time()
    time.sleep(IDLE_S)
    assert time.process_time() - started < IDLE_CPU_S, "a thread spins or yields while it has nothing to do"
