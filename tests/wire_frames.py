"""The wire protocol as wrappers_c/wire.md states it, written independently of the C code, for
tests that speak to a server by hand: frames, a BUILD over ZeroMQ, and a raw direct connection
(TCP or an abstract Unix socket) that reads answers with a deadline."""

from __future__ import annotations

import socket
import struct
import time

import zmq

from paths import make_path, stage
from paths.model.path_spec import path_to_json

HEADER = struct.Struct("<BBHIQQqq")  # version, op, status, payload_length, request, handle, argument, value
VERSION = 1
(BUILD, MOVE, OBSERVE, OBSERVE_AT, FIRST, LAST, DELTA, AXE, RELEASE, PING, EXCHANGE, CONNECT, MOVE_MANY, OBSERVE_RANGE,
 FLUSH, FENCE, PEER, PART, BREAK) = range(1, 20)
OP_LIMIT = 20
RANGE_MAX_BYTES = 1 << 22  # an OBSERVE_RANGE asks for at most this many bytes of tuples (or one larger tuple)
BATCH_PAYLOAD = 16384  # a MOVE_MANY carries at most this many bytes of tuples (or one larger tuple)
ZMQ, TCP, IPC = TRANSPORTS = (0, 1, 2)  # a BUILD's argument
MAX_PAYLOAD = (1 << 20) + 4096
SPEC_MAX = 65536
GROUP_MAX = 255  # a PEER names an allreduce group of 1 to this many bytes
SECRET_BYTES = 32
PS_OK, PS_ETIMEDOUT, PS_EINVAL, PS_ESTATE = 0, 1, 7, 9
STREAM_STARTS, STREAM_CONTINUES = 0, 1  # a MOVE_MANY's argument: a stream's first frame, or one that continues it
BEHIND = 1  # a request's status: sent behind requests not answered yet (run only after whole frames of tuples)
ANSWER_WAIT_S = 10.0  # the longest one answer may take before a test fails


def encode(op, payload=b"", request_id=0, handle_id=0, argument=0, value=0, version=VERSION, status=0,
           length=None):
    length = len(payload) if length is None else length
    return HEADER.pack(version, op, status, length, request_id, handle_id, argument, value) + payload


def decode(frame: bytes, answer: bool = False):
    """The header fields of a well-formed frame (checked as the server checks a request), or None.
    An answer may carry op 0: the answer to a request that could not be decoded."""
    if len(frame) < HEADER.size:
        return None
    version, op, status, length, request_id, handle_id, argument, value = HEADER.unpack_from(frame)
    if version != VERSION or not (answer and op == 0 or 1 <= op < OP_LIMIT) or length > MAX_PAYLOAD \
            or length != len(frame) - HEADER.size:
        return None
    return {"op": op, "status": status, "length": length, "request_id": request_id, "handle_id": handle_id,
            "argument": argument, "value": value, "payload": frame[HEADER.size:]}


def dealer(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(endpoint)
    return sock


def zmq_answer(sock: zmq.Socket, timeout_s: float = ANSWER_WAIT_S) -> bytes:
    assert sock.poll(int(timeout_s * 1000), zmq.POLLIN), f"no answer within {timeout_s} s"
    return sock.recv()


def open_link(ctx: zmq.Context, endpoint: str, element: str, transport: int = ZMQ, format: str = "q"):
    """BUILD by hand: (handle id, link endpoint, secret); the secret is b"" on ZeroMQ."""
    main = dealer(ctx, endpoint)
    spec = path_to_json(make_path(stage("core", name=element, format=format))).encode()
    main.send(encode(BUILD, spec, request_id=1, argument=transport))
    reply = decode(zmq_answer(main))
    main.close()
    assert reply and reply["op"] == BUILD and reply["status"] == PS_OK, reply
    secret_bytes = 0 if transport == ZMQ else SECRET_BYTES
    return reply["handle_id"], reply["payload"][secret_bytes:].decode(), reply["payload"][:secret_bytes]


class Link:
    """A link built by hand (open_link) and connected on its transport: send(frame), answer()."""

    def __init__(self, ctx: zmq.Context, endpoint: str, element: str, transport: int):
        self.id, where, secret = open_link(ctx, endpoint, element, transport)
        self.sock = dealer(ctx, where) if transport == ZMQ else None
        self.direct = None if transport == ZMQ else Direct(where)
        if self.direct:
            self.direct.send(encode(CONNECT, secret, request_id=1, handle_id=self.id))
            assert self.direct.answer()["status"] == PS_OK

    def send(self, frame: bytes) -> None:
        if self.direct:
            self.direct.send(frame)
        else:
            self.sock.send(frame)

    def answer(self):
        return self.direct.answer() if self.direct else decode(zmq_answer(self.sock), answer=True)

    def close(self) -> None:
        if self.direct:
            self.direct.close()
        else:
            self.sock.close()


class Direct:
    """A raw connection to a direct link's endpoint (tcp://HOST:PORT or ipc://@NAME)."""

    def __init__(self, endpoint: str):
        if endpoint.startswith("ipc://@"):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect("\0" + endpoint[len("ipc://@"):])
        else:
            host, _, port = endpoint[len("tcp://"):].rpartition(":")
            self.sock = socket.create_connection((host, int(port)), timeout=ANSWER_WAIT_S)
        self.sock.settimeout(ANSWER_WAIT_S)

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(frames))

    def answer(self):
        """The next answer, decoded; None when the server closed the connection instead."""
        header = self._exactly(HEADER.size)
        if header is None:
            return None
        length = HEADER.unpack_from(header)[3]
        payload = self._exactly(length) if length else b""
        return decode(header + (payload or b""), answer=True)

    def closed_by_server(self) -> bool:
        """True once the server has closed its end (waits up to ANSWER_WAIT_S)."""
        deadline = time.monotonic() + ANSWER_WAIT_S
        while time.monotonic() < deadline:
            try:
                if self.sock.recv(4096) == b"":
                    return True
            except (ConnectionResetError, BrokenPipeError):
                return True
        return False

    def _exactly(self, n: int):
        data = b""
        while len(data) < n:
            try:
                chunk = self.sock.recv(n - len(data))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()
