"""The PastSet element API from Python, single-threaded: every operation, every error, tuple
formats (checked against Python's struct), and timeouts that leave the element as it was."""

import math
import struct
import time

import pytest

import paths

BLOCK_S = 0.05           # how long the timeout tests let a call block
SANE_OVERRUN_S = 1.0     # how much later than its timeout a timed-out call may return

# (format, struct.calcsize(format), two tuples that differ in every field)
FORMAT_CASES = [
    ("q", 8, (-5,), (2**62,)),
    ("qd", 16, (5, 2.5), (-1, -0.125)),
    ("16s", 16, (b"sixteen bytes!!!",), (b"and sixteen more",)),
    ("iid", 16, (1, -2, 3.25), (-4, 5, -6.5)),
    ("?", 1, (True,), (False,)),
    ("<qd", 16, (7, -0.5), (-7, 0.5)),
    ("=id", 12, (3, 1.5), (-3, -1.5)),      # standard sizes: no padding before d
    ("@id", 16, (3, 1.5), (-3, -1.5)),      # native: d aligned to 8
    ("id", 16, (3, 1.5), (-3, -1.5)),       # '@' is the default
    (">hq", 10, (-3, 2**40), (3, -(2**40))),
    ("!I", 4, (2**32 - 1,), (1,)),
    ("b0q", 8, (-1,), (1,)),                # a trailing 0q pads to q's alignment
    ("3s2p", 5, (b"abc", b"z"), (b"xyz", b"")),
    ("q0s", 8, (1, b""), (-1, b"")),        # 0s takes no space but still holds one value
    ("e?xH", 6, (0.5, True, 65535), (-2.0, False, 1)),
    ("Qf", 12, (2**64 - 1, 0.25), (0, -0.75)),     # no padding after the last field
]


@pytest.fixture
def jobs(space):
    """The issue's example element: ("jobs", "qd")."""
    return space.enter("jobs", "qd")


@pytest.fixture
def counter(space):
    """A single-value "q" element."""
    return space.enter("counter", "q")


def snapshot(e):
    """Everything a call could change: the cursor, the end and the counters of real work."""
    stats = e.stats()
    return e.first(), e.last(), stats["live_tuples"], stats["moves"], stats["observes"]


# ---- enter and elements ----------------------------------------------------------------------


def test_enter_gives_element_with_name_and_format(jobs):
    assert (jobs.name, jobs.format) == ("jobs", "qd")
    assert (jobs.first(), jobs.last()) == (0, 0)


def test_entering_again_gives_the_same_log(space, jobs):
    again = space.enter("jobs", "qd")
    jobs.move((1, 1.0))
    assert again.last() == 1
    assert again.observe() == (1, 1.0)
    assert jobs.first() == 1


def test_entering_a_name_with_another_format_raises_value_error(space, jobs):
    with pytest.raises(ValueError, match=r"'jobs' exists with format 'qd'"):
        space.enter("jobs", "q")


@pytest.mark.parametrize("bad_format", ["", "z", "4", "q!", "<n", "0q", "q" * 65])
def test_bad_format_raises_value_error(space, bad_format):
    with pytest.raises(ValueError, match="format"):
        space.enter("bad", bad_format)
    assert space.elements() == []


@pytest.mark.parametrize("bad_name", ["", "n" * 256])
def test_bad_name_raises_value_error(space, bad_name):
    with pytest.raises(ValueError, match="name of 1 to 255 bytes"):
        space.enter(bad_name, "q")


def test_elements_lists_names_and_formats_in_creation_order(space):
    space.enter("b", "q")
    space.enter("a", "16s")
    space.enter("b", "q")
    assert space.elements() == [("b", "q"), ("a", "16s")]


# ---- formats -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt, size, one, other", FORMAT_CASES, ids=[case[0] for case in FORMAT_CASES])
def test_format_lays_out_tuples_as_struct_does(space, fmt, size, one, other):
    """Adjacent tuples read back by index only come out whole if C steps through the log by
    exactly struct.calcsize(format) bytes."""
    assert struct.calcsize(fmt) == size
    e = space.enter("layout", fmt)
    for t in (one, other, one):
        e.move(t)
    assert [e.observe(i) for i in range(3)] == [one, other, one]


