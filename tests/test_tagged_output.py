"""write_tagged (paths/experiments/tagged_output.py): lines of several sources on one stream, each
led by its tag, a long line written in pieces as they come, broken where another source's line
comes first and going on led by its tag again."""

import io

import pytest

from paths.experiments import tagged_output
from paths.experiments.tagged_output import end_open_lines, write_tagged


@pytest.fixture
def stream():
    tagged_output._open.clear()
    yield io.TextIOWrapper(io.BytesIO(), write_through=True)
    tagged_output._open.clear()


def written(stream) -> bytes:
    return stream.buffer.getvalue()


def test_a_long_line_alone_comes_out_whole_led_once_by_its_tag(stream):
    for piece in (b"ab", b"cd", b"ef"):
        write_tagged(stream, "[0] ", piece, ends=False)
    write_tagged(stream, "[0] ", b"g")
    write_tagged(stream, "[0] ", b"next")
    assert written(stream) == b"[0] abcdefg\n[0] next\n"


def test_another_sources_line_breaks_an_open_line_which_goes_on_led_by_its_tag(stream):
    write_tagged(stream, "[0] ", b"long ", ends=False)
    write_tagged(stream, "[1] ", b"short")
    write_tagged(stream, "[0] ", b"line ", ends=False)
    write_tagged(stream, "[1] ", b"open ", ends=False)
    write_tagged(stream, "[0] ", b"ends")
    write_tagged(stream, "[1] ", b"too")
    assert written(stream) == b"[0] long \n[1] short\n[0] line \n[1] open \n[0] ends\n[1] too\n"


def test_a_line_whose_end_never_came_is_ended_before_anything_else_is_said(stream):
    write_tagged(stream, "[n0] ", b"\xff\x00 bytes as they came", ends=False)
    end_open_lines()
    end_open_lines()  # once
    stream.write("paths run: the node stopped\n")
    assert written(stream) == b"[n0] \xff\x00 bytes as they came\npaths run: the node stopped\n"


def test_streams_are_apart(stream):
    other = io.TextIOWrapper(io.BytesIO(), write_through=True)
    write_tagged(stream, "[0] ", b"out ", ends=False)
    write_tagged(other, "[1] ", b"err")
    write_tagged(stream, "[0] ", b"goes on")
    assert (written(stream), written(other)) == (b"[0] out goes on\n", b"[1] err\n")
