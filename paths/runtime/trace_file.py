"""Trace files written by the `trace` stage: reading them, converting them to Perfetto, `paths trace`.

The binary format is documented in wrappers_c/trace.h: a 256-byte header, 32-byte event records,
then (operation mode) one tuple per event. An event's operation is its kind's code in the table of
operation kinds (paths._native.operations()), which gives its name here too. `read_trace` turns a
file into a `Trace` with times in nanoseconds since the stage was created; `to_perfetto` writes
Chrome/Perfetto trace-event JSON (open it at https://ui.perfetto.dev); `trace_command` is the
`paths trace` command line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import struct
import sys
from dataclasses import dataclass
from typing import Optional

from .. import _native

MAGIC = b"PATHSTR1"
VERSION = 1
HEADER = struct.Struct("<8sIIIIQdQqQQ72s112s")
EVENT = struct.Struct("<QQqIBBH")
HAS_TUPLE = 1
MODES = ("timestamp", "operation")
OPS = tuple(op["name"] for op in sorted(_native.operations(), key=lambda op: op["code"]))
# ps_status in pastset/pastset.h, in order.
STATUS_NAMES = ("ok", "timed out", "axed", "bad index", "bad format", "format mismatch",
                "out of memory", "invalid argument", "closed", "wrong state", "not supported",
                "remote failure", "interrupted")


class TraceFileError(ValueError):
    """A trace file that cannot be read; the message names the file and what was expected."""


@dataclass(frozen=True)
class TraceEvent:
    """One traced operation. Times are nanoseconds since the trace stage was created."""

    op: str
    thread: int
    start_ns: int
    end_ns: int
    status: int
    index: Optional[int]
    tuple: Optional[tuple]

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def status_name(self) -> str:
        return STATUS_NAMES[self.status] if self.status < len(STATUS_NAMES) else f"status {self.status}"


@dataclass(frozen=True)
class Trace:
    """The contents of one trace file."""

    path: str
    node: str
    format: str
    ticks_per_ns: float
    mode: str
    origin_unix_ns: int
    events: list
    dropped: int

    @property
    def label(self) -> str:
        """The node label, or the file's name when the trace has none."""
        return self.node or os.path.basename(self.path)


def read_trace(path) -> Trace:
    """Reads a trace file; raises TraceFileError naming the file and what was expected."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read(HEADER.size)
            if data.startswith(MAGIC) and len(data) == HEADER.size:  # the header says how much follows
                data += _read_at_most(f, _file_size(data) - HEADER.size + 1)
    except OSError as e:
        raise TraceFileError(f"trace file '{path}': cannot read it: {e.strerror}") from None

    def fail(what: str) -> TraceFileError:
        return TraceFileError(f"trace file '{path}': {what}")

    if not data.startswith(MAGIC) and not MAGIC.startswith(data):
        raise fail(f"not a PATHS trace (expected it to start with {MAGIC!r}, got {data[:8]!r})")
    if len(data) < HEADER.size:
        raise fail(f"truncated: expected a {HEADER.size}-byte header, got {len(data)} bytes")
    (_, version, header_size, event_size, mode, tuple_size, ticks_per_ns, origin_ticks,
     origin_unix_ns, event_count, dropped, format_text, node_text) = HEADER.unpack_from(data)
    if version != VERSION:
        raise fail(f"expected trace format version {VERSION}, got {version}")
    if header_size != HEADER.size or event_size != EVENT.size:
        raise fail(f"expected {HEADER.size}-byte header and {EVENT.size}-byte events, "
                   f"got {header_size} and {event_size}")
    if mode >= len(MODES):
        raise fail(f"expected mode 0 (timestamp) or 1 (operation), got {mode}")
    if not 0 < ticks_per_ns < math.inf:
        raise fail(f"expected a positive, finite ticks_per_ns calibration, got {ticks_per_ns}")
    tuple_format = _text(format_text)
    try:
        codec = struct.Struct(tuple_format)
    except (struct.error, UnicodeEncodeError) as e:
        raise fail(f"tuple format {tuple_format!r} in the header is not a struct format ({e})") from None
    if codec.size != tuple_size:
        raise fail(f"tuple format {tuple_format!r} is {codec.size} bytes, the header says {tuple_size}")

    tuples_at = HEADER.size + event_count * EVENT.size
    expected = tuples_at + (event_count * tuple_size if MODES[mode] == "operation" else 0)
    if len(data) != expected:
        raise fail(f"{'truncated' if len(data) < expected else 'trailing bytes'}: expected {expected} bytes "
                   f"(header + {event_count} events{' + tuples' if mode else ''}), "
                   f"got {len(data) if len(data) < expected else 'more'}")

    events = []
    records = EVENT.iter_unpack(memoryview(data)[HEADER.size:tuples_at])
    for i, (start, end, index, thread, op, flags, status) in enumerate(records):
        if op >= len(OPS):
            raise fail(f"event {i}: expected an operation code 0..{len(OPS) - 1}, got {op}")
        try:
            start_ns, end_ns = (round((ticks - origin_ticks) / ticks_per_ns) for ticks in (start, end))
        except OverflowError:
            raise fail(f"event {i}: expected ticks that are a time at {ticks_per_ns} ticks per ns, "
                       f"got {start} and {end}") from None
        events.append(TraceEvent(
            op=OPS[op],
            thread=thread,
            start_ns=start_ns,
            end_ns=end_ns,
            status=status,
            index=index if index >= 0 else None,
            tuple=codec.unpack_from(data, tuples_at + i * tuple_size) if flags & HAS_TUPLE else None,
        ))
    return Trace(path=path, node=_text(node_text), format=tuple_format, ticks_per_ns=ticks_per_ns,
                 mode=MODES[mode], origin_unix_ns=origin_unix_ns, events=events, dropped=dropped)


def _file_size(header: bytes) -> int:
    """The bytes of the whole file a (not yet checked) header describes."""
    fields = HEADER.unpack_from(header)
    mode, tuple_size, event_count = fields[4], fields[5], fields[9]
    return HEADER.size + event_count * (EVENT.size + (tuple_size if mode == MODES.index("operation") else 0))


def _read_at_most(f, limit: int) -> bytes:
    """Up to `limit` bytes, in chunks: a file that never ends (/dev/zero) is read no further."""
    chunks, left = [], limit
    while left > 0:
        chunk = f.read(min(left, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "replace")


# ---- Perfetto ---------------------------------------------------------------------------------

def to_perfetto(traces: list, out_path) -> None:
    """Writes Chrome/Perfetto trace-event JSON: one process per trace (pid 1, 2, ... named by its
    node label), one thread per caller slot (tid = slot + 1, named "thread <slot>": viewers treat
    tid 0 specially), one complete ("X") event per operation. Times are microseconds from the
    earliest trace's creation, so traces of several processes line up."""
    start_of_all = min((t.origin_unix_ns for t in traces), default=0)
    labels = [t.label for t in traces]
    records = []
    for pid, trace in enumerate(traces, start=1):
        name = trace.label if labels.count(trace.label) == 1 else f"{trace.label} ({trace.path})"
        records.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
        for thread in sorted({e.thread for e in trace.events}):
            records.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": thread + 1,
                            "args": {"name": f"thread {thread}"}})
        offset_ns = trace.origin_unix_ns - start_of_all
        for e in trace.events:
            args = {"status": e.status_name}
            if e.index is not None:
                args["index"] = e.index
            if e.tuple is not None:
                args["tuple"] = [_json_value(v) for v in e.tuple]
            records.append({"ph": "X", "name": e.op, "cat": "paths", "pid": pid, "tid": e.thread + 1,
                            "ts": (offset_ns + e.start_ns) / 1000, "dur": e.duration_ns / 1000,
                            "args": args})
    with open(out_path, "w") as f:
        json.dump({"traceEvents": records, "displayTimeUnit": "ns"}, f, allow_nan=False)


