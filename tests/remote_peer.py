"""The programs the remote tests run as separate processes (a server, clients, workers).

    remote_peer.py serve [--curve-secret FILE]   a PathServer on a free loopback port; prints
                                                 READY <endpoint>; answers each `counters` line
                                                 on stdin with COUNTERS <json>; stops at EOF
    remote_peer.py figure1 ENDPOINT PROTO ROUNDS the paper's Figure 1 client: 2 C threads,
                                                 reduce-sum(2) -> remote -> reduce-sum(2) -> F;
                                                 GSum with 4 contributors (a wrong total
                                                 fails it); prints DONE <json>
    remote_peer.py worker ENDPOINT PROTO ELEMENT takes jobs (next-observe) until a -1 arrives;
                                                 prints READY, then TOOK <json list>
    remote_peer.py observe ENDPOINT PROTO ELEMENT TIMEOUT_MS
                                                 prints OBSERVING, then blocks in observe();
                                                 prints the exception's type and message

    remote_peer.py interrupted ENDPOINT PROTO CALL
                                                 remote (timeout_ms 60 s) -> an element of 'q':
                                                 prints READY, on `go` on stdin prints CALLING and
                                                 makes CALL (observe, move, move_many, last; fence:
                                                 of 10 moves a batch above the remote holds back);
                                                 prints RAISED and the exception's type
    remote_peer.py batcher ENDPOINT PROTO ELEMENT ID MOVES MAX_MOVES FLUSH_US BUFFERS
                                                 moves (ID, 0) .. (ID, MOVES-1) into ELEMENT ("qq")
                                                 through batch -> remote, asking last() every 97
                                                 moves, then fences; prints DONE <last>
    remote_peer.py contributor ENDPOINT ELEMENT MOVES
                                                 batch -> remote -> reduce-sum(2) -> ELEMENT: moves
                                                 1 .. MOVES (held back), prints MOVED; on `fence`
                                                 on stdin fences, prints FENCED, then observes
                                                 each round's total: TOTALS <json list>
    remote_peer.py member GROUP RANK ROUNDS      an allreduce member with a server of its own:
                                                 prints READY <endpoint>, reads the members'
                                                 endpoints (a comma-separated line), moves RANK + 1
                                                 per round for ROUNDS rounds (its element on the
                                                 first member), prints TOTALS <json list>, then
                                                 ends at once, with no release, on `die`

PROTO is the remote stage's transport (tcp, ipc, zmq, inproc).

Every line is flushed: the tests wait for them.
"""

from __future__ import annotations

import json
import os
import sys

import paths
from paths import build_path, make_path, stage
from paths.runtime.server import PathServer, read_key_file

ROUNDS_TIMEOUT_S = 30.0  # the longest one GSum operation may wait (the other process starts)


def say(*words) -> None:
    print(*words, flush=True)


def serve(argv: list[str]) -> int:
    secret = read_key_file(argv[1], "CURVE secret key") if argv[:1] == ["--curve-secret"] else ""
    server = PathServer("tcp://127.0.0.1:*", secret).start()
    try:
        say("READY", server.endpoint)
        for line in sys.stdin:
            if line.strip() == "counters":
                say("COUNTERS", json.dumps({**server.native.counters(), "build_errors": server.build_errors}))
    finally:
        server.close()
    return 0


def figure1(endpoint: str, proto: str, rounds: str) -> int:
    path = make_path(stage("reduce-sum", num_threads=2), stage("remote", host=endpoint, proto=proto, timeout_ms=5000),
                     stage("reduce-sum", num_threads=2), stage("core", name="F", format="q"))
    handles = [build_path(path) for _ in range(2)]
    say("BUILT")
    result = paths.bench.gsum(handles, int(rounds), contributors=4, timeout=ROUNDS_TIMEOUT_S)
    say("DONE", json.dumps({"rounds": len(result.latencies), "median_us": result.median_us}))
    return 0


def worker(endpoint: str, proto: str, element: str) -> int:
    jobs = build_path(make_path(stage("remote", host=endpoint, proto=proto, timeout_ms=5000),
                                stage("core", name=element, format="q")))
    say("READY")
    took = []
    while (job := jobs.observe(timeout=ROUNDS_TIMEOUT_S)[0]) != -1:
        took.append(job)
    say("TOOK", json.dumps(took))
    return 0


