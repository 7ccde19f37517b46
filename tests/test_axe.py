"""axe through every kind of path: it never loses an unread tuple, and every stage agrees on what
an axed index gives. The element-level rules are in test_pastset.py; here the same operations go
through cache (prefetching or not), trace, delay, a Python stage and a remote stage (to a server on loopback)."""

import pytest

import paths
from paths import build_path, make_path, stage
from paths.runtime.server import PathServer


@paths.stage_kind("axe-passing")
class AxePassing:
    """A Python stage that passes everything on (the defaults)."""


@pytest.fixture(scope="module")
def server():
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()) as served:
        served.start()
        yield served


ABOVE_THE_CORE = {
    "core": lambda server, tmp_path: [],
    "cache": lambda server, tmp_path: [stage("cache", capacity=4)],
    "prefetching cache": lambda server, tmp_path: [stage("cache", capacity=4, prefetch="window", window=4)],
    "trace": lambda server, tmp_path: [stage("trace", file=str(tmp_path / "axe.bin"))],
    "delay": lambda server, tmp_path: [stage("delay", ms=0.1)],
    "python stage": lambda server, tmp_path: [stage("axe-passing")],
    "remote": lambda server, tmp_path: [stage("remote", host=server.endpoint, timeout_ms=5000)],
}


@pytest.mark.parametrize("above", list(ABOVE_THE_CORE))
def test_axe_ahead_of_the_cursor_loses_no_unread_tuple_on_any_path(server, tmp_path, above):
    space = paths.PastSet()
    h = build_path(make_path(*ABOVE_THE_CORE[above](server, tmp_path), stage("core", name=f"axe-{above}", format="q")),
                   pastset=space)
    for value in range(10):
        h.move(value)
    assert [h.observe(), h.observe()] == [(0,), (1,)]
    assert h.observe(5) == (5,)  # a cache now holds a copy of tuple 5
    h.axe(7)
    assert (h.first(), h.last()) == (2, 10), "the cursor jumped over unread tuples"
    with pytest.raises(paths.AxedError, match=r"observe\(5\): tuple 5 was freed by axe \(first live index is 7\): axed$"):
        h.observe(5)  # axed for indexed reads, though not read yet; every path names the first live index
    assert h.observe(7) == (7,)
    assert [h.observe(timeout=1) for _ in range(8)] == [(v,) for v in range(2, 10)]
    with pytest.raises(TimeoutError):
        h.observe(timeout=0.01)
    h.axe(10)
    h.move(10)
    assert h.observe() == (10,)


@pytest.mark.parametrize("above", ["cache", "trace", "delay", "python stage"])
def test_the_element_frees_what_the_cursor_passed_whatever_the_path(tmp_path, above):
    space = paths.PastSet()
    element = space.enter("freed", "q")
    h = build_path(make_path(*ABOVE_THE_CORE[above](None, tmp_path), stage("core", name="freed", format="q")),
                   pastset=space)
    for value in range(10):
        h.move(value)
    h.axe(6)
    assert element.stats()["live_tuples"] == 10  # nothing read: nothing freed
    for _ in range(4):
        h.observe()
    assert element.stats()["live_tuples"] == 6   # tuples 4 to 9: the cursor is behind the axe point
    for _ in range(4):
        h.observe()
    assert element.stats()["live_tuples"] == 4   # tuples 6 to 9: the axe point is behind the cursor
