"""The ranks of one node of `paths launch`: started by the node process, their output passed on
line by line, their exits reported, and stopped when the node stops.

Each rank is the user's command with the environment its rank needs (PATHS_RANK, ...; a variable
given as None is unset, so that one the run does not set is not the shell's), standard
input from /dev/null, and standard output and error on pipes. A rank dies with its node (the
parent-death signal, paths/experiments/parent_death.py), so nothing a node started outlives it.
Each rank leads a process group of its own, and stopping a rank signals its group: what the rank
started goes with it (the program a wrapper script runs, say), not only the rank itself. A daemon
a rank forked off into a session of its own becomes the node's child (the node adopts orphans)
and is stopped with the ranks, when they end or are stopped.

A run that is stopped while its ranks run (another node's rank failed, --timeout, Ctrl-C) stops
them with stop_soon(): they get SIGTERM, SIGKILL after STOP_SECONDS, and what they print as they
end (a goodbye on SIGTERM, a last line without its line break) is still passed on.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from typing import Callable

from .line_buffer import PIECE_BYTES, LineBuffer
from .parent_death import Orphans, adopt_orphans, children, dies_with_me, reaped

STOP_SECONDS = 1.0  # how long a stopped rank has between SIGTERM and SIGKILL
DRAIN_SECONDS = 1.0  # how long a rank's pipes may stay open after it exited (a child of its own)

# emit(event) receives {"event": "output", "rank": r, "stream": "out"|"err", "text": line} (with
# "more": true, a piece of a long line, which goes on: line_buffer.py) and {"event": "exit",
# "rank": r, "status": s, "signal": n} (n: the signal that ended it, else 0); a line's bytes that
# are not UTF-8 are kept as lone surrogates (surrogateescape), so that the launcher writes out the
# very bytes the rank wrote
TEXT_ERRORS = "surrogateescape"
Emit = Callable[[dict], None]


def exit_status(returncode: int) -> int:
    """A shell's exit status: the code, or 128 + the signal that ended the process."""
    return 128 - returncode if returncode < 0 else returncode


def _output(rank: int, stream: str, line: bytes, more: bool = False) -> dict:
    """The event of a rank's line, or with `more` of a piece of one."""
    event = {"event": "output", "rank": rank, "stream": stream, "text": line.decode("utf-8", TEXT_ERRORS)}
    return {**event, "more": True} if more else event


class _Rank:
    def __init__(self, rank: int, process: subprocess.Popen):
        self.rank = rank
        self.process = process
        self.partial = {"out": LineBuffer(), "err": LineBuffer()}
        self.open = 2  # pipes not at their end yet
        self.exited_at: float | None = None


