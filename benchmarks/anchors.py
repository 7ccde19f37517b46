"""The anchors every benchmark reports against, measured in the same run: an OpenMP reduction,
an MPI_Allreduce (over shared memory on one machine, or over TCP as between nodes), and the raw
round trips a remote stage is held to: a C ping-pong over a loopback TCP socket and a raw
ZeroMQ round trip, each between two processes.

Every anchor is a program of its own, apart from the `paths` package (which links none of them):
benchmarks/openmp/, benchmarks/mpi/, benchmarks/tcp_anchor/, benchmarks/zmq_anchor/, compiled on
first use into build/anchors/ with cc (-fopenmp; pkg-config's libzmq flags) or mpicc. MPI is
optional: `apt-get install openmpi-bin libopenmpi-dev` provides mpicc and mpirun.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .child_process import ReadyChild

HERE = Path(__file__).resolve().parent
BUILD = HERE.parent / "build" / "anchors"
OPENMP_SOURCE = HERE / "openmp" / "sum.c"
OPENMP_BUILD = BUILD  # where the OpenMP anchor's program `sum` is
OPENMP_MAX_THREADS = 1024  # as benchmarks/openmp/sum.c: a larger team only measures its stacks
OPENMP_WAIT_POLICIES = ("active", "passive")
TCP_SOURCE = HERE / "tcp_anchor" / "ping_pong.c"
ZMQ_SOURCE = HERE / "zmq_anchor" / "round_trip.c"
MPI_SOURCE = HERE / "mpi" / "allreduce.c"
FRAME_BYTES = 48  # a remote stage's frame for a "q" tuple: 40-byte header + 8 bytes
RUN_TIMEOUT_S = 300


class AnchorUnavailable(RuntimeError):
    """An anchor that cannot be built or run here; the message says why."""


def openmp_sum_us(threads: int, rounds: int, timeout: float = 120.0, *, wait: str = "active",
                  pin: bool = False) -> float:
    """Median microseconds per OpenMP reduction of one value per thread, its threads waiting as
    OMP_WAIT_POLICY=`wait` says ("active": spinning, "passive": asleep, which is faster with more
    threads than CPUs). `pin` places thread t of n on CPU t*cpus/n of this process's, as PATHS
    pins its threads (OMP_PLACES, OMP_PROC_BIND=close); else the scheduler places them."""
    if not 1 <= threads <= OPENMP_MAX_THREADS or rounds < 1:
        raise ValueError(f"the OpenMP anchor: expected 1 <= threads <= {OPENMP_MAX_THREADS} and rounds >= 1, "
                         f"got {threads} threads and {rounds} rounds")
    if wait not in OPENMP_WAIT_POLICIES:
        raise ValueError(f"the OpenMP anchor: wait must be one of {', '.join(OPENMP_WAIT_POLICIES)}, got {wait!r}")
    program = _program(OPENMP_SOURCE, [*_c_compiler(), "-fopenmp"])
    env = dict(os.environ, OMP_WAIT_POLICY=wait, OMP_PROC_BIND="false")
    if pin:
        cpus = sorted(os.sched_getaffinity(0))
        env.update(OMP_PROC_BIND="close",
                   OMP_PLACES=",".join(f"{{{cpus[t * len(cpus) // threads]}}}" for t in range(threads)))
    done = subprocess.run([str(program), str(threads), str(rounds)], capture_output=True, text=True, timeout=timeout,
                          env=env)
    return _median_us(done, f"the OpenMP anchor (OMP_WAIT_POLICY={wait})")


def _program(source: Path, compiler: list[str], flags: list[str] = ()) -> Path:
    """The anchor program built from `source`, compiled when missing or older than its source (or
    than latencies.h, which every anchor includes)."""
    binary = BUILD / source.stem
    newest = max(source.stat().st_mtime, (HERE / "latencies.h").stat().st_mtime)
    if binary.exists() and binary.stat().st_mtime >= newest:
        return binary
    BUILD.mkdir(parents=True, exist_ok=True)
    try:
        built = subprocess.run([*compiler, "-O2", f"-I{HERE}", "-o", str(binary), str(source), *flags],
                               capture_output=True, text=True)
    except OSError as e:
        raise AnchorUnavailable(f"cannot run {compiler[0]}: {e.strerror}") from None
    if built.returncode != 0:
        raise AnchorUnavailable(f"cannot build {source.name}: {built.stderr.strip()[-300:]}")
    return binary


def _c_compiler() -> list[str]:
    compiler = os.environ.get("CC") or shutil.which("cc")
    if not compiler:
        raise AnchorUnavailable("no C compiler (set CC, or install build-essential)")
    return [compiler]


def _libzmq_flags() -> list[str]:
    found = shutil.which("pkg-config") and subprocess.run(["pkg-config", "--cflags", "--libs", "libzmq"],
                                                          capture_output=True, text=True)
    if not found or found.returncode != 0:
        raise AnchorUnavailable("pkg-config finds no libzmq")
    return found.stdout.split()


def _median_us(done: subprocess.CompletedProcess, what: str) -> float:
    """The median a client or rank 0 printed as 'median_us <value> ...'."""
    for line in done.stdout.splitlines():
        fields = line.split()
        if fields[:1] == ["median_us"] and done.returncode == 0:
            return float(fields[1])
    raise RuntimeError(f"{what} failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-400:]}")


def _round_trip_us(program: Path, what: str, rounds: int, bytes_: int, mode: tuple[str, ...] = ()) -> float:
    """Median microseconds per round trip: the program's echo end in one process, its client
    in another (both given the words of `mode`)."""
    with ReadyChild([str(program), "echo", *mode], f"{what} echo") as echo:
        endpoint = echo.ready()
        done = subprocess.run([str(program), "client", endpoint, str(rounds), str(bytes_), *mode],
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        echo.process.wait(timeout=10)
    return _median_us(done, f"the {what} client")


def tcp_ping_pong_us(rounds: int, bytes_: int = FRAME_BYTES, poll: bool = False) -> float:
    """Median microseconds per C ping-pong of `bytes_` over loopback TCP between two processes,
    with reads that block in the kernel, or with `poll` reads that spin (no wake-up): the faster
    of the two is the physical limit of a round trip here (which one depends on the machine: an
    idle virtual CPU may take tens of microseconds to wake)."""
    return _round_trip_us(_program(TCP_SOURCE, _c_compiler()), "TCP ping-pong", rounds, bytes_,
                          ("poll",) if poll else ())


def zmq_round_trip_us(rounds: int, bytes_: int = FRAME_BYTES) -> float:
    """Median microseconds per raw ZeroMQ round trip (DEALER to a ROUTER echo) over loopback TCP
    between two processes."""
    program = _program(ZMQ_SOURCE, _c_compiler(), _libzmq_flags())
    return _round_trip_us(program, "ZeroMQ round trip", rounds, bytes_)


def mpi_available() -> bool:
    """mpicc, MPI's headers and mpirun are here (Debian's openmpi-bin alone brings mpicc without
    mpi.h, which libopenmpi-dev holds)."""
    if shutil.which("mpicc") is None or shutil.which("mpirun") is None:
        return False
    try:
        found = subprocess.run(["mpicc", "-E", "-x", "c", "-o", os.devnull, "-"], input="#include <mpi.h>\n",
                               capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return found.returncode == 0


def mpi_allreduce_us(processes: int, rounds: int, timeout: float = 120.0, bind: bool = False, *,
                     transport: str = "shared", threads: int = 1, cpus: list[list[int]] | None = None
                     ) -> float | None:
    """Median microseconds per MPI_Allreduce of one int64 over `processes` ranks on this machine,
    or None when MPI is not installed. `transport`: "shared" (Open MPI's shared memory, btl
    vader, as on one node) or "tcp" (btl tcp over loopback, as between nodes), both through
    the ob1 pml. `threads` > 1
    makes every rank a hybrid MPI + OpenMP process of that many contributing threads. `cpus`
    gives each rank its CPUs (rank k runs on cpus[k], its threads pinned within them, as PATHS
    pins a node's threads); else `bind` binds each rank to a core (several ranks to a core when
    there are more ranks than cores)."""
    if not mpi_available():
        return None
    if transport not in ("shared", "tcp"):
        raise ValueError(f"mpi_allreduce_us: transport must be 'shared' or 'tcp', got {transport!r}")
    if cpus is not None and len(cpus) != processes:
        raise ValueError(f"mpi_allreduce_us: {processes} ranks need {processes} CPU lists, got {len(cpus)}")
    program = str(_program(MPI_SOURCE, ["mpicc", "-fopenmp"]))
    # ob1 is the messaging layer that sends through the btl named here: left to choose, Open MPI
    # may take one of its own (UCX, or cm over libfabric), which ignores the btl list.
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false",
               OMPI_MCA_pml="ob1")
    if transport == "tcp":
        env.update(OMPI_MCA_btl="tcp,self", OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo")
    else:
        env.update(OMPI_MCA_btl="self,vader")
    arguments = [program, str(rounds), str(threads)]
    if cpus is not None:
        # Each rank starts on its own CPUs (taskset), so that its threads and its OpenMP runtime
        # see only those from the start.
        ranks = []
        for share in cpus:
            ranks += [":", "-np", "1", "taskset", "-c", ",".join(map(str, share)), *arguments]
        command = ["mpirun", "--oversubscribe", "--bind-to", "none", *ranks[1:]]
    else:
        binding = ["--bind-to", "core:overload-allowed"] if bind else ["--bind-to", "none"]
        command = ["mpirun", "--oversubscribe", *binding, "-np", str(processes), *arguments]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    # The program exits 1 when a total was wrong, which _median_us reports with its output.
    return _median_us(done, f"the MPI anchor ({processes} ranks x {threads} threads, {transport})")
