"""Processes that die with the process that started them.

A child started with `preexec_fn=dies_with_me()` gets the Linux parent-death signal (SIGKILL)
between fork and exec: when the starting process ends for any reason, SIGKILL included, the
kernel kills the child. A child with something of its own to stop first takes SIGTERM instead
(`dies_with_me(signal.SIGTERM)`): a node process stops its ranks' process groups then, which
SIGKILL would leave behind. The parent death is per *thread*: start children from a thread that
lives as long as they should (the main thread). A parent that died before the child armed the
signal is caught by comparing the child's parent with the starter's pid.

A process that starts ranks also adopts their orphans (adopt_orphans: the child subreaper), so
that a daemon a rank forked off, in a session of its own, is still found and stopped.

The ssh and srun clients a launcher starts get it too, and what they run on the far side sees
its standard input close when they die (nodes stop by themselves then: paths/experiments/node.py).
"""

from __future__ import annotations

import ctypes
import os
import signal
from typing import Callable

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

_prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int


def dies_with_me(number: int = signal.SIGKILL, ctrl_c=signal.SIG_DFL) -> Callable[[], None]:
    """A preexec_fn for subprocess.Popen: the child gets signal `number` when this process ends.
    `ctrl_c` is its SIGINT: SIG_DFL, as a program started from a shell has it (a node ignores it
    and its ranks would inherit that), or SIG_IGN for a node, whose launcher handles Ctrl-C (SIGINT
    to the terminal's process group, local nodes included) and stops its nodes itself: a node still
    starting up would print a traceback for it."""
    starter = os.getpid()

    def arm() -> None:
        signal.signal(signal.SIGINT, ctrl_c)
        if _prctl(PR_SET_PDEATHSIG, int(number), 0, 0, 0) != 0 or os.getppid() != starter:
            os._exit(1)  # cannot arm it, or the starter is gone already: a child must not outlive it

    return arm


def adopt_orphans() -> None:
    """Make this process the child subreaper of what it starts: a descendant whose parent ends
    (a daemon that forked away from its rank) becomes this process's child, not init's, so that
    children() finds it."""
    if _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot become the subreaper of its children")


def children() -> list[int]:
    """The processes whose parent is this one, zombies included."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:  # the parent follows the command's ")"
                if int(stat.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                    found.append(int(entry))
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
    return found
