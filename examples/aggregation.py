"""ARMI's aggregation and Aurora's bulk-loaded read cache, as two stages on a path to a server.

This script starts `paths serve` as a separate process. A writer moves 10,000 tuples to an
element on it, once move by move and once through `batch` (256 moves a message), ending its
write scope with `paths.fence`. A reader then reads the log back by index through a `cache`
that loads the whole history in one request when it is built (`prefetch="all"`). It prints the
times and the stages' counters, checks every tuple, and stops the server.
"""

import subprocess
import sys
import time

import paths
from paths import build_path, make_path, stage

MOVES = 10_000

server = subprocess.Popen([sys.executable, "-m", "paths", "serve", "--bind", "tcp://127.0.0.1:*"],
                          stdout=subprocess.PIPE, text=True)
try:
    endpoint = server.stdout.readline().split()[1]  # "READY tcp://127.0.0.1:PORT"
    print(f"server at {endpoint}")

    def to_server(name: str) -> list:
        return [stage("remote", host=endpoint), stage("core", name=name, format="qd")]

    seconds = {}
    for name, above in (("PLAIN", []), ("BATCHED", [stage("batch", max_moves=256)])):
        writer = build_path(make_path(*above, *to_server(name)))
        begin = time.perf_counter()
        for i in range(MOVES):
            writer.move((i, i * 0.5))
        paths.fence(writer)  # the end of the write scope: every move applied at the element
        seconds[name] = time.perf_counter() - begin
        if above:
            counters = writer.stage.counters()
            print(f"batch: {counters['moves_sent']} moves in {counters['sends']} messages")
    print(f"{MOVES} moves then a fence: {seconds['PLAIN'] * 1e3:.1f} ms move by move, "
          f"{seconds['BATCHED'] * 1e3:.1f} ms through batch ({seconds['PLAIN'] / seconds['BATCHED']:.0f}x faster)")

    reader = build_path(make_path(stage("cache", capacity=MOVES, prefetch="all"), *to_server("BATCHED")))
    assert [reader.observe(i) for i in range(MOVES)] == [(i, i * 0.5) for i in range(MOVES)]
    counters = reader.stage.counters()
    print(f"cache: {counters['fetched']} tuples fetched in {counters['ranges']} request(s), "
          f"{counters['hits']} reads served here, {counters['misses']} went to the server")
    print(f"every one of the {MOVES} tuples read back right")
    del writer, reader
finally:
    server.terminate()
    server.wait()
