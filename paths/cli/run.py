"""`paths run` and `paths show`: the user's main job on a cluster map.

    paths run gsum --map maps/paper-4w.yaml --threads 1-32 --policy cyclic --max-fanin 4 \\
                   --repeat 5 --csv out.csv --plot out.png
    paths run mcpi --map paper-4w --threads 1-32 --darts 10000000
    paths run ./libjacobi.so:jacobi --map paper-2w --threads 4 --arg points=32
    paths run mymod:kernel --sum TOTAL --acquire mymod:traced --threads 1-4
    paths show --map maps/paper-4w.yaml --threads 12 [--dot]

KERNEL is gsum, mcpi, FILE.so:SYMBOL (a C kernel on paths.h) or pkg.mod:func (a Python kernel).
A map is a YAML file or the name of a shipped one (local, paper-2w, paper-4w, paper-8w,
multicluster); with no --map the local machine's map is used. Swap the map, not the code — or
compare several in one run: `--map paper-2w,paper-4w,paper-8w --policy block,cyclic` runs every
pair, prints a table each, and puts them side by side in the CSV and in one plot. Every column
the kernel reports (paths_report) gets min / avg / max per thread count. A run that fails or is
interrupted (Ctrl-C, or SIGTERM: kill, a batch system's time limit) still prints the table of what
it measured before, and writes it to --csv and --plot; so does one whose output was closed (| head),
which ends there, exit 141. Progress goes to stderr: a bar on a
terminal, else (a batch job's log) a line as each thread count is measured.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import glob
import math
import os
import re
import sys
import time
import warnings
from dataclasses import dataclass, field

from .. import _native
from ..model.cluster_map import MAX_FANIN, TREE_FORMS, ClusterMap, MapError, open_map
from ..experiments.experiment import (Measurement, RunReport, RunSettings, checked_kernel, mean, plans_for,
                                      run_experiment, trace_prefix)
from ..runtime.kernel import load_kernel, parse_kernel_args
from ..runtime.process_context import BARRIER_ELEMENT
from ..experiments.launcher import LaunchError
from ..experiments.parent_death import adopt_orphans
from ..ctrl_c_held import Terminated
from ..model.placement import MAX_THREADS, PlacementWarning, canonical_policy
from ..model.reduction_tree import plan_reduction


def parse_thread_counts(text: str) -> list[int]:
    """'1-4,8,16' -> [1, 2, 3, 4, 8, 16]."""
    counts: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high if dash else low)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected counts and ranges like 1-32 or 1,2,4,8, got {text!r}") from None
        if first < 1 or last < first:
            raise argparse.ArgumentTypeError(f"expected positive counts, low-high ranges; got {part!r}")
        if last > MAX_THREADS:
            raise argparse.ArgumentTypeError(f"expected counts up to {MAX_THREADS}, got {part!r}")
        counts.extend(range(first, last + 1))
    return list(dict.fromkeys(counts))


def positive(maximum: float = math.inf, minimum: int = 1):
    """An argparse type: an integer from minimum to maximum (argparse names the option)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            expected = "a positive integer" if minimum == 1 else f"an integer from {minimum} to {maximum}"
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"expected at most {maximum}, got {text!r}")
        return value
    return parse


def seconds(text: str) -> float:
    """An argparse type: a positive number of seconds (inf: no limit)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0:  # and not NaN
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


SLURM_TIME = re.compile(r"(?:([0-9]+)-)?([0-9]+)(?::([0-9]+))?(?::([0-9]+))?")
SLURM_TIME_FORMS = ("MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS, DAYS-HOURS:MINUTES or "
                    "DAYS-HOURS:MINUTES:SECONDS; 0, UNLIMITED or INFINITE for none")


def slurm_time(text: str) -> float:
    """An argparse type: a time limit as srun and sbatch write it (-t, --time), in seconds (inf:
    no limit)."""
    if text.strip().upper() in ("UNLIMITED", "INFINITE"):
        return math.inf
    form = SLURM_TIME.fullmatch(text.strip())
    if not form:
        raise argparse.ArgumentTypeError(f"expected a time limit as Slurm writes it ({SLURM_TIME_FORMS}), got {text!r}")
    days, first, second, third = (int(part) if part else 0 for part in form.groups())
    if form[1] or form[4]:  # DAYS-HOURS[:MINUTES[:SECONDS]], HOURS:MINUTES:SECONDS
        hours, minutes, secs = first, second, third
    else:  # MINUTES[:SECONDS]
        hours, minutes, secs = 0, first, second
    total = ((days * 24 + hours) * 60 + minutes) * 60 + secs
    return float(total) if total else math.inf


def not_a_step_limit(text: str) -> float:
    """An argparse type for paths run's --time, which is refused: srun's --time limits the whole job,
    paths run's --timeout each step (argparse would take --time as an abbreviation of it)."""
    raise argparse.ArgumentTypeError("paths run has no job time limit (srun's --time, in minutes): --timeout SECONDS "
                                     "bounds each step")


