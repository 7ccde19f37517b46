"""System packages some tests need (Slurm, munge, Open MPI): installed with apt when their
commands are missing, as root and non-interactively; otherwise the reason a test must skip."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Callable, Optional

SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")  # daemons live there, not always on a test's PATH


def command_path(command: str) -> Optional[str]:
    return shutil.which(command) or shutil.which(command, path=os.pathsep.join(SBIN))


def install_missing(packages: list[str], commands: list[str],
                    ready: Optional[Callable[[], bool]] = None) -> Optional[str]:
    """None once every command is there and `ready()` holds, if given (what else the packages
    bring: a header, say), installing `packages` if not; else why not."""
    missing = [c for c in commands if command_path(c) is None]
    if not missing and (ready is None or ready()):
        return None
    missing = missing or [f"what {' '.join(packages)} provide"]
    if os.geteuid() != 0:
        return f"{', '.join(missing)} missing, and installing {' '.join(packages)} needs root"
    if shutil.which("apt-get") is None:
        return f"{', '.join(missing)} missing, and there is no apt-get to install {' '.join(packages)}"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for step in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        done = subprocess.run(step, capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
            return f"cannot install {' '.join(packages)}: {' '.join(step[:2])} failed: {last[0]}"
    still = [c for c in commands if command_path(c) is None]
    if not still and ready is not None and not ready():
        still = [f"what {' '.join(packages)} provide"]
    return f"{', '.join(still)} still missing after installing {' '.join(packages)}" if still else None
