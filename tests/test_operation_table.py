"""One table of operation kinds, defined once in C (wrappers_c/operation.c), and every copy of it
checked against it: the names Python reads (trace files and `paths trace`, stages written in
Python), the op codes in wrappers_c/wire.md and in the tests' own frame codec
(tests/wire_frames.py), the table in docs/semantics.md, and the calls of tests/operation_calls.py
that the stage contract suite makes of every kind."""

from __future__ import annotations

import gc
import re
from pathlib import Path

import wire_frames
from operation_calls import Forwarding, expected_turn, run_turn, turn

import paths
from paths import _native, build_path, make_path, stage
from paths.runtime import trace_file

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = _native.operations()
NAMES = [op["name"] for op in OPERATIONS]
WIRE = _native.wire_protocol()


def markdown_rows(path: Path, heading: str) -> list[list[str]]:
    """The cells of each row of the first table under `heading` (header and rule left out)."""
    text = path.read_text()
    section = text[text.index(heading):]
    rows = []
    for line in section.splitlines()[1:]:
        if rows and not line.startswith("|"):
            break
        if line.startswith("|") and not set(line) <= set("|-: "):
            rows.append([cell.strip().strip("`") for cell in line.strip("|").split("|")])
    return rows[1:]


def test_codes_are_the_tables_order_and_every_wire_code_is_one_operations():
    assert [op["code"] for op in OPERATIONS] == list(range(len(OPERATIONS)))
    assert len(set(NAMES)) == len(NAMES)
    codes = [op["wire"] for op in OPERATIONS] + list(WIRE["control"].values())
    assert len(set(codes)) == len(codes), "two frames would share an op code"
    assert sorted(codes) == list(range(WIRE["op_first"], WIRE["op_limit"])), \
        "a well-formed frame may carry exactly the op codes something answers"


def test_the_turn_makes_every_operation_of_the_table():
    assert {step.op for step in turn(0, 1, 0)} == set(NAMES), \
        "tests/operation_calls.py must make every operation kind: add the Python call of the new one"


def test_trace_files_and_paths_trace_name_operations_from_the_table(tmp_path, capsys):
    assert trace_file.OPS == tuple(NAMES)
    file = tmp_path / "ops.bin"
    h = build_path(make_path(stage("trace", file=str(file)), stage("core", name="OPS", format="q")),
                   pastset=paths.PastSet())
    steps = turn(0, 1, 0)
    assert run_turn(h, steps) == expected_turn(steps)
    del h
    gc.collect()
    assert [e.op for e in trace_file.read_trace(file).events] == [step.op for step in steps]
    assert trace_file.trace_command([str(file)]) == 0
    summary = capsys.readouterr().out
    assert all(re.search(rf"\s0\s+{name}\s+\d", summary) for name in NAMES), summary


def test_a_python_stage_is_offered_each_operation_by_its_name_in_the_table():
    Forwarding.called.clear()
    h = build_path(make_path(stage("forwarding"), stage("core", name="REC", format="q")), pastset=paths.PastSet())
    steps = turn(0, 1, 0)
    assert run_turn(h, steps) == expected_turn(steps)
    assert Forwarding.called == set(NAMES), "a method named after an operation kind answers it"
    doc = paths.stage_kind.__doc__
    assert all(f"{name}(below" in doc for name in NAMES), "stage_kind's docstring lists every method"


def test_wire_md_gives_every_operation_its_tables_op_code():
    rows = markdown_rows(ROOT / "wrappers_c" / "wire.md", "## Operations")
    documented = {int(row[0]): row[1] for row in rows}
    expected = {op["wire"]: op["name"].upper() for op in OPERATIONS}
    expected.update({code: name.upper() for name, code in WIRE["control"].items()})
    assert documented == expected
    text = (ROOT / "wrappers_c" / "wire.md").read_text()
    first, last = map(int, re.search(r"`(\d+) <= op <= (\d+)`", text).groups())
    assert (first, last + 1) == (WIRE["op_first"], WIRE["op_limit"])
    assert f"`payload_length <= {WIRE['max_payload']:,}`" in text
    assert f"{WIRE['batch_payload']:,} bytes" in text


def test_the_tests_frame_codec_agrees_with_the_c_protocol():
    by_name = {op["name"].upper(): op["wire"] for op in OPERATIONS}
    by_name.update({name.upper(): code for name, code in WIRE["control"].items()})
    assert {name: getattr(wire_frames, name) for name in by_name} == by_name
    assert (wire_frames.VERSION, wire_frames.HEADER.size, wire_frames.MAX_PAYLOAD, wire_frames.BATCH_PAYLOAD,
            wire_frames.SPEC_MAX, wire_frames.SECRET_BYTES, wire_frames.OP_LIMIT, wire_frames.GROUP_MAX) == \
        (WIRE["version"], WIRE["header"], WIRE["max_payload"], WIRE["batch_payload"], WIRE["spec_max"],
         WIRE["secret"], WIRE["op_limit"], WIRE["group_max"])
    assert dict(zip(("zmq", "tcp", "ipc"), wire_frames.TRANSPORTS)) == WIRE["transports"]


def test_semantics_md_lists_the_table():
    rows = markdown_rows(ROOT / "docs" / "semantics.md", "## Operations")
    assert [(int(row[0]), row[1], int(row[2])) for row in rows] == \
        [(op["code"], op["name"], op["wire"]) for op in OPERATIONS]
