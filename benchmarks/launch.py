"""`paths launch` against `mpirun`: `python -m benchmarks.launch`.

Start-up: the wall time of a whole run of N ranks that do nothing (`true`), `paths launch` on
this machine's map against Open MPI's `mpirun -np N` (the anchor), and of N Python ranks that
sum their ranks through the map (paper-4w, cyclic: one node each), under `paths launch` and
under `mpirun` with rank discovery and the rendezvous through rank 0.

Reaping: six ranks sleep on two emulated nodes; the launcher gets SIGINT, or SIGKILL, or one
rank fails; the time until no process of the run is left, launcher, node or rank (each carries
the run's mark in its environment): PASS when every run is within the issue's bound, 2 s.

A run that cannot be measured (a launcher that fails, ends before its ranks are up, or whose
ranks print nothing or never end, in time; no mpirun) ends the benchmark with one line, exit 1;
bad arguments exit 2.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import statistics
import subprocess
import sys
import time

from paths.experiments.parent_death import dies_with_me, processes

from .core_ops import positive_int

PATHS = [sys.executable, "-m", "paths", "launch"]
SLEEPER = "import os, sys, time; print('up', flush=True); failing = os.environ['PATHS_RANK'] == sys.argv[1]; " \
          "time.sleep(0.3 if failing else 120); print('failing', flush=True); sys.exit(7)"
SUM = "import paths; i = paths.runtime_info(); h = paths.acquire('TOTAL', 'q'); h.move((i.rank + 1,)); " \
      "assert h.observe(timeout=60)[0] == i.size * (i.size + 1) // 2"
MARK = "PATHS_BENCHMARK_RUN"  # in the environment of every process of a reaped run
REAP_BOUND_S = 2.0  # the bound on reaping
RUN_SECONDS = 300  # the longest a whole run, or a launcher's end after it was told to end, may take
UP_SECONDS = 60    # the longest a launcher may print no line while its ranks start, and until one fails
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}


class LaunchFailed(RuntimeError):
    """A run that could not be measured; the message says which and why."""


def median_seconds(what: str, argv: list[str], runs: int, env: dict | None = None) -> float:
    times = []
    for _ in range(runs):
        begin = time.monotonic()
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_SECONDS,
                                  env={**os.environ, **(env or {})})
        except OSError as e:
            raise LaunchFailed(f"cannot run {what}: {e.strerror}") from None
        except subprocess.TimeoutExpired:
            raise LaunchFailed(f"{what} did not end within {RUN_SECONDS:g} s") from None
        if done.returncode != 0:
            raise LaunchFailed(f"{what} failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-300:]}")
        times.append(time.monotonic() - begin)
    return statistics.median(times)


def left(marker: str) -> list[int]:
    """Live processes (not zombies) of the run: those whose environment holds its marker, which
    the launcher passes on to its nodes and they to their ranks."""
    found = []
    for pid, state, _ in processes():
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if state != "Z" and f"{MARK}={marker}".encode() in environ.read().split(b"\0"):
                    found.append(pid)
        except OSError:  # gone meanwhile
            continue
    return found


def reaping_seconds(how: str) -> float:
    """From SIGINT or SIGKILL to the launcher, or from a rank's failure, until nothing of the run
    (launcher, nodes, ranks) is left."""
    marker = f"benchmark-{os.getpid()}-{time.monotonic_ns()}"
    failing = "4" if how == "a rank fails" else "-1"
    run = subprocess.Popen([*PATHS, "--map", "paper-4w", "--threads", "6", "--", sys.executable, "-c", SLEEPER,
                            failing], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           start_new_session=True, env={**os.environ, MARK: marker},
                           preexec_fn=dies_with_me(signal.SIGTERM))
    lines = LauncherLines(run)
    try:
        for _ in range(6):
            lines.next()
        if how == "a rank fails":
            while not lines.next().endswith("failing"):
                pass
            begin = time.monotonic()
        else:
            begin = time.monotonic()
            os.kill(run.pid, signal.SIGINT if how == "SIGINT" else signal.SIGKILL)
        while left(marker) and time.monotonic() - begin < 10:
            time.sleep(0.002)
        took = time.monotonic() - begin
        try:
            run.wait(timeout=RUN_SECONDS)
        except subprocess.TimeoutExpired:
            raise LaunchFailed(f"paths launch did not end within {RUN_SECONDS:g} s of {how}") from None
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        run.stdout.close()
    return took


class LauncherLines:
    """The lines a launcher prints, each awaited for at most UP_SECONDS."""

    def __init__(self, run: subprocess.Popen):
        self.run, self.pending = run, b""

    def next(self) -> str:
        """The next line, without its end; LaunchFailed when the launcher ended first or printed
        nothing in time."""
        while b"\n" not in self.pending:
            if not select.select([self.run.stdout], [], [], UP_SECONDS)[0]:
                raise LaunchFailed(f"paths launch printed no line for {UP_SECONDS:g} s: its 6 ranks were not up, "
                                   "or none failed, in time")
            chunk = os.read(self.run.stdout.fileno(), 1 << 16)
            if not chunk:
                raise LaunchFailed(f"paths launch ended (exit {self.run.wait(RUN_SECONDS)}) before its 6 ranks were "
                                   "up and one failed")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode(errors="replace")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.launch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=positive_int, default=4, help="ranks of the start-up runs (default 4)")
    parser.add_argument("--runs", type=positive_int, default=5, help="runs of each measurement (default 5)")
    args = parser.parse_args(argv)
    try:
        report(args)
    except (LaunchFailed, subprocess.TimeoutExpired) as e:  # the latter: a ps, or a launcher past its end
        print(f"benchmarks.launch: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # its runs' launchers were told too: each stops its own
        print("benchmarks.launch: interrupted", file=sys.stderr)
        return 130
    return 0


def report(args: argparse.Namespace) -> None:
    n, runs = str(args.ranks), args.runs
    on_map = {"PATHS_MAP": "paper-4w", "PATHS_POLICY": "cyclic", "PATHS_SUM": "TOTAL"}
    empty = median_seconds("paths launch", [*PATHS, "--threads", n, "--", "true"], runs)
    empty_mpi = median_seconds("mpirun", ["mpirun", "-np", n, "true"], runs, MPI_ENV)
    summed = median_seconds("paths launch", [*PATHS, "--map", "paper-4w", "--policy", "cyclic", "--sum", "TOTAL",
                                             "--threads", n, "--", sys.executable, "-c", SUM], runs)
    summed_mpi = median_seconds("mpirun", ["mpirun", "-np", n, sys.executable, "-c", SUM], runs, {**MPI_ENV, **on_map})
    print(f"start-up of {n} ranks, median of {runs} runs:")
    print(f"  true:                   paths launch {empty * 1e3:7.0f} ms   mpirun {empty_mpi * 1e3:5.0f} ms   "
          f"({empty / empty_mpi:.1f}x)")
    print(f"  Python ranks that sum:  paths launch {summed * 1e3:7.0f} ms   mpirun + rendezvous "
          f"{summed_mpi * 1e3:5.0f} ms   ({summed / summed_mpi:.1f}x)")
    print(f"reaping of 6 ranks on 2 nodes, until no process of the run is left, {runs} runs "
          f"(PASS: every run within {REAP_BOUND_S * 1e3:.0f} ms):")
    for how in ("SIGINT", "SIGKILL", "a rank fails"):
        times = [reaping_seconds(how) for _ in range(runs)]
        verdict = "PASS" if max(times) <= REAP_BOUND_S else "MISS"
        print(f"  {verdict}  {how:<13} median {statistics.median(times) * 1e3:5.0f} ms, max {max(times) * 1e3:5.0f} ms")


if __name__ == "__main__":
    sys.exit(main())
