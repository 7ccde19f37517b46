"""The PastSet server: hosts a PastSet and server-side stages for remote callers.

A remote stage's caller sends the remainder of its path; the server builds it in its build
context, exactly as build_path does in a process, so the paths of many clients merge into one
tree here (and with the paths the process builds itself in the same context, as a node's do).
From then on the C side serves that caller's operations on a connection and a thread of its own
(a direct TCP or Unix socket, or ZeroMQ: the caller's `proto`); Python only builds, and reaps
what clients release.

The server does only what a client may ask (paths/runtime/server_policy.py): it builds the kinds it
allows, connects only to endpoints it trusts, charges each stage a client's path goes through to
that client's memory budget, and holds each client to its share of builds and links (paths/runtime/client_ledger.py).
Each build runs on a thread of its own: one that waits (for a server further down its path)
holds only its own client, whose further builds wait their turn. A path that comes back into a
server it went through already is refused (a BUILD names the servers it crossed; a sum's link,
those from the sum on), and so is one that comes into a server a third time (past sums: a BUILD
also names every server it went through).

    paths serve --bind tcp://127.0.0.1:7000        (also: python -m paths serve)

The server prints one line `READY <endpoint>` when it accepts requests (scripts and tests wait
for it), and stops cleanly on SIGINT or SIGTERM; a link whose stage's code does not return (a
Python stage kind's) is waited for STOP_SECONDS, then the process ends without it (exit 1).
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import ipaddress
import itertools
import os
import queue
import secrets
import signal
import socket
import sys
import threading
import weakref

from .. import _native
from .build import BuildContext, abandon_builds, context_of, default_context
from .client_ledger import ClientBuild, ClientLedger, Refused
from ..model.curve_key import KEY_LENGTH, is_curve_key
from ..model.path_edit import client_path
from ..model.path_spec import build_request_from_json
from .server_policy import ServerPolicy, default_memory_budget, endpoint_pattern, parse_size
from ..model.stage_kinds import kinds

POLL_SECONDS = 0.1
EXIT_JOIN_SECONDS = 2.0  # at exit, how long a build that gave up may take to end
BUILD_POLL_SECONDS = 0.002  # how often finished builds are answered while some are running
STOP_SECONDS = 5.0  # how long `paths serve` waits, once stopped, for its links' stages to return
TRACE_SETTLE_SECONDS = 5.0  # at the end, how long trace files still being written may take


class PathServer:
    """A server that builds clients' paths in `context` (else in that of `pastset`, else in the
    process's own), granting each client what `policy` allows (default: ServerPolicy(): the C
    built-in kinds, no outbound connection, the default budgets). With a `curve_secret`,
    `curve_clients` ({name: Z85 public key}) makes it admit only those clients; None admits any
    client that has the server's public key."""

    def __init__(self, bind: str = "tcp://127.0.0.1:7000", curve_secret: str = "",
                 pastset: _native.PastSet | None = None, trace_dir: str | None = None,
                 context: BuildContext | None = None, policy: ServerPolicy | None = None,
                 curve_clients: dict[str, str] | None = None):
        if context is None:
            context = context_of(pastset) if pastset is not None else default_context()
        self.context = context
        self.pastset = context.pastset
        self.policy = policy if policy is not None else ServerPolicy()
        self.ledger = ClientLedger(self.policy)
        if not isinstance(bind, str):
            raise TypeError(f"PathServer: bind: expected an endpoint as text (tcp://HOST:PORT, ipc://PATH, "
                            f"inproc://NAME), got {bind!r:.100}")
        problem = _endpoint_problem(bind)
        if problem:
            raise ValueError(f"PathServer({bind!r}): {problem}")
        self.native = _native.Server(bind, curve_secret, curve_clients)
        self.endpoint = self.native.endpoint
        self.id = secrets.token_hex(8)  # what the paths it sends on say they crossed
        context.server_ids += (self.id,)
        self._served: dict[int, _native.Handle] = {}
        self._built: queue.SimpleQueue = queue.SimpleQueue()  # (request, handle, error) of builds that ended
        self._building = 0  # builds on their threads, not answered yet
        self._callers = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.build_errors = 0
        self.trace_dir = trace_dir  # where trace stages clients send write; None: refused

    def serve_once(self, timeout: float = POLL_SECONDS) -> None:
        """Take at most one BUILD request, drop the handles clients released, then run the
        request and answer the builds that finished. Only one thread serves: the server's own
        after start(), else the caller's."""
        if self._thread is not None and self._thread is not threading.current_thread():
            raise RuntimeError("PathServer.serve_once: the server's own thread serves it (start() was called)")
        request = self.native.next_build(min(timeout, BUILD_POLL_SECONDS) if self._building else timeout)
        for handle_id in self.native.reap():  # first: a client that released a link may build again
            self._served.pop(handle_id, None)
            self.ledger.link_closed(handle_id)
        if request is not None:
            self._arrive(request)
        self._answer_finished()

    def _arrive(self, request: _native.BuildRequest) -> None:
        try:
            run_now = self.ledger.arrive(request.client, request)
        except Refused as e:
            self.build_errors += 1
            self._answer(request, None, str(e))
            return
        if run_now:
            self._start(request)

    def _start(self, request: _native.BuildRequest) -> None:
        self._building += 1
        thread = threading.Thread(target=self._build_on_thread, args=(request,), name="paths-build", daemon=True)
        _BUILD_THREADS.add(thread)
        thread.start()

    def _build_on_thread(self, request: _native.BuildRequest) -> None:
        try:
            handle, error = self._build(request), ""
        except Exception as e:  # whatever a client's spec provokes, it must not end the server
            handle = None
            error = str(e) if isinstance(e, (ValueError, TypeError)) else f"{type(e).__name__}: {e}"
        self._built.put((request, handle, error))

    def _build(self, request: _native.BuildRequest) -> _native.Handle:
        path, crossed, through = build_request_from_json(request.spec)
        again = next((server for server in crossed if server in self.context.server_ids), None)
        if again is not None:
            raise Refused(f"path {path}: it comes back into server {again} ({self.endpoint}), which it went "
                          "through already; a path crosses each server once")
        thrice = next((server for server in self.context.server_ids if through.count(server) >= 2), None)
        if thrice is not None:
            raise Refused(f"path {path}: it comes into server {thrice} ({self.endpoint}) a third time; a path "
                          "comes back into a server at most once, past a sum")
        guard = ClientBuild(request.client, crossed, through, self.policy.allow_remote, self.ledger)
        return self.context.build(client_path(path, self.trace_dir),
                                  label=f"remote caller {next(self._callers)} ({request.client})", guard=guard)

    def _answer_finished(self) -> None:
        while True:
            try:
                request, handle, error = self._built.get_nowait()
            except queue.Empty:
                return
            self._building -= 1
            waiting = self.ledger.finished(request.client)
            if waiting is not None:
                self._start(waiting)
            if handle is None:
                self.build_errors += 1
            self._answer(request, handle, error)

    def _answer(self, request: _native.BuildRequest, handle: _native.Handle | None, error: str) -> None:
        # A refusal may quote what the client sent: text UTF-8 cannot carry (a lone surrogate in
        # a kind's name) is escaped, so that the refusal still goes out.
        error = error.encode("utf-8", "backslashreplace").decode("utf-8")
        try:
            handle_id = self.native.answer_build(request, handle, error)
        except (ConnectionError, MemoryError):
            return  # no socket or thread for the link: the client was told so; drop the handle
        if handle is not None:
            self._served[handle_id] = handle
            self.ledger.link_opened(request.client, handle_id)

    def allow_clients(self, clients: dict[str, str]) -> None:
        """{name: Z85 public key}: the clients admitted from now on (a server started with
        curve_clients)."""
        self.native.allow_clients(clients)

    def stop_serving(self) -> None:
        """Ends serve_forever (safe from a signal handler)."""
        self._stop.set()

    def serve_forever(self) -> None:
        while not self._stop.is_set():
            try:
                self.serve_once()
            except Exception as e:  # a server thread must outlive anything one request does
                print(f"paths server: {type(e).__name__}: {e}", file=sys.stderr)

    def start(self) -> "PathServer":
        """Serve from a background thread of this process (for processes that also run work)."""
        self._thread = threading.Thread(target=self.serve_forever, name="paths-server", daemon=True)
        self._thread.start()
        _SERVING.add(self)
        return self

    def close(self, timeout: float | None = None) -> int:
        """Stop serving. Builds still running (waiting for a server further down) are left to
        end on their own threads; their answers go nowhere. A link whose stage's code has not
        returned `timeout` seconds later (a Python stage kind's, say; None: no limit) is left
        running, and keeps the handles it may use: returns how many were (0 when none)."""
        self.stop_serving()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        left = self.native.stop(timeout)
        self.context.server_ids = tuple(i for i in self.context.server_ids if i != self.id)
        if left:
            _LEFT_RUNNING.append(self._served)
        self._served = {}
        return left

    def __enter__(self) -> "PathServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# Every build thread and every server serving from a thread of its own, so that none is still
