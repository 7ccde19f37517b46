"""A single-node Slurm on this machine, for the tests: munged, slurmctld and slurmd, all in a
folder of their own and owned by the test process.

`SlurmCluster(folder).start()` writes a munge key and a slurm.conf naming this host (as
`slurmd -C` describes it: `hostname -s`, its CPUs and memory), with its state, spool, logs and
munge socket in the folder and ports that are free, starts the three daemons in the foreground
as children of this process (each dies with it), and waits (bounded) for `sinfo` to show the
node idle. `env` is what the Slurm commands then need (SLURM_CONF). `stop()` cancels the jobs
left, then stops exactly those three processes, by their process ids, and the step daemons
(slurmstepd) their slurmd forked, if any is left: nothing else.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from system_packages import command_path

from paths.experiments.parent_death import dies_with_me

IDLE_WITHIN = 30.0  # seconds for the node to show idle
STOP_WITHIN = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    def __init__(self, folder: Path):
        self.folder = folder
        self.daemons: list[subprocess.Popen] = []
        self.conf = folder / "slurm.conf"
        # This machine may have fewer CPUs than a test has ranks: srun may then put several on one.
        self.env = {"SLURM_CONF": str(self.conf), "SLURM_OVERCOMMIT": "1"}

    def start(self) -> "SlurmCluster":
        try:
            self._configure()
            munge = self.folder / "munge"
            self._daemon(["munged", "--foreground", "--force", f"--key-file={munge / 'munge.key'}",
                          f"--socket={munge / 'munge.socket'}", f"--pid-file={munge / 'munged.pid'}",
                          f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}"], "munged")
            self._wait_for(lambda: (munge / "munge.socket").exists(), "munged's socket")
            self._daemon(["slurmctld", "-D", "-i"], "slurmctld")
            self._daemon(["slurmd", "-D"], "slurmd")
            self._wait_for(self._idle, "sinfo to show the node idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _configure(self) -> None:
        for name in ("state", "spool", "munge"):
            (self.folder / name).mkdir(mode=0o700, exist_ok=True)
        (self.folder / "munge").chmod(0o711)
        key = self.folder / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        described = subprocess.run([command_path("slurmd"), "-C"], capture_output=True, text=True, check=True,
                                   timeout=30).stdout
        node_line = next(line for line in described.splitlines() if line.startswith("NodeName="))
        host = node_line.split()[0].split("=", 1)[1]
        f = self.folder
        self.conf.write_text("\n".join([
            "ClusterName=pathstest",
            f"SlurmctldHost={host}(127.0.0.1)",
            "SlurmUser=root", "SlurmdUser=root",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={f / 'munge' / 'munge.socket'}",
            f"StateSaveLocation={f / 'state'}", f"SlurmdSpoolDir={f / 'spool'}",
            f"SlurmctldPidFile={f / 'slurmctld.pid'}", f"SlurmdPidFile={f / 'slurmd.pid'}",
            f"SlurmctldLogFile={f / 'slurmctld.log'}", f"SlurmdLogFile={f / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SwitchType=switch/none",
            "MpiDefault=none", "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "ReturnToService=2", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            "InactiveLimit=0", "MinJobAge=5", "KillWait=2",
            f"{node_line} NodeAddr=127.0.0.1 State=UNKNOWN",
            f"PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))

    def _daemon(self, argv: list[str], name: str) -> None:
        log = open(self.folder / f"{name}.out", "w")
        self.daemons.append(subprocess.Popen([command_path(argv[0]), *argv[1:]], stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env},
                                             preexec_fn=dies_with_me()))
        log.close()

    def _idle(self) -> bool:
        done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10,
                              env={**os.environ, **self.env})
        return done.stdout.strip() == "idle"

    def _wait_for(self, ready, what: str) -> None:
        deadline = time.monotonic() + IDLE_WITHIN
        while not ready():
            dead = [d for d in self.daemons if d.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(self.folder.glob("*.out")))
                problem = f"{dead[0].args[0]} exited ({dead[0].returncode})" if dead else f"no {what} within {IDLE_WITHIN} s"
                raise RuntimeError(f"Slurm did not start: {problem}\n{logs}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop what this cluster runs: first its jobs (so that each step's slurmstepd, forked by
        slurmd, ends while slurmd is there to hear of it), then the three daemons, by process id.
        A slurmstepd still there after that (one carries this cluster's SLURM_CONF) is killed too."""
        if self.daemons and all(d.poll() is None for d in self.daemons):
            subprocess.run(["scancel", "--user=root"], capture_output=True, timeout=30, env={**os.environ, **self.env})
            deadline = time.monotonic() + STOP_WITHIN
            while (self._steps() or self._jobs()) and time.monotonic() < deadline:
                time.sleep(0.1)
        for daemon in reversed(self.daemons):
            if daemon.poll() is None:
                daemon.terminate()
        deadline = time.monotonic() + STOP_WITHIN
        for daemon in reversed(self.daemons):
            try:
                daemon.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        self.daemons.clear()
        for pid in self._steps():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _jobs(self) -> bool:
        done = subprocess.run(["squeue", "-h"], capture_output=True, text=True, timeout=10,
                              env={**os.environ, **self.env})
        return bool(done.stdout.strip())

    def _steps(self) -> list[int]:
        """The slurmstepd processes of this cluster (they carry its SLURM_CONF), not yet ended."""
        marker = f"SLURM_CONF={self.conf}\0".encode()
        found = []
        for entry in os.listdir("/proc"):
            try:
                if (entry.isdigit() and Path(f"/proc/{entry}/comm").read_text().strip() == "slurmstepd"
                        and marker in Path(f"/proc/{entry}/environ").read_bytes()
                        and Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"):
                    found.append(int(entry))
            except OSError:
                continue
        return found
