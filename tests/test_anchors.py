"""The anchors run as their labels and the benchmarks say: the OpenMP anchor's threads pinned as
PATHS pins its own and waiting by the policy asked for, and GSum's table naming the policy it
kept; the MPI anchor on the transport its label says. Each anchor is run for real, its runtime
asked to say what it did (libgomp's OMP_DISPLAY_ENV and OMP_DISPLAY_AFFINITY, Open MPI's
pml_base_verbose)."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import anchors

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def anchor_runs(monkeypatch) -> list[subprocess.CompletedProcess]:
    """Every subprocess.run the anchors make in this test, as it ended."""
    runs, run = [], subprocess.run

    def recorded(*args, **kwargs):
        runs.append(run(*args, **kwargs))
        return runs[-1]

    monkeypatch.setattr(anchors.subprocess, "run", recorded)
    return runs


@pytest.mark.parametrize("wait", anchors.OPENMP_WAIT_POLICIES)
def test_the_openmp_anchor_pins_its_threads_as_paths_does_and_waits_as_asked(monkeypatch, anchor_runs, wait):
    monkeypatch.setenv("OMP_DISPLAY_ENV", "true")
    monkeypatch.setenv("OMP_DISPLAY_AFFINITY", "true")
    monkeypatch.setenv("OMP_AFFINITY_FORMAT", "thread %n on CPU %A")
    assert anchors.openmp_sum_us(4, 20, wait=wait, pin=True) > 0
    shown = anchor_runs[-1].stderr
    assert f"OMP_WAIT_POLICY = '{wait.upper()}'" in shown, shown
    cpus = sorted(os.sched_getaffinity(0))
    placed = dict(re.findall(r"^thread (\d+) on CPU (\d+)$", shown, re.M))
    assert placed == {str(t): str(cpus[t * len(cpus) // 4]) for t in range(4)}, shown


def test_gsum_names_the_wait_policy_of_its_openmp_anchor(tmp_path):
    out = tmp_path / "gsum.csv"
    done = subprocess.run([sys.executable, "-m", "benchmarks.gsum", "--threads", "1,2", "--tree", "flat", "--rounds",
                           "20", "--repeat", "1", "--no-targets", "--csv", str(out)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "threads (PATHS's, OpenMP's) and MPI ranks pinned; OpenMP: the faster of OMP_WAIT_POLICY=active and " \
           "passive (openmp_wait)" in done.stdout.splitlines()[0]
    with open(out, newline="") as f:
        assert [row["openmp_wait"] in anchors.OPENMP_WAIT_POLICIES for row in csv.DictReader(f)] == [True, True]


@pytest.mark.parametrize("transport", ["shared", "tcp"])
def test_the_mpi_anchor_runs_on_the_transport_its_label_says(openmpi, monkeypatch, anchor_runs, transport):
    """Left to choose (no site file that rules out its other layers, as Debian's does), Open MPI
    sends through a messaging layer of its own (cm over libfabric, or UCX), which ignores the btl
    list that names the transport: the anchor must ask for ob1, the layer that uses that list."""
    monkeypatch.setenv("OMPI_MCA_mca_base_param_files", os.devnull)
    monkeypatch.setenv("OMPI_MCA_pml_base_verbose", "10")
    assert anchors.mpi_allreduce_us(2, 20, transport=transport) > 0
    shown = anchor_runs[-1].stdout + anchor_runs[-1].stderr
    assert re.findall(r"select: component (\w+) selected", shown) == ["ob1", "ob1"], shown


def test_mpi_without_its_headers_is_not_available_and_gsum_says_so(tmp_path, monkeypatch):
    """Debian's openmpi-bin brings mpicc and mpirun but not mpi.h (libopenmpi-dev): the MPI anchor
    cannot be built then, so GSum leaves its column out and says what to install."""
    for command, script in (("mpicc", "exit 1"), ("mpirun", "exit 0")):
        (tmp_path / command).write_text(f"#!/bin/sh\n{script}\n")
        (tmp_path / command).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert not anchors.mpi_available()
    done = subprocess.run([sys.executable, "-m", "benchmarks.gsum", "--threads", "1", "--tree", "flat", "--rounds",
                           "20", "--repeat", "1", "--no-targets"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "(MPI not installed: apt-get install openmpi-bin libopenmpi-dev)" in done.stdout.splitlines()[0]
