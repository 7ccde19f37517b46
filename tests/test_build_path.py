"""build_path: merging of equal remainders, id=, validation before building, show/to_dot,
and stage kinds written in Python."""

import gc
import os
import stat
import subprocess
import sys
import threading
import time

import pytest

import paths
from paths import BuildContext, build_path, make_path, stage
from paths.model.stage_kinds import check_spec
from paths.runtime.build import handle_tree
from paths.runtime.trace_file import read_trace

PATIENCE_S = 30  # the longest any wait here may take before its test fails

CORE = stage("core", name="G", format="q")


def sum_path(*stages):
    return make_path(*stages, CORE)


def test_equal_remainders_merge_into_one_stage(space):
    p = sum_path(stage("reduce-sum", num_threads=3))
    handles = [build_path(p, pastset=space) for _ in range(3)]
    assert {h.stage.kind for h in handles} == {"reduce-sum"}
    assert handles[0].stage.link_count == 3
    assert sorted(h.slot for h in handles) == [0, 1, 2]


def test_specs_equal_once_defaults_are_filled_in_merge(space, tmp_path):
    """A parameter given its default is the spec without it: the paths share the stage (shown as
    the first build spelled it), and a trace given its file both ways is one stage writing it."""
    trace = str(tmp_path / "t.bin")
    plain = build_path(sum_path(stage("trace", file=trace), stage("cache")), pastset=space)
    spelled = build_path(sum_path(stage("trace", file=trace, mode="timestamp", capacity=1 << 20),
                                  stage("cache", capacity=1024, prefetch="none")), pastset=space)
    assert spelled.stage is plain.stage and plain.stage.link_count == 2
    assert paths.render_tree(plain).count("trace(") == 1
    assert "cache()" in paths.render_tree(spelled)  # as the first build spelled it
    other = build_path(sum_path(stage("trace", file=str(tmp_path / "u.bin")), stage("cache", capacity=8)),
                       pastset=space)
    assert other.stage is not plain.stage  # a value other than the default is another stage
    plain.move(3)
    assert spelled.observe(0) == (3,)


def test_a_path_has_at_most_256_stages(space):
    sums = [stage("reduce-sum", num_threads=1, id=str(i)) for i in range(256)]
    with pytest.raises(ValueError, match=r"^path of 257 stages: a path has at most 256 \(its first stages: "):
        build_path(sum_path(*sums), pastset=space)
    h = build_path(sum_path(*sums[1:]), pastset=space)
    h.move(4)
    assert h.observe(0) == (4,) and paths.render_tree(h).count("reduce-sum(") == 255


def test_id_keeps_equal_stages_apart(space):
    a = build_path(sum_path(stage("reduce-sum", num_threads=1, id="a")), pastset=space)
    b = build_path(sum_path(stage("reduce-sum", num_threads=1, id="b")), pastset=space)
    assert a.stage.link_count == 1 and b.stage.link_count == 1
    a.move(5)
    b.move(7)
    assert a.observe() == (5,)  # each single-contributor sum goes down alone
    assert b.observe() == (7,)
    # Both reached the same element below them.
    element = space.enter("G", "q")
    assert element.last() == 2


def test_tree_render_shows_threads_stages_and_element(space):
    handles = []
    for g in range(2):
        p = sum_path(stage("reduce-sum", num_threads=2, id=f"g{g}"), stage("reduce-sum", num_threads=2))
        handles += [build_path(p, pastset=space, label=f"t{g}{i}") for i in range(2)]
    text = paths.render_tree(handles[0])
    lines = text.splitlines()
    assert lines[0].startswith("core(")
    assert "reduce-sum(num_threads=2)  [2/2 callers]" in lines[1]
    assert sum("id='g" in line for line in lines) == 2
    assert [label for label in ("t00", "t01", "t10", "t11") if label in text] == ["t00", "t01", "t10", "t11"]
    dot = paths.to_dot(handles[0])
    assert dot.startswith("digraph path {") and dot.rstrip().endswith("}")
    assert dot.count("->") == 3 + 4  # three stage edges, four callers
    quoted = build_path(make_path(stage("core", name="Q", format="q")), pastset=space, label='my "label" \\x')
    assert '_c0 [shape=ellipse, label="my \\"label\\" \\\\x"];' in paths.to_dot(quoted)


@pytest.mark.parametrize("label, error", [(5, TypeError), (b"x", TypeError), ("a\x00b", ValueError),
                                          ("two\nlines", ValueError), ("x" * 201, ValueError), ("", ValueError)])
def test_a_label_that_is_no_line_of_text_is_refused_before_anything_is_built(space, label, error):
    """A label names its caller in messages and in paths.show, one line each. The refused build
    takes no caller's place: the sum's one slot is still there for the next."""
    path = make_path(stage("reduce-sum", num_threads=1), stage("core", name="L", format="q"))
    with pytest.raises(error, match=r"^build_path: label: expected None or text of 1 to 200 printable characters"):
        build_path(path, pastset=space, label=label)
    assert build_path(path, pastset=space, label="x" * 200).stage.link_count == 1


