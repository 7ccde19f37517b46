"""A node process: one node of a cluster map, with its own server and its own threads.

The launcher starts one per node (locally, over ssh, or with srun) and talks to it over its
standard input and output, one JSON object per line. The node first prints `READY <endpoint>`
(its server's endpoint), then answers each request with one line:

    {"op": "addresses", "addresses": {node: endpoint}}   how remote stages reach other nodes
    {"op": "context", "map": YAML, "source": S, "kernel": K, "kernel_name": N,
     "sums": [...], "policy": P, "max_fanin": F, "tree_form": T, "acquire": H, "release": H,
     "tracing": [DIR, PREFIX, CAPACITY] or null}         the run: its map, kernel (K loads it, N
                                                         names it), hooks, traces
    {"op": "run", "threads": [t, ...], "placements": [node, ...], "tag": T, "args": {...},
     "pin": B}                                           run the kernel on these threads of a run
                                                         whose elements are NAME.T; its reports
    {"op": "counters", "tags": [T, ...]}                 every live stage here of the runs tagged so,
                                                         with its counters, and the server's
    {"op": "release", "settle": S}                       drop the runs' handles (their trees go); wait up to
                                                         S s for trace files here to be written, and answer
                                                         with those that could not be ("trace_failures")
    {"op": "launch", "command": [...], "cwd": DIR,       start these ranks of `paths launch`
     "ranks": {rank: {VAR: value}}}                      (each with its environment; null unsets) and wait
                                                         for them; meanwhile event lines
                                                         {"event": "started"|"output"|"exit", ...}
                                                         (paths/experiments/rank_processes.py)
    {"op": "quit"}                                       stop; so does the end of standard input

Answers are {"ok": true, ...} or {"ok": false, "error": "..."}. The node's server and its runs
build in one build context, so remainders other nodes send here merge with this node's own paths. A run's
handles stay until "release", so that "counters" still finds their stages.

A thread reads standard input. Its end while the node is idle stops the node once idle, as
"quit" does; its end while a request runs (a kernel, ranks) means the launcher is gone: the node
stops its ranks and exits at once. A local node also gets the parent-death signal from its
launcher (paths/experiments/parent_death.py): SIGTERM, the signal a launcher also stops a run
with; so does SIGHUP (a local node leads a session of its own, which a closed terminal's SIGHUP
does not reach: its launcher's death does). While ranks run, either signal stops them and their
process groups (SIGTERM, SIGKILL a second later), passing on what they print as they end, then
ends the node; otherwise it ends the node at once, leaving no temporary file of a trace stage
still in use (a failed run's). Ranks get SIGKILL as theirs from their node, and the launcher
hears each rank's process group ("started"), to stop what a rank started should this node be
killed.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import sys
import threading
import warnings

from .. import _native
from ..runtime import kernel
from ..runtime.acquire_hook import served_only
from ..runtime.build import BuildContext
from ..model.cluster_map import load_map_text
from ..model.cpu_sets import cpu_list, format_cpu_list
from ..runtime.node_servers import NodeServers
from ..model.placement import PlacementWarning
from .parent_death import Orphans, adopt_orphans, children
from .rank_processes import STOP_SECONDS, RankProcesses
from ..runtime.process_context import Tracing, make_runtime
from ..runtime.server import PathServer, bind_failure
from ..runtime.server_policy import ServerPolicy

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # each stops a node's ranks and the node


class Node:
    def __init__(self, name: str, curve_public: str, channel):
        self.channel = channel  # the launcher's: one line per answer or event
        self.name = name
        self.curve_public = curve_public
        self.context = BuildContext()  # the node's runs and its server build here
        self.server: PathServer | None = None  # started in self.context by main()
        self.handles: list = []  # of the runs since the last release
        self.addresses: dict[str, str] = {}
        self.servers: NodeServers | None = None  # the run's, from "addresses"
        self.runtime = None  # the run's context, from "context"
        self.kernel = None
        self.ranks: RankProcesses | None = None  # while a "launch" runs
        self.stopped = False  # a signal stopped its ranks: the node ends after them
        adopt_orphans()  # what its ranks and kernels start stays its to stop, whatever session it leaves for
        self.own = set(children())  # none: every later child is a run's
        self._output = threading.Lock()  # one line at a time on standard output

    def addresses_op(self, request: dict) -> dict:
        """Node names become the endpoints the launcher gathered, proved by the run's CURVE key;
        they are what the node's server may reach for the paths other nodes send."""
        self.addresses = dict(request["addresses"])
        keys = {node: self.curve_public for node in self.addresses} if self.curve_public else {}
        self.servers = NodeServers(self.addresses, keys)
        self.context.resolve = self.servers.resolve
        self.context.trusted_endpoints = tuple(self.addresses.values())
        return {}

    def context_op(self, request: dict) -> dict:
        cluster_map = load_map_text(request["map"], source=request["source"])
        if self.servers is not None:  # a path to a node of the map without a server says so
            self.context.resolve = served_only(self.servers.resolve, cluster_map, self.addresses)
        self.kernel = kernel.load_kernel(request["kernel"], request["kernel_name"])
        self.runtime = make_runtime(cluster_map, None, sums=request["sums"], policy=request["policy"],
                                    max_fanin=request["max_fanin"], tree_form=request["tree_form"],
                                    acquire=request["acquire"],
                                    release=request["release"],
                                    tracing=Tracing(*request["tracing"]) if request["tracing"] else None,
                                    context=self.context)
        return {}

    def run_op(self, request: dict) -> dict:
        if self.runtime is None:
            raise ValueError("a run needs its context first")
        runtime = self.runtime.for_run(request["placements"], request["tag"])

        def acquire(thread: int, element: str, format: str):
            return runtime.acquire(element, format, thread)

        def release(thread: int, handle) -> None:
            self.handles.append(handle)
            runtime.release(handle, thread)

        try:
            done = kernel.run_kernel(self.kernel, request["threads"], runtime.threads, self.name, request["args"],
                                     acquire, release, spans_processes=request["spans_processes"],
                                     pin=request["pin"], until_failure=True)
        finally:  # what the kernel started (or left this node, the subreaper) goes with its run
            Orphans(self.own).stop(STOP_SECONDS)
        return {"seconds": done.seconds, "reports": {str(t): r for t, r in done.reports.items()}}

    def counters_op(self, request: dict) -> dict:
        """The stages of the runs the request names by their tags (whose elements are NAME.tag):
        those of earlier runs may not have gone yet, as the links that hold them end when their
        clients let go."""
        tags = set(request["tags"])
        stages = [{"stage": " -> ".join(str(s) for s in built.key), "kind": built.spec.kind,
                   "counters": built.native.counters()} for built in self.context.stages()
                  if ".".join(str(built.key[-1].param("name")).split(".")[-2:]) in tags]
        return {"stages": stages, "server": self.server.native.counters()}

    def release_op(self, request: dict) -> dict:
        self.handles = []  # stages that other nodes' links hold here go as those links end
        return {"trace_failures": _native.take_trace_failures(request.get("settle", 0))}

    def launch_op(self, request: dict) -> dict:
        self.ranks = RankProcesses(request["command"], {int(r): env for r, env in request["ranks"].items()},
                                   request.get("cwd"))
        for rank in self.ranks.ranks:  # its process group, which the launcher stops should this node be killed
            self.say({"event": "started", "rank": rank.rank, "group": rank.process.pid})
        # The launcher stops the run (SIGTERM), or the terminal it shares with this node closes
        # (SIGHUP): the ranks are stopped, what they print as they end passed on, and the node ends.
        stopped = {number: signal.signal(number, lambda *_: self._stop_ranks()) for number in STOP_SIGNALS}
        try:
            statuses = self.ranks.wait(self._say_or_abort)
        finally:
            for number, handler in stopped.items():
                signal.signal(number, handler)
            self.ranks.stop()
            self.ranks = None
        return {"statuses": {str(r): s for r, s in statuses.items()}}

    def _stop_ranks(self) -> None:
        self.ranks.stop_soon()
        self.stopped = True

    def _say_or_abort(self, line: dict) -> None:
        """A rank's event to the launcher; when it cannot take it (it is gone), abort()."""
        try:
            self.say(line)
        except OSError:
            self.abort()

    def say(self, line: dict) -> None:
        """One line to the launcher: an answer or an event."""
        with self._output:
            print(json.dumps(line), file=self.channel, flush=True)

    def abort(self) -> None:
        """The launcher is gone while a request runs: stop the ranks and what a kernel started, end
        the process at once (leaving no temporary trace file)."""
        ranks = self.ranks
        if ranks is not None:
            ranks.stop()
        Orphans(self.own).stop(STOP_SECONDS)  # what a kernel started
        _native.discard_unwritten_traces()
        os._exit(1)

    def answer(self, request: dict) -> dict:
        if request.get("op") == "(not JSON)":
            return {"ok": False, "error": f"node {self.name}: a request must be one JSON object per line"}
        operation = getattr(self, f"{request.get('op')}_op", None)
        if operation is None:
            return {"ok": False, "error": f"node {self.name}: unknown request {request.get('op')!r}"}
        try:
            return {"ok": True, **operation(request)}
        except ValueError as e:  # the request's own mistake (a bad kernel, a program that is not there): it says what
            return {"ok": False, "error": f"node {self.name}: {e}"}
        except (TypeError, KeyError, ConnectionError, TimeoutError, RuntimeError, MemoryError) as e:
            return {"ok": False, "error": f"node {self.name}: {type(e).__name__}: {e}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paths.experiments.node", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True, help="this node's name in the map")
    parser.add_argument("--bind", default="tcp://127.0.0.1:*", help="the server's endpoint")
    parser.add_argument("--advertise", help="the host other nodes reach this one by (when binding *)")
    parser.add_argument("--trace-dir", help="where trace stages in paths other nodes send write their files")
    parser.add_argument("--cpus", type=cpu_list, help="run only on these CPUs, e.g. 0-3,8 (default: all allowed)")
    args = parser.parse_args(argv)
    if args.cpus:
        try:
            os.sched_setaffinity(0, args.cpus)
        except OSError as e:
            parser.error(f"--cpus {format_cpu_list(args.cpus)}: cannot run there ({e.strerror}); "
                         f"allowed: {format_cpu_list(os.sched_getaffinity(0))}")
    # The run's CURVE keys come on the first line of standard input (never on the command line,
    # where other users could read them): "-" for none, or {"server": [PUBLIC, SECRET], "client":
    # [PUBLIC, SECRET], "clients": {node: PUBLIC}}: the run's server key pair, this node's client
    # key pair, and the client keys of every node, the ones its server admits.
    keys = sys.stdin.readline().strip()
    try:
        keys = json.loads(keys) if keys != "-" else {}
        (public, secret), client, clients = keys.get("server", ("", "")), keys.get("client"), keys.get("clients")
    except (ValueError, TypeError, AttributeError):
        parser.error("expected the run's keys on the first line of standard input: '-' or a JSON object")
    warnings.simplefilter("ignore", PlacementWarning)  # the launcher has said so already
    # Answers go to the launcher on a standard output of their own; what a kernel prints (Python
    # or C) goes to standard error, which the launcher passes on line by line, led by the node.
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout.reconfigure(line_buffering=True)
    node = Node(args.name, public, channel)
    for number in STOP_SIGNALS:  # the launcher ends the run (a failed one: kernels may still run)
        signal.signal(number, lambda *_: node.abort())
    node.context.curve_client = tuple(client) if client else None
    try:
        server = node.server = PathServer(args.bind, secret, trace_dir=args.trace_dir, context=node.context,
                                          policy=ServerPolicy.for_run_nodes(), curve_clients=clients).start()
    except ValueError as e:  # the map's address for this node cannot be bound here
        print(f"node {args.name}: --bind: {bind_failure(e)}", file=sys.stderr)
        return 2
    endpoint = server.endpoint
    if args.advertise:
        endpoint = endpoint.replace("0.0.0.0", args.advertise)
    requests: queue.Queue = queue.Queue()
    busy, ended = threading.Event(), threading.Event()  # a request runs; standard input ended

    def read_requests() -> None:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
            except ValueError:
                request = None
            if not isinstance(request, dict):
                request = {"op": "(not JSON)"}
            requests.put(request)
            if request.get("op") == "quit":
                return  # what follows is the end of the input
        ended.set()
        if busy.is_set() or not requests.empty():
            node.abort()
        requests.put({"op": "quit"})

    print(f"READY {endpoint}", file=channel, flush=True)
    threading.Thread(target=read_requests, name="paths-node-requests", daemon=True).start()
    try:
        while (request := requests.get())["op"] != "quit":
            busy.set()
            if ended.is_set():  # the launcher went while this request was on its way
                node.abort()
            reply = node.answer(request)
            busy.clear()  # before the answer: the launcher may end the input once it has it
            if node.stopped:  # a signal stopped its ranks: the run ends
                node.abort()
            node.say(reply)
    except KeyboardInterrupt:
        pass
    finally:
        node.handles = []
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
