"""`paths launch`: run any program on a map, one process (a *rank*) per placed thread.

    paths launch --map paper-4w --threads 8 -- python app.py ARGS...
    paths launch --map paper-2w --threads 4 --policy cyclic --output-dir out/ -- ./my_program
    paths launch --map cluster.yaml --threads 64 --launch slurm -- ./my_program    (in salloc/sbatch)

The map places N threads on its nodes (--policy: block, cyclic, or the map's). Each node the run
needs gets a node process with its server, as in `paths run`: on this machine (emulation), over
ssh, or with srun inside an allocation (the map's launch mode, or --launch). Each node process
starts the ranks placed on it, with standard input from /dev/null and in their environment:

    PATHS_RANK, PATHS_SIZE   this rank and the number of ranks
    PATHS_NODE               the node the map places it on
    PATHS_MAP, PATHS_POLICY  the map (a shipped map's name or a file's absolute path), the policy
    PATHS_SUM, PATHS_ACQUIRE, PATHS_RELEASE   --sum (comma-separated), --acquire, --release
    PATHS_SERVERS            the node servers' endpoints (JSON), and in a CURVE run the keys
                             that prove them and the client key pair the rank presents

so that `paths.acquire(element, format)` (Python) and paths_acquire(NULL, ...) after paths_init
(C) give the rank its path from the acquire hook: a sum element the planned reduction tree,
another its home. A rank's own node's stages live in its node's server, shared by the node's
ranks.

Every line a rank prints comes out prefixed with its rank, `[3] ...` (standard error on standard
error), or with --output-dir DIR into DIR/rank.<rank>.log (both streams, unprefixed). A long
line goes on in pieces as it comes, never held whole (experiments/tagged_output.py). The exit
status is the first failing rank's (128 + N for a rank killed by signal N); the other ranks are
stopped then (SIGTERM, SIGKILL a second later). Ctrl-C stops them all (exit 130), and so do
SIGTERM to the launcher (exit 143) and --timeout or --time (exit 1); what a stopped rank prints
as it ends still comes out. Nothing the run started outlives it, even a launcher killed with
SIGKILL: nodes and ranks get the parent-death signal, and a node off this machine ends when its
ssh or srun does. With an acquire hook that puts a trace stage on the ranks' paths, --trace-dir
names the folder the node servers write the traces in.
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import re
import sys
from collections.abc import Sequence

from ..model.cluster_map import MapError, map_reference, open_map
from ..experiments.launcher import START_SECONDS, LaunchError, NodeProcesses, exit_reason, trace_dir_options
from ..experiments.parent_death import adopt_orphans
from ..experiments.rank_processes import TEXT_ERRORS
from ..experiments.tagged_output import write_tagged
from ..runtime.node_servers import NodeServers
from ..model.placement import MAX_THREADS, canonical_policy, placement_warnings_said
from ..runtime.rank_discovery import ACQUIRE, MAP, NODE, POLICY, RANK, RELEASE, SERVERS, SIZE, SUMS
from ..runtime.process_context import make_runtime
from .run import (SLURM_TIME_FORMS, THREADS_ALSO, add_rank_options, folder_path, make_folder, positive, seconds,
                  slurm_time, threads_named)


class RankFailed(Exception):
    def __init__(self, rank: int, node: str, status: int, ended_by: int = 0):
        """`ended_by`: the signal that ended the rank (its status is then 128 + it), else 0."""
        super().__init__(f"rank {rank} on node {node} exited with status {status}"
                         + (f" ({exit_reason(-ended_by)})" if ended_by else ""))
        self.status = status


class RankOutput:
    """Where the ranks' lines go: prefixed with the rank to this process's standard output and
    error, or into one file per rank. Every rank's file is made empty before the run (ValueError
    naming the file when it cannot be), so that none holds an earlier run's lines, a silent
    rank's included; a file that cannot be written during the run is a LaunchError."""

    def __init__(self, directory: str | None, ranks: int):
        self.directory = directory
        self.files: dict[int, object] = {}
        self.failed = False  # a write failed (said once, as a LaunchError): later lines are dropped
        for rank in range(ranks) if directory else ():
            try:
                open(self._path(rank), "w").close()
            except OSError as e:
                raise ValueError(f"--output-dir {directory}: cannot write {self._path(rank)}: {e.strerror}") from None

    def _path(self, rank: int) -> str:
        return os.path.join(self.directory, f"rank.{rank}.log")

    def line(self, rank: int, stream: str, text: str, more: bool = False) -> None:
        """One line of a rank, or with `more` a piece of a long one (tagged_output.py), written as
        the very bytes the rank wrote (TEXT_ERRORS)."""
        if self.failed:
            return
        data = text.encode("utf-8", TEXT_ERRORS)
        if self.directory is None:
            to = sys.stdout if stream == "out" else sys.stderr
            try:
                if to is None:
                    raise OSError(errno.EBADF, "it is closed")
                write_tagged(to, f"[{rank}] ", data, ends=not more)
            except BrokenPipeError:
                raise  # the reader went away (| head): exit 141
            except OSError as e:
                self.failed = True
                which = "output" if stream == "out" else "error"
                raise LaunchError(f"cannot write the ranks' output to standard {which}: {e.strerror}") from None
            return
        try:
            if rank not in self.files:
                self.files[rank] = open(self._path(rank), "ab")
            self.files[rank].write(data if more else data + b"\n")
            self.files[rank].flush()
        except OSError as e:
            self.failed = True
            raise LaunchError(f"--output-dir {self.directory}: cannot write {self._path(rank)}: {e.strerror}") from None

    def close(self) -> None:
        for file in self.files.values():
            try:
                file.close()
            except OSError:  # what a failed write left in its buffer: that failure was said
                pass