def folder_path(text: str) -> str:
    """An argparse type: a folder's path, which an empty text is not (it would be taken as none)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a folder's path, got {text!r}")
    return text


def sum_name(text: str) -> str:
    """An argparse type: an element name for --sum (the ranks of paths launch and paths sbatch get
    them in PATHS_SUM, separated by commas)."""
    if not text.strip() or "," in text or text != text.strip():
        raise argparse.ArgumentTypeError(f"expected an element name without commas (PATHS_SUM separates names "
                                         f"by them) or spaces around it, got {text!r}")
    if text == BARRIER_ELEMENT:
        raise argparse.ArgumentTypeError(f"{text!r} is the run's own barrier (paths_barrier): name the sum otherwise")
    return text


def add_rank_options(parser: argparse.ArgumentParser) -> None:
    """--sum, --acquire and --release: what the threads (or ranks) reduce and which hooks they
    take, as paths run, paths launch and paths sbatch read them."""
    parser.add_argument("--sum", action="append", default=[], metavar="NAME", type=sum_name,
                        help="reduce element NAME as a sum (as the map's elements: NAME: {reduce: sum}); repeatable")
    parser.add_argument("--acquire", metavar="PKG.MOD:FUNC", help="the acquire hook (default: the map's, else "
                                                                  "sums as reduction trees, elements at their homes)")
    parser.add_argument("--release", metavar="PKG.MOD:FUNC", help="the release hook (default: the map's)")


def check_output_files(outputs: dict[str, str | None]) -> None:
    """A ValueError now, not a failure after a long run, for an output file (option -> its file,
    if given) that has no folder to be written in, that is a folder, or that another option
    writes too (the one would overwrite the other; a device such as /dev/null takes both)."""
    written: dict = {}
    for option, path in outputs.items():
        if not path:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise ValueError(f"{option} {path}: no folder {folder} to write it in")
        if os.path.isdir(path):
            raise ValueError(f"{option} {path}: expected a file to write, got a folder")
        try:
            found = os.stat(path)
        except OSError:  # not there yet: its name says which file it will be
            file = os.path.realpath(path)
        else:  # a file by its inode (a hard link too); not a regular file: written to, never overwritten
            file = (found.st_dev, found.st_ino) if os.path.isfile(path) else None
        same = written.setdefault(file, option) if file else option
        if same != option:
            raise ValueError(f"{option} {path}: {same} writes that file too: give each its own")


def make_folder(option: str, path: str) -> None:
    """The folder an option names, made if missing; ValueError naming the option otherwise."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{option} {path}: expected a folder, and cannot make one there: {e.strerror}") from None


@dataclass
class Run:
    """One configuration of a `paths run` and what it measured."""

    cluster_map: ClusterMap
    settings: RunSettings
    measurements: list[Measurement] = field(default_factory=list)
    counters: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.cluster_map.name}, {self.settings.policy or self.cluster_map.policy}"


def _listed(text: str | None) -> list:
    """'a,b' -> ['a', 'b']; None -> [None] (the default)."""
    return [part.strip() for part in text.split(",")] if text is not None else [None]


def _map_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--map", help="a cluster map: a YAML file or a shipped map's name (default: local)")
    parser.add_argument("--policy", help="placement: block (fill a node first), cyclic (round-robin; "
                                         "bucket and even are the same two), or a Python dotted name; "
                                         "default: the map's")
    parser.add_argument("--max-fanin", type=positive(MAX_FANIN, minimum=2),
                        help="most contributors per sum stage (default: the map's)")
    parser.add_argument("--tree-form", choices=TREE_FORMS,
                        help="how the nodes' partial sums meet: sums (reduce-sum stages joined by remote hops), "
                             "allreduce (one allreduce group, recursive doubling) or allreduce-tree (one group, "
                             "a tree of fan-in --max-fanin); default: the map's")


