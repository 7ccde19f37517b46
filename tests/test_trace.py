"""The `trace` stage (wrappers_c/trace.c) and its file tools (paths/runtime/trace_file.py)."""

import gc
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import pytest
from run_progress import without_progress

import paths
import paths._native as native
from paths.runtime.trace_file import TraceFileError, read_trace, to_perfetto, trace_command


def traced_core(space, path, name="T", format="q", **trace_params):
    """[trace -> core]: returns (core, trace) stages."""
    core = native.create_stage("core", {"name": name, "format": format}, None, space)
    trace = native.create_stage("trace", {"file": str(path), **trace_params}, core, space)
    return core, trace


def traced_pairs(space, path, pairs, **trace_params):
    """Runs `pairs` move+observe pairs through [trace -> core], then releases the stages, so the
    trace file is written; returns the file's path."""
    core, trace = traced_core(space, path, **trace_params)
    h = trace.attach("thread 0")
    native.bench.pairs_ns(h, pairs)
    del h, trace, core
    gc.collect()
    return path


def traced_gsum(space, path, threads, **trace_params):
    """[trace -> reduce-sum(threads) -> core] and one handle per thread."""
    core = native.create_stage("core", {"name": "SUM", "format": "q"}, None, space)
    total = native.create_stage("reduce-sum", {"num_threads": threads}, core, space)
    trace = native.create_stage("trace", {"file": str(path), **trace_params}, total, space)
    return [core, total, trace], [trace.attach(f"t{i}") for i in range(threads)]


def test_every_operation_is_one_event(space, tmp_path):
    path = tmp_path / "t.bin"
    core, trace = traced_core(space, path)
    h = trace.attach("thread 0")
    h.move(5)
    h.move(6)
    assert h.observe() == (5,)
    assert h.observe(1) == (6,)
    h.first()
    h.last()
    h.delta()
    h.axe(1)
    with pytest.raises(paths.AxedError):
        h.observe(0)
    assert trace.counters()["events"] == 9
    assert trace.counters()["dropped"] == 0
    assert not path.exists(), "the file is written when the stage is released"
    del h, trace, core
    gc.collect()

    t = read_trace(path)
    assert [e.op for e in t.events] == ["move", "move", "observe", "observe_at", "first", "last", "delta",
                                        "axe", "observe_at"]
    assert [e.index for e in t.events] == [None, None, None, 1, None, None, None, 1, 0]
    assert [e.status_name for e in t.events] == ["ok"] * 8 + ["axed"]
    assert {e.thread for e in t.events} == {0}
    assert all(e.tuple is None for e in t.events), "timestamp mode keeps no tuples"
    assert (t.mode, t.format, t.node, t.dropped) == ("timestamp", "q", "", 0)
    assert t.ticks_per_ns > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.bin"], "no temporary file is left behind"


def test_two_live_trace_stages_never_share_a_file(space, tmp_path):
    """The second stage's rename would replace the first one's trace: it is refused at creation,
    however the folder is spelled; once the first is written, the file is free again."""
    (tmp_path / "sub").mkdir()
    core, first = traced_core(space, tmp_path / "t.bin")
    other = native.create_stage("core", {"name": "U", "format": "q"}, None, space)
    with pytest.raises(ValueError, match=re.escape(f"stage 'trace': file '{tmp_path}/sub/../t.bin' is written by "
                                                   f"another live trace stage ('{tmp_path / 't.bin'}')")):
        native.create_stage("trace", {"file": str(tmp_path / "sub" / ".." / "t.bin")}, other, space)
    second = native.create_stage("trace", {"file": str(tmp_path / "u.bin")}, other, space)  # its own file
    h = first.attach("thread 0")
    h.move(1)
    del h, first, core, second, other
    gc.collect()
    assert read_trace(tmp_path / "t.bin").events[0].op == "move", "the first trace is kept whole"
    again = traced_pairs(paths.PastSet(), tmp_path / "t.bin", 3)  # the same file, once the first is written
    assert len(read_trace(again).events) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub", "t.bin", "u.bin"]


def test_pairs_loop_records_two_events_per_pair(space, tmp_path):
    path = traced_pairs(space, tmp_path / "t.bin", 5000)
    events = read_trace(path).events
    assert len(events) == 10000
    assert [e.op for e in events[:4]] == ["move", "observe", "move", "observe"]
    assert_monotone_per_thread(events)


