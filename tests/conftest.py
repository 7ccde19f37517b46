"""Fixtures shared by the test files: a fresh PastSet, watching the node processes of map runs
(tests/node_probe.py), Python modules of a test's own (hooks, kernels) that this process and the
node processes it starts can import, a server in a child process with a ZeroMQ context beside
it, for tests that speak the wire protocol by hand, and the launchers of other people: a
single-node Slurm (tests/slurm_cluster.py) and Open MPI's mpirun, installed when missing."""

import os
import signal
import textwrap

import pytest
import zmq
from child_processes import ChildProcesses
from node_probe import NodeProbe
from slurm_cluster import SlurmCluster
from system_packages import install_missing

import paths
from benchmarks import anchors
from paths.experiments import experiment
from paths.experiments.launcher import NodeProcesses

# The Ctrl-C tests send SIGINT to the processes they start, which must take it as a program
# started from a terminal does. A suite started in the background by a script (`cmd &`, no job
# control) has SIGINT ignored, and every process it starts would inherit that: take it back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def space():
    """A fresh, empty PastSet."""
    return paths.PastSet()


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A probe in every node process started by this test (in-process runs and `paths run`)."""
    node_probe = NodeProbe(tmp_path / "probe")
    for key, value in node_probe.env.items():
        monkeypatch.setenv(key, value)
    yield node_probe
    left = node_probe.close()
    assert not left, f"processes left behind (now killed): {left}"


@pytest.fixture
def launched(monkeypatch):
    """The NodeProcesses of each run_experiment in this test, so a test can reach the nodes."""
    runs = []

    class Recorded(NodeProcesses):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            runs.append(self)

    monkeypatch.setattr(experiment, "NodeProcesses", Recorded)
    return runs


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """user_module(name, source) writes module `name` where this process and the processes this
    test starts (nodes, programs) import it from."""
    folder = tmp_path / "modules"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))

    def write(name: str, source: str) -> str:
        (folder / f"{name}.py").write_text(textwrap.dedent(source).lstrip("\n"))
        paths_now = os.environ.get("PYTHONPATH", "")
        if str(folder) not in paths_now.split(os.pathsep):
            monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(folder), paths_now) if p))
        return name

    return write


@pytest.fixture(scope="module")
def peer_server():
    """(child, endpoint): a server child that tells its counters (remote_peer.py serve), one per
    test file."""
    with ChildProcesses() as children:
        yield children.peer_server()


@pytest.fixture
def zmq_context():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A single-node Slurm for the session (slurm-wlm and munge installed when missing); the
    variables Slurm's commands need. Its daemons are stopped, by process id, at the end."""
    why_not = install_missing(["slurm-wlm", "munge"], ["slurmctld", "slurmd", "munged", "srun", "salloc", "sinfo"])
    if why_not:
        pytest.skip(f"no Slurm: {why_not}")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    yield cluster.env
    cluster.stop()


@pytest.fixture(scope="session")
def openmpi():
    """The variables `mpirun` (Open MPI, installed when missing, with mpicc and its headers for
    the MPI anchor) needs here: as root, and with more ranks than this machine has CPUs."""
    why_not = install_missing(["openmpi-bin", "libopenmpi-dev"], ["mpirun", "mpicc"], anchors.mpi_available)
    if why_not:
        pytest.skip(f"no Open MPI: {why_not}")
    return {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1"}