THREADS_ALSO = "also -n or --ntasks, as srun says it, and -np, as mpirun does"


def threads_named(parser: argparse.ArgumentParser, options: list[str],
                  counted: str = "thread count") -> list[str]:
    """The options, srun's and mpirun's names for the count given as --threads (so that a
    message names the one option): -np N and -n N (also -np=N, -npN, -nN), and --ntasks N (also
    --ntasks=N, and its abbreviations from --n, as argparse takes --threads'); a usage error naming
    what is `counted` when it is given more than once, and one for srun's node count (-N,
    --nodes): the map's nodes are the run's."""
    named = []
    for option in options:
        name, equals, value = option.partition("=")
        if re.fullmatch(r"-N[\d,-]*|--nodes", name):  # srun's and sbatch's node count
            parser.error(f"{name}: the map's nodes are the nodes here (--map, whose placement puts the threads on "
                         f"them): give the {counted} with --threads (-n)")
        short = re.fullmatch(r"-(?:np|n)([\d,-]*)", name)
        if short or (len(name) >= 3 and "--ntasks".startswith(name)):
            named.append(f"--threads={short[1]}{equals}{value}" if short and short[1] else f"--threads{equals}{value}")
        else:
            named.append(option)
    if sum(len(name) >= 4 and "--threads".startswith(name) for name, _, _ in (o.partition("=") for o in named)) > 1:
        parser.error(f"the {counted} is given more than once (--threads, -n, --ntasks, -np): give it once")
    return named


