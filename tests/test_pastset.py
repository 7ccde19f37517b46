"""The PastSet element API from Python, single-threaded: every operation, every error, tuple
formats (checked against Python's struct), and timeouts that leave the element as it was."""

import math
import re
import struct
import subprocess
import sys
import textwrap
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


def test_a_nul_byte_in_a_name_is_refused_not_cut(space):
    space.enter("a", "q")
    with pytest.raises(ValueError, match=r"enter\('a\\x00b', 'q'\): expected text without NUL bytes"):
        space.enter("a\x00b", "q")
    with pytest.raises(ValueError, match="without NUL bytes"):
        space.enter("c", "q\x00d")
    assert space.elements() == [("a", "q")]


@pytest.mark.parametrize("call, args, error, expected", [
    ("enter", (5, "q"), TypeError, r"^enter\(5, 'q'\): expected a name as text, got 5$"),
    ("enter", ("a", None), TypeError, r"^enter\('a', None\): expected a format as text, got None$"),
    ("enter", (b"a", "q"), TypeError, r"^enter\(b'a', 'q'\): expected a name as text, got b'a'$"),
    ("enter", ("a\ud800", "q"), ValueError, r"^enter\('a\\ud800', 'q'\): expected a name as text UTF-8 can hold"),
    ("remove", ("a", 1.5), TypeError, r"^remove\('a', 1\.5\): expected a format as text, got 1\.5$"),
    ("format_of", (["a"],), TypeError, r"^format_of\(\['a'\]\): expected a name as text, got \['a'\]$"),
])
def test_a_name_or_format_that_is_no_text_is_one_line_naming_the_argument(space, call, args, error, expected):
    """Not the binding's several-line list of signatures."""
    space.enter("a", "q")
    with pytest.raises(error, match=expected):
        getattr(space, call)(*args)
    assert space.elements() == [("a", "q")]


@pytest.mark.parametrize("bad_format", ["qé", "é", "\u2603q"])
def test_non_ascii_format_is_one_clear_line(space, bad_format):
    with pytest.raises(ValueError, match=rf"bad format '{bad_format}': a non-ASCII character at byte \d+ "
                                         r"\(expected one of xcbB\?hHiIlLqQnNefdspP\)$"):
        space.enter("bad", bad_format)


def test_a_very_long_format_is_shown_cut(space):
    with pytest.raises(ValueError) as raised:
        space.enter("bad", "q" * 100_000)
    assert str(raised.value) == f"bad format '{'q' * 64}...': longer than 64 characters"


def test_elements_lists_names_and_formats_in_creation_order(space):
    space.enter("b", "q")
    space.enter("a", "16s")
    space.enter("b", "q")
    assert space.elements() == [("b", "q"), ("a", "16s")]


# ---- remove ------------------------------------------------------------------------------------


def test_remove_frees_an_element_and_enter_starts_a_new_one(space):
    e = space.enter("jobs", "q")
    for value in range(3):
        e.move(value)
    space.enter("other", "d")
    del e
    space.remove("jobs", "q")
    assert space.elements() == [("other", "d")]
    again = space.enter("jobs", "qd")  # the name is free, for any format
    assert (again.first(), again.last()) == (0, 0)
    assert space.elements() == [("other", "d"), ("jobs", "qd")]


def test_remove_is_refused_while_an_element_object_holds_it(space):
    e = space.enter("jobs", "q")
    same = space.enter("jobs", "q")
    e.move(7)
    with pytest.raises(RuntimeError, match=r"remove\('jobs', 'q'\): element 'jobs' is in use \(2 hold\(s\)"):
        space.remove("jobs", "q")
    assert same.observe() == (7,)  # untouched
    del e
    with pytest.raises(RuntimeError, match=r"in use \(1 hold\(s\)"):
        space.remove("jobs", "q")
    del same
    space.remove("jobs", "q")
    assert space.elements() == []


def test_remove_is_refused_while_a_path_is_built_over_it(space):
    handle = paths.build_path(paths.make_path(paths.stage("cache"), paths.stage("core", name="C", format="q")),
                              pastset=space)
    handle.move(5)
    with pytest.raises(RuntimeError, match="element 'C' is in use"):
        space.remove("C", "q")
    assert handle.observe() == (5,)
    del handle  # the path goes with its last handle, and with it the core stage's hold
    space.remove("C", "q")
    assert space.elements() == []


