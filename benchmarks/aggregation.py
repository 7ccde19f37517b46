"""Aggregation and bulk transfer as stages: the `batch` stage and the prefetching `cache`, measured
the way their seed systems measured them, each against the same path without it.

    python -m benchmarks.aggregation [--repeat N] [--csv FILE] [--plot FILE] [--quick]

ARMI's Figure 6 (aggregated asynchronous calls). Per round, k moves then one observe of the round's
last move by its index, through `delay` (0 and 0.2 ms each way) and `remote` (direct tcp,
window=64) to a `paths serve` child: no batching, against `batch(max_moves=F, max_bytes=F x 8)`
first on the path, for F = 4 ... 2048 (ARMI: 256 was best), and at k = 10,000 also F = 4096 and
8192, past that range, to show where the curve turns. ARMI's calls are asynchronous, aggregated or
not, so the remote's window is 64 on every path: a move without batching, as one of batch's sends,
goes without waiting for its answer, up to 64 ahead, each move its own frame (the speed-ups and
targets are against that). Beside it, the same path without batching at the remote's default
window=1, where each move waits for its answer (the `waited` column), for scale. A wire frame holds
at most 2048 'q' tuples (16 KiB): past 2048 each of batch's sends still goes as one operation, its
frames streamed, so what 4096 and 8192 save is sends (hand-offs, frame writes), not frames. The
delay is a pipelined wire too (`delay(pipelined=1)`): each message arrives 0.2 ms after it was sent
without holding back the next, and the observe follows the moves on it. (On a link that carries one
message of a caller at a time, every batch crosses alone and the largest factor always wins.) The
speed-up per k and factor is printed and plotted (--plot). Beside it, batch's double buffering:
buffers=1 against 2 at k = 10,000 (above the pipelined delay the caller sends its buffers itself
either way); and several callers of one batch stage: 4 threads, each 1,000 moves (one move_many)
then a fence a round, through batch(max_moves=64) over a delay of 0.2 ms each way that is not
pipelined (one message of a caller crosses at a time), buffers=1 against 2: with 2, a caller whose
buffers are all on their way sends its oldest itself when the stage's sender thread is busy with
another caller's, so buffers=2 should take about as long as buffers=1, not 4 times as long. A run
measures each cell in turns, the cells of a k taking turns in alternate order, each turn on a
fresh handle warmed up by one untimed round; a cell's rounds in a run are 50,000 moves' worth or 30
ms' worth (60 ms with the delay), whichever is more (at most 2,000, with the delay 1,000 rounds),
in 5 turns, or in turns of 40 rounds where its moves make more (k = 1 and 10: 50 turns, with the
delay 25; k = 100: 12). A cell's time per round is the median of its turns over the runs: on 2
cores, where the scheduler puts a handle's threads (the caller's, batch's sender's, the delay's
courier's, the server's link's) changes a round by up to half, for as long as the handle lives,
and the short rounds of small k most: at k = 10 with the delay, batching saves a few per cent of a
round, and one turn's round lies up to 5% off the median.
At k = 10,000 the curve is flat from about 256 to 4096: on 2 cores those factors' rounds lie within
a few per cent (at most about 10%) of each other, which is what decides where the best one falls
from run to run. A caller puts a move into its buffer in about 10-15 ns and the server appends a
frame's tuples in bulk, so a message (one of batch's sends) costs far more than its tuples: a
hand-off to batch's sender thread and a frame's write, 3-4 us, the remote not waiting for its
answer (with the delay, the caller sends its buffers into the delay's wire itself). Larger factors
make messages fewer until the last buffer, whose tuples still travel and are appended after the
caller is done, grows. The `info` lines give 4096 and 8192 against the best factor of the range:
where the curve turns. A second `info` line fits the sweep at the largest k to round = base + (k /
F) x message + F x tuple (each message's cost, and that of a tuple of the last buffer): the best
factor is then about sqrt(k x message / tuple), on 2 cores between about 1,100 and 2,800 from run
to run (a message 3-4 us, a tuple 4-30 ns). ARMI's optimum at 256 came from the work each call
costs its receiver, an RMI's dispatch, which a PastSet move barely has.

Aurora's Figure 6 method (a read cache loaded in bulk). A 704 x 704 matrix of 'i' (one row per
tuple) lives on a node that runs no threads; on 2 and 4 emulated node processes (one thread
each, their own process and server, as `paths run` emulates a map), every thread loads every row
into its cache between two barriers: one request per row (benchmarks.read_cache:per_row), or
the whole matrix in one request at the first miss (read_cache:prefetching); over remote with no
delay and with 0.2 ms each way on the link.

MM2 (Aurora's two-phase matrix multiply, a user-level workload): the C kernel benchmarks/mm2.c,
256 x 256, 4 threads on an emulated map of 2 nodes of 2 (the elements on n0), on a map whose
link batches the writes (`batch: 256`) and whose acquire hook prefetches the reads, against the
same map with neither: the time of each, and their results, which must be identical.

Cache hits side by side: 1 and 2 threads read the 1,024 'q' tuples a `cache` holds by index, over
and over, each through its own handle on the one cache stage (C loops, no Python on their path):
the time of a hit, and how many hits two threads make together against one (a hit writes no
shared memory, so two threads on two cores should make about twice as many).

Targets (the issue's): batching faster than no batching from k = 10; at k = 10,000 at least 3x
faster without delay and 15x with it; the best factor strictly inside the swept range, none past
it (4096, 8192) faster either, so that the curve turned inside it; prefetch
at most 0.5x the per-row load without delay and 0.15x with the delay. A MISS is a finding, not
an error: the exit code is 0 after any report, 1 when a measurement could not run, 2 on bad
arguments, 130 on Ctrl-C. Runs with more threads or processes than this machine's cores also
measure context switches: the output says so.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass

from paths import PastSet, build_path, fence, make_path, stage
from paths._native import bench
from paths.model.cluster_map import load_map_text
from paths.experiments.experiment import RunSettings, run_experiment
from paths.runtime.kernel import BUILTIN_LIBRARY, KernelError
from paths.experiments.launcher import LaunchError

from .child_process import ChildError, ReadyChild
from .core_ops import positive_int
from .csv_rows import check_outputs, write_rows

KS = (1, 10, 100, 1_000, 10_000)
FACTORS = (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
BEYOND = (4096, 8192)              # factors past the issue's range, at the largest k only: where the curve turns
DELAYS_MS = (0.0, 0.2)
TUPLE_BYTES = 8                    # the pings are 'q' tuples
MOVES_PER_CELL = {0.0: 50_000, 0.2: 50_000}  # a cell's rounds in a run: this many moves (at least one round) ...
CELL_MS = {0.0: 30.0, 0.2: 60.0}            # ... or this long, whichever takes more rounds ...
MAX_ROUNDS = {0.0: 2_000, 0.2: 1_000}       # ... but at most this many
TURNS = 5                          # ... shared by this many fresh handles, the cells taking turns ...
TURN_ROUNDS = 40                   # ... or more, where a turn of this many rounds leaves moves over
BUFFERS_FACTOR = 256               # where buffers=1 and 2 are compared, at the largest k
CALLERS = 4                        # several callers of one batch stage, ...
CALLERS_K = 1_000                  # ... each this many moves then a fence a round, ...
CALLERS_FACTOR = 64                # ... through batch(max_moves=this) over a delay that is not pipelined
CALLERS_DELAY_MS = 0.2
AURORA_NODES = (2, 4)
MATRIX = 704                       # rows and columns of Aurora's matrix
MM2_N = 256
MM2_THREADS = 4
HIT_THREADS = (1, 2)               # threads reading through one cache at once
HIT_TUPLES = 1_024                 # the tuples the cache holds: all of its element's
HIT_READS = 5_000_000              # reads per thread a run
TIMEOUT_MS = 10_000                # the remote stages'
SWEEP_WINDOW = 64                  # the sweep's remote: calls asynchronous, up to this many ahead
WAITED = "waited"                  # the sweep's cell without batching at window=1 (each move waits)
RUN_TIMEOUT_S = 120.0
KERNELS = str(BUILTIN_LIBRARY)
QUICK = {"ks": (1, 10, 100), "factors": (4, 16, 64), "beyond": (), "moves_per_cell": {0.0: 2_000, 0.2: 200},
         "cell_ms": {0.0: 0.0, 0.2: 0.0}, "max_rounds": {0.0: 200, 0.2: 20}, "turns": 1, "nodes": (2,), "matrix": 64,
         "mm2_n": 32, "callers_rounds": 1, "hit_reads": 200_000, "quick": True}

CSV_COLUMNS = ["experiment", "delay_ms", "k", "factor", "buffers", "nodes", "variant", "ms", "speedup", "checksum"]


@dataclass
class Sizes:
    ks: tuple = KS
    factors: tuple = FACTORS
    beyond: tuple = BEYOND
    moves_per_cell: dict = None
    cell_ms: dict = None
    max_rounds: dict = None
    turns: int = TURNS
    turn_rounds: int = TURN_ROUNDS
    nodes: tuple = AURORA_NODES
    matrix: int = MATRIX
    mm2_n: int = MM2_N
    callers_rounds: int = 10           # the several callers' timed rounds a run
    hit_reads: int = HIT_READS
    quick: bool = False                # a short run: its verdicts are a smoke test, not a measurement

    def __post_init__(self):
        self.moves_per_cell = self.moves_per_cell or dict(MOVES_PER_CELL)
        self.cell_ms = self.cell_ms or dict(CELL_MS)
        self.max_rounds = self.max_rounds or dict(MAX_ROUNDS)

    def turns_for(self, delay_ms: float, k: int) -> int:
        """The turns a cell of k moves a round takes in a run: `turns`, or more where its moves fill
        more turns of `turn_rounds` rounds. A handle's threads stay where the scheduler put them,
        which moves a short round most: so more fresh handles, not more rounds, make its median
        steadier."""
        rounds = min(self.max_rounds[delay_ms], self.moves_per_cell[delay_ms] // k)
        return max(self.turns, rounds // self.turn_rounds)

    def rounds_per_turn(self, delay_ms: float, k: int, round_ms: float) -> int:
        """A turn's share of a cell's rounds in a run, for rounds of about round_ms."""
        rounds = max(self.moves_per_cell[delay_ms] // k, math.ceil(self.cell_ms[delay_ms] / round_ms))
        return max(1, math.ceil(min(self.max_rounds[delay_ms], rounds) / self.turns_for(delay_ms, k)))


# ---- ARMI's sweep ---------------------------------------------------------------------------


class Sweep:
    """Handles on fresh elements of one `paths serve` child, each path batched or not."""

    def __init__(self, endpoint: str):
        self.endpoint, self.made = endpoint, 0

    def handle(self, delay_ms: float, factor: int | str | None, buffers: int = 2):
        """factor None: no batching; WAITED: no batching, each move waiting for its answer."""
        self.made += 1
        batched = factor not in (None, WAITED)
        batch = [stage("batch", max_moves=factor, max_bytes=factor * TUPLE_BYTES, buffers=buffers)] if batched else []
        window = 1 if factor == WAITED else SWEEP_WINDOW
        return build_path(make_path(*batch, stage("delay", ms=delay_ms, pipelined=1),
                                    stage("remote", host=self.endpoint, timeout_ms=TIMEOUT_MS, window=window),
                                    stage("core", name=f"PINGS-{self.made}", format="q")))

    def ms_per_round(self, delay_ms: float, k: int, factor: int | str | None, sizes: Sizes, buffers: int = 2) -> float:
        """One turn of a cell: a fresh handle, one round that warms it up (its threads started, its
        buffers and connection in use; untimed), then the turn's rounds, timed."""
        handle = self.handle(delay_ms, factor, buffers)
        warm_ms = bench.moves_then_observe_ns(handle, k, 1, timeout=RUN_TIMEOUT_S) / 1e6
        rounds = sizes.rounds_per_turn(delay_ms, k, warm_ms)
        return bench.moves_then_observe_ns(handle, k, rounds, timeout=RUN_TIMEOUT_S) / 1e6

    def callers_ms_per_round(self, buffers: int, rounds: int) -> float:
        """CALLERS threads on one batch stage (one path, so one stage tree, on a fresh element), each
        moving CALLERS_K tuples then fencing, a round untimed (their connections and the stage's
        threads in use) then `rounds` rounds: ms a round, from the threads' start together to the
        last one's end."""
        self.made += 1
        path = make_path(stage("batch", max_moves=CALLERS_FACTOR, max_bytes=CALLERS_FACTOR * TUPLE_BYTES,
                               buffers=buffers), stage("delay", ms=CALLERS_DELAY_MS),
                         stage("remote", host=self.endpoint, timeout_ms=TIMEOUT_MS),
                         stage("core", name=f"CALLERS-{self.made}", format="q"))
        handles = [build_path(path) for _ in range(CALLERS)]
        tuples = [(i,) for i in range(CALLERS_K)]
        together = threading.Barrier(CALLERS + 1, timeout=RUN_TIMEOUT_S)
        failed: list[BaseException] = []

        def caller(handle):
            try:
                for r in range(rounds + 1):
                    if r == 1:
                        together.wait()
                    handle.move_many(tuples)
                    fence([handle], timeout=RUN_TIMEOUT_S)
            except BaseException as e:  # noqa: BLE001 - re-raised below, in the measuring thread
                failed.append(e)
                together.abort()

        threads = [threading.Thread(target=caller, args=(h,)) for h in handles]
        for t in threads:
            t.start()
        try:
            together.wait()
            started = time.perf_counter()
        finally:
            for t in threads:
                t.join()
        if failed:
            raise failed[0]
        return (time.perf_counter() - started) * 1e3 / rounds


