"""Remote stage costs against raw ZeroMQ, TCP loopback, in one run: the round trip of a move and
an observe through a remote stage (window 1 and 2), a GSum of 2 processes x 2 threads through
one server (the paper's Figure 1), and pipelined moves from one client (window 64) — each
beside the raw ZeroMQ round trip of a 48-byte frame (a remote stage's frame: 40-byte header and
one "q" tuple).

    python -m benchmarks.remote [--pairs N] [--rounds N] [--moves N] [--repeat N]

The server is a `paths serve` child process, so client and server are separate processes, as
in use. The raw anchor is measured the same way (benchmarks/zmq_anchor/round_trip.c, built here
with cc and libzmq) and, for reference, in one process (paths._native.bench.zmq_round_trip_us).
Every number is the median of --repeat runs. Targets: a remote round trip at most 1.3x the raw
one; at least 100,000 pipelined moves per second. A MISS is a finding, not an error: the exit
code is 0 after any report, 1 when a measurement could not run, 2 on bad arguments, 130 on
Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import selectors
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import paths
from paths import build_path, make_path, stage
from paths._native import bench

from .core_ops import positive_int

ROOT = Path(__file__).resolve().parent.parent
ANCHOR_SOURCE = ROOT / "benchmarks" / "zmq_anchor" / "round_trip.c"
ANCHOR_BUILD = ROOT / "build" / "zmq-anchor"
FRAME_BYTES = 48          # a remote stage's frame for a "q" tuple: 40-byte header + 8 bytes
TIMEOUT_MS = 5000         # the remote stages' timeout_ms
START_TIMEOUT_S = 30      # the longest a child may take to say READY
RUN_TIMEOUT_S = 300       # the longest one measurement may take
MOVES_WINDOW = 64
TARGET_RATIO = 1.3
TARGET_MOVES_PER_S = 100_000


class MeasurementError(RuntimeError):
    """A measurement could not run (a child failed, a build failed)."""


# ---- child processes, always reaped -------------------------------------------------------------


class Child:
    """A child process whose first line starts with READY; killed and reaped on close."""

    def __init__(self, argv: list[str], what: str):
        self.what = what
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)

    def ready(self, timeout: float = START_TIMEOUT_S) -> str:
        """The rest of the READY line."""
        line = b""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while not line.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise MeasurementError(f"{self.what}: not ready within {timeout} s")
                chunk = os.read(self.process.stdout.fileno(), 1)
                if not chunk:
                    self.process.wait(timeout=5)
                    raise MeasurementError(f"{self.what} exited ({self.process.returncode}): "
                                           f"{self.process.stderr.read().decode(errors='replace')[-500:]}")
                line += chunk
        text = line.decode().strip()
        if not text.startswith("READY "):
            raise MeasurementError(f"{self.what}: expected 'READY <endpoint>', got {text!r}")
        return text[len("READY "):]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.process.stderr.close()

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def paths_serve() -> Child:
    return Child([sys.executable, "-m", "paths", "serve", "--bind", "tcp://127.0.0.1:*"], "paths serve")


# ---- the raw ZeroMQ anchor ----------------------------------------------------------------------


def anchor_program() -> tuple[Path | None, str]:
    """The 2-process anchor, built when missing or stale; (None, why) if it cannot be built."""
    binary = ANCHOR_BUILD / "round_trip"
    if binary.exists() and binary.stat().st_mtime >= ANCHOR_SOURCE.stat().st_mtime:
        return binary, ""
    compiler = os.environ.get("CC") or shutil.which("cc")
    if not compiler or not shutil.which("pkg-config"):
        return None, "no C compiler or pkg-config"
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libzmq"], capture_output=True, text=True)
    if flags.returncode != 0:
        return None, "pkg-config finds no libzmq"
    ANCHOR_BUILD.mkdir(parents=True, exist_ok=True)
    built = subprocess.run([compiler, "-O2", "-o", str(binary), str(ANCHOR_SOURCE), *flags.stdout.split()],
                           capture_output=True, text=True)
    if built.returncode != 0:
        return None, f"cannot build {ANCHOR_SOURCE.name}: {built.stderr.strip()[-300:]}"
    return binary, ""


def raw_two_processes_us(program: Path, rounds: int) -> float:
    """Median microseconds per raw round trip, DEALER here and ROUTER echo in another process."""
    with Child([str(program), "echo"], "zmq echo") as echo:
        endpoint = echo.ready()
        done = subprocess.run([str(program), "client", endpoint, str(rounds), str(FRAME_BYTES)],
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        echo.process.wait(timeout=10)
    fields = done.stdout.split()
    if done.returncode != 0 or fields[:1] != ["median_us"]:
        raise MeasurementError(f"zmq anchor client failed ({done.returncode}): {done.stderr.strip()[-300:]}")
    return float(fields[1])


def raw_in_process_us(rounds: int) -> float:
    return bench.zmq_round_trip_us(rounds, FRAME_BYTES)


# ---- through a remote stage ---------------------------------------------------------------------


def remote_handle(endpoint: str, element: str, window: int):
    return build_path(make_path(stage("remote", host=endpoint, timeout_ms=TIMEOUT_MS, window=window),
                                stage("core", name=element, format="q")))


def pairs_us(handle, pairs: int) -> float:
    """Microseconds per move+observe pair through the handle, from a C loop."""
    return bench.pairs_ns(handle, pairs) / 1000.0


def moves_per_second(handle, moves: int) -> float:
    """Moves per second through the handle until all are acknowledged: the C loop
    (bench.link_moves_ns) when the module has it, else a Python loop (a lower bound)."""
    if hasattr(bench, "link_moves_ns"):
        return 1e9 / bench.link_moves_ns(handle, moves)
    before = handle.last()
    move = handle.move
    started = time.perf_counter()
    for i in range(moves):
        move(i)
    moved = handle.last() - before  # answered after every move is acknowledged
    elapsed = time.perf_counter() - started
    if moved < moves:
        raise MeasurementError(f"pipelined moves: {moves} made, {moved} arrived")
    return moves / elapsed


def gsum_client(endpoint: str, element: str, rounds: str) -> int:
    """One process of the Figure 1 GSum: 2 C threads, reduce-sum(2) -> remote -> reduce-sum(2)."""
    path = make_path(stage("reduce-sum", num_threads=2), stage("remote", host=endpoint, timeout_ms=TIMEOUT_MS),
                     stage("reduce-sum", num_threads=2), stage("core", name=element, format="q"))
    handles = [build_path(path) for _ in range(2)]
    result = paths.bench.gsum(handles, int(rounds), contributors=4)
    print(f"median_us {result.median_us:.3f}", flush=True)
    return 0


def remote_gsum_us(endpoint: str, element: str, rounds: int) -> float:
    """Mean over the 2 client processes of the median microseconds per GSum round (thread 0)."""
    clients = [subprocess.Popen([sys.executable, "-m", "benchmarks.remote", "--gsum-client", endpoint, element,
                                 str(rounds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
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


def run(args) -> list[str]:
    """Measures everything --repeat times, interleaved (so a change of load on the machine hits
    the anchor and the remote numbers alike); ratios are medians of each run's own ratio."""
    lines = [f"Remote stage vs raw ZeroMQ, TCP loopback, {FRAME_BYTES}-byte frames, server `paths serve` in "
             f"its own process; median of {args.repeat} runs",
             f"  ({args.pairs} round trips or pairs, {args.rounds} GSum rounds, {args.moves} moves per run)"]
    program, why_not = anchor_program()
    raw_name = "raw ZeroMQ round trip, 2 processes"
    if program is None:
        raw_name = "raw ZeroMQ round trip, IN ONE PROCESS"
        lines.append(f"note: the 2-process anchor is unavailable ({why_not}); ratios use the in-process anchor")
    runs: dict[str, list[float]] = {key: [] for key in ("raw", "raw_local", "pair1", "pair2", "gsum", "rate")}
    with paths_serve() as server:
        endpoint = server.ready()
        handles = {window: remote_handle(endpoint, f"PAIRS-{window}", window) for window in (1, 2)}
        for handle in handles.values():
            pairs_us(handle, min(1000, args.pairs))  # warm-up
        mover = remote_handle(endpoint, "MOVES", MOVES_WINDOW)
        for n in range(args.repeat):
            runs["raw_local"].append(raw_in_process_us(args.pairs))
            runs["raw"].append(raw_two_processes_us(program, args.pairs) if program else runs["raw_local"][-1])
            for window, handle in handles.items():
                runs[f"pair{window}"].append(pairs_us(handle, args.pairs))
            runs["gsum"].append(remote_gsum_us(endpoint, f"GSUM-{n}", args.rounds))
            runs["rate"].append(moves_per_second(mover, args.moves))
        del handles, mover  # released while the server is up
    how = "C loop" if hasattr(bench, "link_moves_ns") else "Python loop, a lower bound: C loop not bound yet"

    def value(key: str, scale: float = 1.0) -> float:
        return statistics.median(runs[key]) * scale

    def ratio(key: str, scale: float = 1.0) -> float:
        return statistics.median(x * scale / raw for x, raw in zip(runs[key], runs["raw"]))

    rows = [
        (raw_name + " (anchor)", f"{value('raw'):.1f} us", "1.00"),
        ("raw ZeroMQ round trip, 1 process (reference)", f"{value('raw_local'):.1f} us", f"{ratio('raw_local'):.2f}"),
        ("remote move+observe, window=1 (2 round trips)", f"{value('pair1'):.1f} us/pair", f"{ratio('pair1'):.2f}"),
        ("  one operation (half a pair)", f"{value('pair1', 0.5):.1f} us", f"{ratio('pair1', 0.5):.2f}"),
        ("remote move+observe, window=2 (1 round trip)", f"{value('pair2'):.1f} us/pair", f"{ratio('pair2'):.2f}"),
        ("remote GSum, 2 processes x 2 threads", f"{value('gsum'):.1f} us/round", f"{ratio('gsum'):.2f}"),
        (f"pipelined moves, window={MOVES_WINDOW}, one client", f"{value('rate'):,.0f} moves/s", ""),
    ]
    lines.append(f"{'measurement':<50}{'value':>20}{'x raw':>8}")
    lines += [f"{name:<50}{shown:>20}{times:>8}" for name, shown, times in rows]
    lines.append(f"  (moves: {how})")
    lines.append("")
    lines.append("Targets")
    lines.append(target(f"window=1: one remote operation <= {TARGET_RATIO}x a raw round trip",
                        ratio("pair1", 0.5) <= TARGET_RATIO, f"{ratio('pair1', 0.5):.2f}x"))
    lines.append(target(f"window=2: a move+observe pair (one round trip) <= {TARGET_RATIO}x a raw round trip",
                        ratio("pair2") <= TARGET_RATIO, f"{ratio('pair2'):.2f}x"))
    lines.append(target(f">= {TARGET_MOVES_PER_S:,} moves/s pipelined (window={MOVES_WINDOW})",
                        value("rate") >= TARGET_MOVES_PER_S, f"{value('rate'):,.0f} moves/s"))
    return lines


def target(name: str, met: bool, shown: str) -> str:
    return f"  {'PASS' if met else 'MISS'}  {name}: {shown}"


def parse_arguments(argv):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.remote", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=positive_int, default=20_000, metavar="N",
                        help="round trips (raw) and move+observe pairs (remote) per run (default: %(default)s)")
    parser.add_argument("--rounds", type=positive_int, default=2_000, metavar="N",
                        help="GSum rounds per run (default: %(default)s)")
    parser.add_argument("--moves", type=positive_int, default=200_000, metavar="N",
                        help="pipelined moves per run (default: %(default)s)")
    parser.add_argument("--repeat", type=positive_int, default=5, metavar="N",
                        help="runs per measurement; the median is reported (default: %(default)s)")
    parser.add_argument("--gsum-client", nargs=3, metavar=("ENDPOINT", "ELEMENT", "ROUNDS"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_arguments(argv)
    if args.gsum_client:
        return gsum_client(*args.gsum_client)
    try:
        lines = run(args)
    except (MeasurementError, ConnectionError, subprocess.TimeoutExpired) as e:
        print(f"benchmarks.remote: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the children are reaped on the way out
        print("benchmarks.remote: interrupted", file=sys.stderr)
        return 130
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