def run_command(argv: list[str]) -> int:
    adopt_orphans()  # so that what a killed node's kernels left goes with the run (parent_death.py)
    parser = argparse.ArgumentParser(prog="paths run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel", help="gsum (global-sum latency), mcpi (Monte Carlo pi), FILE.so:SYMBOL "
                                       "(a C kernel) or pkg.mod:func (a Python kernel)")
    _map_options(parser)
    parser.add_argument("--threads", type=parse_thread_counts, default=[1, 2, 4],
                        help=f"thread counts: ranges and lists, e.g. 1-32 or 1,2,4,8 (default 1,2,4; {THREADS_ALSO})")
    parser.add_argument("--repeat", type=positive(), default=5, help="runs per thread count (default 5)")
    parser.add_argument("--rounds", type=positive(),
                        help=f"gsum only: global sums per run (default {RunSettings.rounds})")
    parser.add_argument("--darts", type=positive(), help=f"mcpi only: darts per run (default {RunSettings.darts})")
    parser.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                        help="an argument the kernel reads with paths_arg (ctx.arg); repeatable")
    add_rank_options(parser)
    parser.add_argument("--launch", choices=("local", "ssh", "slurm"), help="how nodes start (default: the map's)")
    parser.add_argument("--timeout", type=seconds, default=120.0,
                        help="seconds any one step may take, the nodes' start included (kernels get it as "
                             "--arg timeout, and the run's repeat, 0, 1, ..., as --arg repeat; default: %(default)g)")
    parser.add_argument("-t", "--time", type=not_a_step_limit, help=argparse.SUPPRESS)
    parser.add_argument("--trace", metavar="DIR", help="trace every node's callers and every link between nodes "
                                                    "into DIR, then merge the traces into DIR/<kernel>.json "
                                                    "(Perfetto: https://ui.perfetto.dev); the kernel's trace "
                                                    "files of an earlier run in DIR are removed first")
    parser.add_argument("--counters", action="store_true",
                        help="after each thread count, print every node's stages with their counters "
                             "(operations, waits, and the requests each remote stage sent)")
    parser.add_argument("--pin", action="store_true",
                        help="bind each node's threads to its CPUs: thread t of a node's n on its CPU "
                             "t*cpus/n, so a group of a tree shares a CPU; with --launch local every "
                             "node process first gets its own share of this machine's CPUs")
    parser.add_argument("--csv", help="write every measurement to this CSV file (a row per run, with each "
                                      "column's COLUMN:min, :avg and :max over its thread count)")
    parser.add_argument("--plot", help="write a plot (min/avg/max per thread count) to this PNG file")
    args = parser.parse_args(threads_named(parser, argv))
    for option, owner, value in (("--rounds", "gsum", args.rounds), ("--darts", "mcpi", args.darts)):
        if value is not None and args.kernel != owner:
            parser.error(f"{option}: only {owner} takes it, not {args.kernel} (a kernel of your own reads "
                         "--arg KEY=VALUE)")
    try:
        kernel_args = parse_kernel_args(args.arg)
        runs = [Run(open_map(map_name), RunSettings(
                    args.kernel, args.threads, policy, args.max_fanin, args.repeat,
                    args.rounds or RunSettings.rounds, args.darts or RunSettings.darts,
                    args.launch, args.timeout, collect_counters=args.counters, trace_dir=args.trace,
                    pin=args.pin, args=kernel_args, sums=tuple(args.sum), acquire=args.acquire,
                    release=args.release, tree_form=args.tree_form))
                for map_name in _listed(args.map) for policy in map(canonical_policy, _listed(args.policy))]
        if args.trace and len(runs) > 1:
            raise ValueError("--trace: trace one map and policy at a time (their trace files would mix)")
        if args.trace:
            make_folder("--trace", args.trace)
        check_output_files({"--csv": args.csv, "--plot": args.plot})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PlacementWarning)
            for run in runs:  # the kernel, the hooks and every count checked before anything starts
                checked_kernel(run.cluster_map, run.settings)
                plans_for(run.cluster_map, run.settings)
        for message in dict.fromkeys(str(w.message) for w in caught):
            print(f"paths run: warning: {message}", file=sys.stderr)
        if args.trace:
            _clear_traces(args.trace, trace_prefix(load_kernel(args.kernel)))
    except (MapError, ValueError, LaunchError, OSError) as e:
        if _output_lost(e):
            raise  # the command line's exit 141 (or its line for a full disk), not a usage error
        print(f"paths run: {e}", file=sys.stderr)
        return 1 if isinstance(e, LaunchError) else 2
    done = 0  # the run under way
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PlacementWarning)
            for done, run in enumerate(runs):
                _run_with_progress(run)
                print(results_table(run.cluster_map, run.settings, run.measurements), flush=True)
                if args.counters:
                    print(counters_table(run.counters))
    except (KeyboardInterrupt, MapError, ValueError, LaunchError, OSError) as e:
        if _output_lost(e):  # the tables cannot be read (| head) or written (a full disk): the files are kept
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # and nothing more is said there
            _write_outputs(args, [run for run in runs if run.measurements], said=sys.stderr)
            raise
        # What was measured before is kept: its table, and the files asked for.
        status = 143 if isinstance(e, Terminated) else 130 if isinstance(e, KeyboardInterrupt) else \
            1 if isinstance(e, LaunchError) else 2
        said = {143: "paths: terminated", 130: "paths: interrupted"}  # as `paths` says it
        print(said.get(status, f"paths run: {e}"), file=sys.stderr)
        measured = [run for run in runs if run.measurements]
        if measured and measured[-1] is runs[done]:
            counts, made = sorted({m.threads for m in runs[done].measurements}), len(runs[done].measurements)
            print(f"paths run: keeping what was measured before it ended: {made} run{'s' if made != 1 else ''} at "
                  f"{', '.join(map(str, counts))} threads", file=sys.stderr)
            print(results_table(runs[done].cluster_map, runs[done].settings, runs[done].measurements), flush=True)
        return _write_outputs(args, measured) or status
    status = _write_outputs(args, runs)
    if status == 0 and args.trace:
        return _merge_traces(args.trace, trace_prefix(load_kernel(args.kernel)))
    return status


def _output_lost(error: BaseException) -> bool:
    """Whether the error is standard output's: its reader went away (| head), or it cannot be
    written (a full disk: the `paths` command watches it, and says so)."""
    return isinstance(error, BrokenPipeError) or (isinstance(error, OSError) and
                                                  error is getattr(sys.stdout, "failed", None))