def measure_sweep(sizes: Sizes, repeat: int, progress) -> dict:
    """{(delay, k, factor (None: no batching; WAITED: none at window=1), buffers): [ms per round, one
    per turn of each run]}. The cells of a k take turns, in alternate order, each turn on fresh
    handles: so drift and where the scheduler happens to put a handle's threads (on 2 cores, up to
    half a round's time) hit every cell alike."""
    runs: dict = {}
    with ReadyChild([sys.executable, "-m", "paths", "serve", "--bind", "tcp://127.0.0.1:*"], "paths serve") as server:
        sweep = Sweep(server.ready())
        for r in range(repeat):
            for delay in DELAYS_MS:
                for k in sizes.ks:
                    cells = [(WAITED, 2), (None, 2)] + [(f, 2) for f in sizes.factors]
                    if k == max(sizes.ks):
                        cells += [(f, 2) for f in sizes.beyond]
                        if BUFFERS_FACTOR in sizes.factors:
                            cells.append((BUFFERS_FACTOR, 1))
                    for turn in range(sizes.turns_for(delay, k)):
                        for factor, buffers in cells if turn % 2 == 0 else cells[::-1]:
                            ms = sweep.ms_per_round(delay, k, factor, sizes, buffers)
                            runs.setdefault((delay, k, factor, buffers), []).append(ms)
                    progress(f"ARMI run {r + 1}/{repeat}: delay {delay} ms, k = {k}")
            for buffers in (1, 2) if r % 2 == 0 else (2, 1):
                runs.setdefault(("callers", buffers), []).append(
                    sweep.callers_ms_per_round(buffers, sizes.callers_rounds))
            progress(f"ARMI run {r + 1}/{repeat}: {CALLERS} callers")
    return runs


