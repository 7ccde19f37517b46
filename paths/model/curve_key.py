"""A CURVE key as text: 40 Z85 digits (what `paths serve --keygen` writes and ZeroMQ reads)."""

from __future__ import annotations

Z85_DIGITS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")
KEY_LENGTH = 40


def is_curve_key(text: object) -> bool:
    """Whether `text` is a str of KEY_LENGTH Z85 digits."""
    return isinstance(text, str) and len(text) == KEY_LENGTH and set(text) <= Z85_DIGITS
