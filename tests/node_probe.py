"""A probe in the node processes of a map run, so that tests wait for events instead of sleeping
and can tell which node processes were started and whether any is left.

`NodeProbe(directory)` makes a FIFO and a `sitecustomize.py`; its `env` (PATHS_TEST_PROBE and
PYTHONPATH) goes into the environment of the run. Every `python -m paths.experiments.node` started with that
environment then writes one line to the FIFO when it starts (`start <pid> <node name>`) and one
when it enters a kernel (`gsum <pid> <node name>`, `mcpi ...`). Other Python processes (the
`paths run` launcher itself) are left alone.

`alive()` scans /proc for processes that carry this probe's FIFO path in their environment: a
node, or anything a node or the launcher started, that is still there (a zombie counts: it has
not been reaped).
"""

from __future__ import annotations

import os
import select
import signal
import time
from pathlib import Path

SITECUSTOMIZE = '''\
import os
import sys

_FIFO = os.environ.get("PATHS_TEST_PROBE")
_ARGV = getattr(sys, "orig_argv", [])
if _FIFO and "paths.experiments.node" in _ARGV:
    _NAME = _ARGV[_ARGV.index("--name") + 1] if "--name" in _ARGV[:-1] else "?"

    def _tell(what):
        try:
            fd = os.open(_FIFO, os.O_WRONLY | os.O_NONBLOCK)  # the test holds the reading end
        except OSError:
            return
        try:
            os.write(fd, f"{what} {os.getpid()} {_NAME}\\n".encode())
        finally:
            os.close(fd)

    _tell("start")
    import paths.runtime.kernel

    _run_kernel = paths.runtime.kernel.run_kernel

    def _reporting(kernel, *args, **kwargs):
        _tell(kernel.name)
        return _run_kernel(kernel, *args, **kwargs)

    paths.runtime.kernel.run_kernel = _reporting
'''


class NodeProbe:
    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        site = directory / "site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.fifo = str(directory / "probe.fifo")
        os.mkfifo(self.fifo)
        self._read = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
        self._keep = os.open(self.fifo, os.O_WRONLY)  # so that the reader never sees end of file
        self._partial = b""
        self.events: list[tuple[str, int, str]] = []  # (what, pid, node name), in arrival order
        python_path = [str(site)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        self.env = {"PATHS_TEST_PROBE": self.fifo, "PYTHONPATH": os.pathsep.join(python_path)}

    def _drain(self, timeout: float) -> None:
        readable, _, _ = select.select([self._read], [], [], max(timeout, 0.0))
        if not readable:
            return
        try:
            data = os.read(self._read, 65536)
        except BlockingIOError:
            return
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            what, pid, name = line.decode().split(" ", 2)
            self.events.append((what, int(pid), name))

    def seen(self, what: str) -> list[tuple[int, str]]:
        """(pid, node name) of every `what` event so far."""
        self._drain(0)
        return [(pid, name) for kind, pid, name in self.events if kind == what]

    def started(self) -> dict[int, str]:
        """Every node process started so far: pid -> node name."""
        return dict(self.seen("start"))

    def wait_for(self, what: str, count: int, timeout: float = 60.0) -> list[tuple[int, str]]:
        """Block until `count` events `what` have come (no sleeping: select on the FIFO)."""
        deadline = time.monotonic() + timeout
        while len(self.seen(what)) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"only {len(self.seen(what))} of {count} '{what}' events "
                                     f"from node processes within {timeout} s: {self.events}")
            self._drain(left)
        return self.seen(what)

    def alive(self) -> list[int]:
        """Processes (other than this one) that carry this probe in their environment."""
        marker = f"PATHS_TEST_PROBE={self.fifo}\0".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:  # gone meanwhile, or not ours
                continue
            if marker in environ:
                found.append(int(entry))
        return found

    def alive_within(self, seconds: float) -> list[int]:
        """What alive() still finds `seconds` from now, or [] as soon as it finds nothing."""
        deadline = time.monotonic() + seconds
        while (left := self.alive()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return left

    def unreaped(self) -> list[int]:
        """Node processes started so far that still exist (running, or zombies nobody waited for)."""
        return [pid for pid in self.started() if Path(f"/proc/{pid}").exists()]

    def close(self) -> list[int]:
        """Stop the probe; kill (and report) whatever it still finds alive, so a failing test
        leaves nothing behind."""
        left = self.alive()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.close(self._read)
        os.close(self._keep)
        return left
