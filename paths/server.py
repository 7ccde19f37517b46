"""The PastSet server: hosts a PastSet and server-side stages for remote callers.

A remote stage's caller sends the remainder of its path; the server builds it into its own
stage table, exactly as build_path does in a process, so the paths of many clients merge into
one tree here. From then on the C side serves that caller's operations on a connection and a
thread of its own (a direct TCP or Unix socket, or ZeroMQ: the caller's `proto`); Python only
builds, and reaps what clients release.

    paths serve --bind tcp://127.0.0.1:7000        (also: python -m paths serve)

The server prints one line `READY <endpoint>` when it accepts requests (scripts and tests wait
for it), and stops cleanly on SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from . import _native
from .build import default_pastset, stage_table
from .path_edit import client_path
from .path_spec import path_from_json

POLL_SECONDS = 0.1
BUILD_POLL_SECONDS = 0.002  # how often finished builds are answered while some are running
BUILD_WORKERS = 8


class PathServer:
    """A server over one PastSet (the process's own by default)."""

    def __init__(self, bind: str = "tcp://127.0.0.1:7000", curve_secret: str = "",
                 pastset: _native.PastSet | None = None, trace_dir: str | None = None):
        self.pastset = pastset if pastset is not None else default_pastset()
        self.table = stage_table(self.pastset)
        self.native = _native.Server(bind, curve_secret)
        self.endpoint = self.native.endpoint
        self._served: dict[int, _native.Handle] = {}
        self._builders = ThreadPoolExecutor(BUILD_WORKERS, thread_name_prefix="paths-build")
        self._building: list = []  # (request, future) of builds not answered yet
        self._callers = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.build_errors = 0
        self.trace_dir = trace_dir  # where trace stages clients send write; None: refused

    def serve_once(self, timeout: float = POLL_SECONDS) -> None:
        """Take at most one BUILD request, answer the builds that finished, then drop the handles
        clients released. Builds run on worker threads: one that waits (for a server further
        down its path) delays nobody else's. Only one thread serves: the server's own after
        start(), else the caller's."""
        if self._thread is not None and self._thread is not threading.current_thread():
            raise RuntimeError("PathServer.serve_once: the server's own thread serves it (start() was called)")
        request = self.native.next_build(min(timeout, BUILD_POLL_SECONDS) if self._building else timeout)
        if request is not None:
            self._building.append((request, self._builders.submit(self._build, request.spec)))
        self._answer_finished()
        for handle_id in self.native.reap():
            self._served.pop(handle_id, None)

    def _build(self, spec: str) -> _native.Handle:
        path = client_path(path_from_json(spec), self.trace_dir)
        return self.table.build(path, label=f"remote caller {next(self._callers)}")

    def _answer_finished(self) -> None:
        waiting = []
        for request, build in self._building:
            if not build.done():
                waiting.append((request, build))
                continue
            try:
                handle, error = build.result(), ""
            except Exception as e:  # whatever a client's spec provokes, it must not end the server
                self.build_errors += 1
                handle = None
                error = str(e) if isinstance(e, (ValueError, TypeError)) else f"{type(e).__name__}: {e}"
            try:
                handle_id = self.native.answer_build(request, handle, error)
            except (ConnectionError, MemoryError):
                continue  # no socket or thread for the link: the client was told so; drop the handle
            if handle is not None:
                self._served[handle_id] = handle
        self._building = waiting

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
        return self

    def close(self) -> None:
        self.stop_serving()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._builders.shutdown(wait=False, cancel_futures=True)
        self.native.stop()
        self._building.clear()
        self._served.clear()

    def __enter__(self) -> "PathServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


Z85_DIGITS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")


def read_key_file(path: str, what: str) -> str:
    """A Z85 CURVE key from a file (its first line); ValueError naming the file and what is wrong."""
    try:
        with open(path, "rb") as f:
            first = f.read(4096).split(b"\n", 1)[0].strip()  # a key file is one short line
    except OSError as e:
        raise ValueError(f"cannot read {what} '{path}': {e.strerror}") from None
    if len(first) != 40 or not set(first.decode("latin-1")) <= Z85_DIGITS:
        got = "an empty line" if not first else f"{len(first)} characters" + (
            "" if len(first) != 40 else ", not all of them Z85 digits")
        raise ValueError(f"{what} '{path}': expected a 40-character Z85 key on its first line (as "
                         f"`paths serve --keygen` writes), got {got}")
    return first.decode("ascii")


def serve_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="paths serve",
        description="Host a PastSet and server-side stages for remote stages. Prints "
                    "'READY <endpoint>' when it accepts requests; stops on SIGINT/SIGTERM. "
                    "Clients set up their links at the ZeroMQ endpoint; each link's operations "
                    "then travel as the client's proto asks: tcp or ipc, a direct connection per "
                    "link, admitted by a per-link secret but NOT encrypted (as MPI's TCP "
                    "transport is not), or zmq, the one transport that --curve-secret encrypts.")
    parser.add_argument("--bind", default="tcp://127.0.0.1:7000",
                        help="ZeroMQ endpoint to bind (default tcp://127.0.0.1:7000; port * picks a free one). "
                             "Binding beyond loopback needs --curve-secret, or --insecure.")
    parser.add_argument("--curve-secret", metavar="FILE",
                        help="file holding the server's CURVE secret key (Z85); clients then need its public "
                             "key. It encrypts the ZeroMQ endpoint and zmq links, not direct (tcp, ipc) links")
    parser.add_argument("--insecure", action="store_true",
                        help="allow binding a non-loopback address without CURVE (with a warning: anyone who "
                             "reaches it may use it)")
    parser.add_argument("--trace-dir", metavar="DIR",
                        help="where trace stages sent by clients write their files (bare names only); "
                             "without it, such paths are refused")
    parser.add_argument("--keygen", metavar="PREFIX",
                        help="write a new CURVE key pair to PREFIX.key (secret) and PREFIX.pub, then exit")
    args = parser.parse_args(argv)
    if args.keygen:
        public, secret = _native.curve_keypair()
        try:  # the secret is the owner's alone from the moment it exists
            for suffix, key, mode in ((".key", secret, 0o600), (".pub", public, 0o644)):
                with os.fdopen(os.open(args.keygen + suffix, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as f:
                    os.fchmod(f.fileno(), mode)  # an older file keeps its mode otherwise
                    f.write(key + "\n")
        except OSError as e:
            print(f"paths serve: --keygen {args.keygen}: cannot write '{e.filename or args.keygen + suffix}': "
                  f"{e.strerror}", file=sys.stderr)
            return 2
        print(f"wrote {args.keygen}.key (secret) and {args.keygen}.pub (public)")
        return 0
    problem = _endpoint_problem(args.bind)
    if problem:
        print(f"paths serve: --bind {args.bind}: {problem}", file=sys.stderr)
        return 2
    try:
        secret = read_key_file(args.curve_secret, "CURVE secret key") if args.curve_secret else ""
    except ValueError as e:
        print(f"paths serve: --curve-secret: {e}", file=sys.stderr)
        return 2
    if not _is_local(args.bind) and not secret and not args.insecure:
        print(f"paths serve: --bind {args.bind} reaches beyond this machine: give --curve-secret FILE "
              "(see --keygen), or --insecure", file=sys.stderr)
        return 2
    if args.insecure and not secret:
        print(f"paths serve: warning: --insecure: {args.bind} serves without CURVE: anyone who reaches it can "
              "build stages, read and write its elements, and read all its traffic", file=sys.stderr)
    try:
        server = PathServer(args.bind, secret, trace_dir=args.trace_dir)
    except ValueError as e:
        print(f"paths serve: {e}", file=sys.stderr)
        return 1
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: server.stop_serving())
    print(f"READY {server.endpoint}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.close()
    return 0


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
    return ""


def _is_local(endpoint: str) -> bool:
    if endpoint.startswith(("ipc://", "inproc://")):
        return True
    host = endpoint.split("://", 1)[-1].rsplit(":", 1)[0]
    return host == "localhost" or host.startswith("127.") or host == "[::1]"