@pytest.mark.parametrize(
    "spec, error, words",
    [
        (stage("reduce", num_threads=2), ValueError, ["unknown stage kind 'reduce'", "reduce-sum"]),
        (stage("reduce-sum"), ValueError, ["missing parameter 'num_threads'"]),
        (stage("reduce-sum", num_threads=2, fanin=3), ValueError, ["unknown parameter 'fanin'", "num_threads"]),
        (stage("reduce-sum", num_threads="2"), TypeError, ["'num_threads' must be int", "str"]),
        (stage("reduce-sum", num_threads=0), ValueError, ["between 1 and"]),
        (stage("trace", file="t.bin", mode="fast"), ValueError, ["one of timestamp, operation", "'fast'"]),
        (stage("cache", capacity=True), TypeError, ["'capacity' must be int"]),
    ],
)
def test_validation_names_stage_parameter_and_choices(space, spec, error, words):
    with pytest.raises(error) as raised:
        build_path(sum_path(spec), pastset=space)
    for word in words:
        assert word in str(raised.value)
    assert space.elements() == []  # nothing was built


def test_path_shape_errors(space):
    with pytest.raises(ValueError, match="last stage must be stage\\('core'"):
        build_path(make_path(stage("reduce-sum", num_threads=1)), pastset=space)
    with pytest.raises(ValueError, match="may only be the last stage"):
        build_path(make_path(CORE, CORE), pastset=space)
    with pytest.raises(TypeError, match="make_path"):
        make_path("reduce-sum")
    with pytest.raises(ValueError, match="element 'G' exists with format 'q', not 'd'"):
        build_path(make_path(stage("core", name="G", format="q")), pastset=space)
        build_path(make_path(stage("core", name="G", format="d")), pastset=space)
    with pytest.raises(ValueError, match=r"^stage 'core': parameter 'format': bad format 'k': unknown format "
                                         r"character 'k'"):
        build_path(make_path(stage("core", name="K", format="k")), pastset=space)


@pytest.mark.parametrize("value, shown", [([1, 2], "a list: [1, 2]"), ({"a": 1}, "a dict: {'a': 1}")])
def test_a_parameter_that_may_change_is_refused_naming_it(value, shown):
    """A stage's parameters key the stages built from it: a list or a dict gave Python's bare
    'unhashable type' from inside the builder."""
    with pytest.raises(TypeError) as refused:
        stage("cache", id=value)
    assert str(refused.value) == (f"stage 'cache': parameter 'id': expected a value that does not change (an int, "
                                  f"float, str, bool, None, or a tuple of those), got {shown}")
    assert stage("cache", id=(1, 2)).params == (("id", (1, 2)),)


@pytest.mark.parametrize("where", ["a folder", "a name ending in /"])
def test_a_trace_file_that_is_a_folder_is_refused_at_build(space, tmp_path, where):
    """Its file is written at release, by a rename that a folder would refuse then."""
    folder = tmp_path / "traces"
    folder.mkdir()
    file = str(folder) if where == "a folder" else f"{folder}/"
    with pytest.raises(ValueError, match=rf"^stage 'trace': cannot write trace file '{file}': Is a directory$"):
        build_path(make_path(stage("trace", file=file), stage("core", name="T", format="q")), pastset=space)