@pytest.mark.parametrize("name, fmt, expected", [
    ("missing", "q", r"remove\('missing', 'q'\): there is no element 'missing'"),
    ("jobs", "qd", r"remove\('jobs', 'qd'\): element 'jobs' has format 'q'"),
    ("jobs", "z", r"bad format 'z'"),
    ("jobs\x00", "q", r"expected text without NUL bytes"),
])
def test_remove_of_what_is_not_there_raises_value_error(space, name, fmt, expected):
    space.enter("jobs", "q")
    with pytest.raises(ValueError, match=expected):
        space.remove(name, fmt)
    assert space.elements() == [("jobs", "q")]


def test_entering_a_hundred_thousand_names_takes_constant_time_each(space):
    """A linear look-up took 35 s for 10^5 names; a hashed one takes well under a second (most of
    that is Python making Element objects)."""
    names = [f"element-{i}" for i in range(100_000)]
    started = time.monotonic()
    for name in names:
        space.enter(name, "q")
    entered = time.monotonic() - started
    started = time.monotonic()
    found = [space.enter(name, "q").name for name in reversed(names)]
    looked_up = time.monotonic() - started
    assert found == names[::-1]
    assert len(space.elements()) == 100_000
    assert entered < 10 and looked_up < 10, f"{entered:.1f} s to enter, {looked_up:.1f} s to look up again"
    for name in names[::2]:
        space.remove(name, "q")
    assert space.elements() == [(name, "q") for name in names[1::2]]


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


@pytest.mark.parametrize("fmt, values, expected", [
    ("16s", (b"x" * 17,), "field 0 ('16s') holds at most 16 bytes, got 17"),
    ("q4sd", (1, bytearray(b"12345"), 2.0), "field 1 ('4s') holds at most 4 bytes, got 5"),
    ("3p", (b"abc",), "field 0 ('3p') holds at most 2 bytes, got 3"),  # one byte is the length
    ("300p", (b"x" * 256,), "field 0 ('300p') holds at most 255 bytes, got 256"),  # the length byte's most
    ("q0s", (1, b"a"), "field 1 ('0s') holds at most 0 bytes, got 1"),
])
def test_bytes_longer_than_their_field_are_refused_not_cut(space, fmt, values, expected):
    e = space.enter("names", fmt)
    with pytest.raises(ValueError) as raised:
        e.move(values)
    assert str(raised.value) == f"element 'names' move (format '{fmt}'): {expected}"
    assert e.last() == 0


def test_bytes_that_fit_their_field_exactly_are_kept_whole(space):
    e = space.enter("names", "q4s3p")
    e.move((1, b"1234", b"ab"))
    assert e.observe() == (1, b"1234", b"ab")
    long = space.enter("long", "300p")
    long.move(b"y" * 255)
    assert long.observe() == (b"y" * 255,)


def test_short_bytes_are_zero_padded_to_the_field(space):
    e = space.enter("names", "16s")
    e.move(b"abc")
    assert e.observe() == (b"abc" + bytes(13),)


@pytest.mark.parametrize("fmt, value", [("q", 5), ("16s", b"bare"), ("?", True), ("d", 0.5)])
def test_single_value_format_accepts_a_bare_value(space, fmt, value):
    e = space.enter("single", fmt)
    e.move(value)
    assert e.observe() == struct.unpack(fmt, struct.pack(fmt, value))


def test_a_list_of_the_values_is_taken_as_their_tuple_and_a_dict_is_not(space):
    e = space.enter("listed", "qd")
    e.move([1, 2.0])
    assert e.observe() == (1, 2.0)
    with pytest.raises(TypeError, match=r"got \{1: 2\} \(not a tuple or list\)$"):
        e.move({1: 2})


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


def test_move_many_takes_what_the_bound_lets_in_and_says_how_many(counter):
    """A move_many at the delta bound moves what fits and, timing out, says how many of its tuples
    took effect: those, in order, and none after. Room made, the rest goes in."""
    counter.delta(5)
    counter.move(-1)
    with pytest.raises(TimeoutError, match=r"move_many \(4 of 12 tuples moved\): timed out"):
        counter.move_many([(v,) for v in range(12)], timeout=BLOCK_S)
    assert counter.observe_range(0, 20) == [(-1,), (0,), (1,), (2,), (3,)]
    for _ in range(5):
        counter.observe()
    counter.move_many([(v,) for v in range(4, 9)], timeout=0)
    assert counter.observe_range(0, 20) == [(-1,)] + [(v,) for v in range(9)]
    assert counter.stats()["moves"] == 10


def test_unbounded_element_never_blocks_a_move(counter):
    for value in range(10_000):
        counter.move(value, timeout=0)
    assert counter.stats()["waits"] == 0


# ---- axe -----------------------------------------------------------------------------------------