def _write_outputs(args: argparse.Namespace, runs: list[Run], said=None) -> int:
    """The --csv and --plot files of the runs: 0, or 1 when one cannot be written (said), each
    file written said on `said` (default: stdout)."""
    for option, path, write in (("--csv", args.csv, write_csv), ("--plot", args.plot, write_plot)):
        if not path or not runs:
            continue
        try:
            write(path, runs)
        except OSError as e:
            print(f"paths run: {option} {path}: cannot write it: {e.strerror or e}", file=sys.stderr)
            return 1
        print(f"wrote {path}", file=said or sys.stdout)
    return 0


def _trace_files(directory: str, prefix: str) -> list[str]:
    """The trace files a traced run of the kernel with this prefix writes into directory: regular
    files only (a pipe or a device of that name is no trace, and is left alone)."""
    return sorted(p for p in glob.glob(os.path.join(directory, f"{glob.escape(prefix)}-*.bin")) if os.path.isfile(p))


def _clear_traces(directory: str, prefix: str) -> None:
    """A traced run replaces an earlier one's traces in its folder: its trace files, whatever
    thread counts they came from, would otherwise merge into this run's."""
    old = _trace_files(directory, prefix)
    for path in old:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise ValueError(f"--trace {directory}: cannot replace the earlier trace file {path}: {e.strerror}") from None
    if old:
        print(f"paths run: --trace {directory}: removed {len(old)} trace files of an earlier run", file=sys.stderr)


def _merge_traces(directory: str, prefix: str) -> int:
    """All the run's trace files, as one Perfetto file beside them."""
    from ..runtime.trace_file import TraceFileError, read_trace, to_perfetto

    files = _trace_files(directory, prefix)
    try:
        traces = [read_trace(f) for f in files]
        out = os.path.join(directory, f"{prefix}.json")
        to_perfetto(traces, out)
    except (TraceFileError, OSError) as e:
        print(f"paths run: --trace {directory}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out}: {sum(len(t.events) for t in traces)} events from {len(files)} trace files "
          f"(open it at https://ui.perfetto.dev)")
    return 0


def _run_with_progress(run: Run) -> None:
    """Measures the run, its measurements kept in it as they are made. Progress goes to stderr: a
    bar on a terminal, else (a batch job's log) a line as each thread count is measured; best
    effort: stderr that cannot be written (full, closed) costs the run nothing."""
    from tqdm import tqdm

    settings = run.settings
    report = RunReport(run.measurements, run.counters)
    total = len(settings.thread_counts) * settings.repeat
    what = f"{settings.kernel} on {run.cluster_map.name}, policy {settings.policy or run.cluster_map.policy}"
    started, writable = time.monotonic(), True
    with tqdm(total=total, desc=what, unit="run", file=sys.stderr, disable=not _bar_fits(), leave=False) as bar:
        def step(threads: int, repeat: int) -> None:
            nonlocal writable
            try:
                bar.set_postfix_str(f"{threads} threads")
                bar.update()
                if bar.disable and writable and repeat == settings.repeat - 1:
                    counts = settings.thread_counts
                    print(f"paths run: {what}: {threads} thread{'s' if threads != 1 else ''} measured "
                          f"({counts.index(threads) + 1} of {len(counts)} thread counts, "
                          f"{time.monotonic() - started:.1f} s)", file=sys.stderr, flush=True)
            except OSError:
                writable = False
        run_experiment(run.cluster_map, settings, step, report)


def _bar_fits() -> bool:
    """Whether stderr is a terminal of a known width, where a progress bar can be drawn (a
    terminal that says it has 0 columns, as one `script` opens, would show a bar of none)."""
    try:
        return sys.stderr.isatty() and os.get_terminal_size(sys.stderr.fileno()).columns > 0
    except (OSError, ValueError):  # no terminal, or stderr closed
        return False


def _summary(measurements: list[Measurement]) -> list[tuple[int, int, list[Measurement]]]:
    by_count: dict[int, list[Measurement]] = {}
    for m in measurements:
        by_count.setdefault(m.threads, []).append(m)
    return [(n, ms[0].nodes, ms) for n, ms in by_count.items()]


def columns_of(runs: list[Run]) -> list[str]:
    """Every column the runs' kernels reported, in the order they first appear."""
    return list(dict.fromkeys(name for run in runs for m in run.measurements for name in m.columns))


def _stats(measurements: list[Measurement], column: str) -> tuple[float, float, float]:
    """min, average, max of a column over the runs that have it (NaN when none does)."""
    values = [m.columns[column] for m in measurements if column in m.columns]
    if not values:
        return math.nan, math.nan, math.nan
    return min(values), mean(values), max(values)


