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


def test_a_long_line_is_taken_out_in_pieces_that_join_to_it():
    rng = random.Random(11)
    for _ in range(300):
        size = rng.randrange(1, 50)
        data = b"\n".join(bytes(rng.choice(b"ab") for _ in range(rng.randrange(0, 200))) for _ in range(3)) + b"\n"
        buffer, out = LineBuffer(), bytearray()
        for chunk in pieces(data, rng):
            for line in buffer.feed(chunk):
                out += line + b"\n"
            piece = buffer.piece(size)
            assert piece == b"" or len(piece) >= size  # nothing taken before `size` has come
            out += piece
        assert buffer.rest() == []
        assert bytes(out) == data, (size, data)


def test_a_piece_is_only_the_start_of_the_line_not_yet_ended():
    buffer = LineBuffer()
    assert buffer.feed(b"one\ntw") == [b"one"]
    assert buffer.piece(3) == b""
    assert buffer.feed(b"o and") == []
    assert buffer.piece(3) == b"two and"
    assert buffer.feed(b" three\n") == [b" three"]
    assert buffer.piece(1) == b"" and buffer.rest() == []
