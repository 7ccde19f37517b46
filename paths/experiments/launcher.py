"""Starting, talking to and reaping the node processes of a map run.

Three ways to start a node (the map's `launch.mode`, or --launch):
  local  emulation on this machine: each node a local process with its own server on loopback;
  ssh    the map's command template, e.g. "ssh {host} {command}", per node;
  slurm  inside an allocation: the allocation's hosts (SLURM_JOB_NODELIST) go to the nodes the
         run uses, in map order, each started with srun on its host.
Off this machine (ssh, slurm) servers bind every interface, so the run makes a CURVE key pair
for its servers and one for each node as a client, and hands each node on its standard input
the servers' pair, its own client pair and every node's client public key: traffic between nodes
is encrypted, and a node's server admits only the run's own nodes (and their ranks, which present
their node's client key).

Every process started is reaped: on success, on error and on Ctrl-C. A killed launcher (even by
SIGKILL) leaves no node behind either: each node (or its ssh or srun) gets the parent-death
signal, SIGTERM, on which a node stops its ranks' process groups (and, a local node, its own:
what a kernel started) before it exits (SIGKILL would leave what the ranks started), and a node
ends by itself when its standard input closes, at once when it is busy (paths/experiments/node.py).
Start nodes from the main thread: the parent-death signal follows the thread that started them.
A local node leads a session of its own, so that a kill of the launcher's whole process group
reaches the launcher alone; and it tells the launcher its ranks' process groups, which the
launcher kills, with the node's own group, once the node has ended: a node killed by SIGKILL (say
by the kernel's OOM killer) cannot stop them itself. A launcher that adopts orphans (the `paths
run` and `paths launch` commands) also stops what such a node's daemons left it.
"""

from __future__ import annotations

import collections
import ipaddress
import json
import os
import selectors
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

from .. import _native
from ..ctrl_c_held import ctrl_c_held
from ..model.cluster_map import ClusterMap, split_address
from ..model.cpu_sets import cpu_shares, format_cpu_list
from ..model.hostlist import expand_hostlist
from .line_buffer import PIECE_BYTES, LineBuffer
from .tagged_output import end_open_lines, write_tagged
from .parent_death import Orphans, adopts_orphans, children, dies_with_me
from .rank_processes import STOP_SECONDS

START_SECONDS = 60.0
QUIT_SECONDS = 5.0
AGAIN_STOP_SECONDS = 0.25  # after a second Ctrl-C, what the run's processes left has this long after SIGTERM


def exit_reason(returncode: int) -> str:
    """How a process ended, as its parent saw it: "exit 3", or "killed by SIGSEGV" (a negative
    return code is the signal that ended it)."""
    if returncode >= 0:
        return f"exit {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


class LaunchError(RuntimeError):
    """A node that could not be started or that failed; the message names it."""


@dataclass
class NodeCommand:
    node: str
    argv: list[str]
    local: bool = False  # the node process runs here (not an ssh or srun client of one elsewhere)


