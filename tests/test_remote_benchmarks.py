"""The remote-path benchmarks run end to end in a short mode and report what they claim:
`python -m benchmarks.remote` (tcp after, zmq before, the TCP ping-pong and raw ZeroMQ anchors,
move_many of 256 against pipelined moves, the targets) and `python -m benchmarks.cluster_gsum --quick` (GSum on an emulated map on tcp and
zmq against MPI_Allreduce over TCP, which tree won, the targets, a CSV). Each leaves no process
behind (the `probe` fixture fails the test if any process it started is still there)."""

from __future__ import annotations

import csv
import math
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import paths

ROOT = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 240


def run(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=RUN_TIMEOUT_S)


def test_no_measured_run_of_the_remote_benchmark_is_a_handles_first(probe, monkeypatch):
    """Each handle's first run pays for its connection and the server's first buffers: it is a
    warm-up, left out. Here a handle's first run takes 1 ns and every later one 1000 ns."""
    from benchmarks import remote

    used = set()

    def ns(handle, *counts) -> float:
        first = id(handle) not in used
        used.add(id(handle))
        return 1.0 if first else 1000.0

    monkeypatch.setattr(remote, "bench", SimpleNamespace(pair_median_ns=ns, link_moves_ns=ns, link_batches_ns=ns))
    monkeypatch.setattr(remote.anchors, "tcp_ping_pong_us", lambda rounds, poll=False: 1.0)
    monkeypatch.setattr(remote.anchors, "zmq_round_trip_us", lambda rounds: 1.0)
    monkeypatch.setattr(remote, "remote_gsum_us", lambda endpoint, proto, element, rounds: 1.0)
    runs = remote.measure(remote.parse_arguments(["--repeat", "2"]))
    measured = {key: values for key, values in runs.items() if key.startswith(("pair", "rate", "many"))}
    assert measured == {**{f"pair{window}_{proto}": [1.0, 1.0] for window in (1, 2) for proto in ("tcp", "zmq")},
                        **{key: [1e6, 1e6] for key in ("rate_tcp", "rate_zmq", "rate_batched", "many_tcp",
                                                       "many_zmq", "many_pipelined_tcp", "many_pipelined_zmq")}}


@paths.stage_kind("test-every-tenth-move-slow")
class EveryTenthMoveSlow:
    """Sleeps 20 ms on every tenth move: a pair's mean is then above 2 ms, its median far below."""

    def __init__(self):
        self.moves = 0

    def move(self, below, t):
        self.moves += 1
        if self.moves % 10 == 0:
            time.sleep(0.02)
        below.move(t)


def test_the_remote_benchmarks_pairs_are_a_median_as_its_anchors_round_trips_are():
    handle = paths.build_path(paths.make_path(paths.stage("test-every-tenth-move-slow"),
                                              paths.stage("core", name="MEDIAN", format="q")),
                              pastset=paths.PastSet())
    assert paths._native.bench.pairs_ns(handle, 50) > 2e6  # the mean: 5 slow pairs of 50
    assert paths._native.bench.pair_median_ns(handle, 50) < 1e6  # the median: a fast pair


def test_remote_benchmark_reports_both_transports_against_the_anchors(probe):
    done = run("benchmarks.remote", "--pairs", "300", "--rounds", "100", "--moves", "3000", "--repeat", "1")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    anchors = re.search(r"C ping-pong over TCP, blocking reads ([\d.]+) us, spinning reads ([\d.]+) us\n"
                        r"\s+the faster of the two in each run \(the physical limit\)\s+([\d.]+) us", out)
    blocking, spinning, ping_pong = map(float, anchors.groups())
    assert ping_pong == min(blocking, spinning) > 0  # one run: its own faster anchor
    assert re.search(r"raw ZeroMQ round trip, 2 processes\s+[\d.]+ us", out)
    row = re.search(r"one remote operation, window=1 \(half a pair\)\s+([\d.]+) us\s+([\d.]+) us\s+([\d.]+)x", out)
    tcp, zmq, ratio = map(float, row.groups())
    assert tcp > 0 and zmq > 0
    assert math.isclose(ratio, tcp / ping_pong, rel_tol=0.05, abs_tol=0.01)  # one run: its own ratio
    for name in ("move+observe pair, window=2", "remote GSum, 2 processes x 2 threads",
                 "pipelined moves/s, window=64, batch=64"):
        assert name in out
    many = re.search(r"move_many of 256: tuples/s\s+([\d,]+)\s+([\d,]+)\n\s+its ratio to pipelined moves "
                     r"\(window=64\)\s+([\d.]+)x\s+([\d.]+)x", out)
    assert many, out
    many_tcp = float(many[1].replace(",", ""))
    single_tcp = float(re.search(r"pipelined moves/s, window=64\s+([\d,]+)", out)[1].replace(",", ""))
    assert many_tcp > 0 and math.isclose(float(many[3]), many_tcp / single_tcp, rel_tol=0.06, abs_tol=0.1)
    pipelined = re.search(r"move_many of 256, window=64 \(pipelined\): tuples/s\s+([\d,]+)\s+([\d,]+)\n", out)
    assert pipelined and all(float(n.replace(",", "")) > 0 for n in pipelined.groups()), out
    targets = re.findall(r"^  (PASS|MISS)  (.*)$", out, re.M)
    assert [t[1].split(":")[0] for t in targets] == [
        "one remote operation <= 1.3x the TCP ping-pong",
        "a move+observe pair with window=2 <= 1.3x one ping-pong",
        ">= 1,000,000 pipelined moves/s (window=64, batch=64)",
        "move_many of 256",
    ]
    many_target = re.search(r"^  (PASS|MISS)  move_many of 256: >= 5x the tuples/s of pipelined moves \(window=64\): "
                            r"([\d.]+)x", out, re.M)
    assert many_target[1] == ("PASS" if float(many_target[2]) >= 5 else "MISS")


