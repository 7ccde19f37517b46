"""The `core` stage's own checks, as build_path reports them: each error names the element and
what was expected."""

import pytest

import paths
from paths import build_path, make_path, stage


def core(name, fmt):
    return make_path(stage("core", name=name, format=fmt))


@pytest.mark.parametrize("fmt", ["qq", "@q", "d"])
def test_a_format_other_than_the_elements_is_refused_naming_both(space, fmt):
    space.enter("E", "q")
    with pytest.raises(ValueError) as caught:
        build_path(core("E", fmt), pastset=space)
    assert "element 'E' exists with format 'q'" in str(caught.value)
    assert f"'{fmt}'" in str(caught.value)


@pytest.mark.parametrize("name, given", [("", "an empty name"), ("n" * 256, "256 bytes")])
def test_a_bad_name_is_refused_saying_what_a_name_is(space, name, given):
    with pytest.raises(ValueError) as caught:
        build_path(core(name, "q"), pastset=space)
    message = str(caught.value)
    assert "1 to 255 bytes" in message and given in message
    assert len(message) < 200  # a long name is not copied into the message
    assert space.elements() == []


def test_a_name_of_255_bytes_is_an_element(space):
    h = build_path(core("n" * 255, "q"), pastset=space)
    h.move(3)
    assert space.enter("n" * 255, "q").observe() == (3,)
    assert isinstance(h, paths.Handle)