def node_commands(cluster_map: ClusterMap, nodes: list[str], mode: str | None = None,
                  environ: dict | None = None, node_options: tuple[str, ...] = (),
                  share_cpus: bool = False) -> list[NodeCommand]:
    """The command that starts each node, for the given (or the map's) launch mode;
    node_options are added to every node's own options (python -m paths.experiments.node --help).
    With share_cpus, emulated (local) nodes each run on their own share of this machine's CPUs."""
    mode = mode or cluster_map.launch.mode
    environ = os.environ if environ is None else environ
    python = [sys.executable, "-m", "paths.experiments.node", *node_options]
    if mode == "local":
        shares = cpu_shares(len(nodes), sorted(os.sched_getaffinity(0))) if share_cpus else None
        return [NodeCommand(n, python + ["--name", n, "--bind", _emulated_bind(cluster_map, n)]
                            + (["--cpus", format_cpu_list(shares[i])] if shares else []), local=True)
                for i, n in enumerate(nodes)]
    if mode == "ssh":
        commands = []
        for n in nodes:
            remote = shlex.join(python + ["--name", n] + _bind_options(cluster_map, n, n))
            argv = [part.format(host=n, command=remote) for part in shlex.split(cluster_map.launch.ssh)]
            commands.append(NodeCommand(n, argv))
        return commands
    if mode == "slurm":
        hosts = slurm_hosts(environ)
        used = [node.name for node in cluster_map.nodes if node.name in nodes]  # as paths sbatch: in map order
        if len(hosts) < len(used):
            raise LaunchError(f"slurm: the allocation has {len(hosts)} hosts ({', '.join(hosts)}) but the run uses "
                              f"{len(used)} nodes of map {cluster_map.name} ({', '.join(used)})")
        host_of = dict(zip(used, hosts))
        return [NodeCommand(n, ["srun", "--nodes=1", "--ntasks=1", "--overlap", "-w", host_of[n]] + python
                            + ["--name", n] + _bind_options(cluster_map, n, host_of[n]))
                for n in nodes]
    raise LaunchError(f"unknown launch mode {mode!r} (expected local, ssh or slurm)")


def _emulated_bind(cluster_map: ClusterMap, node: str) -> str:
    """Where a node emulated on this machine binds: its address in the map when that is a
    loopback one (127.0.0.0/8, [::1]), else a free port of 127.0.0.1 (the map's addresses are
    those of other machines)."""
    address = cluster_map.node(node).address
    if address:
        try:
            if ipaddress.ip_address(split_address(address)[0].strip("[]")).is_loopback:
                return address
        except ValueError:  # a host name
            pass
    return "tcp://127.0.0.1:*"


def _bind_options(cluster_map: ClusterMap, node: str, host: str) -> list[str]:
    """Where a node off this machine binds: its address in the map (every interface, at its port,
    where it names a host: ZeroMQ binds addresses, not names), or every interface with a free
    port, advertised to the others by its host name."""
    address = cluster_map.node(node).address
    if not address:
        return ["--bind", "tcp://0.0.0.0:*", "--advertise", host]
    name, port = split_address(address)
    try:
        ipaddress.ip_address(name.strip("[]"))
        return ["--bind", address]
    except ValueError:
        return ["--bind", f"tcp://0.0.0.0:{port}", "--advertise", name]


def slurm_hosts(environ) -> list[str]:
    variable = "SLURM_JOB_NODELIST" if environ.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
    nodelist = environ.get(variable)
    if not nodelist:
        raise LaunchError("slurm: no SLURM_JOB_NODELIST: run inside an allocation (salloc or sbatch)")
    try:
        return expand_hostlist(nodelist)
    except ValueError as e:
        raise LaunchError(f"slurm: {variable}: {e}") from None


