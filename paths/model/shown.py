"""How a message shows a value a user gave: a long string (or a deep list) cut in the middle, so
that one line says what was wrong however long the value was."""

import reprlib

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def shown(value) -> str:
    """repr(value), cut to about 60 characters: 'xxxxxxxxxxxxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxxxxxxxxxxxx'."""
    return _REPR.repr(value)


def cut(text: str, most: int = 80) -> str:
    """`text` itself where short; else its start and end around '...', `most` characters in all."""
    if len(text) <= most:
        return text
    half = (most - 3) // 2
    return f"{text[:half]}...{text[len(text) - (most - 3 - half):]}"
