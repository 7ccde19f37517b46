"""A program the launch tests run as ranks (under paths launch, srun or mpirun).

    rank_app.py sum                 says what it found, adds rank+1 into the sum TOTAL, prints
                                    `rank R of N on NODE by LAUNCHER total T rendezvous X`
    rank_app.py fail R [CODE [exit]] as sum, but rank R fails once it found the others (and so
                                    never adds its part): it raises `RuntimeError: rank R fails`,
                                    or calls sys.exit(CODE) (a number, else a message), or the
                                    builtin exit(CODE) when `exit` follows
    rank_app.py env                 prints its PATHS_* variables, one `NAME=value` a line
    rank_app.py sleep [R STATUS]    prints `up PID`, then sleeps (rank R exits with STATUS once
                                    every rank is up: it prints `failing` first, on stderr)
    rank_app.py lines N             prints N numbered lines, half of them on stderr
    rank_app.py long MIB            rank 0 prints one line of MIB MiB of 'x', then `end`; with
                                    ranks besides, halfway it makes the file `half` (in its
                                    working folder) and waits for `done`, which rank 1 makes
                                    once it has printed `short I` for I = 0..19 after `half`

Every line is flushed: the tests read them as they come.
"""

import os
import sys
import time

import paths


def main(what: str, *args: str) -> int:
    if what in ("sum", "fail"):
        info = paths.runtime_info()
        if what == "fail" and info.rank == int(args[0]) and len(args) > 1:
            (exit if args[2:] == ("exit",) else sys.exit)(int(args[1]) if args[1].isdigit() else args[1])
        if what == "fail" and info.rank == int(args[0]):
            raise RuntimeError(f"rank {info.rank} fails")
        total = paths.acquire("TOTAL", "q")
        total.move((info.rank + 1,))
        print(f"rank {info.rank} of {info.size} on {info.node} by {info.launcher} total "
              f"{total.observe(timeout=60)[0]} rendezvous {info.rendezvous}", flush=True)
        return 0
    if what == "env":
        for name in sorted(os.environ):
            if name.startswith("PATHS_") and name != "PATHS_TEST_PROBE":
                print(f"{name}={os.environ[name]}", flush=True)
        return 0
    if what == "sleep":
        print(f"up {os.getpid()}", flush=True)
        if args and int(os.environ["PATHS_RANK"]) == int(args[0]):
            time.sleep(0.5)
            print("failing", file=sys.stderr, flush=True)
            return int(args[1])
        time.sleep(120)
        return 0
    if what == "lines":
        for i in range(int(args[0])):
            print(f"line {i}", file=sys.stderr if i % 2 else sys.stdout, flush=True)
        return 0
    if what == "long":
        half, together = b"x" * (int(args[0]) << 19), int(os.environ["PATHS_SIZE"]) > 1
        if int(os.environ["PATHS_RANK"]) == 0:
            os.write(1, half)  # returns once all but a pipe's worth is read
            if together:
                open("half", "w").close()
                wait_for("done")
            os.write(1, half + b"\nend\n")
        elif int(os.environ["PATHS_RANK"]) == 1:
            wait_for("half")
            for i in range(20):
                print(f"short {i}", flush=True)
            open("done", "w").close()
        return 0
    raise SystemExit(f"rank_app.py: unknown action {what!r}")


def wait_for(name: str) -> None:
    deadline = time.monotonic() + 60
    while not os.path.exists(name):
        if time.monotonic() > deadline:
            raise SystemExit(f"rank_app.py: no file {name!r} within 60 s")
        time.sleep(0.01)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
