"""The `paths` command line: one sub-command per job, each parsing its own options.

    paths kinds                      list the stage kinds and their parameters
    paths trace FILE --perfetto OUT  summarize trace files, convert them to Perfetto JSON
    paths serve --bind ADDR          host a PastSet and server-side stages for remote stages
    paths show --map MAP --threads N print a map's placement and generated tree
    paths run KERNEL --map MAP       run a kernel on a cluster map: gsum, mcpi, FILE.so:SYMBOL,
                                     pkg.mod:func
    paths launch --map MAP --threads N -- CMD ARGS...
                                     run any program on a map, one process (rank) per thread
    paths sbatch --map MAP --threads N -- CMD ARGS...
                                     print a Slurm batch script that places CMD's ranks as the map
    paths config --cflags --libs     what a program of its own on paths.h compiles and links with

Exit codes: 0 success, 1 a failed run (named in the message), 2 a usage error, 130 Ctrl-C,
143 SIGTERM (kill, a batch system's time limit: stopped as on Ctrl-C, what was measured kept),
141 the output was closed early (as by `| head`). `paths serve` runs until stopped (Ctrl-C or
SIGTERM), then exits 0, or 1 when it could not stop cleanly (`paths serve --help` says when).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

from ..ctrl_c_held import Terminated, ctrl_c_held, hear_sigterm


def _kinds(argv: list[str]) -> int:
    import argparse

    with ctrl_c_held():
        from ..model.stage_kinds import kinds

    parser = argparse.ArgumentParser(prog="paths kinds", description="List the stage kinds a path may use, with their "
                                     "roles and parameters.")
    parser.parse_args(argv)
    for name, info in sorted(kinds().items()):
        roles = [info.role] + (["needs a stage below"] if info.needs_below else []) + (
            [f"the rest of the path is built at its {info.rest_at}"] if info.rest_at else []) + (
            ["ends a path"] if info.ends_path else []) + (["written in Python"] if info.python_class else [])
        print(f"{name}  ({'; '.join(roles)})\n    {info.doc}")
        for p in info.params.values():
            default = "required" if p.required else f"default {p.default!r}"
            extra = f", one of {'|'.join(p.choices)}" if p.choices else ""
            extra += f", {p.min}..{p.max}" if p.min is not None else ""
            print(f"    {p.name}: {p.type} ({default}{extra}) {p.doc}")
    return 0


# Where each other command lives, imported only when it runs (a start-up stays quick).
LAZY_COMMANDS = {
    "trace": ("..runtime.trace_file", "trace_command"),
    "serve": ("..runtime.server", "serve_command"),
    "show": (".run", "show_command"),
    "run": (".run", "run_command"),
    "launch": (".launch", "launch_command"),
    "sbatch": (".sbatch", "sbatch_command"),
    "config": ("..runtime.compile_flags", "config_command"),
}


def _lazy(module: str, function: str) -> Callable[[list[str]], int]:
    def command(argv: list[str]) -> int:
        with ctrl_c_held():
            run = getattr(importlib.import_module(module, __package__), function)
        return run(argv)

    return command


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "kinds": _kinds,
    **{name: _lazy(*where) for name, where in LAZY_COMMANDS.items()},
}


class _WatchedOutput:
    """Standard output, which remembers a write that failed (a full disk, /dev/full): that error
    is then the output's, said in one line, not any other OSError's."""

    def __init__(self, stream):
        self.stream, self.failed = stream, None

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as e:
            self.failed = e
            raise

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as e:
            self.failed = e
            raise

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help"):
        print(f"paths: unknown command {argv[0]!r} (expected one of {', '.join(COMMANDS)}); see paths --help",
              file=sys.stderr)
        return 2
    output = sys.stdout = _WatchedOutput(sys.stdout) if sys.stdout is not None else None  # None: closed (>&-)
    try:
        hear_sigterm()
        if not argv or argv[0] in ("-h", "--help"):  # asked for, on stdout; else a usage error, on stderr
            print(__doc__.strip(), file=sys.stdout if argv else sys.stderr)
            return 0 if argv else 2
        status = COMMANDS[argv[0]](argv[1:])
        if output is not None:
            output.flush()  # a full disk says so here, not at exit
        return status
    except Terminated:
        print("paths: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("paths: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (| head): stop writing, and keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:
        if output is None or e is not output.failed:
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), output.stream.fileno())  # nothing more is said there
        print(f"paths: cannot write the output: {e.strerror or e}", file=sys.stderr)
        return 1
    except SystemExit as e:  # argparse: 0 after --help, 2 for a usage error; or a message to say
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
            return 2
        return int(e.code or 0)
    finally:
        if output is not None:
            sys.stdout = output.stream


if __name__ == "__main__":
    sys.exit(main())