# ---- Aurora's cache load and MM2, on emulated maps --------------------------------------------


def aurora_map(nodes: int, delay_ms: float):
    """The matrix's node h0 (no threads) and `nodes` worker nodes of one CPU, linked with a delay."""
    link = f"links:\n  - between: [home, work]\n    delay_ms: {delay_ms}\n" if delay_ms else ""
    text = (f"name: aurora-{nodes}\nclusters:\n  home: {{nodes: h0, cpus: 0}}\n"
            f"  work: {{nodes: \"n[0-{nodes - 1}]\", cpus: 1}}\nroot: h0\n{link}")
    return load_map_text(text, source=f"<benchmarks.aggregation aurora {nodes} nodes, {delay_ms} ms>")


def mm2_map(aggregated: bool, delay_ms: float):
    """2 nodes of 2 CPUs in clusters of their own (so the hop between them is a link), the elements
    on n0; aggregated: the link batches the moves across it and the hook prefetches reads."""
    link = ([f"delay_ms: {delay_ms}"] if delay_ms else []) + (["batch: 256"] if aggregated else [])
    links = "links:\n  - between: [a, b]\n" + "".join(f"    {line}\n" for line in link) if link else ""
    hook = "acquire: benchmarks.read_cache:prefetching\n" if aggregated else ""
    name = "aggregated" if aggregated else "plain"
    text = (f"name: mm2-{name}\nclusters:\n  a: {{nodes: n0, cpus: 2}}\n  b: {{nodes: n1, cpus: 2}}\nroot: n0\n"
            f"{links}{hook}")
    return load_map_text(text, source=f"<benchmarks.aggregation mm2 {name}, {delay_ms} ms>")