def test_four_threads_gsum_through_trace_above_reduce_sum(space, tmp_path):
    path = tmp_path / "gsum.bin"
    stages, handles = traced_gsum(space, path, threads=4, node="node-a")
    result = paths.bench.gsum(handles, 2000)  # checks every total in C
    assert len(result.latencies) == 2000
    assert stages[2].counters()["events"] == 4 * 2000 * 2
    del handles, stages, result
    gc.collect()

    t = read_trace(path)
    assert t.node == "node-a"
    assert len(t.events) == 4 * 2000 * 2
    for thread in range(4):
        ops = [e.op for e in t.events if e.thread == thread]
        assert ops == ["move", "observe"] * 2000
    assert_monotone_per_thread(t.events)


def assert_monotone_per_thread(events):
    last_end = {}
    for e in events:
        assert e.start_ns <= e.end_ns
        assert e.start_ns >= last_end.get(e.thread, e.start_ns)
        last_end[e.thread] = e.end_ns


def test_operation_mode_records_the_tuples(space, tmp_path):
    path = tmp_path / "op.bin"
    core, trace = traced_core(space, path, format="qd", mode="operation")
    h = trace.attach("thread 0")
    h.move((1, 0.5))
    h.move((2, 1.5))
    assert h.observe() == (1, 0.5)
    assert h.observe(1) == (2, 1.5)
    h.last()
    del h, trace, core
    gc.collect()
    t = read_trace(path)
    assert t.mode == "operation"
    assert [e.tuple for e in t.events] == [(1, 0.5), (2, 1.5), (1, 0.5), (2, 1.5), None]


def test_operation_mode_records_gsum_totals(space, tmp_path):
    path = tmp_path / "gsum.bin"
    stages, handles = traced_gsum(space, path, threads=4, mode="operation")
    paths.bench.gsum(handles, 100)
    del handles, stages
    gc.collect()
    events = read_trace(path).events
    for thread in range(4):
        assert [e.tuple for e in events if e.thread == thread and e.op == "move"] == [(i,) for i in range(100)]
        assert [e.tuple for e in events if e.thread == thread and e.op == "observe"] == [(4 * i,) for i in range(100)]


def test_overflow_counts_dropped_events(space, tmp_path):
    path = tmp_path / "small.bin"
    core, trace = traced_core(space, path, capacity=10, mode="operation")
    h = trace.attach("thread 0")
    native.bench.pairs_ns(h, 100)
    counters = trace.counters()
    assert (counters["events"], counters["dropped"], counters["capacity"]) == (10, 190, 10)
    assert h.observe(99) == (99,), "the path keeps working when the buffer is full"
    del h, trace, core
    gc.collect()
    t = read_trace(path)
    assert (len(t.events), t.dropped) == (10, 191)
    assert [e.tuple for e in t.events[:2]] == [(0,), (0,)]


@pytest.mark.parametrize("params, message", [
    ({}, "missing parameter 'file'"),
    ({"file": ""}, "parameter 'file'"),
    ({"file": "x", "mode": "full"}, "timestamp|operation"),
    ({"file": "x", "capacity": 0}, "parameter 'capacity'"),
    ({"file": "x", "node": "n" * 200}, "parameter 'node'"),
    ({"file": "/nonexistent-dir/t.bin"}, "cannot write trace file '/nonexistent-dir/t.bin'"),
])
def test_bad_parameters_are_explained(space, params, message):
    core = native.create_stage("core", {"name": "T", "format": "q"}, None, space)
    with pytest.raises(ValueError, match="stage 'trace'.*" + message.replace("|", r"\|")):
        native.create_stage("trace", params, core, space)


def test_a_file_that_cannot_be_written_is_reported(space, tmp_path, capfd):
    directory = tmp_path / "gone"
    directory.mkdir()
    core, trace = traced_core(space, directory / "t.bin")
    h = trace.attach("thread 0")
    h.move(1)
    shutil.rmtree(directory)
    del h, trace, core
    gc.collect()
    message = f"stage 'trace': cannot write trace file '{directory / 't.bin'}': No such file or directory"
    assert f"paths: {message}" in capfd.readouterr().err
    assert native.take_trace_failures() == [message]
    assert native.take_trace_failures() == []  # told once


def test_a_failure_cut_to_fit_its_message_is_still_text(space, tmp_path, capfd):
    deep = tmp_path.joinpath(*["é" * 100] * 4)  # 800 bytes of two-byte characters: cut somewhere
    deep.mkdir(parents=True)
    core, trace = traced_core(space, deep / "t.bin")
    shutil.rmtree(tmp_path / ("é" * 100))
    del trace, core
    gc.collect()
    capfd.readouterr()
    [failure] = native.take_trace_failures()
    assert failure.startswith(f"stage 'trace': cannot write trace file '{tmp_path}/éé")
    assert len(failure) <= 512  # cut, perhaps inside a character: replaced, not an error


