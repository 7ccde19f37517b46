"""delay: both crossings are paid, no crossing outlasts the caller's timeout, a call that timed out
on the way there changed nothing, calls made in 0.1 s slices still cross slow links, and Ctrl-C
interrupts a call on its way (and one blocked in a Python stage) at once."""

import signal
import sys
import textwrap
import time

import pytest
from child_processes import ChildProcesses

import paths
from paths import build_path, make_path, stage

SLACK_S = 0.5   # how much later than planned a sleeping call may return on a loaded machine


def delayed(space, ms, name="D"):
    """A handle through delay(ms) onto element (name, 'q'), and the element itself."""
    h = build_path(make_path(stage("delay", ms=ms), stage("core", name=name, format="q")), pastset=space)
    return h, space.enter(name, "q")


def timed(call):
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def test_an_operation_pays_the_crossing_both_ways(space):
    h, element = delayed(space, 40)
    _, took = timed(lambda: h.move(1))
    assert 0.08 <= took < 0.08 + SLACK_S
    (value, took) = timed(h.observe)
    assert value == (1,) and 0.08 <= took < 0.08 + SLACK_S
    assert h.stage.counters()["delayed_ns"] >= 0.99 * 160_000_000  # a crossing begins just before its sleep
    assert element.last() == 1


@pytest.mark.parametrize("call", ["move", "observe"])
def test_a_timeout_on_the_way_there_changes_nothing(space, call):
    h, element = delayed(space, 2000)
    element.move(7)
    with pytest.raises(TimeoutError):
        h.move(8, timeout=0.2) if call == "move" else h.observe(timeout=0.2)
    assert (element.first(), element.last()) == (0, 1)
    waited = h.stage.counters()["delayed_ns"]  # it waited on its way there until its timeout, no longer
    assert 0.99 * 200_000_000 <= waited < (0.2 + SLACK_S) * 1e9


def test_a_timed_out_call_returns_at_its_timeout_not_after_the_crossings(space):
    h, _ = delayed(space, 2000)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        h.observe(timeout=0.2)
    assert 0.2 <= time.monotonic() - started < 0.2 + SLACK_S


def test_a_link_slower_than_a_slice_still_carries_calls_made_from_python(space):
    """Python waits in 0.1 s slices; each slice's call continues the crossing the last one began,
    so a 250 ms crossing arrives (a new crossing per slice would never arrive)."""
    h, element = delayed(space, 250)
    _, took = timed(lambda: h.move(1, timeout=5))
    assert element.last() == 1
    assert 0.25 <= took < 0.5 + SLACK_S


def test_an_answer_crossing_back_comes_by_the_timeout(space):
    h, element = delayed(space, 300)
    _, took = timed(lambda: h.move(1, timeout=0.45))  # arrives at 0.3 s, would be back at 0.6 s
    assert element.last() == 1
    assert 0.3 <= took < 0.45 + SLACK_S


def test_a_call_waiting_below_crosses_once_however_many_slices_it_takes(space):
    h, _ = delayed(space, 5)
    with pytest.raises(TimeoutError):
        h.observe(timeout=0.35)  # four slices of waiting at the element, one crossing there
    assert 0.99 * 5_000_000 <= h.stage.counters()["delayed_ns"] < 10_000_000


# ---- Ctrl-C ------------------------------------------------------------------------------------

INTERRUPTED = textwrap.dedent("""
    import sys, time
    import paths
    from paths import build_path, make_path, stage

    @paths.stage_kind("passing")
    class Passing:
        pass

    above = {"delay": stage("delay", ms=30000), "python stage": stage("passing")}[sys.argv[1]]
    h = build_path(make_path(above, stage("core", name="E", format="q")))
    print("READY", flush=True)
    started = time.monotonic()
    try:
        h.observe()
    except KeyboardInterrupt:
        print(f"INTERRUPTED {time.monotonic() - started:.3f}", flush=True)
        sys.exit(130)
""")


@pytest.mark.parametrize("above", ["delay", "python stage"])
def test_ctrl_c_interrupts_a_call_at_once(above):
    with ChildProcesses() as children:
        child = children.start([sys.executable, "-c", INTERRUPTED, above], name=f"observe through {above}")
        child.expect("READY")
        time.sleep(0.3)  # well into the call
        child.signal(signal.SIGINT)
        waited = float(child.expect("INTERRUPTED ", timeout=10))
        assert child.wait(10) == 130
    assert waited < 0.3 + 0.2 + SLACK_S
