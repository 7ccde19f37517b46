#!/usr/bin/env bash
# bootstrap.sh — every set-up step a fresh Debian machine needs, then one job.
#
#   bash bootstrap.sh main   set up, then run the main job: GSum and MCPi on the local map
#   bash bootstrap.sh test   set up, then run the whole test suite (pytest + C sanitizer tests)
#   bash bootstrap.sh bench  set up (with MPI for the MPI_Allreduce anchor), then the benchmarks
#   bash bootstrap.sh setup  set up only
#
# Set-up: system packages when missing (a C compiler, pkg-config, libzmq, Python's venv), a
# virtual environment in .venv, and the build of the project into it. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"
job="${1:-main}"
case "$job" in main|test|bench|setup) ;; *) echo "usage: bash bootstrap.sh main|test|bench|setup" >&2; exit 2;; esac

need_packages=()
{ command -v cc && command -v c++; } >/dev/null 2>&1 || need_packages+=(build-essential)
command -v pkg-config >/dev/null 2>&1 || need_packages+=(pkg-config)
pkg-config --exists libzmq 2>/dev/null || need_packages+=(libzmq3-dev)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_packages+=(python3-venv)
python3 -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
    >/dev/null 2>&1 || need_packages+=(python3-dev)
if [ "$job" = bench ]; then  # mpicc with MPI's headers (openmpi-bin alone has no mpi.h), and mpirun
    { command -v mpirun && echo '#include <mpi.h>' | mpicc -E -x c -o /dev/null -; } >/dev/null 2>&1 ||
        need_packages+=(openmpi-bin libopenmpi-dev)
fi
if [ ${#need_packages[@]} -gt 0 ]; then
    echo "bootstrap: installing system packages: ${need_packages[*]}"
    if [ "$(id -u)" -ne 0 ]; then echo "bootstrap: run as root to install ${need_packages[*]}" >&2; exit 1; fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_packages[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    echo "bootstrap: creating .venv"
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q scikit-build-core pybind11 cmake ninja PyYAML pytest pyzmq
echo "bootstrap: building paths"
.venv/bin/python -m pip install -q --no-build-isolation -e '.[test]'

case "$job" in
main)
    .venv/bin/paths run gsum --threads 1,2,4,8 --repeat 3 --rounds 2000 --pin
    exec .venv/bin/paths run mcpi --threads 1,2,4 --repeat 3 --darts 20000000 --pin ;;
test) exec .venv/bin/python -m pytest -q tests ;;
bench)
    .venv/bin/python -m benchmarks.core_ops
    .venv/bin/python -m benchmarks.gsum
    .venv/bin/python -m benchmarks.remote
    exec .venv/bin/python -m benchmarks.cluster_gsum ;;
setup) echo "bootstrap: ready; use .venv/bin/python or .venv/bin/paths" ;;
esac
