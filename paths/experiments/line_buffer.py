"""Bytes as they arrive from a pipe, taken out as whole lines, or a long line in pieces.

A line that arrives in many pieces is kept in one growing buffer and split once its end has
come, so a line of n bytes costs O(n) however it was cut (joining the pieces anew at each one
cost O(n^2): a 64 MiB line took half a minute). A reader that must not hold a long line whole
takes its start out with piece() once PIECE_BYTES of it have come.
"""

from __future__ import annotations

PIECE_BYTES = 1 << 20  # a line's start longer than this goes on as a piece of it, not held


class LineBuffer:
    def __init__(self) -> None:
        self._partial = bytearray()  # the start of a line whose end has not come yet

    def feed(self, data: bytes) -> list[bytes]:
        """The lines `data` ends (without their line breaks); the rest is kept for later."""
        end = data.rfind(b"\n")
        if end < 0:
            self._partial += data
            return []
        self._partial += data[:end]
        lines = self._partial.split(b"\n")
        self._partial = bytearray(data[end + 1:])
        return [bytes(line) for line in lines]

    def piece(self, size: int = PIECE_BYTES) -> bytes:
        """The started line's bytes so far, taken out, once they are `size` or more (the line goes
        on: its next piece, or its end, comes from feed); else b""."""
        if len(self._partial) < size:
            return b""
        piece, self._partial = bytes(self._partial), bytearray()
        return piece

    def rest(self) -> list[bytes]:
        """At the end of the input: the started line, as a line of its own ([] when none)."""
        lines = [bytes(self._partial)] if self._partial else []
        self._partial = bytearray()
        return lines
