"""Ctrl-C held back while the main thread does what a KeyboardInterrupt must not cut, and raised
once it is done.

Python raises KeyboardInterrupt wherever the main thread is. Inside an import that may be a
callback that only prints it ("Exception ignored") and goes on, an extension's initialization that
turns it into an ImportError, or a dataclass's exec(), after which the interpreter ends by the
signal even once the exception was handled. Around a fork (subprocess with preexec_fn) it may be
an at-fork hook of the parent, which swallows it, or of the child before its exec, which prints a
traceback.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """SIGINT recorded, not raised, inside the block; KeyboardInterrupt after it if one came. A
    SIGINT ignored from the start (a background job) stays ignored, and only the main thread,
    which alone hears signals, holds it."""
    heard = []
    previous = signal.getsignal(signal.SIGINT)
    holding = previous not in (signal.SIG_IGN, None) and threading.current_thread() is threading.main_thread()
    if holding:
        signal.signal(signal.SIGINT, lambda *_: heard.append(True))
    try:
        yield
    finally:
        if holding:
            signal.signal(signal.SIGINT, previous)
    if heard:
        raise KeyboardInterrupt
