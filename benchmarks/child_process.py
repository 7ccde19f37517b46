"""A child process of a benchmark whose first line says `READY <endpoint>` (a `paths serve`, an
anchor's echo end): started, read with a deadline, and always reaped, on success, error or
Ctrl-C; and told to stop (SIGTERM) when the benchmark ends any other way, even killed."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from pathlib import Path

from paths.experiments.parent_death import dies_with_me

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 30  # the longest a child may take to say READY


class ChildError(RuntimeError):
    """A child that could not start, or said something else than READY."""


class ReadyChild:
    """A child process whose first line starts with READY; killed and reaped on close."""

    def __init__(self, argv: list[str], what: str):
        self.what = what
        try:
            self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                                            preexec_fn=dies_with_me(signal.SIGTERM))
        except OSError as e:
            raise ChildError(f"{what}: cannot start {argv[0]}: {e.strerror}") from None

    def ready(self, timeout: float = START_TIMEOUT_S) -> str:
        """The rest of the READY line."""
        line = b""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while not line.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise ChildError(f"{self.what}: not ready within {timeout} s")
                chunk = os.read(self.process.stdout.fileno(), 1)
                if not chunk:
                    self.process.wait(timeout=5)
                    raise ChildError(f"{self.what} exited ({self.process.returncode}): "
                                     f"{self.process.stderr.read().decode(errors='replace')[-500:]}")
                line += chunk
        text = line.decode().strip()
        if not text.startswith("READY "):
            raise ChildError(f"{self.what}: expected 'READY <endpoint>', got {text!r}")
        return text[len("READY "):]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.process.stderr.close()

    def __enter__(self) -> "ReadyChild":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