# running when the interpreter ends.
_BUILD_THREADS: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()
_SERVING: "weakref.WeakSet[PathServer]" = weakref.WeakSet()
_LEFT_RUNNING: list[dict] = []  # the handles of servers closed while a link's stage still ran: kept for good


@atexit.register
def _end_builds() -> None:
    """Servers left serving stop, and builds still waiting for a server further down give up;
    all end before the interpreter does: a thread that came back into it while it finalizes would
    abort the process."""
    serving = [server for server in _SERVING if server._thread is not None and server._thread.is_alive()]
    for server in serving:
        server.stop_serving()
    running = [thread for thread in _BUILD_THREADS if thread.is_alive()]
    if running:
        abandon_builds()
        _native.abandon_remote_waits()
    for thread in running + [server._thread for server in serving]:
        thread.join(EXIT_JOIN_SECONDS)


def bind_failure(error: ValueError) -> str:
    """Why a PathServer could not bind its endpoint, for a line that already names --bind."""
    return str(error).removeprefix("paths server: ")


def read_key_file(path: str, what: str) -> str:
    """A Z85 CURVE key from a file (its first line); ValueError naming the file and what is wrong."""
    try:
        with open(path, "rb") as f:
            first = f.read(4096).split(b"\n", 1)[0].strip()  # a key file is one short line
    except OSError as e:
        raise ValueError(f"cannot read {what} '{path}': {e.strerror}") from None
    if not is_curve_key(first.decode("latin-1")):
        got = "an empty line" if not first else f"{len(first)} characters" + (
            "" if len(first) != KEY_LENGTH else ", not all of them Z85 digits")
        raise ValueError(f"{what} '{path}': expected a 40-character Z85 key on its first line (as "
                         f"`paths serve --keygen` writes), got {got}")
    return first.decode("ascii")


