"""Ping-pong between two ranks: the round-trip latency of a tuple through the map's paths.

    paths launch --map local --threads 2 -- python examples/ping_pong.py
    paths launch --map paper-4w --threads 2 --policy cyclic -- python examples/ping_pong.py --rounds 2000

Rank 0 moves a ball into element `ping@1`, which lives on rank 1's node (a name `NAME@T` is
homed with thread T); rank 1 observes it there and moves it back into `pong@0`, on rank 0's
node. Each side thus observes where it runs and moves across. Rank 0 prints the median and the
best round trip.
"""

import argparse
import statistics
import sys
import time

import paths

TIMEOUT = 60.0  # seconds any one wait may take


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1000, help="round trips (default 1000)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds: expected at least 1, got {args.rounds}")
    info = paths.runtime_info()
    if info.size != 2:
        print(f"ping_pong: expected 2 ranks, got {info.size} (paths launch --threads 2)", file=sys.stderr)
        return 2
    ping, pong = paths.acquire("ping@1", "qd"), paths.acquire("pong@0", "qd")
    if info.rank == 1:
        for _ in range(args.rounds):
            ping_ball = ping.observe(timeout=TIMEOUT)
            pong.move(ping_ball)
        return 0
    trips = []
    for round_ in range(args.rounds):
        start = time.perf_counter()
        ping.move((round_, start))
        ball = pong.observe(timeout=TIMEOUT)
        trips.append(time.perf_counter() - start)
        assert ball == (round_, start), f"round {round_}: got {ball} back"
    print(f"ping-pong: {args.rounds} round trips between rank 0 on {info.node} and rank 1: "
          f"median {statistics.median(trips) * 1e6:.1f} us, best {min(trips) * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
