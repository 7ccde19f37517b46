"""Ctrl-C (and SIGTERM, where a handler raises for it) held back while the main thread does what
an exception must not cut, and raised once it is done.

Python raises KeyboardInterrupt wherever the main thread is. Inside an import that may be a
callback that only prints it ("Exception ignored") and goes on, an extension's initialization that
turns it into an ImportError, or a dataclass's exec(), after which the interpreter ends by the
signal even once the exception was handled. Around a fork (subprocess with preexec_fn) it may be
an at-fork hook of the parent, which swallows it, or of the child before its exec, which prints a
traceback. The `paths` command stops on SIGTERM as on Ctrl-C (hear_sigterm), so the same holds
for it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

HELD = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, timeout(1), a batch system's time limit) heard by a command that stops on it
    as on Ctrl-C (what it measured kept), and exits 143."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated


def hear_sigterm() -> None:
    """SIGTERM raises Terminated in the main thread from now on."""
    signal.signal(signal.SIGTERM, _raise_terminated)


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """SIGINT and SIGTERM recorded, not raised, inside the block, each whose handler is a Python
    function (Ctrl-C's raises KeyboardInterrupt); after it, the first that came goes to its
    handler. A signal ignored or left to its default stays so, and only the main thread, which
    alone hears signals, holds them."""
    heard: list[int] = []
    main = threading.current_thread() is threading.main_thread()
    held = {sig: handler for sig in HELD if main and callable(handler := signal.getsignal(sig))}
    for sig in held:
        signal.signal(sig, lambda signum, frame: heard.append(signum))
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
    if heard:
        held[heard[0]](heard[0], None)
