"""A function named in a map or on the command line, `pkg.mod:func` (or `pkg.mod.func`): a
placement policy, an acquire or release hook, a kernel written in Python. A hook must also be
marked as one (by @paths.acquire_hook or @paths.release_hook, which set HOOK_MARK).

Modules are found as `python -m` finds them: on sys.path, and in the current folder.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
import traceback
from typing import Callable, Optional

from .shown import shown

DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*[.:][A-Za-z_]\w*")
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # paths/
HOOK_MARK = "__paths_hook__"  # "acquire" or "release": what kind of hook a function was marked as
HOOK_SHAPES = {"acquire": "(request)", "release": "(request, handle)"}  # what each kind is called with


def import_function(name: str, what: str, hook: Optional[str] = None) -> Callable:
    """The function `name` names (marked as a `hook` hook, if given); ValueError saying what is
    wrong, starting with `what` (such as "policy" or "acquire hook")."""
    if not isinstance(name, str) or not DOTTED_NAME.fullmatch(name):
        raise ValueError(f"{what} {shown(name)}: expected a function named 'pkg.mod:func' or 'pkg.mod.func'")
    module_name, _, func_name = name.rpartition(":" if ":" in name else ".")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        why = f"No module named {shown(error.name)}" if isinstance(error, ModuleNotFoundError) and error.name else error
        raise ValueError(f"{what} {shown(name)}: cannot import module {shown(module_name)} ({why})") from error
    except Exception as error:  # the module's own code failed: say what it raised, and where
        raised = f"{type(error).__name__}: {error}" if isinstance(error, SyntaxError) else raised_where(error)
        raise ValueError(f"{what} {shown(name)}: importing module {shown(module_name)} raised {raised}") from error
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ValueError(f"{what} {shown(name)}: module {shown(module_name)} has no function {shown(func_name)}")
    called = getattr(func, "__qualname__", func_name)  # a callable object or a partial has none
    if hook is not None and getattr(func, HOOK_MARK, None) != hook:
        raise ValueError(f"{what} {shown(name)}: {called} is not marked as one: decorate it with "
                         f"@paths.{hook}_hook")
    if hook is not None and (kind := body_not_run(func)):
        raise ValueError(f"{what} {shown(name)}: {called} is {kind} (calling it runs none of its body): expected "
                         f"def {func_name}{HOOK_SHAPES[hook]}")
    if hook is not None and not takes_arguments(func, HOOK_SHAPES[hook].count(",") + 1):
        raise ValueError(f"{what} {shown(name)}: {called} cannot be called as the hook it is marked as: "
                         f"expected def {func_name}{HOOK_SHAPES[hook]}")
    return func


# Functions whose call returns a coroutine or generator, running none of their body.
_NOT_CALLED_THROUGH = (("an async function", inspect.iscoroutinefunction),
                       ("an async generator", inspect.isasyncgenfunction),
                       ("a generator function", inspect.isgeneratorfunction))


def body_not_run(function: Callable) -> str:
    """What `function` is when calling it runs none of its body ("an async function", ...), else ""."""
    return next((kind for kind, test in _NOT_CALLED_THROUGH if test(function)), "")


def takes_arguments(function: Callable, count: int) -> bool:
    """Whether function(...) can take `count` positional arguments (judged by its own signature,
    not that of a function it wraps); True when it has none to read (some built-ins)."""
    try:
        inspect.signature(function, follow_wrapped=False).bind(*[None] * count)
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def raised_where(error: BaseException, trace=None) -> str:
    """'ValueError: message (at file.py:12)': an exception and the user's line that raised it, or
    made the call into this package that raised it (from `trace`, else the exception's own
    traceback; the innermost line of all when none is the user's), on one line."""
    frames = traceback.extract_tb(trace or error.__traceback__)
    users = [frame for frame in frames if not os.path.abspath(frame.filename).startswith(PACKAGE)]
    where = f" (at {(users or frames)[-1].filename}:{(users or frames)[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {' '.join(str(error).split())}{where}"
