"""Remote stage costs on its two kinds of transport, against the raw round trips, in one run:
`tcp` (a direct socket per link: the new path) and `zmq` (ZeroMQ: the old path), each for a
move and an observe through a remote stage (window 1 and 2), a GSum of 2 processes x 2 threads
through one server (the paper's Figure 1; other work than a round trip, so shown without a ratio:
benchmarks.cluster_gsum holds GSum to MPI_Allreduce over TCP), pipelined moves from one client, and move_many of 256
tuples at a time from one client (each batch one frame, acknowledged once; and with window 64,
sent without waiting for the answers, which the count at the end reads) — beside a C
ping-pong of the same 48-byte frames (a remote stage's frame: 40-byte header and one "q" tuple)
over a loopback TCP socket, with blocking reads and with spinning ones, the faster of the two
the physical limit here (the ratios' anchor), and a raw ZeroMQ round trip.

    python -m benchmarks.remote [--pairs N] [--rounds N] [--moves N] [--repeat N]

The server is a `paths serve` child process, so client and server are separate processes, as
in use; so are the anchors' two ends (benchmarks/tcp_anchor/, benchmarks/zmq_anchor/). A run
times each pair, as each anchor times each round trip, and takes the median; every number is the
median of --repeat runs, whose measurements take turns, so that a drifting machine shifts all of
them alike. Targets: one remote operation at most 1.3x the TCP ping-pong; a move+observe pair
with window=2 at most 1.3x one ping-pong; at least 1,000,000 pipelined moves per second (window
64, with the remote stage's batch=64: its moves leave 64 to a write; the row without batch is
shown beside it); move_many of 256 moving at least 5x the tuples per second of single pipelined
moves (window 64). A MISS is a finding, not an error: the exit code is 0 after any
report, 1 when a measurement could not run, 2 on bad arguments, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys

import paths
from paths import build_path, make_path, stage
from paths._native import bench
from paths.experiments.parent_death import dies_with_me

from . import anchors
from .child_process import ROOT, ChildError, ReadyChild
from .core_ops import positive_int

PROTOS = ("tcp", "zmq")    # the new path, then the old one
TIMEOUT_MS = 5000          # the remote stages' timeout_ms
RUN_TIMEOUT_S = 300        # the longest one measurement may take
MOVES_WINDOW = 64
MOVES_BATCH = 64
MANY = 256                 # tuples per move_many
GSUM_THREADS = 4           # the remote GSum's: 2 client processes of 2
TARGET_RATIO = 1.3
TARGET_MOVES_PER_S = 1_000_000
TARGET_MANY_RATIO = 5.0    # move_many's tuples/s over single pipelined moves' (window MOVES_WINDOW)


class MeasurementError(RuntimeError):
    """A measurement could not run (a child failed, a build failed)."""


def paths_serve() -> ReadyChild:
    return ReadyChild([sys.executable, "-m", "paths", "serve", "--bind", "tcp://127.0.0.1:*"], "paths serve")


def remote_handle(endpoint: str, proto: str, element: str, window: int = 1, batch: int = 1):
    remote = stage("remote", host=endpoint, proto=proto, timeout_ms=TIMEOUT_MS, window=window,
                   **({"batch": batch} if batch > 1 else {}))
    return build_path(make_path(remote, stage("core", name=element, format="q")))


def pairs_us(handle, pairs: int) -> float:
    """Microseconds of the median move+observe pair through the handle, from a C loop that times
    each pair on its own, as the anchors time each round trip."""
    return bench.pair_median_ns(handle, pairs) / 1000.0


def moves_per_second(handle, moves: int) -> float:
    """Moves per second through the handle, from a C loop, until all are acknowledged."""
    return 1e9 / bench.link_moves_ns(handle, moves)


def many_per_second(handle, moves: int) -> float:
    """Tuples per second through the handle moved MANY at a time (each batch one move_many), from a
    C loop, until all are acknowledged."""
    return 1e9 / bench.link_batches_ns(handle, moves, MANY)


def gsum_client(endpoint: str, proto: str, element: str, rounds: str) -> int:
    """One process of the Figure 1 GSum: 2 C threads, reduce-sum(2) -> remote -> reduce-sum(2)."""
    path = make_path(stage("reduce-sum", num_threads=2),
                     stage("remote", host=endpoint, proto=proto, timeout_ms=TIMEOUT_MS),
                     stage("reduce-sum", num_threads=2), stage("core", name=element, format="q"))
    handles = [build_path(path) for _ in range(2)]
    result = paths.bench.gsum(handles, int(rounds), contributors=4)
    print(f"median_us {result.median_us:.3f}", flush=True)
    return 0


def remote_gsum_us(endpoint: str, proto: str, element: str, rounds: int) -> float:
    """Mean over the 2 client processes of the median microseconds per GSum round (thread 0)."""
    clients = [subprocess.Popen([sys.executable, "-m", "benchmarks.remote", "--gsum-client", endpoint, proto, element,
                                 str(rounds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                preexec_fn=dies_with_me(signal.SIGTERM))
               for _ in range(2)]
    try:
        outputs = [client.communicate(timeout=RUN_TIMEOUT_S) for client in clients]
    finally:
        for client in clients:
            if client.poll() is None:
                client.kill()
            client.communicate()
    medians = []
    for client, (out, err) in zip(clients, outputs):
        fields = out.split()
        if client.returncode != 0 or fields[:1] != ["median_us"]:
            raise MeasurementError(f"GSum client failed ({client.returncode}): {err.strip()[-400:]}")
        medians.append(float(fields[1]))
    return statistics.mean(medians)


# ---- the report -----------------------------------------------------------------------------


def measure(args) -> dict[str, list[float]]:
    """Every measurement --repeat times, in turns."""
    runs: dict[str, list[float]] = {}

    def take(key: str, value: float) -> None:
        runs.setdefault(key, []).append(value)

    with paths_serve() as server:
        endpoint = server.ready()
        handles = {(proto, window): remote_handle(endpoint, proto, f"PAIRS-{proto}-{window}", window)
                   for proto in PROTOS for window in (1, 2)}
        movers = {proto: remote_handle(endpoint, proto, f"MOVES-{proto}", MOVES_WINDOW) for proto in PROTOS}
        batched = remote_handle(endpoint, "tcp", "MOVES-batched", MOVES_WINDOW, MOVES_BATCH)
        many = {proto: remote_handle(endpoint, proto, f"MANY-{proto}") for proto in PROTOS}
        many_pipelined = {proto: remote_handle(endpoint, proto, f"MANY-PIPELINED-{proto}", MOVES_WINDOW)
                          for proto in PROTOS}
        # One untimed run of each handle: its first pays for its connection and the server's buffers.
        for handle in handles.values():
            pairs_us(handle, min(1000, args.pairs))
        for handle in (*movers.values(), batched):
            moves_per_second(handle, min(10_000, args.moves))
        for handle in (*many.values(), *many_pipelined.values()):
            many_per_second(handle, min(10_000, args.moves))
        for n in range(args.repeat):
            blocking, polling = anchors.tcp_ping_pong_us(args.pairs), anchors.tcp_ping_pong_us(args.pairs, poll=True)
            take("ping_pong_blocking", blocking)
            take("ping_pong_polling", polling)
            take("ping_pong", min(blocking, polling))
            take("zmq_raw", anchors.zmq_round_trip_us(args.pairs))
            for proto in PROTOS:
                for window in (1, 2):
                    take(f"pair{window}_{proto}", pairs_us(handles[proto, window], args.pairs))
                take(f"gsum_{proto}", remote_gsum_us(endpoint, proto, f"GSUM-{proto}-{n}", args.rounds))
                take(f"rate_{proto}", moves_per_second(movers[proto], args.moves))
                take(f"many_{proto}", many_per_second(many[proto], args.moves))
                take(f"many_pipelined_{proto}", many_per_second(many_pipelined[proto], args.moves))
            take("rate_batched", moves_per_second(batched, args.moves))
        del handles, movers, batched, many, many_pipelined  # released while the server is up
    return runs


def report(args, runs: dict[str, list[float]]) -> list[str]:
    def value(key: str, scale: float = 1.0) -> float:
        return statistics.median(runs[key]) * scale

    def ratio(key: str, scale: float = 1.0) -> float:
        """The median of each run's own ratio to that run's ping-pong."""
        return statistics.median(x * scale / anchor for x, anchor in zip(runs[key], runs["ping_pong"]))

    def many_ratio(proto: str) -> float:
        """The median of each run's own ratio of move_many's tuples/s to pipelined moves'."""
        return statistics.median(m / r for m, r in zip(runs[f"many_{proto}"], runs[f"rate_{proto}"]))

    lines = [f"Remote stage on tcp (direct: the new path) and zmq (ZeroMQ: the old path), loopback, "
             f"{anchors.FRAME_BYTES}-byte frames, server `paths serve` in its own process; median of {args.repeat} "
             f"runs",
             f"  ({args.pairs} round trips or pairs, {args.rounds} GSum rounds, {args.moves} moves per run)",
             f"anchors, same run: C ping-pong over TCP, blocking reads {value('ping_pong_blocking'):.1f} us, "
             f"spinning reads {value('ping_pong_polling'):.1f} us",
             f"                   the faster of the two in each run (the physical limit)  "
             f"{value('ping_pong'):.1f} us",
             f"                   raw ZeroMQ round trip, 2 processes                     "
             f"{value('zmq_raw'):.1f} us ({ratio('zmq_raw'):.2f}x the ping-pong)",
             "",
             f"{'measurement':<48}{'tcp (after)':>16}{'zmq (before)':>16}{'tcp/ping-pong':>15}"]
    rows = [
        ("one remote operation, window=1 (half a pair)", "pair1", 0.5, "us"),
        ("move+observe pair, window=2 (one round trip)", "pair2", 1.0, "us"),
        ("move+observe pair, window=1 (two round trips)", "pair1", 1.0, "us"),
    ]
    for name, key, scale, unit in rows:
        lines.append(f"{name:<48}{value(f'{key}_tcp', scale):>13.1f} {unit}{value(f'{key}_zmq', scale):>13.1f} {unit}"
                     f"{ratio(f'{key}_tcp', scale):>14.2f}x")
    # A sum is other work than a ping-pong: no ratio (benchmarks.cluster_gsum holds GSum to MPI_Allreduce).
    gsum = "remote GSum, 2 processes x 2 threads" + (" *" if GSUM_THREADS > len(os.sched_getaffinity(0)) else "")
    lines.append(f"{gsum:<48}{value('gsum_tcp'):>13.1f} us{value('gsum_zmq'):>13.1f} us{'-':>15}")
    lines.append(f"{f'pipelined moves/s, window={MOVES_WINDOW}':<48}{value('rate_tcp'):>16,.0f}{value('rate_zmq'):>16,.0f}")
    lines.append(f"{f'pipelined moves/s, window={MOVES_WINDOW}, batch={MOVES_BATCH}':<48}{value('rate_batched'):>16,.0f}"
                 f"{'-':>16}")
    lines.append(f"{f'move_many of {MANY}: tuples/s':<48}{value('many_tcp'):>16,.0f}{value('many_zmq'):>16,.0f}")
    lines.append(f"{f'  its ratio to pipelined moves (window={MOVES_WINDOW})':<48}"
                 f"{many_ratio('tcp'):>15.1f}x{many_ratio('zmq'):>15.1f}x")
    lines.append(f"{f'move_many of {MANY}, window={MOVES_WINDOW} (pipelined): tuples/s':<48}"
                 f"{value('many_pipelined_tcp'):>16,.0f}{value('many_pipelined_zmq'):>16,.0f}")
    if gsum.endswith("*"):
        lines.append(f"  * {GSUM_THREADS} threads and a server on {len(os.sched_getaffinity(0))} cores: it measures "
                     "context switches as well")
    lines += ["", "Targets (tcp)"]
    lines.append(target(f"one remote operation <= {TARGET_RATIO}x the TCP ping-pong",
                        ratio("pair1_tcp", 0.5) <= TARGET_RATIO, f"{ratio('pair1_tcp', 0.5):.2f}x"))
    lines.append(target(f"a move+observe pair with window=2 <= {TARGET_RATIO}x one ping-pong",
                        ratio("pair2_tcp") <= TARGET_RATIO, f"{ratio('pair2_tcp'):.2f}x"))
    lines.append(target(f">= {TARGET_MOVES_PER_S:,} pipelined moves/s (window={MOVES_WINDOW}, batch={MOVES_BATCH})",
                        value("rate_batched") >= TARGET_MOVES_PER_S,
                        f"{value('rate_batched'):,.0f} moves/s (without batch: {value('rate_tcp'):,.0f})"))
    lines.append(target(f"move_many of {MANY}: >= {TARGET_MANY_RATIO:g}x the tuples/s of pipelined moves "
                        f"(window={MOVES_WINDOW})", many_ratio("tcp") >= TARGET_MANY_RATIO,
                        f"{many_ratio('tcp'):.1f}x ({value('many_tcp'):,.0f} tuples/s)"))
    return lines