def test_short_bytes_are_zero_padded_to_the_field(space):
    e = space.enter("names", "16s")
    e.move(b"abc")
    assert e.observe() == (b"abc" + bytes(13),)


@pytest.mark.parametrize("fmt, value", [("q", 5), ("16s", b"bare"), ("?", True), ("d", 0.5)])
def test_single_value_format_accepts_a_bare_value(space, fmt, value):
    e = space.enter("single", fmt)
    e.move(value)
    assert e.observe() == struct.unpack(fmt, struct.pack(fmt, value))


@pytest.mark.parametrize(
    "fmt, given, expected",
    [
        ("qd", (1,), r"2 value\(s\) \(int, float\), got \(1,\)"),
        ("qd", (1, 2.0, 3), r"2 value\(s\) \(int, float\), got \(1, 2.0, 3\)"),
        ("qd", 5, r"2 value\(s\) \(int, float\), got 5"),
        ("qd", ("a", 2.0), r"2 value\(s\) \(int, float\), got \('a', 2.0\)"),
        ("q", 2.5, r"1 value\(s\) \(int\), got 2.5"),
        ("16s", "text", r"1 value\(s\) \(bytes\), got 'text'"),
        ("iid", (1, 2, "x"), r"3 value\(s\) \(int, int, float\), got \(1, 2, 'x'\)"),
    ],
)
def test_wrong_tuple_raises_type_error_naming_expected_and_given(space, fmt, given, expected):
    e = space.enter("typed", fmt)
    with pytest.raises(TypeError, match=expected):
        e.move(given)
    assert e.last() == 0


# ---- move, observe, first, last --------------------------------------------------------------


def test_move_then_observe_returns_the_tuple(jobs):
    jobs.move((5, 2.5))
    assert jobs.observe() == (5, 2.5)


def test_observe_takes_tuples_in_order_and_advances_first(counter):
    for value in (10, 11, 12):
        counter.move(value)
    assert (counter.first(), counter.last()) == (0, 3)
    assert counter.observe() == (10,)
    assert counter.observe() == (11,)
    assert (counter.first(), counter.last()) == (2, 3)


def test_observe_index_reads_history_without_moving_the_cursor(counter):
    for value in (10, 11, 12):
        counter.move(value)
    counter.observe()
    assert [counter.observe(i) for i in (2, 0, 1)] == [(12,), (10,), (11,)]
    assert counter.first() == 1
    assert counter.observe() == (11,)


def test_observe_negative_index_raises_index_error(counter):
    counter.move(1)
    with pytest.raises(IndexError, match="expected an index >= 0") as raised:
        counter.observe(-1)
    assert not isinstance(raised.value, paths.AxedError)


def test_stats_count_moves_observes_and_live_tuples(counter):
    for value in range(5):
        counter.move(value)
    counter.observe()
    counter.observe(3)
    stats = counter.stats()
    assert (stats["live_tuples"], stats["moves"], stats["observes"], stats["waits"]) == (5, 5, 2, 0)
    assert stats["bytes_held"] >= 5 * 8


# ---- delta ---------------------------------------------------------------------------------------


def test_delta_sets_and_reads_the_bound(counter):
    assert counter.delta() == 0
    assert counter.delta(10) == 10
    assert counter.delta() == 10
    assert counter.delta(0) == 0


def test_negative_delta_raises_value_error(counter):
    with pytest.raises(ValueError, match="expected a bound >= 0"):
        counter.delta(-1)
    assert counter.delta() == 0


def test_delta_bound_admits_moves_again_as_tuples_are_read(counter):
    counter.delta(2)
    counter.move(1)
    counter.move(2)
    with pytest.raises(TimeoutError):
        counter.move(3, timeout=0)
    counter.observe()
    counter.move(3, timeout=0)
    assert counter.last() == 3


