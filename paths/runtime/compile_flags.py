"""What C code built against PATHS needs.

`paths.get_include()` is the folder of paths.h, for kernels and extension modules:

    cc -shared -fPIC -O2 -I"$(python -c 'import paths; print(paths.get_include())')" k.c -o libk.so

A program of its own (a main that calls paths_init) links libpaths and embeds this interpreter:

    cc prog.c $(python -m paths config --cflags --libs) -o prog

`--cflags` gives the include folders of paths.h and Python.h; `--libs` gives libpaths (in the
package, found again at run time through an rpath) and this interpreter's libpython with what it
needs, as python3-config --embed would.
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from pathlib import Path

from .. import _native

PACKAGE = Path(_native.__file__).resolve().parent


def get_include() -> str:
    """The folder holding paths.h (inside the installed package)."""
    return str(PACKAGE / "include")


def cflags() -> list[str]:
    return [f"-I{get_include()}", f"-I{sysconfig.get_paths()['include']}", "-pthread"]


def libs() -> list[str]:
    var = sysconfig.get_config_var
    flags = [f"-L{PACKAGE}", "-lpaths", f"-Wl,-rpath,{PACKAGE}"]
    libpython = f"-lpython{var('LDVERSION') or var('VERSION')}"
    if var("Py_ENABLE_SHARED"):
        flags += [f"-L{var('LIBDIR')}", libpython, f"-Wl,-rpath,{var('LIBDIR')}"]
    else:  # a static libpython: extension modules find its symbols in the program
        flags += [f"-L{var('LIBPL')}", libpython, *(var("LINKFORSHARED") or "").split()]
    return flags + (var("LIBS") or "").split() + (var("SYSLIBS") or "").split()


def config_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="paths config", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cflags", dest="parts", action="append_const", const=cflags,
                        help="the include flags (paths.h, Python.h)")
    parser.add_argument("--libs", dest="parts", action="append_const", const=libs,
                        help="the link flags (libpaths, libpython)")
    args = parser.parse_args(argv)
    if not args.parts:
        parser.error("expected --cflags, --libs or both")
    print(" ".join(flag for part in args.parts for flag in part()))
    return 0


if __name__ == "__main__":
    sys.exit(config_command(sys.argv[1:]))
