"""Processes that die with the process that started them.

A child started with `preexec_fn=dies_with_me()` gets the Linux parent-death signal (SIGKILL)
between fork and exec: when the starting process ends for any reason, SIGKILL included, the
kernel kills the child. A child with something of its own to stop first takes SIGTERM instead
(`dies_with_me(signal.SIGTERM)`): a node process stops its ranks' process groups then, which
SIGKILL would leave behind. The parent death is per *thread*: start children from a thread that
lives as long as they should (the main thread). A parent that died before the child armed the
signal is caught by comparing the child's parent with the starter's pid.

A node process adopts the orphans of what it starts, ranks or a kernel's processes (adopt_orphans:
the child subreaper), so that a daemon one forked off, in a session of its own, is still found and
stopped (Orphans); so does the `paths run` or `paths launch` command, for a node that was killed
with SIGKILL.

The ssh and srun clients a launcher starts get it too, and what they run on the far side sees
its standard input close when they die (nodes stop by themselves then: paths/experiments/node.py).
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Callable, Iterator

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

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


def adopts_orphans() -> bool:
    """Whether this process is the child subreaper of what it starts (adopt_orphans)."""
    flag = ctypes.c_int(0)
    return _prctl(PR_GET_CHILD_SUBREAPER, ctypes.addressof(flag), 0, 0, 0) == 0 and flag.value != 0


def processes() -> Iterator[tuple[int, str, int]]:
    """(pid, state, parent) of every process now ("Z": a zombie), from /proc."""
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:  # the state and the parent follow the command's ")"
                state, parent = stat.read().rsplit(")", 1)[1].split()[:2]
            yield int(entry), state, int(parent)
        except (OSError, ValueError):  # gone meanwhile
            continue


def children() -> list[int]:
    """The processes whose parent is this one, zombies included."""
    me = os.getpid()
    return [pid for pid, _, parent in processes() if parent == me]


class Orphans:
    """What this process (a subreaper) has as children besides `keep`, stopped: SIGTERM when first
    seen, SIGKILL once late; each reaped. Look again each turn: a process's children become this
    one's as it ends."""

    def __init__(self, keep: set[int]):
        self.keep, self.signalled = set(keep), set()

    def left(self) -> list[int]:
        return [pid for pid in children() if pid not in self.keep]

    def turn(self, late: bool) -> bool:
        """Signal what is there (SIGKILL when late) and reap what has ended; True while some are left."""
        there = self.left()
        for pid in there:
            if late or pid not in self.signalled:
                signal_process(pid, signal.SIGKILL if late else signal.SIGTERM)
                self.signalled.add(pid)
        return bool([pid for pid in there if not reaped(pid, block=late)])

    def stop(self, grace: float) -> None:
        """Turn until none is left: SIGKILL after `grace` seconds, give up `grace` later (what not
        even SIGKILL ends)."""
        deadline = time.monotonic() + grace
        while (self.turn(time.monotonic() >= deadline) or self.left()) and time.monotonic() < deadline + grace:
            time.sleep(0.01)


def signal_process(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass


def reaped(pid: int, block: bool = False) -> bool:
    """Reap pid if it has exited (wait for it with block); True once it is gone."""
    try:
        return os.waitpid(pid, 0 if block else os.WNOHANG)[0] == pid
    except ChildProcessError:  # reaped already
        return True