def test_cluster_gsum_quick_compares_tcp_zmq_allreduce_and_mpi_and_writes_csv(probe, tmp_path):
    out_csv = tmp_path / "cluster.csv"
    done = run("benchmarks.cluster_gsum", "--quick", "--csv", str(out_csv))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(r"C ping-pong over TCP, 48 B, blocking reads [\d.]+ us, spinning reads [\d.]+ us; raw ZeroMQ "
                     r"round trip, 2 processes "
                     r"[\d.]+ us", out)
    rows = list(csv.DictReader(out_csv.open()))
    assert [(r["nodes"], r["threads_per_node"], r["contributors"], r["tree"]) for r in rows] == \
        [("2", "1", "2", "flat"), ("2", "1", "2", "allreduce")]
    # the map's two nodes, for the sums on tcp and on zmq, and for the allreduce
    assert sorted(probe.started().values()) == ["n0", "n0", "n0", "n1", "n1", "n1"]
    flat, exchange = rows
    tcp, zmq, mpi = float(flat["tcp_us"]), float(flat["zmq_us"]), float(flat["mpi_us"])
    assert tcp > 0 and zmq > 0 and mpi > 0 and float(exchange["tcp_us"]) > 0
    assert math.isclose(float(flat["tcp_per_mpi"]), tcp / mpi) and math.isclose(float(flat["zmq_per_mpi"]), zmq / mpi)
    assert exchange["zmq_us"] == exchange["zmq_per_mpi"] == "", "allreduce's members connect directly: no zmq run"
    best = min(rows, key=lambda r: float(r["tcp_us"]))
    verdict = re.search(r"^  (PASS|MISS by [\d.]+%)\s+2 nodes x 1 thread\(s\): (\S+) won, tcp ([\d.]+) us vs MPI "
                        r"([\d.]+) us = ([\d.]+)x \(target <= 1.00x\)$", out, re.M)
    assert verdict, out
    assert verdict[2] == best["tree"]
    assert verdict[1].startswith("PASS") == (float(verdict[5]) <= 1.0)


@pytest.mark.parametrize("args, words", [
    (["--nodes", "1"], "at least 2 nodes"), (["--rounds", "0"], "--rounds"),
    (["--nodes", "2,4,2"], "--nodes: 2 given more than once in '2,4,2': expected each count once"),
    (["--csv", "/no/such/folder/out.csv"], "--csv /no/such/folder/out.csv: no folder /no/such/folder to write it in"),
    (["--nodes", "16", "--threads-per-node", "2"],
     "--threads-per-node: more than 1 runs at 8 nodes and fewer, so --nodes 16 leaves nothing to measure"),
])
def test_cluster_gsum_refuses_bad_options_with_exit_2(args, words):
    done = run("benchmarks.cluster_gsum", *args)
    assert done.returncode == 2 and words in done.stderr, done.stderr


def test_cluster_gsum_quick_gives_defaults_that_options_beside_it_override():
    from benchmarks.cluster_gsum import parse_arguments

    quick = parse_arguments(["--quick"])
    assert (quick.nodes, quick.threads_per_node, quick.rounds, quick.repeat) == ([2], [1], 200, 1)
    chosen = parse_arguments(["--quick", "--nodes", "4", "--rounds", "50", "--repeat", "2"])
    assert (chosen.nodes, chosen.threads_per_node, chosen.rounds, chosen.repeat) == ([4], [1], 50, 2)