def _json_value(value):
    """A tuple field as JSON allows it: bytes as text, non-finite floats as strings."""
    if isinstance(value, bytes):
        return value.decode("ascii", "backslashreplace")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


# ---- summary ----------------------------------------------------------------------------------

def summary_rows(trace: Trace) -> list:
    """[(thread, op, count, median_ns, p99_ns)] sorted by thread and operation."""
    durations = {}
    for e in trace.events:
        durations.setdefault((e.thread, e.op), []).append(e.duration_ns)
    rows = []
    for (thread, op), values in sorted(durations.items(), key=lambda kv: (kv[0][0], OPS.index(kv[0][1]))):
        values.sort()
        p99 = values[max(0, math.ceil(0.99 * len(values)) - 1)]
        rows.append((thread, op, len(values), statistics.median(values), p99))
    return rows


def format_summary(trace: Trace) -> str:
    lines = [f"{trace.path}: node '{trace.label}', format '{trace.format}', {trace.mode} mode, "
             f"{len(trace.events)} events, {trace.dropped} dropped"]
    if trace.dropped:
        lines.append(f"  warning: {trace.dropped} operations were not recorded (the buffer was full: "
                     f"raise the trace stage's capacity)")
    rows = summary_rows(trace)
    width = max([len("op")] + [len(op) for _, op, _, _, _ in rows])  # observe_range is the longest name
    lines.append(f"  {'thread':>6}  {'op':<{width}}  {'count':>9}  {'median ns':>10}  {'p99 ns':>10}")
    for thread, op, count, median, p99 in rows:
        lines.append(f"  {thread:>6}  {op:<{width}}  {count:>9}  {median:>10.0f}  {p99:>10}")
    return "\n".join(lines)


# ---- the command line -------------------------------------------------------------------------

def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them is not there
        return False


def trace_command(argv: list) -> int:
    """`paths trace FILE [FILE...] [--perfetto OUT.json]`: 0 on success, 2 on a usage error, a
    file given that is no trace it can read, or an OUT.json it cannot write (as `paths run` for a
    map it cannot use)."""
    parser = argparse.ArgumentParser(
        prog="paths trace",
        description="Summarize trace files written by `trace` stages (per thread and operation: count, "
                    "median and 99th-percentile duration in nanoseconds) and optionally convert them to "
                    "one Chrome/Perfetto JSON file: each trace becomes a process named by its node label, "
                    "each caller slot a thread. Open the JSON at https://ui.perfetto.dev.")
    parser.add_argument("files", nargs="+", metavar="FILE", help="trace files (written when a trace stage is released)")
    parser.add_argument("--perfetto", metavar="OUT.json", help="write all traces into this Perfetto JSON file")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits: 0 after --help, 2 on a usage error
        return int(e.code or 0)
    try:
        traces = [read_trace(path) for path in args.files]
    except TraceFileError as e:
        print(f"paths trace: {e}", file=sys.stderr)
        return 2
    if args.perfetto and any(_same_file(args.perfetto, path) for path in args.files):
        print(f"paths trace: --perfetto {args.perfetto}: is a trace file it reads; give the JSON another name",
              file=sys.stderr)
        return 2
    for trace in traces:
        print(format_summary(trace))
    if args.perfetto:
        try:
            to_perfetto(traces, args.perfetto)
        except OSError as e:
            print(f"paths trace: cannot write '{args.perfetto}': {e.strerror}", file=sys.stderr)
            return 2
        print(f"wrote {args.perfetto}: {sum(len(t.events) for t in traces)} events from {len(traces)} trace(s)")
    return 0
