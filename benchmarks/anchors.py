"""The anchors every benchmark reports against, measured in the same run: an OpenMP reduction
and, where MPI is installed, an MPI_Allreduce, at the same thread counts.

Both are programs of their own, apart from the `paths` package (which links neither): the
OpenMP anchor (benchmarks/openmp/sum.c) is compiled once with `cc -fopenmp` into
build/openmp-anchor/. MPI is optional: `apt-get install openmpi-bin libopenmpi-dev` provides
mpicc and mpirun. The anchor program (benchmarks/mpi/allreduce.c) is compiled once into
build/mpi-anchor/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
OPENMP_SOURCE = HERE / "openmp" / "sum.c"
OPENMP_BUILD = HERE.parent / "build" / "openmp-anchor"
OPENMP_MAX_THREADS = 1024  # as benchmarks/openmp/sum.c: a larger team only measures its stacks
MPI_SOURCE = HERE / "mpi" / "allreduce.c"
MPI_BUILD = HERE.parent / "build" / "mpi-anchor"


def openmp_sum_us(threads: int, rounds: int, timeout: float = 120.0) -> float:
    """Median microseconds per OpenMP reduction of one value per thread."""
    if not 1 <= threads <= OPENMP_MAX_THREADS or rounds < 1:
        raise ValueError(f"the OpenMP anchor: expected 1 <= threads <= {OPENMP_MAX_THREADS} and rounds >= 1, "
                         f"got {threads} threads and {rounds} rounds")
    program = OPENMP_BUILD / "sum"
    if not program.exists() or program.stat().st_mtime < OPENMP_SOURCE.stat().st_mtime:
        OPENMP_BUILD.mkdir(parents=True, exist_ok=True)
        built = subprocess.run([os.environ.get("CC", "cc"), "-O2", "-fopenmp", str(OPENMP_SOURCE), "-o", str(program)],
                               capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"cannot build the OpenMP anchor (a C compiler with OpenMP: build-essential): "
                               f"{built.stderr.strip()[-400:]}")
    done = subprocess.run([str(program), str(threads), str(rounds)], capture_output=True, text=True, timeout=timeout)
    words = done.stdout.split()
    if done.returncode != 0 or words[:1] != ["median_us"]:
        raise RuntimeError(f"the OpenMP anchor failed (exit {done.returncode}): {done.stdout.strip()} "
                           f"{done.stderr.strip()[-400:]}")
    return float(words[1])


def mpi_available() -> bool:
    return shutil.which("mpicc") is not None and shutil.which("mpirun") is not None


def _mpi_program() -> Path:
    binary = MPI_BUILD / "allreduce"
    if not binary.exists() or binary.stat().st_mtime < MPI_SOURCE.stat().st_mtime:
        MPI_BUILD.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mpicc", "-O2", "-o", str(binary), str(MPI_SOURCE)], check=True,
                       capture_output=True, text=True)
    return binary


def mpi_allreduce_us(processes: int, rounds: int, timeout: float = 120.0, bind: bool = False) -> float | None:
    """Median microseconds per MPI_Allreduce of one int64 over `processes` ranks on this
    machine, or None when MPI is not installed. `bind` binds each rank to a core (several ranks
    to a core when there are more ranks than cores), as pinned PATHS threads are."""
    if not mpi_available():
        return None
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl="self,vader", OMPI_MCA_rmaps_base_oversubscribe="1")
    binding = ["--bind-to", "core:overload-allowed"] if bind else ["--bind-to", "none"]
    command = ["mpirun", "--oversubscribe", *binding, "-np", str(processes), str(_mpi_program()), str(rounds)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    for line in done.stdout.splitlines():
        if line.startswith("median_us"):
            fields = line.split()
            if done.returncode != 0 or fields[3] != "0":
                raise RuntimeError(f"the MPI anchor computed wrong totals: {line}")
            return float(fields[1])
    raise RuntimeError(f"the MPI anchor failed (exit {done.returncode}): {done.stderr.strip()[-400:]}")