def test_axe_frees_the_tuples_the_cursor_has_passed(counter):
    for value in range(10):
        counter.move(value)
    for _ in range(6):
        counter.observe()
    counter.axe(4)
    assert (counter.first(), counter.last()) == (6, 10)
    assert counter.stats()["live_tuples"] == 6
    assert counter.observe(4) == (4,)
    assert counter.observe() == (6,)


def test_axe_ahead_of_the_cursor_loses_no_unread_tuple(counter):
    for value in range(10):
        counter.move(value)
    counter.observe()
    counter.axe(8)
    assert counter.first() == 1, "the cursor jumped over unread tuples"
    assert counter.stats()["live_tuples"] == 9
    with pytest.raises(paths.AxedError, match=r"tuple 5 was freed by axe \(first live index is 8\)"):
        counter.observe(5)  # axed for indexed reads, read or not
    assert [counter.observe(timeout=0) for _ in range(9)] == [(v,) for v in range(1, 10)]
    assert counter.stats()["live_tuples"] == 2  # tuples 8 and 9: the cursor freed the rest as it passed


def test_unread_axed_tuples_still_count_against_the_delta_bound(counter):
    counter.delta(2)
    counter.move(1)
    counter.move(2)
    counter.axe(2)
    with pytest.raises(TimeoutError):
        counter.move(3, timeout=0)
    assert counter.observe() == (1,)
    counter.move(3, timeout=0)
    assert [counter.observe(timeout=0) for _ in range(2)] == [(2,), (3,)]


def test_the_axe_point_never_moves_back(counter):
    for value in range(10):
        counter.move(value)
    counter.axe(6)
    counter.axe(3)
    with pytest.raises(paths.AxedError, match="first live index is 6"):
        counter.observe(4)


def test_observing_an_axed_tuple_raises_axed_error_naming_the_index(counter):
    for value in range(10):
        counter.move(value)
    counter.axe(4)
    assert issubclass(paths.AxedError, IndexError)
    with pytest.raises(paths.AxedError, match=r"observe\(2\): tuple 2 was freed by axe \(first live index is 4\)"):
        counter.observe(2)


def test_axe_everything_moved_empties_the_element_once_read(counter):
    for value in range(10):
        counter.move(value)
    counter.axe(counter.last())
    assert counter.stats()["live_tuples"] == 10
    assert [counter.observe(timeout=0) for _ in range(10)] == [(v,) for v in range(10)]
    assert counter.stats()["live_tuples"] == 0
    with pytest.raises(TimeoutError):
        counter.observe(timeout=0)
    counter.move(10)
    assert counter.observe() == (10,)


@pytest.mark.parametrize("index", [-1, 4, 2**63, -(2**70)])
def test_axe_outside_the_history_raises_index_error(counter, index):
    for value in range(3):
        counter.move(value)
    with pytest.raises(IndexError, match=rf"axe\({index}\): expected 0 <= index <= last\(\) = 3"):
        counter.axe(index)
    assert counter.observe(0) == (0,)


@pytest.mark.parametrize("index", ["2", 1.0, True])
def test_axe_of_no_int_raises_type_error(counter, index):
    counter.move(1)
    with pytest.raises(TypeError, match=rf"element 'counter' axe\({re.escape(repr(index))}\): expected an int"):
        counter.axe(index)
    assert counter.observe(0) == (1,)


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


def test_a_timeout_beyond_any_float_is_no_limit(space):
    e = space.enter("T", "q")
    e.move(1)
    assert e.observe(0, timeout=10**400) == (1,)  # 10**400 s: no double holds it, and it is no limit


@pytest.mark.parametrize("bad_timeout", [-0.001, -1, math.nan, -10**400])
def test_bad_timeout_raises_value_error(blocked, bad_timeout):
    e, call = blocked
    before = snapshot(e)
    with pytest.raises(ValueError, match="timeout: expected None or a finite number of seconds >= 0"):
        call(e, bad_timeout)
    assert snapshot(e) == before


def test_ctrl_c_while_the_core_initializes_is_the_interrupt_not_an_import_error():
    """Ctrl-C lands in the C core's initialization (here: as it imports threading): `import paths`
    raises KeyboardInterrupt, as an interrupted import of anything else would, not the binding's
    ImportError "initialization failed", which says the installation is broken (and exits 1)."""
    program = textwrap.dedent("""
        import sys
        class Interrupting:
            def find_spec(self, name, path=None, target=None):
                if name == "threading":
                    raise KeyboardInterrupt
        sys.modules.pop("threading", None)
        sys.meta_path.insert(0, Interrupting())
        try:
            import paths
        except BaseException as e:
            print(type(e).__name__)
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "KeyboardInterrupt\n", "")
