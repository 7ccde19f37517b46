"""delay: both crossings are paid, no crossing outlasts the caller's timeout, a call that timed out
on the way there changed nothing, calls made in 0.1 s slices still cross slow links, and Ctrl-C
interrupts a call on its way (and one blocked in a Python stage) at once."""

import re
import signal
import sys
import textwrap
import time

import pytest
from caller_threads import assert_each_callers_moves_once_in_order, goes_past_a_stuck_caller, run_callers
from child_processes import ChildProcesses

import paths
from paths import build_path, make_path, stage
from refusing_stage import NoNegatives  # noqa: F401  (registers the kind test-no-negatives)

SLACK_S = 0.5   # how much later than planned a sleeping call may return on a loaded machine
# A crossing short enough to end in a caller's first 0.1 s slice, long enough that one crossing,
# however late a loaded machine wakes its sleeper, is told from two.
CROSSING_MS = 40


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


@pytest.mark.parametrize("ms", [80, 250])
def test_a_link_slower_than_a_slice_still_carries_calls_made_from_python(space, ms):
    """Python waits in 0.1 s slices; each slice's call continues the crossing the last one began,
    so a 250 ms crossing arrives (a new crossing per slice would never arrive), and the crossing
    back is not cut at the end of the slice it began in (an 80 ms link cost 100 ms, not 160)."""
    h, element = delayed(space, ms)
    _, took = timed(lambda: h.move(1, timeout=5))
    assert element.last() == 1
    assert 2 * ms / 1000 <= took < 2 * ms / 1000 + SLACK_S
    (value, took) = timed(lambda: h.observe(timeout=5))
    assert value == (1,) and 2 * ms / 1000 <= took < 2 * ms / 1000 + SLACK_S
    _, took = timed(lambda: pytest.raises(TimeoutError, h.observe, timeout=1.5 * ms / 1000))  # the second waits
    assert 1.5 * ms / 1000 <= took < 1.5 * ms / 1000 + SLACK_S


def test_an_answer_crossing_back_comes_by_the_timeout(space):
    h, element = delayed(space, 300)
    _, took = timed(lambda: h.move(1, timeout=0.45))  # arrives at 0.3 s, would be back at 0.6 s
    assert element.last() == 1
    assert 0.3 <= took < 0.45 + SLACK_S


def assert_crossed_once(h):
    assert 0.99 * CROSSING_MS * 1e6 <= h.stage.counters()["delayed_ns"] < 2 * CROSSING_MS * 1e6


def test_a_call_waiting_below_crosses_once_however_many_slices_it_takes(space):
    h, _ = delayed(space, CROSSING_MS)
    with pytest.raises(TimeoutError):
        h.observe(timeout=0.35)  # four slices of waiting at the element, one crossing there
    assert_crossed_once(h)


@pytest.mark.parametrize("call", ["exchange", "move_many"])
def test_a_call_done_in_part_below_goes_on_waiting_there_without_crossing_again(space, call):
    """An exchange whose move a sum of two took (its total waits for the other contributor), a
    move_many of which a full bound let one tuple in: the first slice crosses and does that part;
    the later slices go on with what is left of it (the exchange's observe, the other tuples) at
    the stage below, crossing no more."""
    summed = [stage("reduce-sum", num_threads=2)] if call == "exchange" else []
    h = build_path(make_path(stage("delay", ms=CROSSING_MS), *summed, stage("core", name="D", format="q")),
                   pastset=space)
    element = space.enter("D", "q")
    if call == "exchange":
        with pytest.raises(TimeoutError, match=r"exchange \(moved; its observe\)"):
            h.exchange(1, timeout=0.35)
    else:
        element.delta(2)
        element.move(0)
        with pytest.raises(TimeoutError, match=r"\(1 of 3 tuples moved\)"):
            h.move_many([(1,), (2,), (3,)], timeout=0.35)
        assert element.observe_range(0, 10) == [(0,), (1,)]
    assert_crossed_once(h)


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


# ---- pipelined: moves stream as on a wire ------------------------------------------------------

PATIENCE_S = 30


def pipelined(space, ms, name="W", format="q"):
    return build_path(make_path(stage("delay", ms=ms, pipelined=1), stage("core", name=name, format=format)),
                      pastset=space)


def test_pipelined_moves_do_not_wait_for_the_crossing_and_arrive_after_it(space):
    h = pipelined(space, 300)
    element = space.enter("W", "q")
    _, took = timed(lambda: [h.move(v) for v in range(5)])
    assert took < 0.3  # five moves on the wire at once, not five crossings one after another
    assert element.last() == 0  # still on their way
    value, took = timed(h.observe)  # behind the moves on the same wire: it sees the first of them
    assert value == (0,) and 0.3 <= took < 0.6 + SLACK_S  # (from Python the way back ends with a 0.1 s slice)
    assert element.last() == 5
    assert h.stage.counters()["streamed"] == 5


def test_an_idle_wire_holds_no_core(space):
    """The courier sleeps while nothing is on the wire: its wait escalates to a sleep, not a spin
    or a yield started over (which took a core for as long as the stage lived)."""
    h = pipelined(space, 1)
    h.move(1)
    assert h.observe() == (1,)  # delivered: the wire is empty from here on
    started = time.process_time()
    time.sleep(0.5)
    assert time.process_time() - started < 0.1  # a thread that spins takes about 0.5 s of it