class _Node:
    """One started node: its process and the lines of its standard output."""

    def __init__(self, command: NodeCommand, keys: str):
        self.name = command.node
        self.command = command
        self.errors = tempfile.TemporaryFile(mode="w+")  # a file, so a chatty node never blocks
        # read at an offset of its own: the node writes at the shared one
        self._unread_errors = open(f"/proc/self/fd/{self.errors.fileno()}", "rb")
        self._error_lines = LineBuffer()
        # A local node leads a session of its own: a kill of the launcher's whole process group
        # (SIGKILL included) then ends the launcher alone, and the node stops its ranks as it would
        # after any death of its launcher.
        self.process = subprocess.Popen(command.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.errors, bufsize=0, start_new_session=command.local,
                                        preexec_fn=dies_with_me(signal.SIGTERM, ctrl_c=signal.SIG_IGN))
        self.rank_groups: set[int] = set()  # a local node's ranks' process groups, as it said
        self.endpoint = ""
        self.lines: collections.deque[str] = collections.deque()  # read, not taken yet
        self._received = LineBuffer()  # the lines not read whole yet
        try:
            self._write(keys)
        except (BrokenPipeError, OSError):
            pass  # it died at once: waiting for READY reports it, with what it wrote on stderr

    def _write(self, line: str) -> None:
        data = memoryview(line.encode() + b"\n")
        while data:  # unbuffered: a write may take part of it
            data = data[self.process.stdin.write(data):]

    def read(self) -> bool:
        """Read what the node has written (once ready to read) into `lines`; False at its end."""
        data = os.read(self.process.stdout.fileno(), 1 << 16)
        self.lines.extend(line.decode("utf-8", "replace") for line in self._received.feed(data))
        return bool(data)

    def pass_on_errors(self, ended: bool = False) -> None:
        """The node's new lines on standard error (a kernel's prints, say) on this process's, led
        by the node's name, read a piece at a time: a long line goes on in pieces as it comes
        (tagged_output.py); once the node has `ended`, its last line too."""
        tag = f"[{self.name}] "
        while True:
            data = self._unread_errors.read(PIECE_BYTES)
            for line in self._error_lines.feed(data):
                write_tagged(sys.stderr, tag, line)
            piece = self._error_lines.piece()
            if piece:
                write_tagged(sys.stderr, tag, piece, ends=False)
            if len(data) < PIECE_BYTES:
                break
        for line in self._error_lines.rest() if ended else []:
            write_tagged(sys.stderr, tag, line)

    def send(self, request: dict) -> None:
        try:
            self._write(json.dumps(request))
        except (BrokenPipeError, OSError):
            raise LaunchError(self._death("stopped taking requests")) from None

    def _death(self, what: str) -> str:
        # Its output ended, so it is ending: its exit status (and all it wrote on stderr) may
        # come a moment later, ssh's in particular. Wait for them, a bounded time. What it wrote
        # last follows on the same line when it is one line (ssh's reason), else below.
        try:
            self.process.wait(QUIT_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        tail = ""
        if self.process.returncode is not None:  # what it wrote last, not passed on yet
            lines = self._error_lines.feed(self._unread_errors.read()) + self._error_lines.rest()
            tail = b"\n".join(lines).decode("utf-8", "replace").strip()[-600:]
        code = f" ({exit_reason(self.process.returncode)})" if self.process.returncode is not None else ""
        said = f"node {self.name} {what}{code}"
        return f"{said}:" + ("\n" if "\n" in tail else " ") + tail if tail else said

    def ask_to_quit(self) -> None:
        """Ask the node to stop (it does once idle): quit, then the end of its standard input."""
        try:
            self._write(json.dumps({"op": "quit"}))
        except (BrokenPipeError, OSError, ValueError):
            pass
        try:
            self.process.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def reap(self, deadline: float) -> str:
        """Wait for the node until `deadline` (time.monotonic), then kill it; always reaped. How it
        ended, unless it exited 0: 'exit 3', 'killed by SIGABRT', or that it did not end in time."""
        ended = ""
        try:
            self.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            ended = f"did not end within {QUIT_SECONDS:g} s: killed"
        self.pass_on_errors(ended=True)
        for stream in (self.process.stdin, self.process.stdout, self.errors, self._unread_errors):
            try:
                stream.close()
            except (BrokenPipeError, OSError, ValueError):
                pass
        return ended or (exit_reason(self.process.returncode) if self.process.returncode else "")


def _event(line: str) -> dict:
    """A node's line as a dict ({} when it is none)."""
    try:
        event = json.loads(line)
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}


def _answer(name: str, line: str) -> dict:
    """A node's answer line as a dict; LaunchError naming the node for a failure."""
    try:
        answer = json.loads(line)
    except ValueError:
        raise LaunchError(f"node {name}: expected one JSON answer, got {line[:200]!r}") from None
    if not isinstance(answer, dict) or not answer.get("ok"):
        error = answer.get("error") if isinstance(answer, dict) else None
        raise LaunchError(error or f"node {name}: failed")
    return answer


