"""Child processes for the remote tests: started, read line by line with a deadline, and always
reaped — on success, on failure, on Ctrl-C.

Each child's stdout is read by a thread into a queue, so a test waits for a line (`READY ...`)
with a timeout instead of sleeping, and a child that never prints fails the test instead of
hanging it. stderr is collected for the failure message.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PEER = TESTS / "remote_peer.py"
START_TIMEOUT_S = 30   # the longest a child may take to print its first line


class Child:
    """One child process and the lines it printed."""

    def __init__(self, argv: list[str], name: str):
        self.name = name
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, bufsize=1)
        self.pid = self.process.pid
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr_lines: list[str] = []
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)  # end of output

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            self.stderr_lines.append(line)

    def stderr(self) -> str:
        return "".join(self.stderr_lines)

    def expect(self, prefix: str, timeout: float = START_TIMEOUT_S) -> str:
        """The rest of the next stdout line that starts with prefix (other lines are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(left, 0.0))
            except queue.Empty:
                raise AssertionError(f"{self.name}: no line '{prefix}...' within {timeout} s; "
                                     f"stderr:\n{self.stderr()[-3000:]}") from None
            if line is None:
                self.process.wait(timeout=10)
                raise AssertionError(f"{self.name}: exited ({self.process.returncode}) before printing "
                                     f"'{prefix}...'; stderr:\n{self.stderr()[-3000:]}")
            if line.startswith(prefix):
                return line[len(prefix):].strip()

    def send(self, line: str) -> None:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def wait(self, timeout: float) -> int:
        """The exit code; fails the test if the child is still running after timeout."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name}: still running after {timeout} s; "
                                 f"stderr:\n{self.stderr()[-3000:]}") from None
        for reader in self._readers:
            reader.join(timeout=5)
        return code

    def signal(self, number: int) -> None:
        self.process.send_signal(number)

    def stop(self) -> None:
        """SIGSTOP, and return once the child is stopped (a signal is delivered some time after it is sent)."""
        self.signal(signal.SIGSTOP)
        deadline = time.monotonic() + START_TIMEOUT_S
        while Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} did not stop within {START_TIMEOUT_S} s")
            time.sleep(0.001)

    def reap(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(timeout=10)
        finally:
            for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
                try:
                    stream.close()
                except (OSError, ValueError):
                    pass

    def rss_kb(self) -> int:
        """Resident memory (VmRSS) of the running child, in kB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError(f"{self.name}: no VmRSS in /proc/{self.pid}/status")


class ChildProcesses:
    """Starts children and reaps every one of them on close (a context manager)."""

    def __init__(self):
        self.children: list[Child] = []

    def start(self, argv: list[str], name: str | None = None) -> Child:
        child = Child(argv, name or " ".join(argv[1:4]))
        self.children.append(child)
        return child

    def peer(self, *args: str) -> Child:
        """tests/remote_peer.py with a sub-command (see that file)."""
        return self.start([sys.executable, str(PEER), *map(str, args)], name=f"remote_peer {args[0]}")

    def paths_serve(self, *extra: str, bind: str = "tcp://127.0.0.1:*") -> tuple[Child, str]:
        """`python -m paths serve` on a free loopback port; returns the child and its endpoint."""
        child = self.start([sys.executable, "-m", "paths", "serve", "--bind", bind, *extra], name="paths serve")
        return child, child.expect("READY ")

    def peer_server(self, *extra: str) -> tuple[Child, str]:
        """A PathServer that also answers `counters` on stdin (remote_peer.py serve)."""
        child = self.peer("serve", *extra)
        return child, child.expect("READY ")

    def close(self) -> None:
        for child in self.children:
            child.reap()
        self.children.clear()

    def __enter__(self) -> "ChildProcesses":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def process_exists(pid: int) -> bool:
    """True while pid names a process (a zombie counts: it has not been reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def counters(server: Child) -> dict:
    """The server-side counters of a remote_peer.py server: frames, bad_frames, builds, live,
    build_errors."""
    server.send("counters")
    return json.loads(server.expect("COUNTERS "))