def test_cluster_gsum_names_the_configurations_it_leaves_out():
    from benchmarks.cluster_gsum import parse_arguments, report

    args = parse_arguments(["--nodes", "2,16", "--threads-per-node", "1,2", "--repeat", "1"])
    assert [(c.nodes, c.threads) for c in args.configs] == [(2, 1), (16, 1), (2, 2)]
    runs = {(config, column): [1.0] for config in args.configs
            for column in [*((tree, proto) for tree in config.trees() for proto in ("tcp", "zmq")), "mpi"]}
    lines, _ = report(args.configs, runs, {"ping_pong": [1.0], "ping_pong_polling": [1.0], "zmq_raw": [1.0]}, args)
    assert "not measured (more than 1 thread per node runs at 8 nodes and fewer): 16 x 2 (nodes x threads per " \
           "node)" in lines
    assert any("(more threads per node: hybrid ranks of as many OpenMP threads)" in line for line in lines)


def test_cluster_gsum_sets_no_target_at_3_processes():
    from benchmarks.cluster_gsum import parse_arguments, report

    args = parse_arguments(["--nodes", "2,3,4", "--threads-per-node", "1", "--repeat", "1"])
    runs = {(config, column): [1.0] for config in args.configs
            for column in [*((tree, proto) for tree in config.trees() for proto in ("tcp", "zmq")), "mpi"]}
    lines, _ = report(args.configs, runs, {"ping_pong": [1.0], "ping_pong_polling": [1.0], "zmq_raw": [1.0]}, args)
    verdicts = [line.split()[0] + " " + line.split(":")[0].split(maxsplit=1)[1].split(" x ")[0].split()[-2]
                for line in lines if " nodes x " in line]
    assert verdicts == ["PASS 2", "no 3", "MISS 4"], lines
    assert not any("hybrid" in line for line in lines), lines  # one thread per node: no hybrid ranks measured


@pytest.mark.parametrize("module, args, words", [
    ("benchmarks.gsum", ["--threads", "1", "--tree", "flat", "--rounds", "10", "--repeat", "1", "--no-targets",
                         "--csv", "/no/such/folder/out.csv"],
     "--csv /no/such/folder/out.csv: no folder /no/such/folder to write it in"),
    ("benchmarks.gsum", ["--threads", "1,2000", "--tree", "flat", "--rounds", "10", "--repeat", "1", "--no-targets"],
     "--threads: at most 1024 (the OpenMP anchor's largest team), got 2000"),
    ("benchmarks.gsum", ["--tree", ",", "--threads", "1", "--rounds", "10", "--repeat", "1", "--no-targets"],
     "argument --tree: expected a comma-separated list of trees (flat, faninK), got ','"),
    ("benchmarks.gsum", ["--tree", "fanin5000", "--threads", "1", "--rounds", "10", "--repeat", "1", "--no-targets"],
     "argument --tree: unknown tree 'fanin5000' (expected flat or faninK with K from 2 to 4096)"),
    ("benchmarks.launch", ["--ranks", "0"], "argument --ranks: expected a number from 1 to 2**63-1, got 0"),
    ("benchmarks.launch", ["--runs", "0"], "argument --runs: expected a number from 1 to 2**63-1, got 0"),
], ids=["gsum csv nowhere", "gsum above the OpenMP anchor", "gsum no tree", "gsum fan-in past the most",
        "launch no ranks", "launch no runs"])
def test_other_benchmarks_refuse_bad_options_with_exit_2_before_measuring(module, args, words):
    done = run(module, *args)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_benchmark_killed_leaves_no_server_child(probe):
    """SIGTERM (or SIGKILL) to the benchmark alone, not its process group: its `paths serve`
    child goes with it (parent-death signal), as on Ctrl-C."""
    bench = subprocess.Popen([sys.executable, "-m", "benchmarks.remote", "--pairs", "100000", "--repeat", "5"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)  # the probe's env
    try:
        deadline = time.monotonic() + 60
        while not set(probe.alive()) - {bench.pid} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set(probe.alive()) - {bench.pid}, "the server child never started"
        time.sleep(3)  # past its READY: measuring
        bench.terminate()
        bench.wait(timeout=30)
        assert probe.alive_within(5) == []
    finally:
        bench.kill()
        bench.wait()