def _numbers(values: list[float]) -> list[str]:
    """One column's cells with the same decimals: none for whole numbers, else six significant
    digits for its largest value; in scientific notation when that is below 0.001 (a residual of
    1e-8 is not 0.00000) or from 1e15 (not a number of 16 digits or more)."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    if finite and (0 < max(finite) < 1e-3 or max(finite) >= 1e15):
        return [f"{v:.5e}" for v in values]
    decimals = 0 if all(v.is_integer() for v in finite) else max(0, 6 - len(str(int(max(finite)))))
    return [f"{v:.{decimals}f}" for v in values]


def results_table(cluster_map: ClusterMap, settings: RunSettings, measurements: list[Measurement]) -> str:
    """Min / avg / max of each reported column per thread count. With one column the header says
    min avg max (the title names what it is); with more, each cell says column:stat. A thread
    count of fewer runs than asked (the run ended during it) says how many it has."""
    kernel = load_kernel(settings.kernel)
    policy = settings.policy or cluster_map.policy
    fanin = settings.max_fanin or cluster_map.max_fanin
    tree_form = settings.tree_form or cluster_map.tree_form
    form = "" if tree_form == TREE_FORMS[0] else f", tree form {tree_form}"
    mapping = f"policy {policy}, max fan-in {fanin}{form}" + (", threads pinned" if settings.pin else "")
    given = [f"{getattr(settings, kernel.builtin.setting)} {kernel.builtin.setting}"] if kernel.builtin else []
    given += [f"{key}={value}" for key, value in settings.args.items()]
    repeats = f"{settings.repeat} run{'s' if settings.repeat != 1 else ''}"
    runs = f"{', '.join(given)} x {repeats}" if given else repeats
    columns = columns_of([Run(cluster_map, settings, measurements)])
    title = f"{kernel.title} on map {cluster_map.name} ({mapping}), {runs}"
    if len(columns) == 1:
        unit = kernel.builtin.unit if kernel.builtin and kernel.builtin.unit else columns[0]
        title += f": {unit}"
    stats = ("min", "avg", "max")
    labels = list(stats) if len(columns) == 1 else [f"{column}:{stat}" for column in columns for stat in stats]
    widths = [max(10, len(label)) for label in labels]
    lines = [title if columns else f"{title} (the kernel reported no columns)",
             f"{'threads':>8} {'nodes':>6} " + " ".join(f"{label:>{w}}" for label, w in zip(labels, widths))]
    rows = _summary(measurements)
    by_column = {column: _numbers([v for _, _, ms in rows for v in _stats(ms, column)]) for column in columns}
    for r, (n, nodes, ms) in enumerate(rows):
        cells = [by_column[column][3 * r + i] for column in columns for i in range(3)]
        part = f"  ({len(ms)} of {repeats}: it ended before the rest)" if len(ms) < settings.repeat else ""
        lines.append(f"{n:>8} {nodes:>6} " + " ".join(f"{cell:>{w}}" for cell, w in zip(cells, widths)) + part)
    return "\n".join(lines)


def counters_table(counters: dict[int, dict[str, list]]) -> str:
    """Every node's stages after each thread count: the stage (its spec, not its whole path)
    and its counters, the node's busiest stages first."""
    lines = []
    for n, nodes in counters.items():
        lines.append(f"\nstages after {n} threads (node, stage, counters):")
        for node, stages in nodes.items():
            for entry in sorted(stages, key=lambda e: -e["counters"].get("operations", 0)):
                shown = {k: v for k, v in entry["counters"].items() if v and k != "links"}
                stage_text = entry["stage"].split(" -> ")[0]
                lines.append(f"  {node:<10} {stage_text:<48} " + ", ".join(f"{k}={v}" for k, v in shown.items()))
    return "\n".join(lines)