def read_secret_key(path: str) -> str:
    """--curve-secret: the server's secret key; ValueError also for a public key given in its place
    (the two look alike: a file named PREFIX.pub, or one that holds what PREFIX.pub beside it holds)."""
    key = read_key_file(path, "CURVE secret key")
    stem, suffix = os.path.splitext(path)
    try:
        with open(stem + ".pub", "rb") as f:
            public = f.read(4096).split(b"\n", 1)[0].strip().decode("latin-1")
    except OSError:
        public = None
    if suffix == ".pub" or key == public:
        raise ValueError(f"'{path}' holds a public key, not the secret one: give the PREFIX.key file "
                         f"that `paths serve --keygen PREFIX` wrote beside PREFIX.pub")
    return key


CLIENT_NAME_MAX = 63  # the bytes of a client's name, as the C server keeps it


def client_name_fits(name: str) -> bool:
    return 1 <= len(name.encode("utf-8", "surrogateescape")) <= CLIENT_NAME_MAX


def read_client_keys(directory: str) -> dict[str, str]:
    """The client keys a server admits: {name: key} from every NAME.pub in `directory` (as
    `paths serve --keygen NAME` writes them); ValueError naming the folder or the file."""
    try:
        names = sorted(entry for entry in os.listdir(directory) if entry.endswith(".pub"))
    except OSError as e:
        raise ValueError(f"cannot read folder '{directory}': {e.strerror}") from None
    if not names:
        raise ValueError(f"folder '{directory}' holds no NAME.pub file: expected the public keys of the clients "
                         "to admit, one per file (paths serve --keygen NAME writes one)")
    unnamed = next((name for name in names if not client_name_fits(name[:-len(".pub")])), None)
    if unnamed is not None:
        raise ValueError(f"'{os.path.join(directory, unnamed)}': a client is named by its file's name before .pub, "
                         f"of 1 to {CLIENT_NAME_MAX} bytes")
    return {name[:-len(".pub")]: read_key_file(os.path.join(directory, name), "client public key") for name in names}