def test_unbounded_element_never_blocks_a_move(counter):
    for value in range(10_000):
        counter.move(value, timeout=0)
    assert counter.stats()["waits"] == 0


# ---- axe -----------------------------------------------------------------------------------------


def test_axe_frees_history_and_moves_a_cursor_behind_it(counter):
    for value in range(10):
        counter.move(value)
    counter.observe()
    counter.axe(4)
    assert counter.first() == 4
    assert counter.last() == 10
    assert counter.stats()["live_tuples"] == 6
    assert counter.observe(4) == (4,)
    assert counter.observe() == (4,)


def test_axe_behind_the_cursor_leaves_it(counter):
    for value in range(10):
        counter.move(value)
    for _ in range(6):
        counter.observe()
    counter.axe(3)
    assert counter.first() == 6


def test_observing_an_axed_tuple_raises_axed_error_naming_the_index(counter):
    for value in range(10):
        counter.move(value)
    counter.axe(4)
    assert issubclass(paths.AxedError, IndexError)
    with pytest.raises(paths.AxedError, match=r"observe\(2\): tuple 2 was freed by axe \(first live index is 4\)"):
        counter.observe(2)


def test_axe_everything_moved_empties_the_element(counter):
    for value in range(10):
        counter.move(value)
    counter.axe(counter.last())
    assert counter.stats()["live_tuples"] == 0
    with pytest.raises(TimeoutError):
        counter.observe(timeout=0)
    counter.move(10)
    assert counter.observe() == (10,)


@pytest.mark.parametrize("index", [-1, 4])
def test_axe_outside_the_history_raises_index_error(counter, index):
    for value in range(3):
        counter.move(value)
    with pytest.raises(IndexError, match=r"expected 0 <= index <= last\(\) = 3"):
        counter.axe(index)
    assert counter.observe(0) == (0,)


# ---- timeouts ------------------------------------------------------------------------------------


def bound_at_one_and_full(e):
    e.delta(1)
    e.move(7)


# name -> (prepare the element so that the call blocks, the blocking call)
BLOCKING_CALLS = {
    "observe on an empty element": (lambda e: None, lambda e, timeout: e.observe(timeout=timeout)),
    "observe(i) past the end": (lambda e: e.move(7), lambda e, timeout: e.observe(1, timeout=timeout)),
    "move at the delta bound": (bound_at_one_and_full, lambda e, timeout: e.move(8, timeout=timeout)),
}


@pytest.fixture(params=list(BLOCKING_CALLS), ids=list(BLOCKING_CALLS))
def blocked(request, counter):
    """An element prepared so that the named call blocks, and that call (e, timeout)."""
    prepare, call = BLOCKING_CALLS[request.param]
    prepare(counter)
    return counter, call


def test_blocking_call_times_out_and_changes_nothing(blocked):
    e, call = blocked
    before = snapshot(e)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="timed out"):
        call(e, BLOCK_S)
    took = time.monotonic() - started
    assert BLOCK_S <= took < BLOCK_S + SANE_OVERRUN_S
    assert snapshot(e) == before
    assert e.stats()["waits"] >= 1


def test_zero_timeout_is_a_poll(blocked):
    e, call = blocked
    before = snapshot(e)
    with pytest.raises(TimeoutError):
        call(e, 0)
    assert snapshot(e) == before


def test_element_works_after_a_timed_out_call(blocked):
    e, call = blocked
    with pytest.raises(TimeoutError):
        call(e, BLOCK_S)
    moved = [e.observe(i) for i in range(e.last())]
    e.delta(0)
    e.move(9)
    e.move(10)
    while e.first() < e.last():
        e.observe(timeout=0)
    assert [e.observe(i) for i in range(e.last())] == moved + [(9,), (10,)]


@pytest.mark.parametrize("bad_timeout", [-0.001, -1, math.nan])
def test_bad_timeout_raises_value_error(blocked, bad_timeout):
    e, call = blocked
    before = snapshot(e)
    with pytest.raises(ValueError, match="timeout: expected None or a finite number of seconds >= 0"):
        call(e, bad_timeout)
    assert snapshot(e) == before
