"""GSum across emulated cluster nodes against MPI_Allreduce over TCP, in one run.

    python -m benchmarks.cluster_gsum [--nodes 2,4,8,16] [--threads-per-node 1,2] [--repeat 3]
                                      [--rounds 1000] [--csv FILE] [--quick]

Each configuration is a map built here: one cluster of N nodes with `cpus: T` (T threads per
node), every node a process of its own with its own server on loopback, as `paths run` emulates
a cluster, nodes on their share of this machine's CPUs and threads pinned (RunSettings(pin=True)).
GSum runs on it with every hop between nodes on `proto: tcp` (the direct transport: the new path)
and on `proto: zmq` (ZeroMQ: the old path, for the before/after column), for the reduction trees
of sums (`tree: {form: sums}`) fan-in 2, fan-in 4 and flat (one sum of all node partials; a fan-in
not below the node count is that same tree, shown once); and with the node partials meeting in one
`allreduce` stage instead, its members sending to each other directly (tcp only): by recursive
doubling (`form: allreduce`) and up and down a tree of fan-in 2 and 4 (`form: allreduce-tree`,
shown as allreduce-tree2 and allreduce-tree4, the latter from 8 nodes). Beside them:
MPI_Allreduce over TCP (`--mca btl tcp,self`, loopback) with the same processes and the same
contributors, each rank on its node's CPUs: N ranks for one thread per node; for two, N hybrid
ranks of 2 OpenMP threads each (the anchor of the ratio), and also 2N plain ranks (ranks =
contributors, each on its thread's CPU). The TCP ping-pong and raw
ZeroMQ anchors are measured in the same run. The runs of all columns take turns, so a drifting
machine shifts them alike; each cell is the median over --repeat runs of the median round
(thread 0 times each round).

Targets (the issue's): at 2 processes, PATHS at most 1.0x MPI (a tree of sums makes one round
trip where MPI makes one exchange; an allreduce group makes one exchange too); from 4 processes
up, at most 0.55x MPI (the paper's claim); 3 processes have none. The best tree counts. More
threads than this machine's cores measure context switches as well: the output says so. A MISS
is a finding, not an error: the exit code is 0 after any report, 1 when a measurement could not
run, 2 on bad arguments, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass

from paths.model.cluster_map import load_map_text
from paths.model.cpu_sets import cpu_shares
from paths.experiments.experiment import RunSettings, run_experiment
from paths.experiments.launcher import LaunchError

from . import anchors
from .child_process import ChildError
from .core_ops import positive_int
from .csv_rows import check_outputs, write_rows
from .local_trees import parse_counts

PROTOS = ("tcp", "zmq")     # the new path, then the old one
FANINS = (2, 4)             # and flat
QUICK = {"nodes": [2], "threads_per_node": [1], "rounds": 200, "repeat": 1}
ANCHOR_ROUNDS = 5000
TARGET_TWO = 1.0            # at 2 processes
TARGET_MORE = 0.55          # from 4 processes up
MAX_HYBRID_NODES = 8        # more than one thread per node runs on at most this many nodes
RUN_TIMEOUT_S = 300.0

CSV_COLUMNS = ["nodes", "threads_per_node", "contributors", "tree", "tcp_us", "zmq_us", "mpi_us", "mpi_ranks_us",
               "tcp_per_mpi", "zmq_per_mpi"]


@dataclass(frozen=True)
class Config:
    nodes: int
    threads: int  # per node

    @property
    def contributors(self) -> int:
        return self.nodes * self.threads

    def trees(self) -> dict[str, tuple[str, int]]:
        """The distinct trees: name -> (the map's tree form, max_fanin); a fan-in not below the node
        count is flat."""
        found = {f"fanin{k}": ("sums", k) for k in FANINS if k < self.nodes}
        found["flat"] = ("sums", max(self.nodes, 2))
        found["allreduce"] = ("allreduce", 2)
        found.update({f"allreduce-tree{k}": ("allreduce-tree", k) for k in FANINS if k < self.nodes})
        return found


def emulated_map(config: Config, proto: str, form: str):
    """One cluster of `config.nodes` nodes of `config.threads` CPUs, every hop on `proto`, the node
    partial sums meeting in the tree `form`."""
    text = (f"name: emulated-{config.nodes}x{config.threads}-{proto}\n"
            f"clusters:\n  c:\n    nodes: \"n[0-{config.nodes - 1}]\"\n    cpus: {config.threads}\n"
            f"    proto: {proto}\nroot: n0\ntree:\n  form: {form}\n")
    return load_map_text(text, source=f"<benchmarks.cluster_gsum {config.nodes}x{config.threads} {proto} {form}>")


def gsum_us(config: Config, proto: str, tree: tuple[str, int], rounds: int) -> float:
    """Microseconds per global sum (thread 0's median round) on the emulated map."""
    form, fanin = tree
    settings = RunSettings(kernel="gsum", thread_counts=[config.contributors], max_fanin=fanin, repeat=1,
                           rounds=rounds, pin=True, timeout=RUN_TIMEOUT_S)
    return run_experiment(emulated_map(config, proto, form), settings).measurements[0].value


def rank_cpus(config: Config, per_thread: bool) -> list[list[int]]:
    """The CPUs of each MPI rank, as the nodes are pinned: node k's share of this machine's CPUs
    (as the launcher shares them out), or, with a rank per thread, the CPU thread t of the node
    runs on (t * cpus / T of its share, as kernel threads are pinned)."""
    shares = cpu_shares(config.nodes, sorted(os.sched_getaffinity(0)))
    if not per_thread:
        return shares
    return [[share[t * len(share) // config.threads]] for share in shares for t in range(config.threads)]


def mpi_us(config: Config, rounds: int, plain_ranks: bool) -> float | None:
    """MPI_Allreduce over TCP with the configuration's contributors: N ranks of T threads each,
    or (plain_ranks) one rank per contributor."""
    ranks, threads = (config.contributors, 1) if plain_ranks else (config.nodes, config.threads)
    return anchors.mpi_allreduce_us(ranks, rounds, RUN_TIMEOUT_S, transport="tcp", threads=threads,
                                    cpus=rank_cpus(config, per_thread=plain_ranks))


def measure(configs: list[Config], rounds: int, repeat: int, progress) -> tuple[dict, dict]:
    """Every column's runs, taken in turns per configuration: {(config, column): [us, ...]},
    and the anchors' runs {name: [us, ...]}."""
    runs: dict = {}
    anchor_runs: dict = {"ping_pong": [], "ping_pong_polling": [], "zmq_raw": []}
    for r in range(repeat):
        anchor_runs["ping_pong"].append(anchors.tcp_ping_pong_us(ANCHOR_ROUNDS))
        anchor_runs["ping_pong_polling"].append(anchors.tcp_ping_pong_us(ANCHOR_ROUNDS, poll=True))
        anchor_runs["zmq_raw"].append(anchors.zmq_round_trip_us(ANCHOR_ROUNDS))
        for config in configs:
            columns = {(name, proto): (lambda t=tree, p=proto: gsum_us(config, p, t, rounds))
                       for name, tree in config.trees().items() for proto in PROTOS
                       if tree[0] == "sums" or proto == "tcp"}  # allreduce's members connect directly
            if anchors.mpi_available():
                columns["mpi"] = lambda: mpi_us(config, rounds, plain_ranks=False)
                if config.threads > 1:
                    columns["mpi_ranks"] = lambda: mpi_us(config, rounds, plain_ranks=True)
            for column, run in columns.items():
                runs.setdefault((config, column), []).append(run())
                progress(f"run {r + 1}/{repeat}: {config.nodes} nodes x {config.threads}, {column}")
    return runs, anchor_runs


def report(configs: list[Config], runs: dict, anchor_runs: dict, args) -> tuple[list[str], list[dict]]:
    def cell(config: Config, column) -> float | None:
        values = runs.get((config, column))
        return statistics.median(values) if values else None

    cores = len(os.sched_getaffinity(0))
    lines = [f"GSum on emulated nodes (one process per node, its own server, loopback), threads and MPI ranks "
             f"pinned as the nodes are; median of {args.repeat} runs x {args.rounds} rounds, us per global sum",
             f"anchors, same run: C ping-pong over TCP, 48 B, blocking reads "
             f"{statistics.median(anchor_runs['ping_pong']):.1f} us, spinning reads "
             f"{statistics.median(anchor_runs['ping_pong_polling']):.1f} us; raw ZeroMQ round trip, 2 processes "
             f"{statistics.median(anchor_runs['zmq_raw']):.1f} us",
             "mpi: MPI_Allreduce over TCP (btl tcp,self), the same processes and contributors" +
             ("" if all(c.threads == 1 for c in configs) else
              " (more threads per node: hybrid ranks of as many OpenMP threads)") +
             "; mpi_ranks: plain ranks = contributors",
             f"this machine has {cores} cores: runs with more threads than that also measure context switches",
             ""]
    skipped = [f"{n} x {t}" for t in args.threads_per_node for n in args.nodes if Config(n, t) not in configs]
    if skipped:
        lines.insert(-1, f"not measured (more than 1 thread per node runs at {MAX_HYBRID_NODES} nodes and fewer): "
                         f"{', '.join(skipped)} (nodes x threads per node)")
    if not anchors.mpi_available():
        lines.append("MPI is not installed (apt-get install openmpi-bin libopenmpi-dev): no MPI columns, no targets")
    header = ["nodes", "thr/node", "contrib", "tree", "tcp_us", "zmq_us", "mpi_us", "mpi_ranks_us", "tcp/mpi",
              "zmq/mpi"]
    lines.append("".join(f"{h:>16}" for h in header))
    rows, verdicts = [], []
    for config in configs:
        mpi, mpi_ranks = cell(config, "mpi"), cell(config, "mpi_ranks")
        best = None
        for tree in config.trees():
            tcp, zmq = cell(config, (tree, "tcp")), cell(config, (tree, "zmq"))
            row = {"nodes": config.nodes, "threads_per_node": config.threads, "contributors": config.contributors,
                   "tree": tree, "tcp_us": tcp, "zmq_us": zmq, "mpi_us": mpi, "mpi_ranks_us": mpi_ranks,
                   "tcp_per_mpi": tcp / mpi if mpi else None, "zmq_per_mpi": zmq / mpi if mpi and zmq else None}
            rows.append(row)
            shown = [config.nodes, config.threads, config.contributors, tree, tcp, zmq, mpi, mpi_ranks,
                     row["tcp_per_mpi"], row["zmq_per_mpi"]]
            lines.append("".join(f"{_fmt(v):>16}" for v in shown))
            if best is None or tcp < best[1]:
                best = (tree, tcp)
        if mpi:
            bound = TARGET_TWO if config.nodes == 2 else TARGET_MORE if config.nodes >= 4 else None
            ratio = best[1] / mpi
            verdict = "no target" if bound is None else "PASS" if ratio <= bound else f"MISS by {ratio / bound - 1:.2%}"
            oversubscribed = " (more threads than cores)" if config.contributors > cores else ""
            verdicts.append(f"  {verdict:<14} {config.nodes} nodes x {config.threads} thread(s){oversubscribed}: "
                            f"{best[0]} won, tcp {best[1]:.1f} us vs MPI {mpi:.1f} us = {ratio:.3f}x "
                            + ("(the targets are at 2 and from 4 processes up)" if bound is None
                               else f"(target <= {bound:.2f}x)"))
    if verdicts:
        lines += ["", "Targets (the best tree on tcp against MPI_Allreduce over TCP)", *verdicts]
    return lines, rows


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, str)):
        return str(value)
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def parse_arguments(argv):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster_gsum", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=parse_counts, default=parse_counts("2,4,8,16"),
                        help="comma-separated node counts (default 2,4,8,16)")
    parser.add_argument("--threads-per-node", type=parse_counts, default=parse_counts("1,2"),
                        help=f"comma-separated threads per node (default 1,2); more than 1 runs at "
                             f"{MAX_HYBRID_NODES} nodes and fewer")
    parser.add_argument("--rounds", type=positive_int, default=1000, metavar="N",
                        help="global sums per run (default: %(default)s)")
    parser.add_argument("--repeat", type=positive_int, default=3, metavar="N",
                        help="runs per cell; the median is shown (default: %(default)s)")
    parser.add_argument("--csv", metavar="FILE", help="also write the table to this CSV file")
    parser.add_argument("--quick", action="store_true",
                        help="a short run (2 nodes, 1 thread each, 200 rounds, 1 run; options given beside it win), "
                             "e.g. for a test")
    args = parser.parse_args(argv)
    if args.quick:
        parser.set_defaults(**QUICK)
        args = parser.parse_args(argv)
    if min(args.nodes) < 2:
        parser.error("--nodes: a cluster GSum needs at least 2 nodes")
    check_outputs(parser, {"--csv": args.csv})
    args.configs = [Config(n, t) for t in args.threads_per_node for n in args.nodes
                    if t == 1 or n <= MAX_HYBRID_NODES]
    if not args.configs:
        parser.error(f"--threads-per-node: more than 1 runs at {MAX_HYBRID_NODES} nodes and fewer, so --nodes "
                     f"{','.join(map(str, args.nodes))} leaves nothing to measure")
    return args


def main(argv=None) -> int:
    args = parse_arguments(argv)
    try:
        runs, anchor_runs = measure(args.configs, args.rounds, args.repeat,
                                    lambda what: print(f"  ... {what}", file=sys.stderr, flush=True))
        lines, rows = report(args.configs, runs, anchor_runs, args)
    except (LaunchError, ChildError, anchors.AnchorUnavailable, RuntimeError, OSError) as e:
        print(f"benchmarks.cluster_gsum: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # node processes and children are reaped on the way out
        print("benchmarks.cluster_gsum: interrupted", file=sys.stderr)
        return 130
    print("\n".join(lines))
    if args.csv:
        write_rows(args.csv, CSV_COLUMNS, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