def kernel_columns(cluster_map, kernel: str, threads: int, repeat: int, args: dict, acquire=None) -> list[dict]:
    settings = RunSettings(kernel=f"{KERNELS}:{kernel}", thread_counts=[threads], repeat=repeat,
                           timeout=RUN_TIMEOUT_S, args={k: str(v) for k, v in args.items()}, acquire=acquire)
    return [m.columns for m in run_experiment(cluster_map, settings).measurements]


def measure_aurora(sizes: Sizes, repeat: int, progress) -> dict:
    """{(nodes, delay, variant): [load ms, ...]}."""
    runs = {}
    for nodes in sizes.nodes:
        for delay in DELAYS_MS:
            for variant in ("per_row", "prefetching"):
                columns = kernel_columns(aurora_map(nodes, delay), "cache_load", nodes, repeat,
                                         {"rows": sizes.matrix, "cols": sizes.matrix},
                                         acquire=f"benchmarks.read_cache:{variant}")
                runs[nodes, delay, variant] = [c["load_ms"] for c in columns]
                progress(f"Aurora: {nodes} nodes, delay {delay} ms, {variant}")
    return runs


def measure_mm2(sizes: Sizes, repeat: int, progress) -> dict:
    """{(delay, aggregated): [(seconds, checksum), ...]}."""
    runs = {}
    for delay in DELAYS_MS:
        for aggregated in (False, True):
            columns = kernel_columns(mm2_map(aggregated, delay), "mm2", MM2_THREADS, repeat, {"n": sizes.mm2_n})
            runs[delay, aggregated] = [(c["seconds"], c["checksum"]) for c in columns]
            progress(f"MM2: delay {delay} ms, {'aggregated' if aggregated else 'plain'}")
    return runs


