"""`paths sbatch`: a Slurm batch script that runs each of a program's ranks on the host of the
node the map places it on.

    paths sbatch --map paper-4w --threads 6 --policy cyclic --sum TOTAL -- python app.py > job.sh
    sbatch job.sh

The map places N threads on its nodes (--policy: block, cyclic, pkg.mod:func, or the map's);
the script asks Slurm for as many nodes as the placement uses (--nodes) and, on each, as many
tasks as the placement puts on its busiest node (--ntasks-per-node, with --ntasks their product:
given fewer, Slurm may spread the tasks otherwise and leave a node too few CPUs for its ranks).
Inside the allocation the map's used nodes take the allocation's hosts in map order (`scontrol
show hostnames`); the script writes rank r's host on line r of a temporary host file (removed
when the script ends) and starts the N ranks with `srun --distribution=arbitrary`, which puts
each task on its line's host (SLURM_HOSTFILE). An allocation with fewer hosts than the
placement's nodes ends the script with a line on stderr and status 1, before any rank starts.
A built-in policy's Slurm name is also the job's --distribution (block for block and bucket,
cyclic for cyclic and even): what the job's other steps get by default.
The script exports PATHS_MAP and PATHS_POLICY, and PATHS_SUM, PATHS_ACQUIRE and PATHS_RELEASE as
`paths launch` gives them its ranks (--sum, --acquire, --release; unset when not given, whatever
the environment sbatch passes on), and PATHS_TRACE_DIR with --trace-dir (the folder the servers
the ranks host write trace files in): each rank finds its rank, its node and the other ranks by
itself (paths/runtime/rank_discovery.py, paths/runtime/rendezvous.py), with the rendezvous file
in the folder sbatch was called from.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from collections import Counter
from collections.abc import Sequence

from ..model.cluster_map import MapError, map_reference, open_map
from ..model.placement import SLURM_NAMES, canonical_policy, placement_warnings_said
from .launch import add_placement_options, options_and_command, rank_variables
from .run import SLURM_TIME_FORMS, folder_path, slurm_time
from ..runtime.process_context import make_runtime
from ..runtime.rank_discovery import MAP, POLICY, TRACE_DIR

# What sbatch reads in an #SBATCH line as the end of an option, a quote, an escape or a comment.
NOT_IN_AN_OPTION = re.compile(r"[^A-Za-z0-9._-]")


def batch_script(map_name: str | None, threads: int, policy: str | None, command: list[str], sums: Sequence[str] = (),
                 acquire: str | None = None, release: str | None = None, time: str | None = None,
                 trace_dir: str | None = None) -> str:
    """The script's text; ValueError (MapError) for a map, policy, count or hook that cannot be."""
    cluster_map = open_map(map_name)
    chosen = cluster_map.policy if policy is None else canonical_policy(policy)
    runtime = make_runtime(cluster_map, threads, sums=sums, policy=chosen, acquire=acquire, release=release)
    per_node = Counter(runtime.placements)
    trace_dir = os.path.abspath(trace_dir) if trace_dir else None
    variables = {**rank_variables(sums, acquire, release), TRACE_DIR: trace_dir}
    unset = [name for name, value in variables.items() if value is None]
    used = [node.name for node in cluster_map.nodes if node.name in per_node]
    busiest = max(per_node.values())
    # A line break in a comment would end it: bash would run the rest, and sbatch would stop
    # reading the #SBATCH lines there.
    summary = f"{threads} ranks of {shlex.join(command)} on map {cluster_map.name}, policy {chosen}:"
    return "\n".join([
        "#!/bin/bash",
        "# " + summary.replace("\n", "\\n"),
        f"#   {', '.join(f'{node} x{per_node[node]}' for node in used)}",
        f"#SBATCH --job-name=paths-{NOT_IN_AN_OPTION.sub('_', cluster_map.name)}",
        f"#SBATCH --nodes={len(used)}",
        f"#SBATCH --ntasks={len(used) * busiest}",
        f"#SBATCH --ntasks-per-node={busiest}",
        *([f"#SBATCH --distribution={chosen}"] if chosen in SLURM_NAMES.values() else []),  # a built-in
        *([f"#SBATCH --time={time}"] if time else []),
        f"export {MAP}={shlex.quote(map_reference(map_name))}",
        f"export {POLICY}={shlex.quote(chosen)}",
        *(f"export {name}={shlex.quote(value)}" for name, value in variables.items() if value is not None),
        *([f"unset {' '.join(unset)}"] if unset else []),
        *([f"mkdir -p -- {shlex.quote(trace_dir)} || exit 1"] if trace_dir else []),
        *host_file_commands(cluster_map.name, used, runtime.placements),
        f"srun --distribution=arbitrary --ntasks={threads} {shlex.join(command)}",
        "",
    ])


def slurm_time_text(text: str) -> str:
    """An argparse type: a time limit Slurm can read (run.slurm_time), as given."""
    slurm_time(text)
    return text.strip()


def host_file_commands(map_name: str, used: list[str], placements: Sequence[str]) -> list[str]:
    """Bash that writes rank r's host on line r of a temporary file (removed at exit) and names it
    in SLURM_HOSTFILE, the used nodes taking the allocation's hosts in order; too few hosts end
    the script with status 1."""
    index = {node: i for i, node in enumerate(used)}
    needed = shlex.quote(f"nodes map {map_name} places its ranks on ({', '.join(used)})")
    return [
        "# Rank r runs on the host of its node: the map's used nodes take the allocation's hosts in order.",
        'mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        f"if (( ${{#hosts[@]}} < {len(used)} )); then",
        f"    echo \"paths sbatch: the allocation's hosts (${{hosts[*]}}) are fewer than the\" {needed} >&2",
        "    exit 1",
        "fi",
        "SLURM_HOSTFILE=$(mktemp) || exit 1",
        """trap 'rm -f "$SLURM_HOSTFILE"' EXIT""",
        f"for node in {' '.join(str(index[node]) for node in placements)}; do echo \"${{hosts[node]}}\"; done "
        '> "$SLURM_HOSTFILE"',
        "export SLURM_HOSTFILE",
    ]


def sbatch_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="paths sbatch", usage="paths sbatch [options] -- CMD [ARGS...]",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_placement_options(parser)
    parser.add_argument("-t", "--time", type=slurm_time_text, metavar="TIME",
                        help=f"the job's time limit, as sbatch's --time: {SLURM_TIME_FORMS} (default: the partition's)")
    parser.add_argument("--trace-dir", metavar="DIR", type=folder_path,
                        help="where the node servers the ranks host write the trace files the ranks' paths ask for "
                             "(PATHS_TRACE_DIR; made by the script); without it they are refused")
    args, command = options_and_command(parser, argv)
    try:
        with placement_warnings_said("paths sbatch"):
            script = batch_script(args.map, args.threads, args.policy, command, args.sum, args.acquire, args.release,
                                  args.time, args.trace_dir)
        print(script, end="")
    except (MapError, ValueError) as e:
        print(f"paths sbatch: {e}", file=sys.stderr)
        return 2
    return 0
