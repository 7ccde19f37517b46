"""cache: repeated indexed observes are served locally and counted; everything else passes
through untouched, an index the cache cannot hold (a negative one a stage below answers) too."""

import pytest

import paths

from paths import build_path, make_path, stage


def cached(space, capacity=8, name="C"):
    return build_path(make_path(stage("cache", capacity=capacity), stage("core", name=name, format="qd")),
                      pastset=space)


def test_repeated_indexed_observes_hit(space):
    h = cached(space)
    for i in range(5):
        h.move((i, i / 2))
    assert [h.observe(i) for i in range(5)] == [(i, i / 2) for i in range(5)]
    assert [h.observe(i) for i in range(5)] == [(i, i / 2) for i in range(5)]
    counters = h.stage.counters()
    assert (counters["misses"], counters["hits"]) == (5, 5)


def test_direct_mapped_eviction_is_still_correct(space):
    h = cached(space, capacity=2)
    for i in range(6):
        h.move((i, 0.0))
    for _ in range(2):
        assert [h.observe(i)[0] for i in range(6)] == list(range(6))
    assert h.stage.counters()["hits"] == 0  # every index evicted the one two before it
    assert h.observe(5) == (5, 0.0)
    assert h.stage.counters()["hits"] == 1


def test_other_operations_pass_through(space):
    h = cached(space)
    h.move((1, 1.0))
    h.move((2, 2.0))
    assert h.observe() == (1, 1.0)
    assert (h.first(), h.last()) == (1, 2)
    h.axe(1)
    element = space.enter("C", "qd")
    with pytest.raises(IndexError):
        element.observe(0)
    assert h.stage.counters()["hits"] == 0


def test_axe_through_the_cache_stops_serving_freed_tuples(space):
    h = cached(space)
    h.move((7, 7.0))
    h.move((8, 8.0))
    assert h.observe(0) == (7, 7.0) and h.observe(1) == (8, 8.0)
    h.axe(1)
    with pytest.raises(paths.AxedError):
        h.observe(0)  # as without the cache
    assert h.observe(1) == (8, 8.0)
    assert h.stage.counters()["hits"] == 1


def test_a_copy_outlives_an_axe_made_elsewhere(space):
    h = cached(space)
    h.move((7, 7.0))
    assert h.observe(0) == (7, 7.0)
    space.enter("C", "qd").axe(1)  # not through the cache: it cannot know
    assert h.observe(0) == (7, 7.0)  # tuples are immutable: the copy is still the tuple that was


def test_missing_tuple_waits_and_times_out(space):
    h = cached(space)
    with pytest.raises(TimeoutError):
        h.observe(3, timeout=0.05)
    assert h.stage.counters()["misses"] == 1


@paths.stage_kind("python-index")
class PythonIndex:
    """Answers observe_at(-1) with the last tuple, as Python sequences do."""

    def observe_at(self, below, index):
        return below.observe(below.last() - 1 if index == -1 else index)


def test_cache_never_stores_a_negative_index(space):
    h = build_path(make_path(stage("cache", capacity=4), stage("python-index"), stage("core", name="N", format="q")),
                   pastset=space)
    for v in range(5):
        h.move(v)
    assert h.observe(-1) == (4,) and h.observe(-1) == (4,)
    assert [h.observe(i) for i in range(5)] == [(v,) for v in range(5)]
    assert h.stage.counters()["misses"] == 7  # the two negative ones were never cached
