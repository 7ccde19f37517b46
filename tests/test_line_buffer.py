"""LineBuffer (paths/experiments/line_buffer.py): the lines of a pipe, however its bytes were cut."""

import random

from paths.experiments.line_buffer import LineBuffer


def pieces(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), rng.randint(0, min(len(data) - 1, 40)))) if data else []
    return [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]


def test_every_cut_of_the_input_gives_the_same_lines():
    rng = random.Random(7)
    for _ in range(2000):
        lines = [bytes(rng.choice(b"ab\xff") for _ in range(rng.randrange(0, 6))) for _ in range(rng.randrange(1, 8))]
        data = b"\n".join(lines) + rng.choice([b"", b"\n"])
        buffer = LineBuffer()
        got = [line for piece in pieces(data, rng) for line in buffer.feed(piece)]
        got += buffer.rest()
        expected = data.split(b"\n")
        assert got == (expected[:-1] if expected[-1] == b"" else expected), data
        assert buffer.rest() == []  # nothing left once taken


def test_a_long_line_in_many_pieces_is_one_line():
    buffer = LineBuffer()
    for _ in range(1000):
        assert buffer.feed(b"x" * 1000) == []
    assert buffer.feed(b"x\nnext") == [b"x" * 1_000_001]
    assert buffer.rest() == [b"next"]