def observe(endpoint: str, proto: str, element: str, timeout_ms: str) -> int:
    handle = build_path(make_path(stage("remote", host=endpoint, proto=proto, timeout_ms=int(timeout_ms)),
                                  stage("core", name=element, format="q")))
    say("OBSERVING")
    try:
        handle.observe()
    except Exception as e:
        say("RAISED", type(e).__name__, str(e))
        return 1
    say("RAISED nothing")
    return 0


UNREAD_TUPLES = 4_000_000  # 32 MiB, pipelined 16 MiB ahead: more than the sockets' buffers hold, so a send waits


def interrupted(endpoint: str, proto: str, call: str) -> int:
    remote = stage("remote", host=endpoint, proto=proto, timeout_ms=60_000)
    plain = build_path(make_path(remote, stage("core", name="INTERRUPTED", format="q")))
    batched = build_path(make_path(stage("batch", max_moves=1000), remote, stage("core", name="INTERRUPTED", format="q")))
    pipelined = build_path(make_path(stage("remote", host=endpoint, proto=proto, timeout_ms=60_000, window=1024),
                                     stage("core", name="INTERRUPTED", format="q")))
    unread = [(i,) for i in range(UNREAD_TUPLES)] if call == "move_many_unread" else []
    calls = {"observe": lambda: plain.observe(0), "move": lambda: plain.move(1),
             "move_many": lambda: plain.move_many([(i,) for i in range(5000)]), "last": plain.last,
             "move_many_unread": lambda: pipelined.move_many(unread),
             "fence": lambda: [batched.move(i) for i in range(10)] and paths.fence(batched)}
    say("READY")
    if sys.stdin.readline().strip() == "go":
        say("CALLING")
        try:
            calls[call]()
        except BaseException as e:  # noqa: BLE001 - the test reads which
            say("RAISED", type(e).__name__)
            return 1
    return 0


def batcher(endpoint: str, proto: str, element: str, ident: str, moves: str, max_moves: str, flush_us: str,
            buffers: str) -> int:
    handle = build_path(make_path(stage("batch", max_moves=int(max_moves), flush_us=int(flush_us),
                                        buffers=int(buffers)),
                                  stage("remote", host=endpoint, proto=proto, timeout_ms=5000),
                                  stage("core", name=element, format="qq")))
    for seq in range(int(moves)):
        handle.move((int(ident), seq))
        if seq % 97 == 96:
            handle.last()  # another operation: what is held back goes first
    paths.fence([handle], timeout=ROUNDS_TIMEOUT_S)
    say("DONE", handle.last())
    return 0


def contributor(endpoint: str, element: str, moves: str) -> int:
    handle = build_path(make_path(stage("batch", max_moves=64), stage("remote", host=endpoint, timeout_ms=5000),
                                  stage("reduce-sum", num_threads=2), stage("core", name=element, format="q")))
    for value in range(1, int(moves) + 1):
        handle.move(value)
    say("MOVED")
    if sys.stdin.readline().strip() == "fence":
        paths.fence(handle, timeout=ROUNDS_TIMEOUT_S)
        say("FENCED")
        say("TOTALS", json.dumps([handle.observe(timeout=ROUNDS_TIMEOUT_S)[0] for _ in range(int(moves))]))
    return 0


def member(group: str, rank: str, rounds: str) -> int:
    server = PathServer("tcp://127.0.0.1:*").start()
    say("READY", server.endpoint)
    nodes = sys.stdin.readline().strip()
    path = make_path(stage("allreduce", group=group, nodes=nodes, rank=int(rank)),
                     stage("remote", host=nodes.split(",")[0]), stage("core", name=group, format="q"))
    handle = build_path(path, context=server.context)
    totals = []
    for _ in range(int(rounds)):
        handle.move((int(rank) + 1,), timeout=ROUNDS_TIMEOUT_S)
        totals.append(handle.observe(timeout=ROUNDS_TIMEOUT_S)[0])
    say("TOTALS", json.dumps(totals))
    if sys.stdin.readline().strip() == "die":
        os._exit(0)  # the process goes as a crash would: its connections close, nothing is released
    return 0


PROGRAMS = {"serve": serve, "figure1": figure1, "worker": worker, "observe": observe, "interrupted": interrupted,
            "batcher": batcher,
            "contributor": contributor, "member": member}

if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    if command == "serve":
        sys.exit(serve(arguments))
    sys.exit(PROGRAMS[command](*arguments))
