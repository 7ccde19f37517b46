"""Slurm-style host lists: "n[0-7]", "n[0-3,8,10-11]", "a[01-03]b", "n[0-1],login".

A host list is a comma-separated list of names; a name may hold bracketed ranges, each a
comma-separated list of numbers and `lo-hi` spans.  The width of a span's first number is kept
as zero padding (`[01-03]` gives 01, 02, 03), and several brackets in one name expand as a
product (`r[1-2]n[1-2]` gives r1n1, r1n2, r2n1, r2n2).
"""

from __future__ import annotations

import itertools
import math
import re
from typing import NoReturn

from .shown import shown

EXAMPLES = "'n[0-7]', 'n[0-3,8,10-11]', 'a[01-03]b' or 'n[0-1],login'"
MAX_HOSTS = 65536
MAX_DIGITS = 18  # a host number fits a 64-bit integer, as Slurm reads it

_NAME_PART = re.compile(r"[A-Za-z0-9._-]*")
_SPAN = re.compile(r"([0-9]+)(?:-([0-9]+))?")  # ASCII digits, as Slurm reads them


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm-style host list into host names, in the order written; ValueError for a
    list of more than MAX_HOSTS names (counted before they are made)."""
    if not isinstance(text, str) or not text.strip():
        _fail(text, "it is empty")
    hosts: list[str] = []
    for name in _split_names(text):
        hosts.extend(_expand_name(text, name, len(hosts)))
    return hosts


def _fail(text: object, problem: str) -> NoReturn:
    raise ValueError(f"bad host list {shown(text)}: {problem}; expected names like {EXAMPLES}")


def _split_names(text: str) -> list[str]:
    """Split at the commas that are outside brackets."""
    names, start, depth = [], 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                _fail(text, f"nested '[' at position {index}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                _fail(text, f"']' without '[' at position {index}")
        elif char == "," and depth == 0:
            names.append(text[start:index].strip())
            start = index + 1
    if depth:
        _fail(text, "a '[' is never closed")
    names.append(text[start:].strip())
    if "" in names:
        _fail(text, "an empty name between commas")
    return names


def _expand_name(text: str, name: str, before: int) -> list[str]:
    """The hosts of one name, which follow `before` others of the list."""
    # re.split with a group alternates literal parts and bracket bodies: lit, body, lit, ...
    pieces = re.split(r"\[([^\]]*)\]", name)
    choices: list[list[str]] = []
    for index, piece in enumerate(pieces):
        if index % 2:
            choices.append(_expand_ranges(text, piece))
        elif _NAME_PART.fullmatch(piece):
            choices.append([piece])
        else:
            _fail(text, f"{shown(name)} has characters other than letters, digits, '.', '_', '-'")
        if before + math.prod(map(len, choices)) > MAX_HOSTS:
            _fail(text, f"it names more than {MAX_HOSTS} hosts")
    return ["".join(parts) for parts in itertools.product(*choices)]


def _expand_ranges(text: str, body: str) -> list[str]:
    numbers: list[str] = []
    for span in body.split(","):
        match = _SPAN.fullmatch(span.strip())
        if not match:
            _fail(text, f"[{shown(body)[1:-1]}] holds {shown(span)}, not a number or a 'lo-hi' span")
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        if max(len(low_text), len(high_text)) > MAX_DIGITS:
            _fail(text, f"span {shown(span)} has a number of more than {MAX_DIGITS} digits")
        low, high = int(low_text), int(high_text)
        if low > high:
            _fail(text, f"span {shown(span)} runs backwards")
        if len(numbers) + high - low >= MAX_HOSTS:
            _fail(text, f"it names more than {MAX_HOSTS} hosts")
        numbers.extend(str(number).zfill(len(low_text)) for number in range(low, high + 1))
    return numbers