def target(name: str, met: bool, shown: str) -> str:
    return f"  {'PASS' if met else 'MISS'}  {name}: {shown}"


def parse_arguments(argv):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.remote", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=positive_int, default=20_000, metavar="N",
                        help="round trips (anchors) and move+observe pairs (remote) per run (default: %(default)s)")
    parser.add_argument("--rounds", type=positive_int, default=2_000, metavar="N",
                        help="GSum rounds per run (default: %(default)s)")
    parser.add_argument("--moves", type=positive_int, default=200_000, metavar="N",
                        help="pipelined moves per run (default: %(default)s)")
    parser.add_argument("--repeat", type=positive_int, default=5, metavar="N",
                        help="runs per measurement; the median is reported (default: %(default)s)")
    parser.add_argument("--gsum-client", nargs=4, metavar=("ENDPOINT", "PROTO", "ELEMENT", "ROUNDS"),
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_arguments(argv)
    if args.gsum_client:
        return gsum_client(*args.gsum_client)
    try:
        lines = report(args, measure(args))
    except (MeasurementError, ChildError, anchors.AnchorUnavailable, RuntimeError, ConnectionError,
            subprocess.TimeoutExpired) as e:
        print(f"benchmarks.remote: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the children are reaped on the way out
        print("benchmarks.remote: interrupted", file=sys.stderr)
        return 130
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