def measure_hits(sizes: Sizes, repeat: int, progress) -> dict:
    """{threads: [ns a read per thread, one per run]}: `threads` threads at once, each through its own
    handle of one path (so one cache stage) over a local element whose tuple i holds i, each first
    reading every tuple once (untimed: the cache fills), then sizes.hit_reads reads."""
    space = PastSet()
    space.enter("HITS", "q").move_many([(i,) for i in range(HIT_TUPLES)])
    path = make_path(stage("cache", capacity=HIT_TUPLES), stage("core", name="HITS", format="q"))
    runs: dict = {}
    for r in range(repeat):
        for threads in HIT_THREADS if r % 2 == 0 else HIT_THREADS[::-1]:
            handles = [build_path(path, pastset=space) for _ in range(threads)]
            for handle in handles:
                bench.indexed_reads_ns(handle, HIT_TUPLES, HIT_TUPLES, timeout=RUN_TIMEOUT_S)
            times: list = [None] * threads
            together = threading.Barrier(threads, timeout=RUN_TIMEOUT_S)

            def reader(i):
                together.wait()
                times[i] = bench.indexed_reads_ns(handles[i], sizes.hit_reads, HIT_TUPLES, timeout=RUN_TIMEOUT_S)

            workers = [threading.Thread(target=reader, args=(i,)) for i in range(threads)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            if None in times:
                raise RuntimeError(f"cache hits: a reader of {threads} failed")
            runs.setdefault(threads, []).append(statistics.mean(times))
        progress(f"cache hits run {r + 1}/{repeat}")
    return runs


def mm2_expected_checksum(n: int) -> float:
    """The sum of S = Q x (Q x R)'s entries, as mm2.c defines Q and R: (1^T Q) Q (R 1), exact."""
    q = [[(i + 2 * j) % 7 - 3 for j in range(n)] for i in range(n)]
    column_sums = [sum(q[i][j] for i in range(n)) for j in range(n)]
    left = [sum(column_sums[i] * q[i][j] for i in range(n)) for j in range(n)]
    right = [sum((3 * i + j) % 5 - 2 for j in range(n)) for i in range(n)]
    return float(sum(a * b for a, b in zip(left, right)))


# ---- the report -----------------------------------------------------------------------------


@dataclass
class RoundModel:
    """round = base + (k / F) x message + F x tuple, fitted to a sweep over the factor F: each
    message's cost, and the cost of a tuple of the last buffer, which still travels after the
    caller is done. The best factor is then about sqrt(k x message / tuple): the bigger a message's
    cost against a tuple's, the bigger the best factor (ARMI's receiver paid a call's dispatch per
    tuple, so its best factor was small)."""
    base_ms: float
    message_ms: float
    tuple_ms: float
    worst_error: float  # the largest relative distance of a measured round from the model's

    def best_factor(self, k: int) -> float:
        return math.sqrt(k * self.message_ms / self.tuple_ms) if self.message_ms > 0 < self.tuple_ms else math.inf


def fit_round_model(k: int, rounds: dict) -> RoundModel:
    """The model fitted to {factor: ms per round}, each round weighted by its own size (least
    squares of the relative error), so that the largest factors' short rounds count as much as the
    smallest factors' long ones."""
    import numpy

    factors = sorted(rounds)
    measured = numpy.array([rounds[f] for f in factors])
    terms = numpy.array([[1.0, k / f, f] for f in factors])
    weights = 1.0 / measured
    (base, message, tuple_), *_ = numpy.linalg.lstsq(terms * weights[:, None], measured * weights, rcond=None)
    worst = float(numpy.max(numpy.abs(terms @ (base, message, tuple_) / measured - 1.0)))
    return RoundModel(float(base), float(message), float(tuple_), worst)


def best_factors(rounds: dict, factors: tuple, beyond: tuple) -> tuple[int, int, bool]:
    """The fastest factor of all swept (`rounds`: a round's time by factor), the next one, and
    whether the fastest lies strictly inside the range `factors`: the curve turned inside it,
    none of the factors past it (`beyond`) being faster."""
    first, second = sorted(factors + beyond, key=lambda f: rounds[f])[:2]
    return first, second, factors[0] < first < factors[-1]


def target(name: str, met: bool, shown: str) -> str:
    return f"  {'PASS' if met else 'MISS'}  {name}: {shown}"


def not_measured(name: str, why: str) -> str:
    return f"  ----  {name}: not measured ({why})"


def report(sizes: Sizes, repeat: int, sweep: dict, aurora: dict, mm2: dict, hits: dict) -> tuple[list[str], list[dict]]:
    med = {key: statistics.median(values) for key, values in sweep.items()}
    rows: list[dict] = []
    cores = len(os.sched_getaffinity(0))
    lines = [f"Aggregation and bulk transfer, loopback, median of {repeat} run(s); this machine has {cores} cores "
             "(runs with more threads or processes also measure context switches)", "",
             "ARMI Figure 6: k moves, then one observe of the round's last move, through delay (pipelined) -> remote (tcp, "
             f"window={SWEEP_WINDOW}) -> a `paths serve` child; 'q' tuples; each cell the median of its turns, a fresh handle "
             f"each, {sizes.turns} or more a run (" + ", ".join(
                 f"k = {k}: {'/'.join(str(sizes.turns_for(d, k)) for d in DELAYS_MS)}" for k in sizes.ks) +
             " without/with the delay). Speed-up of batch(max_moves=factor) over no batching; `waited`: "
             "no batching at window=1 (each move waits for its answer)"]
    best: dict = {}
    for delay in DELAYS_MS:
        lines.append(f"delay {delay:g} ms each way")
        lines.append(f"{'k':>7}{WAITED:>12}{'no batch':>12}" + "".join(f"{f:>7}" for f in sizes.factors) + f"{'best':>7}")
        for k in sizes.ks:
            base, waited = med[delay, k, None, 2], med[delay, k, WAITED, 2]
            ups = {f: base / med[delay, k, f, 2] for f in sizes.factors}
            best[delay, k] = max(ups, key=ups.get)
            lines.append(f"{k:>7}{waited:>9.3f} ms{base:>9.3f} ms" + "".join(f"{ups[f]:>6.1f}x" for f in sizes.factors) +
                         f"{best[delay, k]:>7}")
            rows.append({"experiment": "armi", "delay_ms": delay, "k": k, "buffers": 2, "ms": base})
            rows.append({"experiment": "armi", "delay_ms": delay, "k": k, "variant": f"{WAITED} (window=1)",
                         "ms": waited})
            rows += [{"experiment": "armi", "delay_ms": delay, "k": k, "factor": f, "buffers": 2,
                      "ms": med[delay, k, f, 2], "speedup": base / med[delay, k, f, 2]}
                     for f in sizes.factors + (sizes.beyond if k == max(sizes.ks) else ())]
    top = max(sizes.ks)
    if (0.0, top, BUFFERS_FACTOR, 1) in med:
        lines.append(f"double buffering, k = {top}, factor {BUFFERS_FACTOR}: " + "; ".join(
            f"delay {d:g} ms: buffers=1 {med[d, top, BUFFERS_FACTOR, 1]:.3f} ms, buffers=2 "
            f"({'the caller sends above the pipelined delay' if d else 'a sender thread'}) "
            f"{med[d, top, BUFFERS_FACTOR, 2]:.3f} ms" for d in DELAYS_MS))
        rows += [{"experiment": "armi", "delay_ms": d, "k": top, "factor": BUFFERS_FACTOR, "buffers": 1,
                  "ms": med[d, top, BUFFERS_FACTOR, 1], "speedup": med[d, top, None, 2] / med[d, top, BUFFERS_FACTOR, 1]}
                 for d in DELAYS_MS]
    one, two = med["callers", 1], med["callers", 2]
    lines.append(f"several callers: {CALLERS} threads on one batch(max_moves={CALLERS_FACTOR}) over a delay of "
                 f"{CALLERS_DELAY_MS:g} ms each way that is not pipelined -> remote, each {CALLERS_K} moves then a "
                 f"fence a round: buffers=1 {one:.2f} ms, buffers=2 {two:.2f} ms a round (buffers=2 / buffers=1: "
                 f"{two / one:.2f}x; {CALLERS} callers on {cores} cores)")
    rows += [{"experiment": "callers", "delay_ms": CALLERS_DELAY_MS, "k": CALLERS_K, "factor": CALLERS_FACTOR,
              "buffers": b, "ms": med["callers", b]} for b in (1, 2)]

    lines += ["", f"Aurora Figure 6 method: every thread loads a {sizes.matrix} x {sizes.matrix} matrix of 'i' (one row "
              "per tuple, on a node of its own) into its cache between two barriers; ms from barrier to barrier",
              f"{'nodes':>7}{'delay':>8}{'per-row':>12}{'prefetch':>12}{'ratio':>9}"]
    ratios = {}
    for nodes in sizes.nodes:
        for delay in DELAYS_MS:
            per_row = statistics.median(aurora[nodes, delay, "per_row"])
            fetched = statistics.median(aurora[nodes, delay, "prefetching"])
            ratios[nodes, delay] = fetched / per_row
            lines.append(f"{nodes:>7}{delay:>6g}ms{per_row:>9.2f} ms{fetched:>9.2f} ms{fetched / per_row:>8.3f}x")
            rows += [{"experiment": "aurora", "delay_ms": delay, "nodes": nodes, "variant": variant,
                      "ms": statistics.median(aurora[nodes, delay, variant])} for variant in ("per_row", "prefetching")]

    expected = mm2_expected_checksum(sizes.mm2_n)
    lines += ["", f"MM2 {sizes.mm2_n} x {sizes.mm2_n}, {MM2_THREADS} threads on 2 emulated nodes of 2 (elements on n0); "
              f"expected checksum {expected:.0f}",
              f"{'map':>12}{'delay':>8}{'seconds':>10}{'checksum':>16}"]
    checksums = set()
    for delay in DELAYS_MS:
        for aggregated in (False, True):
            seconds = statistics.median(s for s, _ in mm2[delay, aggregated])
            sums = {c for _, c in mm2[delay, aggregated]}
            checksums |= sums
            name = "aggregated" if aggregated else "plain"
            lines.append(f"{name:>12}{delay:>6g}ms{seconds:>10.3f}{', '.join(f'{c:.0f}' for c in sorted(sums)):>16}")
            rows += [{"experiment": "mm2", "delay_ms": delay, "variant": name, "ms": seconds * 1e3, "checksum": c}
                     for c in sorted(sums)]
        plain = statistics.median(s for s, _ in mm2[delay, False])
        batched = statistics.median(s for s, _ in mm2[delay, True])
        lines.append(f"{'':>12}{'':>8}  aggregated / plain: {batched / plain:.2f}x")

    ns = {threads: statistics.median(hits[threads]) for threads in HIT_THREADS}
    lines += ["", f"Cache hits: observe(i) of the {HIT_TUPLES} 'q' tuples a cache holds, {sizes.hit_reads} reads a thread, "
              "each thread on its own handle of one cache stage (C loops)"]
    lines += [f"{threads:>7} thread(s): {ns[threads]:.1f} ns a hit, {threads * 1e3 / ns[threads]:.0f} M hits/s together"
              for threads in HIT_THREADS]
    lines.append(f"  info  {HIT_THREADS[-1]} threads make {HIT_THREADS[-1] * ns[1] / ns[HIT_THREADS[-1]]:.2f}x the hits "
                 f"of one ({HIT_THREADS[-1]} threads on {cores} cores)")
    rows += [{"experiment": "hits", "variant": f"threads={threads}", "ms": ns[threads] / 1e6} for threads in HIT_THREADS]

    lines += ["", "Targets" + (" (a --quick run: small sizes, a few samples each; the verdicts show that every "
                               "experiment runs, they do not measure the targets)" if sizes.quick else "")]
    lines.append(target("batch faster than no batching from k = 10 (every factor, both delays)",
                        all(med[d, k, None, 2] > med[d, k, f, 2] for d in DELAYS_MS for k in sizes.ks if k >= 10
                            for f in sizes.factors),
                        "slowest " + ", ".join(f"k={k}: {min(med[d, k, None, 2] / med[d, k, f, 2] for d in DELAYS_MS for f in sizes.factors):.2f}x"
                                              for k in sizes.ks if k >= 10)))
    for delay, bound in ((0.0, 3.0), (0.2, 15.0)):
        name = f"k = 10,000 {'without delay' if not delay else 'with 0.2 ms delay'}, >= {bound:g}x faster"
        if 10_000 in sizes.ks:
            up = med[delay, 10_000, None, 2] / med[delay, 10_000, best[delay, 10_000], 2]
            lines.append(target(name, up >= bound, f"{up:.1f}x (factor {best[delay, 10_000]})"))
        else:
            lines.append(not_measured(name, f"k up to {top}"))
    for delay in DELAYS_MS:
        rounds = {f: med[delay, top, f, 2] for f in sizes.factors + sizes.beyond}
        name = f"best factor at k = 10,000 strictly inside {sizes.factors[0]}..{sizes.factors[-1]} (delay {delay:g} ms)"
        if top != 10_000 or not sizes.beyond:  # ARMI's k, and factors past the range to show the curve turned
            lines.append(not_measured(name, f"k up to {top}" if top != 10_000 else "no factor past the range"))
        else:
            first, second, inside = best_factors(rounds, sizes.factors, sizes.beyond)
            past = f" (past {sizes.factors[-1]})" if first > sizes.factors[-1] else ""
            lines.append(target(name, inside, f"{first}{past} (next {second}, "
                                              f"{rounds[second] / rounds[first] - 1:.1%} slower a round)"))
        if sizes.beyond:
            in_range = best[delay, top]
            lines.append(f"  info  past {sizes.factors[-1]} at k = {top} (delay {delay:g} ms), a round against "
                         f"{in_range}'s (the best of {sizes.factors[0]}..{sizes.factors[-1]}): " +
                         ", ".join(f"{f} {rounds[f] / rounds[in_range] - 1:+.1%}" for f in sizes.beyond))
        swept = sizes.factors + sizes.beyond
        if len(swept) > 3:  # more rounds than the model's three costs
            model = fit_round_model(top, {f: med[delay, top, f, 2] for f in swept})
            lines.append(f"  info  why, at k = {top} (delay {delay:g} ms): a round = {model.base_ms * 1e3:.0f} us + "
                         f"(k / factor) x {model.message_ms * 1e3:.2f} us a message + factor x "
                         f"{model.tuple_ms * 1e6:.2f} ns a tuple of the last buffer (fitted to factors "
                         f"{swept[0]}..{swept[-1]}, within {model.worst_error:.0%}): " +
                         (f"the best factor is about sqrt(k x message / tuple) = {model.best_factor(top):.0f}"
                          if math.isfinite(model.best_factor(top)) else "no cost grows with the factor"))
    for delay, bound in ((0.0, 0.5), (0.2, 0.15)):
        worst = max(ratios[n, delay] for n in sizes.nodes)
        lines.append(target(f"prefetch <= {bound}x the per-row load, delay {delay:g} ms ({', '.join(map(str, sizes.nodes))} "
                            "nodes)", worst <= bound, f"at most {worst:.3f}x"))
    lines.append(target("MM2 gives identical results on both maps, the expected ones", checksums == {expected},
                        ", ".join(f"{c:.0f}" for c in sorted(checksums))))
    return lines, rows


def write_plot(path: str, sizes: Sizes, sweep: dict) -> None:
    """Speed-up over no batching against the factor, one line per k, a panel per delay."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = {key: statistics.median(values) for key, values in sweep.items()}
    figure, panels = plt.subplots(1, len(DELAYS_MS), figsize=(11, 4.2), squeeze=False)
    for axes, delay in zip(panels[0], DELAYS_MS):
        for k in sizes.ks:
            factors = sizes.factors + (sizes.beyond if k == max(sizes.ks) else ())
            axes.plot(factors, [med[delay, k, None, 2] / med[delay, k, f, 2] for f in factors], marker="o",
                      label=f"k = {k}")
        axes.axvspan(sizes.factors[-1], max(sizes.factors + sizes.beyond), color="grey", alpha=0.1)
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.axhline(1.0, color="grey", linewidth=0.8)
        axes.set_xlabel("aggregation factor (batch max_moves)")
        axes.set_ylabel("speed-up over no batching")
        axes.set_title(f"k moves + 1 observe, delay {delay:g} ms each way")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    figure.tight_layout()
    kind = os.path.splitext(path)[1][1:].lower()
    figure.savefig(path, dpi=120, format=kind if kind in figure.canvas.get_supported_filetypes() else "png")
    plt.close(figure)


def parse_arguments(argv):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.aggregation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=positive_int, default=3, metavar="N",
                        help="runs per measurement; the median is reported (default: %(default)s)")
    parser.add_argument("--csv", metavar="FILE", help="also write every measurement to this CSV file")
    parser.add_argument("--plot", metavar="FILE", default="aggregation.png",
                        help="the ARMI sweep's plot (default: %(default)s)")
    parser.add_argument("--quick", action="store_true",
                        help="a short run (k up to 100, 3 factors, a 64 x 64 matrix on 2 nodes, MM2 32 x 32, 1 run "
                             "unless --repeat says otherwise), e.g. for a test")
    args = parser.parse_args(argv)
    if args.quick:
        parser.set_defaults(repeat=1)
        args = parser.parse_args(argv)
    check_outputs(parser, {"--csv": args.csv, "--plot": args.plot})
    args.sizes = Sizes(**QUICK) if args.quick else Sizes()
    return args


def main(argv=None) -> int:
    args = parse_arguments(argv)
    progress = lambda what: print(f"  ... {what}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        sweep = measure_sweep(args.sizes, args.repeat, progress)
        aurora = measure_aurora(args.sizes, args.repeat, progress)
        mm2 = measure_mm2(args.sizes, args.repeat, progress)
        hits = measure_hits(args.sizes, args.repeat, progress)
        lines, rows = report(args.sizes, args.repeat, sweep, aurora, mm2, hits)
        write_plot(args.plot, args.sizes, sweep)
    except (LaunchError, KernelError, ChildError, RuntimeError, ConnectionError, OSError, ValueError) as e:
        print(f"benchmarks.aggregation: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # node processes and the server child are reaped on the way out
        print("benchmarks.aggregation: interrupted", file=sys.stderr)
        return 130
    print("\n".join(lines))
    print(f"\nplot: {args.plot}")
    if args.csv:
        write_rows(args.csv, CSV_COLUMNS, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
