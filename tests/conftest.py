"""Fixtures shared by the PastSet test files."""

import pytest

import paths


@pytest.fixture
def space():
    """A fresh, empty PastSet."""
    return paths.PastSet()