@pytest.fixture
def full_disk(tmp_path):
    """A folder on a 64 KiB tmpfs mounted for the test and filled up: a file can be created there,
    but not written. Unmounted afterwards."""
    folder = tmp_path / "full"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True,
                             text=True)
    assert mounted.returncode == 0, f"this test mounts a tmpfs (as root): {mounted.stderr}"
    try:
        filler = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            with pytest.raises(OSError, match="No space left on device"):
                while True:
                    os.write(filler, bytes(4096))
        finally:
            os.close(filler)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_trace_lost_to_a_full_disk_is_kept_for_the_caller(space, full_disk):
    core, trace = traced_core(space, full_disk / "t.bin")
    h = trace.attach("thread 0")
    native.bench.pairs_ns(h, 1000)
    del h, trace, core
    gc.collect()
    assert native.take_trace_failures(wait=5) == [
        f"stage 'trace': cannot write trace file '{full_disk / 't.bin'}': No space left on device"]
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]  # no temporary file left either


def test_a_map_run_whose_traces_are_lost_fails_naming_every_node(probe, full_disk):
    done = subprocess.run([sys.executable, "-m", "paths", "run", "gsum", "--map", "paper-4w", "--threads", "6",
                           "--repeat", "1", "--rounds", "20", "--trace", str(full_disk)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    said = without_progress(done.stderr).strip().splitlines()
    assert said.pop() == "paths run: keeping what was measured before it ended: 1 run at 6 threads"
    lines = [line for line in said if not line.startswith("[n")]  # not what the nodes said as it happened
    assert lines[0] == "paths run: traces lost:" and "Traceback" not in done.stderr
    passed_on = said[:len(said) - len(lines)]  # one line per lost file, as each node said it
    assert len(passed_on) == len(lines) - 1 and all(line.endswith("No space left on device") for line in passed_on)
    lost = [re.fullmatch(rf"  node (n[01]): stage 'trace': cannot write trace file '{full_disk}/gsum-[^']*-\1-"
                         r"(callers|link)-[^']*\.bin': No space left on device", line) for line in lines[1:]]
    assert all(lost), done.stderr
    # every node's callers, and n1's link to n0
    assert {(m.group(1), m.group(2)) for m in lost} == {("n0", "callers"), ("n1", "callers"), ("n1", "link")}
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]


def test_perfetto_json(space, tmp_path):
    stages, handles = traced_gsum(space, tmp_path / "a.bin", threads=2, node="node-a")
    paths.bench.gsum(handles, 50)
    core, trace = traced_core(space, tmp_path / "b.bin", name="B", mode="operation", node="node-b")
    h = trace.attach("thread 0")
    h.move(7)
    h.observe(0)
    del handles, stages, h, trace, core
    gc.collect()

    out = tmp_path / "trace.json"
    to_perfetto([read_trace(tmp_path / "a.bin"), read_trace(tmp_path / "b.bin")], out)
    with open(out) as f:
        records = json.load(f)["traceEvents"]
    names = {r["pid"]: r["args"]["name"] for r in records if r["ph"] == "M" and r["name"] == "process_name"}
    assert names == {1: "node-a", 2: "node-b"}
    complete = [r for r in records if r["ph"] == "X"]
    assert len(complete) == 2 * 50 * 2 + 2
    threads = {r["tid"]: r["args"]["name"] for r in records if r["ph"] == "M" and r["name"] == "thread_name"}
    assert threads == {1: "thread 0", 2: "thread 1"}, "tid is the caller slot + 1"
    assert {r["tid"] for r in complete if r["pid"] == 1} == {1, 2}
    assert all(isinstance(r["ts"], (int, float)) and r["ts"] >= 0 and r["dur"] >= 0 for r in complete)
    observe_at = [r for r in complete if r["pid"] == 2 and r["name"] == "observe_at"]
    assert observe_at[0]["args"] == {"status": "ok", "index": 0, "tuple": [7]}


def test_cli_summary_and_perfetto(space, tmp_path, capsys):
    traced_pairs(space, tmp_path / "t.bin", 200, node="n0")
    out = tmp_path / "t.json"
    assert trace_command([str(tmp_path / "t.bin"), "--perfetto", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "node 'n0'" in printed and "move" in printed and "200" in printed and "p99" in printed
    assert len(json.loads(out.read_text())["traceEvents"]) == 400 + 2


def test_cli_errors(tmp_path, capsys):
    assert trace_command([]) == 2
    assert "FILE" in capsys.readouterr().err
    assert trace_command(["--help"]) == 0
    assert "Perfetto" in capsys.readouterr().out

    missing = tmp_path / "missing.bin"
    assert trace_command([str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "No such file" in err and "Traceback" not in err

    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"hello, this is not a trace" * 20)
    assert trace_command([str(garbage)]) == 2
    err = capsys.readouterr().err
    assert str(garbage) in err and "not a PATHS trace" in err and "PATHSTR1" in err

    assert trace_command([str(garbage), "--perfetto", str(tmp_path / "no" / "out.json")]) == 2  # the file first
    nowhere = tmp_path / "no" / "out.json"
    real = traced_pairs(paths.PastSet(), tmp_path / "real.bin", 10)
    assert trace_command([str(real), "--perfetto", str(nowhere)]) == 2
    assert f"cannot write '{nowhere}': No such file or directory" in capsys.readouterr().err

    kept = real.read_bytes()
    for spelling in (str(real), str(tmp_path / "." / "real.bin")):  # its own input, however spelled
        assert trace_command([str(real), "--perfetto", spelling]) == 2
        assert "is a trace file it reads" in capsys.readouterr().err
    assert real.read_bytes() == kept


def test_a_file_that_never_ends_or_runs_on_is_refused_without_reading_it_all(space, tmp_path):
    done = subprocess.run([sys.executable, "-m", "paths", "trace", "/dev/zero"], capture_output=True, text=True,
                          timeout=30)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("paths trace: trace file '/dev/zero': not a PATHS trace (expected it to start with "
                           "b'PATHSTR1', got b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00')\n")
    path = traced_pairs(space, tmp_path / "t.bin", 10)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\0" * 1000)
    with pytest.raises(TraceFileError, match=re.escape(f"'{path}': trailing bytes: expected {size} bytes "
                                                       "(header + 20 events), got more")):
        read_trace(path)


def test_truncated_file_is_named(space, tmp_path):
    path = traced_pairs(space, tmp_path / "t.bin", 10)
    data = path.read_bytes()
    for cut in (4, 100, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.raises(TraceFileError, match=f"'{path}': truncated: expected"):
            read_trace(path)


@pytest.mark.parametrize("offset, field, value, words", [
    (32, "<d", 5e-324, "ticks"),                        # ticks_per_ns: every time overflows a float
    (32, "<d", float("inf"), "ticks_per_ns"),           # ticks_per_ns: every time would be 0
    (72, "<2s", "é".encode(), "tuple format"),          # the format: text that is no struct format
])
def test_a_hostile_header_is_named_not_a_traceback(space, tmp_path, capsys, offset, field, value, words):
    path = traced_pairs(space, tmp_path / "t.bin", 10)
    data = bytearray(path.read_bytes())
    struct.pack_into(field, data, offset, value)
    path.write_bytes(bytes(data))
    with pytest.raises(TraceFileError, match=f"'{path}': .*{words}"):
        read_trace(path)
    assert trace_command([str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "Traceback" not in err


def test_the_overhead_benchmark_names_its_target_and_what_the_clock_costs(capsys):
    from benchmarks import trace_overhead
    assert trace_overhead.main(["--pairs", "1000", "--runs", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"trace overhead: -?[\d.]+ cycles per operation \(median of 1\), target <= 40: (PASS|MISS)",
                        out[-2]), out
    assert re.fullmatch(r"of which the clock: [\d.]+ cycles \(a traced operation reads it twice; on this machine\)",
                        out[-1]), out
    assert paths._native.bench.clock_read_ns(1000) > 0
    with pytest.raises(ValueError, match="expected reads > 0"):
        paths._native.bench.clock_read_ns(0)


def test_the_summary_keeps_its_columns_under_the_longest_operation_name(tmp_path):
    from paths.runtime.trace_file import format_summary
    path = str(tmp_path / "ops.bin")
    h = paths.build_path(paths.make_path(paths.stage("trace", file=path), paths.stage("core", name="S", format="q")),
                         pastset=paths.PastSet())
    h.move(1)
    h.observe_range(0, 1, timeout=5)
    del h
    gc.collect()
    table = format_summary(read_trace(path)).splitlines()[1:]
    assert [row.split()[1] for row in table] == ["op", "move", "observe_range"]
    assert len({len(row) for row in table}) == 1  # every row as wide as the header: the columns line up
