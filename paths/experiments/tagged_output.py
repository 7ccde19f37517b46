"""Lines of several sources on one of this process's streams, each led by its source's tag (a
rank's `[3] `, a node's `[n0] `), written as the very bytes the source wrote.

A long line comes in pieces (line_buffer.py), each written as it comes, so it is never held
whole: the tag leads its first piece, and the line is open until its end comes. A line of
another source that comes first breaks the open one there (a line break), and the open one goes
on in a line led by its tag again. Alone on its stream, a long line comes out whole.
"""

from __future__ import annotations

from typing import TextIO

_open: dict[TextIO, str] = {}  # a stream -> the tag of its line whose end has not come


def write_tagged(stream: TextIO, tag: str, data: bytes, ends: bool = True) -> None:
    """A source's line (ends), or a piece of it (the line goes on), on `stream`."""
    started = _open.pop(stream, None)
    head = b"" if started == tag else (b"\n" if started is not None else b"") + tag.encode()
    stream.flush()  # what went through the text layer first
    stream.buffer.write(head + data + (b"\n" if ends else b""))
    stream.buffer.flush()
    if not ends:
        _open[stream] = tag


def end_open_lines() -> None:
    """Every line whose end did not come is ended (its source stopped): before a message of
    this process's own, or its exit."""
    while _open:
        stream, _ = _open.popitem()
        try:
            stream.buffer.write(b"\n")
            stream.buffer.flush()
        except OSError:  # the stream's own failure was said where it came
            pass