def _kill_groups(nodes: list[_Node]) -> None:
    """SIGKILL to the process groups of the nodes' ranks and of the local nodes themselves."""
    groups = {group for node in nodes for group in node.rank_groups}
    for group in groups | {node.process.pid for node in nodes if node.command.local}:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def trace_dir_options(trace_dir: str | None) -> tuple[str, ...]:
    """A node's options that make its server write the trace files clients ask for in trace_dir."""
    return ("--trace-dir", os.path.abspath(trace_dir)) if trace_dir else ()


class NodeProcesses:
    """The running nodes of one map run; use as a context manager so they are always reaped."""

    def __init__(self, cluster_map: ClusterMap, nodes: list[str], mode: str | None = None,
                 node_options: tuple[str, ...] = (), pin: bool = False, start_timeout: float = START_SECONDS):
        self.start_timeout = start_timeout  # seconds the nodes have to say READY
        self.commands = node_commands(cluster_map, nodes, mode, node_options=node_options, share_cpus=pin)
        self.secure = (mode or cluster_map.launch.mode) != "local"
        self.public_key = ""  # the run's CURVE public key, when secure: what proves its servers
        self.client_keys: dict[str, tuple[str, str]] = {}  # node -> the CURVE key pair it presents, when secure
        self.nodes: dict[str, _Node] = {}
        self.on_event: Callable[[str, dict], None] | None = None  # of the last request_all
        self.others = set(children())  # this process's children from before: not the run's

    def __enter__(self) -> "NodeProcesses":
        try:
            self.start()
        except BaseException:
            self.close(graceful=False)
            raise
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(graceful=exc_type is None)

    def start(self) -> None:
        keys = {}
        if self.secure:
            server = _native.curve_keypair()
            self.public_key = server[0]
            self.client_keys = {command.node: _native.curve_keypair() for command in self.commands}
            clients = {node: public for node, (public, _) in self.client_keys.items()}
            keys = {node: json.dumps({"server": server, "client": pair, "clients": clients})
                    for node, pair in self.client_keys.items()}
        with ctrl_c_held():  # a Ctrl-C raised in a fork's hooks would be lost, or printed by the child
            for command in self.commands:
                try:
                    self.nodes[command.node] = _Node(command, keys.get(command.node, "-"))
                except OSError as e:
                    raise LaunchError(f"node {command.node}: cannot start {command.argv[0]!r}: {e.strerror}") from None
        ready = self._read_lines(list(self.nodes.values()), self.start_timeout, "to be READY")
        for node, line in ready.items():
            if not line.startswith("READY "):
                raise LaunchError(f"node {node}: expected 'READY <endpoint>', got {line!r}")
            self.nodes[node].endpoint = line.split(" ", 1)[1].strip()
        self.request_all({n: {"op": "addresses", "addresses": self.addresses()} for n in self.nodes})

    def addresses(self) -> dict[str, str]:
        return {name: node.endpoint for name, node in self.nodes.items()}

    def request_all(self, requests: dict[str, dict], timeout: float = 600.0,
                    on_event: Callable[[str, dict], None] | None = None, what: str = "to answer",
                    if_late: str = "") -> dict[str, dict]:
        """Send each node its request (all at once: they may wait for each other), then collect
        every answer. The first failed answer raises LaunchError naming the node at once: the
        others may be waiting for the failed node and would only answer at their timeout. Lines
        {"event": ...} a node writes before its answer go to on_event(node, event) as they come;
        `what` the nodes are waited for, and `if_late` what a user can do when they are late,
        for messages."""
        self.on_event = on_event
        for name, request in requests.items():
            self.nodes[name].send(request)
        return self._read_lines([self.nodes[n] for n in requests], timeout, what, _answer, on_event, if_late)

    def _read_lines(self, nodes: list[_Node], timeout: float, what: str, parse=lambda name, line: line,
                    on_event: Callable[[str, dict], None] | None = None, if_late: str = "") -> dict:
        """One line from each node, each passed through parse(name, line) as it comes."""
        selector = selectors.DefaultSelector()
        for node in nodes:
            selector.register(node.process.stdout, selectors.EVENT_READ, node)
        lines: dict = {}
        deadline = time.monotonic() + timeout
        try:
            while len(lines) < len(nodes):
                for node in nodes:
                    while node.name not in lines and node.lines:
                        line = node.lines.popleft()
                        if line.startswith('{"event"'):
                            event = json.loads(line)
                            if event["event"] == "started" and node.command.local:
                                node.rank_groups.add(event["group"])
                            if on_event:
                                on_event(node.name, event)
                            continue
                        lines[node.name] = parse(node.name, line)
                        selector.unregister(node.process.stdout)
                if len(lines) == len(nodes):
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    late = [n.name for n in nodes if n.name not in lines]
                    raise LaunchError(f"node{'s' if len(late) > 1 else ''} {', '.join(late)} did not answer within "
                                      f"{timeout:g} s ({what})" + (f": {if_late}" if if_late else ""))
                for key, _ in selector.select(min(left, 0.25)):
                    if not key.data.read():
                        raise LaunchError(key.data._death(f"exited while waiting {what}"))
                for node in nodes:
                    node.pass_on_errors()
        finally:
            selector.close()
        for node in nodes:  # what it wrote before its answer
            node.pass_on_errors()
        return lines

    def _last_output(self, nodes: list[_Node], deadline: float) -> None:
        """The output events of nodes that are ending (the lines their ranks print as they are
        stopped) to on_event, until each node's standard output ends or `deadline` passes."""
        selector = selectors.DefaultSelector()
        for node in nodes:
            selector.register(node.process.stdout, selectors.EVENT_READ, node)
        try:
            while selector.get_map() and (left := deadline - time.monotonic()) > 0:
                for key, _ in selector.select(min(left, 0.25)):
                    if not key.data.read():
                        selector.unregister(key.fileobj)
                for node in nodes:
                    while node.lines:
                        event = _event(node.lines.popleft())
                        if self.on_event and event.get("event") == "output":
                            self.on_event(node.name, event)
                    node.pass_on_errors()
        except LaunchError:  # the output cannot be written (--output-dir): the run ends anyway
            pass
        finally:
            selector.close()

    def close(self, graceful: bool = True) -> None:
        """Stop and reap every node. Graceful (after a run that went well): each node is asked to
        quit and finishes what it holds. Otherwise (an error, Ctrl-C) nodes may be busy in a
        kernel that waits for a node that is gone, so each is terminated at once. Either way the
        nodes are stopped together, and one still there after QUIT_SECONDS is killed. A Ctrl-C
        meanwhile kills them all at once, their ranks' process groups too, and is raised. After a
        graceful stop, a node that did not exit 0 (its kernel library aborted as it exited, say)
        fails the run: LaunchError, once every node is reaped."""
        nodes = list(self.nodes.values())
        try:
            for node in nodes:
                if graceful:
                    node.ask_to_quit()
                elif node.process.poll() is None:
                    node.process.terminate()
            deadline = time.monotonic() + QUIT_SECONDS
            self._last_output(nodes, deadline)
            ended = {node.name: node.reap(deadline) for node in nodes}
        except KeyboardInterrupt:
            for node in nodes:
                node.process.kill()
            _kill_groups(nodes)
            for node in nodes:
                node.reap(time.monotonic())  # at once: killed
            if adopts_orphans():  # what ranks or kernels started in a session of its own: killed soon too
                Orphans(self.others).stop(AGAIN_STOP_SECONDS)
            self.nodes.clear()
            raise
        # What a rank, or a kernel in a local node (its process group's), started is left only
        # when its node was killed (SIGKILL): it goes now.
        _kill_groups(nodes)
        if adopts_orphans():  # the command's: what a killed node's daemons left it goes too
            Orphans(self.others).stop(STOP_SECONDS)
        end_open_lines()  # a line a node or rank did not end, before this process says more
        self.nodes.clear()
        failed = [f"node {name} {how}" for name, how in ended.items() if how]
        if graceful and failed:
            raise LaunchError(f"after the run, as the nodes quit: {'; '.join(failed)}")