@pytest.mark.parametrize("what", ["a pipe", "a device"])
def test_a_trace_file_that_is_no_regular_file_is_refused_at_build_and_left_alone(space, tmp_path, what):
    """The file is written anew and renamed over its name at release: over a device (/dev/full,
    run as root) or a pipe, that would replace it with a regular file."""
    file = tmp_path / what.split()[1]
    if what == "a pipe":
        os.mkfifo(file)
    else:
        try:  # one of its own, as /dev/null is (a failure here must not replace the machine's)
            os.mknod(file, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("making a device node needs root")
    kind = file.stat().st_mode
    with pytest.raises(ValueError, match=rf"^stage 'trace': cannot write trace file '{file}': it exists and is no "
                                         r"regular file \(a trace file is written anew and replaces what has its "
                                         r"name\)$"):
        build_path(make_path(stage("trace", file=str(file)), stage("core", name="T", format="q")), pastset=space)
    assert file.stat().st_mode == kind
    assert [p.name for p in file.parent.iterdir() if p.name.startswith(f"{file.name}.tmp-")] == []


@paths.stage_kind("test-needs-a-value")
class NeedsAValue:
    def __init__(self, value):
        self.value = value


def test_a_missing_parameter_of_a_kind_that_says_nothing_of_it_is_named_with_its_type_alone(space):
    """Not "(any: )", an empty text where a built-in kind says what the parameter is."""
    with pytest.raises(ValueError, match=r"^stage test-needs-a-value\(\): missing parameter 'value' \(any\)$"):
        build_path(make_path(stage("test-needs-a-value"), stage("core", name="V", format="q")), pastset=space)


@paths.stage_kind("test-refused-at-creation")
class RefusedAtCreation:
    def __init__(self):
        raise ValueError("not today")


@pytest.mark.parametrize("above, error", [
    (stage("reduce-sum", num_threads=2), "format '8s' has fields that cannot be added"),
    (stage("trace", file="/no/such/folder/t.bin"), "cannot write trace file"),
    (stage("test-refused-at-creation"), "not today"),
], ids=["a sum of bytes", "an unwritable trace", "a Python kind's __init__"])
def test_a_build_refused_at_a_stages_creation_leaves_no_element(space, above, error):
    kept = space.enter("KEPT", "8s")  # there before: a refused build over it leaves it be
    for name in ("NEW", "KEPT"):
        with pytest.raises(ValueError, match=error):
            build_path(make_path(above, stage("core", name=name, format="8s")), pastset=space)
    assert space.elements() == [("KEPT", "8s")]
    del kept
    build_path(make_path(stage("core", name="NEW", format="q")), pastset=space)  # no clash with a leftover


def test_a_refused_build_leaves_an_element_someone_moved_into(space):
    handle = build_path(make_path(stage("core", name="USED", format="8s")), pastset=space)
    handle.move((b"x",))
    del handle  # the element outlives its stages, with its tuple
    with pytest.raises(ValueError, match="cannot be added"):
        build_path(make_path(stage("reduce-sum", num_threads=2), stage("core", name="USED", format="8s")),
                   pastset=space)
    assert space.enter("USED", "8s").observe(0) == (b"x" + bytes(7),)
    assert space.format_of("USED") == "8s" and space.format_of("NONE") is None


def test_only_an_element_nobody_holds_or_moved_into_is_removed_as_unused(space):
    space.enter("MOVED", "q").move((1,))
    held = space.enter("HELD", "q")
    space.enter("EMPTY", "q")
    assert [space._remove_unused(name, "q") for name in ("MOVED", "HELD", "EMPTY")] == [False, False, True]
    assert space.elements() == [("MOVED", "q"), ("HELD", "q")] and held.last() == 0


def test_one_caller_too_many_is_refused_before_building(space):
    p = sum_path(stage("reduce-sum", num_threads=2, id="x"), stage("reduce-sum", num_threads=1))
    keep = [build_path(p, pastset=space) for _ in range(2)]
    with pytest.raises(ValueError, match="fan-in 2 is used up.*caller 3, one too many"):
        build_path(p, pastset=space)
    # A second group above the fan-in-1 sum would be its second caller: refused too.
    q = sum_path(stage("reduce-sum", num_threads=2, id="y"), stage("reduce-sum", num_threads=1))
    with pytest.raises(ValueError, match="reduce-sum\\(num_threads=1\\): fan-in 1 is used up"):
        build_path(q, pastset=space)
    assert keep[0].stage.link_count == 2


def test_a_released_contributor_is_not_replaced_and_the_refusal_says_so(space):
    """Releasing one of a sum's two handles while the other is in use and building the path
    again: refused, saying that the released caller still counts (not '2 callers attached')."""
    p = sum_path(stage("reduce-sum", num_threads=2))
    a, b = build_path(p, pastset=space), build_path(p, pastset=space)
    del a
    gc.collect()
    with pytest.raises(ValueError) as refused:
        build_path(p, pastset=space)
    assert str(refused.value) == (
        "stage reduce-sum(num_threads=2): fan-in 2 is used up (2 callers have joined it, released ones included: its "
        "callers are contributors, and one that went (released, or its process ended) is not replaced); this path "
        "would be caller 3, one too many. Build at most 2 paths through it, or keep stages apart with id=...")
    assert b.stage.link_count == 2


def stage_below(handle):
    """The native stage just below a handle's top stage."""
    context, key = handle_tree(handle)
    return context.live(key).below.native


def test_pass_through_stage_keeps_each_caller_distinct_below(space, tmp_path):
    p = sum_path(stage("cache", capacity=4), stage("reduce-sum", num_threads=4))
    handles = [build_path(p, pastset=space) for _ in range(4)]
    assert handles[0].stage.kind == "cache"
    assert stage_below(handles[0]).link_count == 4  # four contributors, not one
    paths.bench.gsum(handles, 200)  # checks every total
    assert space.enter("G", "q").last() == 200


def test_tree_is_released_with_its_last_handle(space):
    p = sum_path(stage("reduce-sum", num_threads=2))
    a, b = build_path(p, pastset=space), build_path(p, pastset=space)
    context, key = handle_tree(a)
    del a, b
    gc.collect()
    assert context.live(key) is None and context.live(key[1:]) is None
    space.remove("G", "q")  # nothing holds the element: its core stage went with the tree
    fresh = [build_path(p, pastset=space) for _ in range(2)]  # a new stage with a fresh fan-in
    assert fresh[0].stage.link_count == 2


@paths.stage_kind("offset")
class Offset:
    """Adds `amount` to the first field of every tuple moved (a Python stage, for the tests)."""

    def __init__(self, amount=1):
        self.amount = amount

    def move(self, below, t):
        below.move((t[0] + self.amount,) + tuple(t[1:]))


@paths.stage_kind("no-methods")
class NoMethods:
    """Answers nothing itself."""


def test_a_python_stage_passes_a_kind_made_of_others_whole_unless_it_answers_one_of_them(space):
    """move_many comes as moves only to a stage with a move method (Offset sees every tuple);
    through one with none it passes whole: a sum below refuses it whole, nothing moved."""
    moved = build_path(make_path(stage("offset", amount=10), CORE), pastset=space)
    moved.move_many([(1,), (2,)])
    assert [moved.observe(i) for i in range(2)] == [(11,), (12,)]
    p = make_path(stage("no-methods"), stage("reduce-sum", num_threads=2), stage("core", name="WHOLE", format="q"))
    ahead = build_path(p, pastset=space)
    with pytest.raises(RuntimeError, match=r"move_many \(0 of 5 tuples moved\) \(reduce-sum: a sum holds 4 rounds"):
        ahead.move_many([(1,)] * 5)  # five rounds ahead of its observes: a sum holds four
    ahead.move_many([(1,)] * 4)
    assert ahead.stage.counters()["operations"] == 2  # two calls, each one operation


@paths.stage_kind("refuse-observe")
class RefuseObserve:
    def observe(self, below):
        raise LookupError("this stage refuses next-observes")


def test_a_call_waiting_in_slices_holds_its_handle_between_them(space):
    """A blocking call waits in slices of 0.1 s (so that Ctrl-C is seen); another thread that
    calls the handle over and over, between two of them too, is refused every time, and the
    waiting call ends as its own timeout says, never refused itself. The other thread counts from
    its first refusal (the wait has begun) for 0.4 s of the wait's 0.8 s (after that, the wait may
    have ended and the handle be free)."""
    h = build_path(make_path(stage("core", name="EMPTY", format="q")), pastset=space)
    outcome, others = [], []
    waiter = threading.Thread(target=lambda: outcome.append(pytest.raises(TimeoutError, h.observe, timeout=0.8)))
    waiter.start()
    until = None
    while until is None or time.monotonic() < until:
        try:
            h.last()
            if until is not None:
                others.append("went through")
        except RuntimeError as e:
            until = until or time.monotonic() + 0.4
            others.append(str(e)[:40])
    waiter.join()
    assert outcome and len(others) > 1 and set(others) == {"this handle is in use by another thread "}


def test_a_handle_in_use_by_one_thread_refuses_another_and_goes_on(space):
    """A thread's handle is one caller's link (a remote stage's connection, a sum's contributor):
    another thread's call while one runs is refused, not let through to break it."""
    h = build_path(make_path(stage("test-release-gate"), CORE), pastset=space)  # holds a move until GATED
    GATED.clear()
    AT_GATE.clear()
    mover = threading.Thread(target=h.move, args=(1,))
    mover.start()
    assert AT_GATE.wait(PATIENCE_S)
    in_use = r"this handle is in use by another thread right now: give each thread a handle of its own"
    with pytest.raises(RuntimeError, match=in_use):
        h.last()
    idle = build_path(make_path(CORE), pastset=space)
    with pytest.raises(RuntimeError, match=in_use):
        paths.fence([idle, h], timeout=1)
    GATED.set()
    mover.join(PATIENCE_S)
    assert h.last() == 1 and h.observe() == (1,)  # the next user goes on, from any thread
    moved = []  # the fence let go of the handle it had claimed before it met the busy one
    other = threading.Thread(target=lambda: moved.append(idle.move(2) is None))
    other.start()
    other.join(PATIENCE_S)
    assert moved == [True]


def test_python_stage_kind_runs_in_a_path(space):
    h = build_path(make_path(stage("offset", amount=3), CORE), pastset=space)
    h.move(7)
    assert h.observe() == (10,)
    assert h.last() == 1 and h.first() == 1
    assert "offset" in paths.kinds()
    assert h.stage.kind == "offset"  # its own name, as the kinds written in C have theirs


def test_python_stage_exception_reaches_the_caller(space):
    h = build_path(make_path(stage("refuse-observe"), CORE), pastset=space)
    h.move(1)
    with pytest.raises(LookupError, match="refuses"):
        h.observe()
    assert h.observe(0) == (1,)  # the stage and the element are intact


@paths.stage_kind("refuse-moves")
class RefuseMoves:
    def move(self, below, t):
        raise LookupError("this stage refuses moves")


def test_a_python_stage_exception_in_a_release_is_not_raised_by_a_later_call(space):
    h = build_path(make_path(stage("batch", max_moves=4), stage("refuse-moves"), CORE), pastset=space)
    h.move(1)  # held back by the batch, sent down (and refused) when the handle goes
    del h
    gc.collect()
    with pytest.raises(TimeoutError, match="element 'other' observe: timed out"):
        space.enter("other", "q").observe(timeout=0)  # its own failure, not the stage's LookupError


@paths.stage_kind("wrong-answers")
class WrongAnswers:
    def first(self, below):
        return "soon"

    def last(self, below):
        return 2**64

    def observe(self, below):
        return None

    def observe_range(self, below, index, count):
        return None


@pytest.mark.parametrize("call, error, expected", [
    (lambda h: h.first(), TypeError, r"python stage WrongAnswers.first\(\) returned: expected an int, got 'soon'"),
    (lambda h: h.last(), ValueError,
     r"python stage WrongAnswers.last\(\) returned: expected an int from -2\*\*63 to 2\*\*63-1, got "
     r"18446744073709551616"),
    (lambda h: h.observe(), TypeError,
     r"python stage WrongAnswers.observe\(\) returned \(format 'q'\): expected a tuple of 1 value\(s\) \(int\), "
     r"got None"),
    (lambda h: h.observe_range(0, 1), TypeError,  # was: 'NoneType' object is not iterable
     r"python stage WrongAnswers.observe_range\(\) returned None: expected a list of 1 to 1 tuples"),
])
def test_python_stage_returning_the_wrong_type_is_one_clear_line(space, call, error, expected):
    h = build_path(make_path(stage("wrong-answers"), CORE), pastset=space)
    h.move(1)
    with pytest.raises(error, match=f"^{expected}"):
        call(h)
    assert h.observe(0) == (1,)


def test_python_stage_waits_no_longer_than_its_callers_timeout(space):
    h = build_path(make_path(stage("offset", amount=0), CORE), pastset=space)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        h.observe(timeout=0.3)  # the stage's own below.observe() has no timeout
    assert 0.3 <= time.monotonic() - started < 1.3
    mover = threading.Timer(0.3, lambda: space.enter("G", "q").move(5))
    mover.start()
    assert h.observe(timeout=10) == (5,)  # its slices' timeouts were no reason to give up
    mover.join()


@paths.stage_kind("forward-exchange")
class ForwardExchange:
    """Answers exchange and move_many itself, by the same calls on `below`."""

    def exchange(self, below, t):
        return below.exchange(t)

    def move_many(self, below, tuples):
        below.move_many(tuples)


def test_an_exchange_through_a_python_stage_whose_move_went_does_not_move_again(space):
    p = make_path(stage("forward-exchange"), stage("reduce-sum", num_threads=2), CORE)
    early, late = build_path(p, pastset=space), build_path(p, pastset=space)
    totals = {}
    waiter = threading.Thread(target=lambda: totals.setdefault("early", early.exchange(1, timeout=30)))
    waiter.start()
    time.sleep(0.5)  # several of the early caller's 0.1 s slices end while its exchange waits for the round
    assert late.exchange(2, timeout=30) == (3,)
    waiter.join()
    assert totals == {"early": (3,)}  # its move went once: no second round was started by it
    with pytest.raises(TimeoutError, match=r"exchange \(moved; its observe\)"):
        late.exchange(5, timeout=0.3)  # a round of its own only: nothing of the early caller's in it
    element = space.enter("G", "q")
    assert [element.observe(i) for i in range(element.last())] == [(3,)]


def test_a_move_many_through_a_python_stage_does_not_move_its_first_part_again(space):
    element = space.enter("G", "q")
    element.delta(2)
    h = build_path(make_path(stage("forward-exchange"), CORE), pastset=space)
    with pytest.raises(TimeoutError, match=r"move_many \(2 of 5 tuples moved\)"):
        h.move_many(range(5), timeout=0.3)
    assert element.last() == 2

    def read_slowly():
        for _ in range(5):  # room for one tuple at a time: the caller's 0.1 s slices end part way
            time.sleep(0.15)
            element.observe(timeout=30)

    reader = threading.Thread(target=read_slowly)
    reader.start()
    h.move_many(range(2, 7), timeout=10)  # moved again from its start in each slice, it would never end
    reader.join()
    assert [element.observe(i)[0] for i in range(element.last())] == list(range(7))


KEPT_BELOW = """
import gc, paths
from paths import build_path, make_path, stage

@paths.stage_kind("keep-below")
class KeepBelow:
    kept = []

    def move(self, below, t):
        self.kept.append(below)
        below.move(t)

space = paths.PastSet()
h = build_path(make_path(stage("keep-below"), stage("core", name="G", format="q")), pastset=space)
h.move(1)
below = KeepBelow.kept[0]
for gone in (False, True):
    if gone:
        del h
        gc.collect()
    for name, call in [("last", lambda: below.last()), ("move", lambda: below.move(2)),
                       ("observe", lambda: below.observe(timeout=0.5)), ("fence", lambda: paths.fence(below)),
                       ("capsule", lambda: below.capsule())]:
        try:
            call()
            print(name, "ran")
        except RuntimeError as e:
            print(f"{name}: {e}")
print("moved", space.enter("G", "q").last())
"""


def test_a_below_kept_past_its_call_is_refused_not_a_crash():
    done = subprocess.run([sys.executable, "-c", KEPT_BELOW], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    only = "a Python stage's `below` is a handle only during the call it was given to"
    expected = [f"last: below 0 last ({only}): closed", f"move: below 0 move ({only}): closed",
                f"observe: below 0 observe ({only}): closed", f"fence: fence: below 0: {only}",
                f"capsule: below 0 capsule: {only}"]
    assert done.stdout.splitlines() == expected * 2 + ["moved 1"]  # its caller's handle alive, then gone


RELEASED_AT_EXIT = """
import sys
import paths
from paths import build_path, make_path, stage

@paths.stage_kind("test-exit-pass")
class Pass:
    def move(self, below, t):
        below.move(t)

h = build_path(make_path(stage("batch", max_moves=4, buffers=int(sys.argv[2])), stage("test-exit-pass"),
                         stage("trace", file=sys.argv[1]), stage("core", name="X", format="q")))
for i in range(7):
    h.move(i)
"""


@pytest.mark.parametrize("buffers", [1, 2])
def test_a_handle_on_a_python_kind_of_the_script_kept_in_its_globals_is_released_at_exit(tmp_path, buffers):
    """The stage holds the kind's instance in C, whose methods hold the script's globals, which
    hold the handle: the collector cannot free it, so paths releases it at exit. The batch sends
    the 3 moves it holds, and the trace below writes its file."""
    trace = tmp_path / "exit.bin"
    done = subprocess.run([sys.executable, "-c", RELEASED_AT_EXIT, str(trace), str(buffers)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    moves = [e.tuple for e in read_trace(trace).events if e.op == "move"]
    assert len(moves) == 7


GATED, AT_GATE = threading.Event(), threading.Event()


@paths.stage_kind("test-release-gate")
class ReleaseGate:
    """Holds a move until GATED opens."""

    def move(self, below, t):
        AT_GATE.set()
        GATED.wait(PATIENCE_S)
        below.move(t)


def test_a_handle_released_at_exit_refuses_what_comes_after_and_one_in_an_operation_is_left(space):
    """What paths does at exit: an idle handle lets its link and path go, and refuses what comes
    after; one in an operation in another thread keeps them (the operation ends as it would), and
    refuses what comes after it."""
    path = make_path(stage("test-release-gate"), stage("core", name="R", format="q"))
    idle = build_path(path, pastset=space)
    assert idle._release_if_idle() is True and idle.stage is None
    with pytest.raises(RuntimeError, match=r"thread 0 last \(the handle was released\): closed"):
        idle.last()
    busy = build_path(path, pastset=space)
    GATED.clear()
    AT_GATE.clear()
    mover = threading.Thread(target=busy.move, args=(1,))
    mover.start()
    try:
        assert AT_GATE.wait(PATIENCE_S)
        assert busy._release_if_idle() is False
    finally:
        GATED.set()
        mover.join()
    assert space.enter("R", "q").last() == 1 and busy.stage is not None
    with pytest.raises(RuntimeError, match="closed"):
        busy.move(2)


def test_a_nul_byte_in_a_stage_parameter_is_refused_before_anything_is_built(space):
    with pytest.raises(ValueError, match=r"parameter 'name' must not contain a NUL byte, got 'a\\x00b'"):
        build_path(make_path(stage("core", name="a\x00b", format="q")), pastset=space)
    with pytest.raises(ValueError, match=r"parameter 'file' must not contain a NUL byte"):
        build_path(make_path(stage("trace", file="t\x00.bin"), CORE), pastset=space)
    with pytest.raises(ValueError, match=r"parameter 'name' must be text UTF-8 can hold \(no lone surrogate\), got "
                                         r"'\\ud800'"):
        build_path(make_path(stage("core", name="\ud800", format="q")), pastset=space)
    assert space.elements() == []


def test_a_nul_byte_is_refused_by_the_native_builder_too(space):
    with pytest.raises(ValueError, match=r"stage 'core': parameter 'name': expected text without NUL bytes"):
        paths._native.create_stage("core", {"name": "a\x00b", "format": "q"}, None, space)
    assert space.elements() == []


OUT_OF_MEMORY = """
import resource, sys, paths
from paths import build_path, make_path, stage
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # no 4 GiB cache can fit
for above in (stage("cache", capacity=1 << 20), stage("trace", file=sys.argv[1], capacity=1 << 20, mode="operation")):
    try:
        build_path(make_path(above, stage("core", name="big", format="4096s")))
    except MemoryError as e:
        print(e)
"""


def test_a_stage_too_big_for_memory_says_which_and_how_big(tmp_path):
    done = subprocess.run([sys.executable, "-c", OUT_OF_MEMORY, str(tmp_path / "big.bin")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "stage 'cache' (capacity=1048576) over 4096-byte tuples: out of memory",
        "stage 'trace': cannot preallocate 1048576 events: out of memory",
    ]
    assert list(tmp_path.iterdir()) == []  # the trace's file was never written


def test_python_stage_parameters_are_checked(space):
    with pytest.raises(ValueError, match="unknown parameter 'speed'"):
        build_path(make_path(stage("offset", speed=3), CORE), pastset=space)
    with pytest.raises(ValueError, match="a built-in stage kind has that name"):
        paths.stage_kind("trace")(Offset)


class KeywordsOnly:
    def __init__(self, **params):
        self.params = params


class PositionalOnly:
    def __init__(self, amount, /):
        self.amount = amount


class NamesId:
    def __init__(self, id=1):
        self.id = id


@paths.stage_kind("own-name-for-self")
class OwnNameForSelf:
    def __init__(this, amount=1):  # noqa: N805 - the instance's parameter may have any name
        this.amount = amount

    def move(this, below, t):
        below.move((t[0] + this.amount,))


def test_a_python_kinds_instance_parameter_may_have_any_name(space):
    """It was taken for a parameter a path must give ("missing parameter 'this'")."""
    assert list(paths.kinds()["own-name-for-self"].params) == ["amount"]
    h = build_path(make_path(stage("own-name-for-self", amount=5), stage("core", name="S5", format="q")),
                   pastset=space)
    h.move(1)
    assert h.observe() == (6,)


def test_a_build_cut_short_by_ctrl_c_as_it_reserves_leaves_the_path_buildable(space, monkeypatch):
    """A KeyboardInterrupt that came as the build marked its keys left them marked: the next
    build of the path waited for ever."""
    import paths.runtime.build as build_module

    class InterruptedOnce:  # threading, but for its second Event: the build's second key
        made = 0

        def __getattr__(self, name):
            return getattr(threading, name)

        def Event(self):  # noqa: N802 - threading.Event's name
            self.made += 1
            if self.made == 2:
                raise KeyboardInterrupt
            return threading.Event()

    path = make_path(stage("reduce-sum", num_threads=2), stage("core", name="R2", format="q"))
    monkeypatch.setattr(build_module, "threading", InterruptedOnce())
    with pytest.raises(KeyboardInterrupt):
        build_path(path, pastset=space)
    monkeypatch.undo()
    built = []
    builder = threading.Thread(target=lambda: built.append(build_path(path, pastset=space)), daemon=True)
    builder.start()
    builder.join(10)
    assert len(built) == 1, "the second build still waits for the first"


@pytest.mark.parametrize("name", [5, None, "", "x\x00y", "core ", "has space", "mod:kind", "a,b", "-x", "x" * 65])
def test_a_python_kind_needs_a_name_a_path_can_give(name):
    """Such names were registered and listed, but no path could use them; a name that is no
    text made every later "unknown stage kind" message a TypeError of sorting the kinds."""
    with pytest.raises(ValueError, match=r"^stage_kind\(.*\): expected a name of a letter, then up to 63 letters, "
                                         r"digits, '-', '_' or '.'$"):
        paths.stage_kind(name)
    assert name not in paths.kinds()
    with pytest.raises(ValueError, match="unknown stage kind 'nosuch'"):
        check_spec(stage("nosuch"))


def test_a_python_kind_is_a_class_whose_init_names_its_parameters():
    with pytest.raises(TypeError, match=r"^stage_kind\('not-a-class'\): expected a class to register, got <function"):
        paths.stage_kind("not-a-class")(lambda: None)
    with pytest.raises(TypeError, match=r"^stage_kind\('keywords-only'\): KeywordsOnly.__init__ takes \*\*params: name "
                                        r"each parameter the stage takes in its signature"):
        paths.stage_kind("keywords-only")(KeywordsOnly)  # it refused every parameter a path gave
    with pytest.raises(TypeError, match=r"^stage_kind\('positional-only'\): PositionalOnly.__init__'s parameter "
                                        r"'amount' is positional only: a path gives a stage its parameters by keyword"):
        paths.stage_kind("positional-only")(PositionalOnly)  # every build of it was a TypeError
    with pytest.raises(TypeError, match=r"^stage_kind\('names-id'\): NamesId.__init__ names 'id', which is the "
                                        r"builder's"):
        paths.stage_kind("names-id")(NamesId)  # a path's id= never reached it
    assert not {"not-a-class", "keywords-only", "positional-only", "names-id"} & set(paths.kinds())


def test_build_path_names_a_context_or_pastset_of_the_wrong_type(space):
    path = make_path(CORE)
    with pytest.raises(TypeError, match="^build_path: pastset: expected a paths.PastSet, got 'nope'$"):
        build_path(path, pastset="nope")  # was: cannot create weak reference to 'str' object
    with pytest.raises(TypeError, match="^build_path: context: expected a paths.BuildContext, got 'nope'$"):
        build_path(path, context="nope")  # was: 'str' object has no attribute 'build'
    with pytest.raises(TypeError, match="^BuildContext: resolve: expected a function of \\(params, info\\), got 5$"):
        BuildContext(space, resolve=5)
    for keys, got in ((5, "int"), (("a" * 40, "~" * 40), "tuple of 2")):
        with pytest.raises(TypeError) as refused:  # was: pybind11's argument dump, or a failed send, at the build
            BuildContext(space, curve_client=keys)
        assert str(refused.value) == ("BuildContext: curve_client: expected None or a (public, secret) pair of "
                                      f"40-character Z85 keys, got {got} (not shown: it may hold a secret key)")


@pytest.mark.parametrize("resolve, error, expected", [
    (lambda params, info: None, TypeError, "the build context's resolve returned None: expected the stage's "
                                           "parameters as a dict"),
    (lambda params, info: {}["host"], ValueError, "the build context's resolve raised KeyError: 'host'"),
])
def test_a_build_contexts_resolve_that_fails_is_named(space, resolve, error, expected):
    path = make_path(stage("remote", host="n0", timeout_ms=100), CORE)
    with pytest.raises(error) as failed:
        build_path(path, context=BuildContext(space, resolve=resolve))
    assert str(failed.value).startswith("stage remote(host='n0', timeout_ms=100): " + expected), str(failed.value)


def test_python_stage_under_gsum_from_c_threads(space):
    p = make_path(stage("offset", amount=0), stage("reduce-sum", num_threads=3), CORE)
    handles = [build_path(p, pastset=space) for _ in range(3)]
    assert stage_below(handles[0]).link_count == 3  # the Python stage passes its callers through
    paths.bench.gsum(handles, 100)  # checks every total
    element = space.enter("G", "q")
    assert [element.observe(i)[0] for i in range(element.last())] == [3 * r for r in range(100)]


def test_handles_are_independent_across_python_threads(space):
    p = sum_path(stage("reduce-sum", num_threads=4))
    handles = [build_path(p, pastset=space) for _ in range(4)]
    totals = [[] for _ in handles]

    def run(i):
        for r in range(300):
            handles[i].move(r + i)
            totals[i].append(handles[i].observe(timeout=30)[0])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = [4 * r + 6 for r in range(300)]
    assert totals == [expected] * 4


def test_a_pass_through_stage_gives_a_gone_callers_slot_to_the_next(space):
    p = make_path(stage("cache", capacity=4), CORE)
    keeper = build_path(p, pastset=space)  # keeps the cache stage alive throughout
    for i in range(1100):  # more callers over time than a pass-through stage has slots at once
        h = build_path(p, pastset=space)
        h.move(i)
        del h
    assert keeper.stage.link_count == 1
    assert keeper.stage.counters()["links"] == 2  # slots ever handed out: never more than at once
    assert space.enter("G", "q").last() == 1100


def test_import_paths_reaches_every_public_name_and_module_by_its_dotted_name():
    """In a fresh interpreter, where nothing loaded them first: the names of paths.__all__, and
    modules named from the package down, as the docs name them."""
    program = ("import paths\n"
               "assert all(getattr(paths, name) is not None for name in paths.__all__)\n"
               "print(paths.model.placement.place.__name__, paths.runtime.acquire_hook.default_acquire.__name__,\n"
               "      paths.bench is paths.experiments.bench, paths.cli.main.main.__name__)\n"
               "try:\n"
               "    paths.model.no_such_module\n"
               "except AttributeError as e:\n"
               "    print(e)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == ["place default_acquire True main",
                                        "module 'paths.model' has no attribute 'no_such_module'"]


def test_a_tuple_of_the_wrong_shape_is_refused_naming_the_call(space):
    handle = build_path(make_path(stage("core", name="SHAPES", format="q")), pastset=space)
    expected = "(format 'q'): expected a tuple of 1 value(s) (int), got 'abc' (required argument is not an integer)"
    for call, name in [(handle.move, "move"), (handle.exchange, "exchange"),
                       (lambda t: handle.move_many([t]), "move_many (tuple 0)")]:
        with pytest.raises(TypeError) as raised:
            call("abc")
        assert str(raised.value) == f"thread 0 {name} {expected}"
    assert space.enter("SHAPES", "q").last() == 0


def test_every_stage_of_a_path_and_its_counters_are_reached_from_the_handle(space):
    h = build_path(make_path(stage("cache", capacity=8), stage("reduce-sum", num_threads=1),
                             stage("core", name="BELOW", format="q")), pastset=space)
    h.move(3)
    assert h.observe(0) == (3,)
    kinds, at = [], h.stage
    while at is not None:
        kinds.append((at.kind, at.counters()["operations"]))
        at = at.below
    assert kinds == [("cache", 2), ("reduce-sum", 2), ("core", 2)]
