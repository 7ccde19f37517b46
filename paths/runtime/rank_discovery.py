"""Who this process is in a run of many processes (ranks): its rank, the run's size, and what
started it, read from the environment its launcher gave it.

    paths launch   PATHS_RANK, PATHS_SIZE (and PATHS_NODE, PATHS_SERVERS: the node servers)
    mpirun         OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE (Open MPI; job PMIX_NAMESPACE)
    srun           SLURM_PROCID, SLURM_NTASKS, in a task of a step (job SLURM_JOB_ID.SLURM_STEP_ID)
    PMIx           PMIX_RANK, and the size from PMI_SIZE (job PMIX_NAMESPACE)
    PMI            PMI_RANK, PMI_SIZE (MPICH's and Intel MPI's launchers; job PMI_KVSNAME)

The first that is present wins, in this order. A launcher started inside a Slurm job passes the
job's variables on to its ranks: a batch script's SLURM_PROCID (0, with no SLURM_STEP_ID: the
script is no task of a step), or on other hosts that of the srun task it started there. So
mpirun's variables win over srun's, and srun's count only in a step. Nothing of these: a process
alone, rank 0 of 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

from ..model.placement import MAX_THREADS

# What `paths launch` gives each rank (paths/cli/launch.py), read by paths/runtime/process_context.py.
RANK, SIZE, NODE, SERVERS = "PATHS_RANK", "PATHS_SIZE", "PATHS_NODE", "PATHS_SERVERS"
# What a program's run is, in its environment (--paths-X options win): the map, its policy,
# the elements that are sums (comma-separated), the hooks.
MAP, POLICY, SUMS, ACQUIRE, RELEASE = "PATHS_MAP", "PATHS_POLICY", "PATHS_SUM", "PATHS_ACQUIRE", "PATHS_RELEASE"
# Where the node servers a program's ranks host (under srun, mpirun) write the trace files their
# paths ask for (as `paths serve --trace-dir`); not set: they write none.
TRACE_DIR = "PATHS_TRACE_DIR"


class RankError(ValueError):
    """The launcher's variables (or --paths-thread options) name no rank of a run: the message
    names the variable, its value and what was expected."""


@dataclass(frozen=True)
class Discovered:
    launcher: str  # "paths launch", "srun", "mpirun", "pmix", "pmi", or "" (none)
    rank: int
    size: int
    job: str = ""  # names the run, the same in every rank (for the rendezvous file)
    one_host: bool = False  # the launcher says every rank runs on this host

    def describe(self) -> str:
        return f"rank {self.rank} of {self.size}" + (f" ({self.launcher}{', job ' + self.job if self.job else ''})"
                                                      if self.launcher else "")


# launcher: (rank variable, size variables, job variables, local-size variable or a host-count one,
# the variable without which the rank variable is another process's)
_LAUNCHERS = (
    ("paths launch", RANK, (SIZE,), (), None, None),
    ("mpirun", "OMPI_COMM_WORLD_RANK", ("OMPI_COMM_WORLD_SIZE",), ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"),
     "OMPI_COMM_WORLD_LOCAL_SIZE", None),
    ("srun", "SLURM_PROCID", ("SLURM_NTASKS", "SLURM_NPROCS"), ("SLURM_JOB_ID", "SLURM_STEP_ID"), "SLURM_STEP_NUM_NODES",
     "SLURM_STEP_ID"),
    ("pmix", "PMIX_RANK", ("PMI_SIZE",), ("PMIX_NAMESPACE",), None, None),
    ("pmi", "PMI_RANK", ("PMI_SIZE",), ("PMI_KVSNAME",), "MPI_LOCALNRANKS", None),
)


def discover(environ: Optional[Mapping[str, str]] = None) -> Discovered:
    """This process's rank, from the first launcher whose variables are set; RankError naming
    the variable for a value that is not a rank or a size."""
    environ = os.environ if environ is None else environ
    for launcher, rank_name, size_names, job_names, hosts_name, within in _LAUNCHERS:
        if rank_name not in environ or (within and within not in environ):
            continue
        size_name = next((name for name in size_names if name in environ), None)
        if size_name is None:
            raise RankError(f"{launcher}: {rank_name} is set but not {' or '.join(size_names)}: "
                             "cannot tell how many ranks the run has")
        size = _whole(environ, size_name, 1, MAX_THREADS)
        rank = _whole(environ, rank_name, 0)
        if rank >= size:
            raise RankError(f"{launcher}: {rank_name}={rank}: expected a rank below {size_name}={size}")
        job = ".".join(environ[name] for name in job_names if name in environ)
        if launcher == "mpirun":  # PMIX_NAMESPACE, or else the job id: one of them names the job
            job = next((environ[name] for name in job_names if name in environ), "")
        one_host = hosts_name is not None and environ.get(hosts_name) == (
            "1" if hosts_name == "SLURM_STEP_NUM_NODES" else str(size))
        return Discovered(launcher, rank, size, job, one_host)
    return Discovered("", 0, 1, one_host=True)


def _whole(environ: Mapping[str, str], name: str, least: int, most: Optional[int] = None) -> int:
    text = environ[name]
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < least:
        raise RankError(f"{name}={text!r}: expected a whole number >= {least}")
    if most is not None and value > most:
        raise RankError(f"{name}={text!r}: expected at most {most} (the most threads a run places)")
    return value
