"""A real (single-node) Slurm: `paths run` inside `salloc`, a program started by `srun` that finds
its rank and the other ranks by itself, a `paths sbatch` script, and `paths launch` inside an
allocation. The Slurm is the session's (tests/slurm_cluster.py, the `slurm` fixture); skipped
only when it cannot be installed."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_launch import REAPED_WITHIN, gone_within, processes_with

APP = str(Path(__file__).resolve().parent / "rank_app.py")
PATHS = [sys.executable, "-m", "paths"]

# The allocation's one host is the map's one node; its server on loopback (the tests reach no
# other address).
ALLOCATION_MAP = """\
name: allocation
clusters:
  here:
    nodes: a0
    cpus: 2
    address: "tcp://127.0.0.1:*"
root: a0
launch:
  mode: slurm
"""


@pytest.fixture
def allocation_map(tmp_path):
    path = tmp_path / "allocation.yaml"
    path.write_text(ALLOCATION_MAP)
    return str(path)


def run(argv: list[str], slurm: dict, cwd, **extra) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=cwd,
                          env={**os.environ, **slurm, **extra})


def test_paths_run_inside_salloc(slurm, allocation_map, tmp_path):
    done = run(["salloc", "-N1", "-n2", *PATHS, "run", "gsum", "--map", allocation_map, "--threads", "1,2",
                "--repeat", "2", "--rounds", "200"], slurm, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("GSum on map allocation (policy block, max fan-in 4), 200 rounds x 2 runs: "
                        "microseconds per global sum (median round per run)")
    assert [line.split()[:2] for line in lines[2:]] == [["1", "1"], ["2", "1"]]
    assert re.search(r"salloc: Granted job allocation \d+", done.stderr)


@pytest.mark.parametrize("policy, nodes", [("block", ["n0"] * 4), ("cyclic", ["n0", "n1", "n2", "n3"])])
def test_srun_ranks_find_each_other_and_sum(slurm, tmp_path, policy, nodes):
    done = run(["srun", "-n", "4", sys.executable, APP, "sum"], slurm, tmp_path, PATHS_MAP="paper-4w",
               PATHS_POLICY=policy, PATHS_SUM="TOTAL")
    assert done.returncode == 0, done.stderr
    found = re.findall(r"^rank (\d) of 4 on (n\d) by srun total (\d+) rendezvous rank 0 at tcp://127\.0\.0\.1:\d+$",
                       done.stdout, re.MULTILINE)
    assert sorted(found) == [(str(rank), nodes[rank], "10") for rank in range(4)], done.stdout
    assert list(tmp_path.iterdir()) == []  # the rendezvous file is gone


def test_mpirun_ranks_inside_a_batch_job_find_each_other(slurm, openmpi, tmp_path):
    """A batch script's SLURM_PROCID (0) reaches every rank mpirun starts from it: their own
    rank is Open MPI's."""
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\nexec mpirun -np 2 {sys.executable} {APP} sum\n")
    out = tmp_path / "job.out"
    done = run(["sbatch", "--wait", "-n2", "-o", str(out), str(script)], slurm, tmp_path, **openmpi,
               PATHS_MAP="paper-2w", PATHS_POLICY="cyclic", PATHS_SUM="TOTAL", PATHS_RENDEZVOUS_TIMEOUT="20")
    assert done.returncode == 0, out.read_text()
    found = re.findall(r"rank (\d) of 2 on (n\d) by mpirun total (\d+)", out.read_text())
    assert sorted(found) == [("0", "n0", "3"), ("1", "n1", "3")], out.read_text()


def test_a_paths_sbatch_script_runs_the_ranks_with_its_sum(slurm, allocation_map, tmp_path):
    """The script alone gives the ranks their map and sum: none comes from the caller's environment."""
    done = run([*PATHS, "sbatch", "--map", allocation_map, "--threads", "2", "--sum", "TOTAL", "--", sys.executable,
                APP, "sum"], slurm, tmp_path)
    assert done.returncode == 0, done.stderr
    script, out = tmp_path / "job.sh", tmp_path / "job.out"
    script.write_text(done.stdout)
    done = run(["sbatch", "--wait", "-o", str(out), str(script)], slurm, tmp_path, PATHS_RENDEZVOUS_TIMEOUT="20")
    assert done.returncode == 0, out.read_text()
    found = re.findall(r"rank (\d) of 2 on (a0) by srun total (\d+)", out.read_text())
    assert sorted(found) == [("0", "a0", "3"), ("1", "a0", "3")], out.read_text()


def test_paths_launch_inside_an_allocation(slurm, allocation_map, tmp_path):
    done = run(["salloc", "-N1", "-n2", *PATHS, "launch", "--map", allocation_map, "--threads", "2", "--sum", "TOTAL",
                "--", sys.executable, APP, "sum"], slurm, tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [
        f"[{r}] rank {r} of 2 on a0 by paths launch total 3 rendezvous the node servers paths launch started"
        for r in range(2)]


def test_nothing_is_left_when_paths_launch_is_killed_inside_an_allocation(slurm, allocation_map, tmp_path):
    """The nodes run under srun: killing the launcher (SIGKILL) ends its srun steps, their nodes
    and the nodes' ranks."""
    app = tmp_path / "rank_app.py"
    shutil.copy(APP, app)
    allocation = subprocess.Popen(["salloc", "-N1", "-n2", *PATHS, "launch", "--map", allocation_map, "--threads", "2",
                                   "--", sys.executable, str(app), "sleep"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, cwd=tmp_path, env={**os.environ, **slurm},
                                  start_new_session=True)
    try:
        assert sorted(allocation.stdout.readline().split(" up ")[0] for _ in range(2)) == ["[0]", "[1]"]
        [launcher] = [int(line.split()[0]) for line in processes_with(str(app)) if "paths launch" in line
                      and "salloc" not in line]
        node = f"{sys.executable} -m paths.experiments.node --name a0"
        assert processes_with(node)  # under its srun
        os.kill(launcher, signal.SIGKILL)
        assert gone_within(str(app), REAPED_WITHIN) == []
        assert gone_within(node, REAPED_WITHIN) == []
        allocation.wait(timeout=60)
    finally:
        if allocation.poll() is None:
            os.killpg(allocation.pid, signal.SIGKILL)  # salloc, and the launcher if it is still there
        allocation.communicate()
