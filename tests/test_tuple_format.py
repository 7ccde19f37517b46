"""Tuple format strings a user gets wrong: each is refused with a message naming the bound."""

import pytest

import paths


@pytest.mark.parametrize("fmt", ["1048577s", "99999999999999999999999q"])
def test_a_repeat_count_too_large_names_the_largest(fmt):
    with pytest.raises(ValueError) as caught:
        paths.PastSet().enter("E", fmt)
    assert f"bad format '{fmt}': a repeat count is at most 1048576" in str(caught.value)


def test_the_largest_repeat_count_is_taken():
    e = paths.PastSet().enter("E", "1048576s")
    e.move(b"x" * 1048576)
    assert e.observe() == (b"x" * 1048576,)