def add_placement_options(parser: argparse.ArgumentParser) -> None:
    """--map, --threads, --policy and the rank options: where the ranks of a command go, as paths
    launch and paths sbatch read them."""
    parser.add_argument("--map", help="a cluster map: a YAML file or a shipped map's name (default: local)")
    parser.add_argument("--threads", type=positive(MAX_THREADS), required=True,
                        help=f"how many ranks ({THREADS_ALSO})")
    parser.add_argument("--policy", type=canonical_policy,
                        help="placement: block, cyclic (bucket and even are the same two) or "
                                         "pkg.mod:func; default: the map's")
    add_rank_options(parser)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paths launch", usage="paths launch [options] -- CMD [ARGS...]",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_placement_options(parser)
    parser.add_argument("--launch", choices=("local", "ssh", "slurm"), help="how nodes start (default: the map's)")
    parser.add_argument("--output-dir", metavar="DIR", help="write each rank's output to DIR/rank.<rank>.log "
                                                           "(each made empty first) instead of prefixing it "
                                                           "with [rank]")
    parser.add_argument("--trace-dir", metavar="DIR", type=folder_path,
                        help="where the node servers write the trace files the ranks' paths ask for (a trace stage "
                             "from the acquire hook; bare file names), made if missing; without it they are refused")
    limit = parser.add_mutually_exclusive_group()
    limit.add_argument("--timeout", type=seconds, help="stop the ranks after this many seconds, exit 1; the "
                                                     "nodes have at most as long (and 60 s) to start (default: "
                                                     "no limit on the ranks)")
    limit.add_argument("-t", "--time", type=slurm_time, dest="timeout", metavar="TIME",
                       help=f"the same limit as srun writes it: {SLURM_TIME_FORMS} (--time 5 is 5 minutes)")
    return parser


def rank_variables(sums: Sequence[str], acquire: str | None, release: str | None) -> dict[str, str | None]:
    """The variables that give the ranks --sum, --acquire and --release (run.add_rank_options):
    PATHS_SUM (comma-separated), PATHS_ACQUIRE, PATHS_RELEASE; None for one not given."""
    return {SUMS: ",".join(sums) or None, ACQUIRE: acquire or None, RELEASE: release or None}


def options_and_command(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """`[options] -- CMD [ARGS...]`: the options parsed, and the command (a usage error without one)."""
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        if any(a in ("-h", "--help") for a in argv):
            parser.parse_args(["--help"])
        parser.error("expected -- CMD [ARGS...] after the options")
    split = argv.index("--")
    return parser.parse_args(threads_named(parser, argv[:split], "rank count")), argv[split + 1:]


def launch_command(argv: list[str]) -> int:
    adopt_orphans()  # so that what a killed node's ranks left goes with the run (parent_death.py)
    args, command = options_and_command(_parser(), argv)
    try:
        cluster_map = open_map(args.map)
        with placement_warnings_said("paths launch"):
            runtime = make_runtime(cluster_map, args.threads, sums=args.sum, policy=args.policy,
                                   acquire=args.acquire, release=args.release)
        if args.output_dir:
            make_folder("--output-dir", args.output_dir)
        if args.trace_dir:
            make_folder("--trace-dir", args.trace_dir)
        output = RankOutput(args.output_dir, args.threads)
    except (MapError, ValueError, OSError) as e:
        print(f"paths launch: {e}", file=sys.stderr)
        return 2
    given = {MAP: map_reference(args.map), SIZE: str(args.threads), POLICY: args.policy,
             **rank_variables(args.sum, args.acquire, args.release)}
    common = {name: value or None for name, value in given.items()}  # None: unset, not this shell's value
    placements = runtime.placements

    def on_event(node: str, event: dict) -> None:
        if event["event"] == "output":
            output.line(event["rank"], event["stream"], event["text"], event.get("more", False))
        elif event["event"] == "exit" and event["status"] != 0:
            raise RankFailed(event["rank"], node, event["status"], event.get("signal", 0))

    try:
        with NodeProcesses(cluster_map, runtime.nodes(), args.launch,
                           trace_dir_options(args.trace_dir),
                           start_timeout=min(START_SECONDS, args.timeout or math.inf)) as processes:
            keys = {node: processes.public_key for node in processes.nodes} if processes.public_key else {}
            servers = {node: NodeServers(processes.addresses(), keys, processes.client_keys.get(node)).to_json()
                       for node in processes.nodes}  # a rank presents its node's client key
            requests = {node: {"op": "launch", "command": command, "cwd": os.getcwd(),
                               "ranks": {str(r): {**common, RANK: str(r), NODE: node, SERVERS: servers[node]}
                                         for r, p in enumerate(placements) if p == node}}
                        for node in dict.fromkeys(placements)}
            processes.request_all(requests, args.timeout or math.inf, on_event, "for the ranks to end",
                                  if_late="the run's time limit (--timeout, --time) passed; its ranks were stopped")
    except RankFailed as failed:
        print(f"paths launch: {failed}; the other ranks were stopped", file=sys.stderr)
        return failed.status
    except LaunchError as e:
        print(f"paths launch: {e}", file=sys.stderr)
        return 1
    finally:
        output.close()
    return 0