def write_csv(path: str, runs: list[Run]) -> None:
    """One row per run: the configuration, every column the kernel reported, then each column's
    min, avg and max over the runs of its thread count (COLUMN:min ..., as the table's cells say:
    no kernel's column has a ':')."""
    columns = columns_of(runs)
    stats = ("min", "avg", "max")

    def exact(value: float) -> str:
        """Ten significant digits, or as many as it takes to read back the same float (1.797...e308
        to ten digits reads back as inf)."""
        short = f"{value:.10g}"
        return short if float(short) == value else repr(value)

    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*_native.RUN_COLUMNS, *columns,  # the kernel's own are none of these
                         *(f"{c}:{stat}" for c in columns for stat in stats)])
        for run in runs:
            cluster_map, settings = run.cluster_map, run.settings
            for m in run.measurements:
                same = [other for other in run.measurements if other.threads == m.threads]
                writer.writerow([m.kernel, cluster_map.name, settings.policy or cluster_map.policy,
                                 settings.max_fanin or cluster_map.max_fanin,
                                 settings.tree_form or cluster_map.tree_form, m.threads, m.nodes, m.repeat,
                                 *(exact(m.columns[c]) if c in m.columns else "" for c in columns),
                                 *("" if math.isnan(value) else exact(value)
                                   for c in columns for value in _stats(same, c))])


PLOTTED_MOST = 1e300  # larger values (and inf, nan) are left out of a plot: its axis cannot hold them


def write_plot(path: str, runs: list[Run]) -> None:
    """One panel per reported column: the average per thread count with min-max bars, one line
    per map and policy (values past PLOTTED_MOST are in the table and the CSV only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    columns = columns_of(runs) or ["(no columns reported)"]
    figure, panels = plt.subplots(len(columns), 1, figsize=(7, 1.5 + 3 * len(columns)), squeeze=False)
    for axes, column in zip(panels[:, 0], columns):
        for run in runs:
            rows = [(n, _stats(ms, column)) for n, _, ms in _summary(run.measurements)]
            rows = [(n, low, mean, high) for n, (low, mean, high) in rows
                    if all(abs(v) <= PLOTTED_MOST for v in (low, mean, high))]  # not nan, inf or past an axis
            if rows:
                axes.errorbar([r[0] for r in rows], [r[2] for r in rows],
                              yerr=[[max(0.0, r[2] - r[1]) for r in rows], [max(0.0, r[3] - r[2]) for r in rows]],
                              marker="o", capsize=3, label=run.label)
        axes.set_ylabel(column)
        axes.grid(True, alpha=0.3)
        if axes.has_data():
            axes.legend()
    panels[-1, 0].set_xlabel("threads")
    panels[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))  # no tick at 1.5 threads
    maps = ", ".join(dict.fromkeys(run.cluster_map.name for run in runs))
    title = load_kernel(runs[0].settings.kernel).title
    repeat = runs[0].settings.repeat
    panels[0, 0].set_title(f"{title} on {maps}: min / average / max of {repeat} run{'s' if repeat != 1 else ''}")
    figure.tight_layout()
    kind = os.path.splitext(path)[1][1:].lower()  # exactly this file: PNG unless it names another format
    figure.savefig(path, dpi=120, format=kind if kind in figure.canvas.get_supported_filetypes() else "png")
    plt.close(figure)


def show_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="paths show", description="Print a map's placement of N threads and "
                                     "the reduction tree their paths build.")
    _map_options(parser)
    parser.add_argument("--threads", type=positive(MAX_THREADS), required=True,
                        help=f"how many threads ({THREADS_ALSO})")
    parser.add_argument("--dot", action="store_true", help="print Graphviz DOT instead of text")
    args = parser.parse_args(threads_named(parser, argv))
    try:
        cluster_map = open_map(args.map)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PlacementWarning)
            at_home = dataclasses.replace(cluster_map, home=cluster_map.home_of("GSUM"))  # as the run homes it
            plan = plan_reduction(at_home, args.threads, ("GSUM", "q"), policy=args.policy,
                                  max_fanin=args.max_fanin, form=args.tree_form)
    except (MapError, ValueError, OSError) as e:
        print(f"paths show: {e}", file=sys.stderr)
        return 2
    for message in dict.fromkeys(str(w.message) for w in caught):
        print(f"paths show: warning: {message}", file=sys.stderr)
    if args.dot:
        print(plan.to_dot())
        return 0
    print("placement:")
    for node in cluster_map.nodes:
        threads = [str(i) for i, p in enumerate(plan.placements) if p == node.name]
        if threads:
            print(f"  {node.name:<12} threads {', '.join(threads)}")
    print(plan.render())
    return 0