class RankProcesses:
    def __init__(self, command: list[str], environments: dict[int, dict[str, str | None]], cwd: str | None):
        self.ranks: list[_Rank] = []
        self.stopping_since: float | None = None  # stop_soon() was called then (time.monotonic)
        self._sent = 0  # the signal the ranks got last from stop_soon() (0: none yet)
        adopt_orphans()
        self.others = set(children())  # not the ranks' (none, in a node)
        try:
            for rank, environment in sorted(environments.items()):
                process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, env=_environment(environment),
                                           cwd=cwd if cwd and os.path.isdir(cwd) else None,
                                           preexec_fn=dies_with_me(), start_new_session=True)
                self.ranks.append(_Rank(rank, process))
        except OSError as e:
            self.stop()
            raise ValueError(f"cannot start {command[0]!r}: {e.strerror}") from None

    def wait(self, emit: Emit) -> dict[int, int]:
        """Pass on every line the ranks print and each rank's exit as it comes; the exit status
        of each rank once all have ended."""
        selector = selectors.DefaultSelector()
        for rank in self.ranks:
            for stream, pipe in (("out", rank.process.stdout), ("err", rank.process.stderr)):
                os.set_blocking(pipe.fileno(), False)
                selector.register(pipe, selectors.EVENT_READ, (rank, stream))
        statuses: dict[int, int] = {}
        try:
            while len(statuses) < len(self.ranks):
                self._stopping(statuses)
                for key, _ in selector.select(0.05):
                    rank, stream = key.data
                    try:  # at most a piece's worth: a rank that writes on and on is passed on as it goes
                        data = os.read(key.fd, PIECE_BYTES)
                    except BlockingIOError:
                        continue
                    if data:
                        self._lines(rank, stream, rank.partial[stream].feed(data), emit)
                        piece = rank.partial[stream].piece()  # of a long line, not held whole
                        if piece:
                            emit(_output(rank.rank, stream, piece, more=True))
                    else:  # the end of the pipe
                        self._last_piece(rank, stream, emit)
                        selector.unregister(key.fileobj)
                        rank.open -= 1
                for rank in self.ranks:
                    if rank.rank not in statuses and self._ended(rank, selector, emit):
                        statuses[rank.rank] = exit_status(rank.process.returncode)
                        emit({"event": "exit", "rank": rank.rank, "status": statuses[rank.rank],
                              "signal": max(0, -rank.process.returncode)})
        finally:
            selector.close()
        return statuses

    def stop_soon(self) -> None:
        """Have wait() stop the ranks still running, passing on what they print as they end.
        Safe from a signal handler: it only notes the time."""
        self.stopping_since = self.stopping_since or time.monotonic()

    def _stopping(self, statuses: dict[int, int]) -> None:
        """Once stop_soon() was called: SIGTERM to the process group of each rank still there,
        then SIGKILL after STOP_SECONDS."""
        if self.stopping_since is None:
            return
        number = signal.SIGKILL if time.monotonic() - self.stopping_since >= STOP_SECONDS else signal.SIGTERM
        if number != self._sent:
            for rank in self.ranks:
                if rank.rank not in statuses:
                    _signal_group(rank.process.pid, number)
            self._sent = number

    @staticmethod
    def _lines(rank: _Rank, stream: str, lines: list[bytes], emit: Emit) -> None:
        for line in lines:
            emit(_output(rank.rank, stream, line))

    @staticmethod
    def _last_piece(rank: _Rank, stream: str, emit: Emit) -> None:
        """At the end of a pipe: a last line the rank did not end, passed on as a piece (its end
        never comes), so that the bytes stay the rank's, with no line break added."""
        for line in rank.partial[stream].rest():
            emit(_output(rank.rank, stream, line, more=True))

    @staticmethod
    def _ended(rank: _Rank, selector: selectors.BaseSelector, emit: Emit) -> bool:
        """The rank exited and its output is all passed on (or its pipes stayed open, held by a
        child of its own, DRAIN_SECONDS after it exited)."""
        if rank.process.poll() is None:
            return False
        rank.exited_at = rank.exited_at or time.monotonic()
        if rank.open and time.monotonic() - rank.exited_at < DRAIN_SECONDS:
            return False
        for stream, pipe in (("out", rank.process.stdout), ("err", rank.process.stderr)):
            RankProcesses._last_piece(rank, stream, emit)
            if pipe in selector.get_map():
                selector.unregister(pipe)
            pipe.close()
        rank.open = 0
        return True

    def stop(self) -> None:
        """Stop every rank still running, and what any rank started that is still there (its
        process group, whose id is the rank's pid, and the orphans the node adopted, also those a
        rank leaves as it is stopped): SIGTERM, then SIGKILL after STOP_SECONDS; every rank and
        orphan reaped. Safe from a signal handler (the node's SIGTERM): it waits with waitpid
        itself, not through the Popen objects, whose lock the interrupted code may hold."""
        ranks = {rank.process.pid for rank in self.ranks}
        running = [rank.process.pid for rank in self.ranks if rank.process.returncode is None]
        groups = list(ranks)
        for group in groups:
            _signal_group(group, signal.SIGTERM)
        orphans = Orphans(ranks | self.others)  # the node's children the ranks left it
        deadline = time.monotonic() + STOP_SECONDS
        while True:
            late = time.monotonic() >= deadline
            adopted = orphans.turn(late)
            if late:
                for group in groups:
                    _signal_group(group, signal.SIGKILL)
            running = [pid for pid in running if not reaped(pid, block=late)]
            groups = [group for group in groups if group in running or _signal_group(group, 0)]
            settled = not (running or groups or adopted or orphans.left())
            if settled or time.monotonic() >= deadline + STOP_SECONDS:  # then: what not even SIGKILL ends
                return
            time.sleep(0.01)


def _environment(variables: dict[str, str | None]) -> dict[str, str]:
    """This process's environment with the rank's variables; one given as None is unset."""
    merged = {**os.environ, **variables}
    return {name: value for name, value in merged.items() if value is not None}


def _signal_group(group: int, number: int) -> bool:
    """Signal every process of the group (0: only look); False when none is left."""
    try:
        os.killpg(group, number)
    except (ProcessLookupError, PermissionError):
        return False
    return True
