"""How a message shows a value a user gave: a long string (or a deep list) cut in the middle, so
that one line says what was wrong however long the value was."""

import reprlib

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def shown(value) -> str:
    """repr(value), cut to about 60 characters: 'xxxxxxxxxxxxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxxxxxxxxxxxx'."""
    return _REPR.repr(value)