def test_pipelined_moves_of_many_callers_keep_order_and_lose_nothing(space):
    callers, moves = 8, 1500
    element = space.enter("W", "qq")
    path = make_path(stage("delay", ms=0.5, pipelined=1), stage("core", name="W", format="qq"))
    handles = [build_path(path, pastset=space) for _ in range(callers)]
    seen_own = []

    def caller(i):
        h, seq, calls = handles[i], 0, 0
        while seq < moves:
            if calls % 7 == 3:
                h.move_many([(i, s) for s in range(seq, min(seq + 5, moves))])
                seq = min(seq + 5, moves)
            else:
                h.move((i, seq))
                seq += 1
            calls += 1
            if calls % 301 == 0:  # another operation: everything it moved is in
                seen_own.append(h.last() >= seq)
        paths.fence(h, timeout=PATIENCE_S)

    run_callers(caller, callers, PATIENCE_S)
    assert_each_callers_moves_once_in_order(element, callers, moves)
    assert seen_own and all(seen_own)
    assert handles[0].stage.counters()["dropped"] == 0


def test_a_full_wire_times_a_move_out_and_loses_nothing(space):
    h = pipelined(space, 1000)
    element = space.enter("W", "q")
    for v in range(64):  # the wire holds 64 messages
        h.move(v, timeout=1)
    with pytest.raises(TimeoutError):
        h.move(64, timeout=0.05)  # no room: nothing sent
    h.move(64, timeout=PATIENCE_S)  # room once the first arrived
    paths.fence(h, timeout=PATIENCE_S)
    assert element.observe_range(0, 100) == [(v,) for v in range(65)]


def test_a_failed_delivery_is_reported_by_the_next_operation_with_what_took_effect():
    from paths.runtime.server import PathServer
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()).start() as server:
        h = build_path(make_path(stage("delay", ms=20, pipelined=1),
                                 stage("remote", host=server.endpoint, timeout_ms=2000),
                                 stage("core", name="F", format="q")))
        h.move(1)
        paths.fence(h, timeout=PATIENCE_S)
    for v in range(3):  # the server is gone: these cannot arrive
        h.move(v)
    with pytest.raises(ConnectionError, match=r"delay: at least 0 of 1 moves sent ahead took effect \(the other 1 "
                                              r"may have too: the answer was lost\), then their delivery failed "
                                              r"\(remote failure\), and the 2 moves sent after them were dropped: "
                                              r"remote tcp://127\.0\.0\.1:\d+"):
        h.last()
    assert h.stage.counters()["dropped"] == 3


@pytest.mark.parametrize("hears_by", ["last", "move"])
def test_moves_sent_after_a_failed_delivery_are_dropped_so_what_took_effect_is_a_prefix(space, hears_by):
    """-2 is refused below; 3 and 4, on the wire behind it, must not take effect after it (a hole in
    the caller's moves): they are dropped, and the caller's next operation says so. A move made
    once -2 was refused hears of it, after waiting for 3 and 4, and is not sent itself; the
    caller's next move is."""
    h = build_path(make_path(stage("delay", ms=5, pipelined=1), stage("test-no-negatives"),
                             stage("core", name="H", format="q")), pastset=space)
    for v in (1, -2, 3, 4):
        h.move(v)
    deadline = time.monotonic() + PATIENCE_S
    while hears_by == "move" and h.stage.counters()["dropped"] == 0:  # -2 refused; 3 and 4 may be on the wire yet
        assert time.monotonic() < deadline, "-2 was not refused"
        time.sleep(0.001)
    with pytest.raises(ValueError, match=re.escape(
            "(delay: 0 of 1 moves sent ahead took effect, then their delivery failed (invalid argument), and the 2 "
            "moves sent after them were dropped: test-no-negatives: ValueError: no negatives here, got -2)")):
        h.last() if hears_by == "last" else h.move(5)
    h.move(6)
    paths.fence(h, timeout=PATIENCE_S)
    assert space.enter("H", "q").observe_range(0, 10) == [(1,), (6,)]
    assert h.stage.counters()["dropped"] == 3


def test_a_caller_going_is_not_held_up_by_another_callers_move_that_waits_below(space, capfd):
    """The courier delivers every caller's moves in the order sent. A caller whose move is on the
    wire behind another caller's that the stage below cannot take yet (a full bound nobody drains)
    still goes, after its 1 s: its move is said on stderr as not applied; the other's still arrive."""
    path = make_path(stage("delay", ms=1, pipelined=1), stage("core", name="W", format="q"))
    waiting = goes_past_a_stuck_caller(space, path, "W", PATIENCE_S)
    assert waiting.stage.counters()["dropped"] == 1
    assert "delay: 0 of 1 moves sent ahead took effect, then their delivery failed (timed out)" in capfd.readouterr().err


def test_a_pipelined_link_of_no_delay_passes_moves_straight_on(space):
    h = pipelined(space, 0)
    h.move(1)
    assert space.enter("W", "q").last() == 1  # applied before the move returned: no courier
    assert "streamed" not in h.stage.counters()


def test_a_pipelined_move_many_crosses_as_messages_of_at_most_16_kib_whole_and_in_order(space):
    """Each message on the wire holds at most 2048 'q' tuples (its queue's room is bounded): a
    move_many of 5000 goes as three, and lands whole, in order."""
    h = build_path(make_path(stage("delay", ms=1, pipelined=1), stage("core", name="MANY", format="q")), pastset=space)
    h.move_many([(i,) for i in range(5000)])
    assert h.last() == 5000  # the caller's own moves: it waits for them
    assert h.observe_range(0, 5000, timeout=5) == [(i,) for i in range(5000)]
    assert h.stage.counters()["streamed"] == 3