def read_key_pair(prefix: str) -> tuple[str, str]:
    """(public, secret) from PREFIX.pub and PREFIX.key, as `paths serve --keygen PREFIX` writes
    them: what a BuildContext's curve_client presents to a server that authenticates clients."""
    return read_key_file(prefix + ".pub", "CURVE public key"), read_key_file(prefix + ".key", "CURVE secret key")


def allowed_kinds(text: str) -> frozenset[str]:
    """--allow-kinds: a comma list of kind names, each NAME or MODULE:NAME (the module is imported
    first: it registers the kind, as @paths.stage_kind does). ValueError naming what is wrong."""
    names = set()
    for entry in filter(None, (part.strip() for part in text.split(","))):
        module, _, name = entry.rpartition(":")
        if module:
            try:
                importlib.import_module(module)
            except Exception as e:  # the operator's own module: say what it raised, in one line
                raise ValueError(f"{entry!r}: cannot import {module!r}: {type(e).__name__}: {e}") from None
        if name not in kinds():
            raise ValueError(f"{entry!r}: no stage kind {name!r} (known: {', '.join(sorted(kinds()))})")
        names.add(name)
    return frozenset(names)


def serve_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="paths serve",
        description="Host a PastSet and server-side stages for remote stages. Prints "
                    "'READY <endpoint>' when it accepts requests; stops on SIGINT/SIGTERM (exit 1 when a "
                    "link's stage is still in its code 5 s later: it is not waited for). "
                    "Clients set up their links at the ZeroMQ endpoint; each link's operations "
                    "then travel as the client's proto asks: tcp or ipc, a direct connection per "
                    "link, admitted by a per-link secret but NOT encrypted (as MPI's TCP "
                    "transport is not), or zmq, the one transport that --curve-secret encrypts. "
                    "The server does only what a client may ask: it builds the C built-in stage "
                    "kinds (and --allow-kinds), connects nowhere on a client's say-so (but "
                    "--allow-remote), refuses a stage beyond a memory budget before creating it, "
                    "and holds each client to a share of builds and links. A client is its "
                    "--curve-clients key, else its address (all clients of one host are one), "
                    "else 'local'. Exit status: 0 when stopped, 1 when a trace file could not be "
                    "written (each is named), 2 for a usage error (an endpoint it cannot bind too).")
    parser.add_argument("--bind", default="tcp://127.0.0.1:7000",
                        help="ZeroMQ endpoint to bind (default tcp://127.0.0.1:7000; port * picks a free one). "
                             "Binding beyond loopback needs --curve-secret, or --insecure. An ipc://PATH's socket "
                             "file (and its links' PATH.R files) are removed as the server stops; those a killed "
                             "server left, as the next one on PATH starts.")
    parser.add_argument("--curve-secret", metavar="FILE",
                        help="file holding the server's CURVE secret key (Z85); clients then need its public "
                             "key. It encrypts the ZeroMQ endpoint and zmq links, not direct (tcp, ipc) links")
    parser.add_argument("--curve-clients", metavar="DIR",
                        help="admit only the clients whose CURVE public key is a NAME.pub file in DIR (as "
                             "--keygen NAME writes; NAME is what messages call the client). Needs --curve-secret. "
                             "A refused client gets no answer, on the ZeroMQ endpoint and on every link")
    parser.add_argument("--insecure", action="store_true",
                        help="allow binding a non-loopback address without CURVE (with a warning: anyone who "
                             "reaches it may use it)")
    parser.add_argument("--trace-dir", metavar="DIR",
                        help="where trace stages sent by clients write their files (bare names only); "
                             "without it, such paths are refused")
    parser.add_argument("--allow-remote", metavar="PATTERN", action="append", default=[],
                        help="let a client's path make this server connect to an endpoint that matches PATTERN "
                             "(repeatable): a shell pattern (* ? [...]) matched against the whole endpoint a remote "
                             "stage names (tcp://HOST:PORT, ipc://NAME, inproc://NAME; a bare HOST:PORT, in the "
                             "pattern as in the stage, is tcp://HOST:PORT), e.g. 'tcp://10.1.2.*:7000'; a wildcard "
                             "stays within one label of the host (between dots), the port, or one part of an ipc path. An endpoint with a source address of its own "
                             "(tcp://A;B) never matches. Without it, a path with a remote stage to build here is "
                             "refused")
    parser.add_argument("--allow-kinds", metavar="KINDS", default="",
                        help="build these stage kinds too (a comma list of NAME or MODULE:NAME; MODULE is imported "
                             "first, to register a kind written in Python). Without it, only the C built-in kinds")
    parser.add_argument("--memory-budget", metavar="SIZE",
                        help="the bytes the stages all clients make it create may hold (each kind's footprint, "
                             "checked before creating it), e.g. 512M or 2G; default: a quarter of this machine's "
                             "memory, at most 2G")
    parser.add_argument("--client-memory-budget", metavar="SIZE",
                        help="the same for one client, at most --memory-budget; default: a quarter of it")
    parser.add_argument("--max-links-per-client", metavar="N", type=int,
                        help="the links one client may hold (direct ones too); default 256, or half of the links "
                             "this server can hold when that is fewer. Whatever this is, a "
                             "client holds at most half of the links the other clients leave (the file descriptors "
                             "of this process bound them all), so that another client is always served")
    parser.add_argument("--max-builds-per-client", metavar="N", type=int, default=ServerPolicy.builds_per_client,
                        help=f"the builds of one client that run at once (default %(default)s; its further ones "
                             f"wait, up to {ServerPolicy.waiting_builds_per_client}); at most "
                             f"{ServerPolicy.max_builds - 1}: {ServerPolicy.max_builds} run at once in all")
    parser.add_argument("--keygen", metavar="PREFIX",
                        help="write a new CURVE key pair to PREFIX.key (secret) and PREFIX.pub, then exit")
    args = parser.parse_args(argv)
    if args.keygen is not None:
        return _keygen(parser, args)
    problem = _endpoint_problem(args.bind)
    if problem:
        print(f"paths serve: --bind {args.bind}: {problem}", file=sys.stderr)
        return 2
    if args.trace_dir is not None and not os.path.isdir(args.trace_dir):
        print(f"paths serve: --trace-dir {args.trace_dir}: no such folder (trace files are written there)",
              file=sys.stderr)
        return 2
    try:
        secret = read_secret_key(args.curve_secret) if args.curve_secret else ""
    except ValueError as e:
        print(f"paths serve: --curve-secret: {e}", file=sys.stderr)
        return 2
    try:
        policy = _policy(args)
    except ValueError as e:
        print(f"paths serve: {e}", file=sys.stderr)
        return 2
    try:
        clients = read_client_keys(args.curve_clients) if args.curve_clients else None
    except ValueError as e:
        print(f"paths serve: --curve-clients: {e}", file=sys.stderr)
        return 2
    if clients is not None and not secret:
        print("paths serve: --curve-clients needs --curve-secret (clients are authenticated by CURVE)", file=sys.stderr)
        return 2
    if not _is_local(args.bind) and not secret and not args.insecure:
        print(f"paths serve: --bind {args.bind} reaches beyond this machine: give --curve-secret FILE "
              "(see --keygen), or --insecure", file=sys.stderr)
        return 2
    if args.insecure and not secret:
        print(f"paths serve: warning: --insecure: {args.bind} serves without CURVE: anyone who reaches it can "
              "build stages, read and write its elements, and read all its traffic", file=sys.stderr)
    try:
        server = PathServer(args.bind, secret, trace_dir=args.trace_dir, policy=policy, curve_clients=clients)
    except ValueError as e:  # the endpoint is taken, or its folder is not there: choose another
        print(f"paths serve: --bind: {bind_failure(e)}", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: server.stop_serving())
    print(f"READY {server.endpoint}", flush=True)
    try:
        server.serve_forever()
    finally:
        left = server.close(STOP_SECONDS)
    if left:  # the interpreter cannot end around a thread still in a stage's code: the process ends now
        print(f"paths serve: {left} link{'s' if left > 1 else ''} still in a stage's code {STOP_SECONDS:g} s after "
              "the stop (a stage kind whose operation does not return): stopped without waiting for "
              f"{'them' if left > 1 else 'it'}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)
    lost = _native.take_trace_failures(TRACE_SETTLE_SECONDS if args.trace_dir else 0)
    if lost:
        print("paths serve: traces lost:\n" + "\n".join(f"  {failure}" for failure in lost), file=sys.stderr)
        return 1
    return 0


def _keygen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """paths serve --keygen PREFIX: a new key pair in PREFIX.key (secret) and PREFIX.pub, PREFIX's
    folder made when missing (its owner's alone); it never replaces a key, and serves nothing."""
    serving = next((action.option_strings[0] for action in parser._actions if action.dest not in ("help", "keygen")
                    and getattr(args, action.dest) != action.default), None)
    existing = next((args.keygen + suffix for suffix in (".key", ".pub") if os.path.lexists(args.keygen + suffix)),
                    None)
    name = os.path.basename(args.keygen)
    if not args.keygen:
        problem = "expected a file prefix (PREFIX.key and PREFIX.pub are written), got ''"
    elif name in ("", ".", ".."):
        problem = "expected a file prefix (PREFIX.key and PREFIX.pub are written), got a folder: give FOLDER/NAME"
    elif not client_name_fits(name):
        problem = (f"its name '{name[:80]}' is the client's name in a --curve-clients folder: at most "
                   f"{CLIENT_NAME_MAX} bytes")
    elif serving:
        problem = f"it writes a key pair and exits, serving nothing: {serving} has no use with it"
    elif existing:
        problem = f"'{existing}' exists: a new key pair would replace it; remove it first, or give another PREFIX"
    else:
        problem = ""
    if problem:
        print(f"paths serve: --keygen {args.keygen}: {problem}", file=sys.stderr)
        return 2
    folder = os.path.dirname(args.keygen) or "."
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError as e:
        print(f"paths serve: --keygen {args.keygen}: cannot make the folder '{folder}': {e.strerror}", file=sys.stderr)
        return 2
    public, secret = _native.curve_keypair()
    try:  # the secret is the owner's alone from the moment it exists
        for suffix, key, mode in ((".key", secret, 0o600), (".pub", public, 0o644)):
            with os.fdopen(os.open(args.keygen + suffix, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "w") as f:
                f.write(key + "\n")
    except OSError as e:
        print(f"paths serve: --keygen {args.keygen}: cannot write '{e.filename or args.keygen + suffix}': "
              f"{e.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {args.keygen}.key (secret) and {args.keygen}.pub (public)")
    return 0


def _policy(args: argparse.Namespace) -> ServerPolicy:
    """The server's policy from its options; ValueError naming the option."""
    def size(option: str, text: str | None) -> int | None:
        return None if text is None else parse_size(text, option)

    for option, value in (("--max-links-per-client", args.max_links_per_client),
                          ("--max-builds-per-client", args.max_builds_per_client)):
        if value is not None and value < 1:
            raise ValueError(f"{option}: expected a number of at least 1, got {value}")
    if args.max_builds_per_client >= ServerPolicy.max_builds:
        raise ValueError(f"--max-builds-per-client: expected at most {ServerPolicy.max_builds - 1} (the server runs "
                         f"{ServerPolicy.max_builds} builds at once in all), got {args.max_builds_per_client}")
    try:
        kinds_allowed = allowed_kinds(args.allow_kinds)
    except ValueError as e:
        raise ValueError(f"--allow-kinds: {e}") from None
    for pattern in args.allow_remote:
        try:
            endpoint_pattern(pattern)
        except ValueError as e:
            raise ValueError(f"--allow-remote: {e}") from None
    memory, client_memory = size("--memory-budget", args.memory_budget), size("--client-memory-budget",
                                                                              args.client_memory_budget)
    if client_memory is not None and client_memory > (memory or default_memory_budget()):
        server = args.memory_budget if memory is not None else f"by default {default_memory_budget()} bytes"
        raise ValueError(f"--client-memory-budget: expected at most the server's --memory-budget ({server}), got "
                         f"{args.client_memory_budget}")
    return ServerPolicy(allow_kinds=kinds_allowed, allow_remote=tuple(args.allow_remote), memory_budget=memory,
                        client_memory_budget=client_memory, builds_per_client=args.max_builds_per_client,
                        links_per_client=args.max_links_per_client)


def _endpoint_problem(endpoint: str) -> str:
    """What is wrong with an endpoint to bind, or "" (libzmq itself would take port 99999 as
    34463, so the port is checked here)."""
    scheme, _, rest = endpoint.partition("://")
    if scheme not in ("tcp", "ipc", "inproc") or not rest:
        return "expected tcp://HOST:PORT, ipc://PATH or inproc://NAME"
    if scheme == "tcp":
        host, _, port = rest.rpartition(":")
        if not host or not (port == "*" or (port.isdigit() and 0 < int(port) < 65536)):
            return "expected tcp://HOST:PORT with PORT from 1 to 65535, or * for a free one"
        if not _bindable_host(host):
            return (f"HOST {host!r} is no address to bind: expected an IP address (such as 127.0.0.1), * for "
                    "every interface, or the name of a network interface (not a host name)")
    return ""


def _bindable_host(host: str) -> bool:
    """What ZeroMQ binds: an IP address ([...] for IPv6), * or an interface's name."""
    if host == "*" or host in {name for _, name in socket.if_nameindex()}:
        return True
    try:
        ipaddress.ip_address(host[1:-1] if host.startswith("[") and host.endswith("]") else host)
    except ValueError:
        return False
    return True


def _is_local(endpoint: str) -> bool:
    if endpoint.startswith(("ipc://", "inproc://")):
        return True
    host = endpoint.split("://", 1)[-1].rsplit(":", 1)[0]
    return host == "localhost" or host.startswith("127.") or host == "[::1]"
