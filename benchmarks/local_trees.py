"""Sum trees on this machine for the benchmarks: N threads' handles shaped as a named tree
(`flat`: one sum of all threads; `faninK`: sums of at most K contributors, then sums of those),
and the parsing of the comma-separated lists the benchmark options take."""

from __future__ import annotations

import argparse
import warnings

import paths
from paths.model.cluster_map import MAX_FANIN, builtin_map
from paths.model.placement import MAX_THREADS, PlacementWarning
from paths.model.reduction_tree import plan_reduction


def tree_handles(n: int, tree: str, pastset: paths.PastSet, element=("GSUM", "q")) -> list:
    """One handle per thread over the element in `pastset`, shaped as `tree`. More threads than
    CPUs is what these benchmarks measure on purpose, so the map's warning about it is not shown."""
    fanin = max(n, 2) if tree == "flat" else int(tree.removeprefix("fanin"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlacementWarning)
        plan = plan_reduction(builtin_map("local"), n, element, max_fanin=fanin)
    return [paths.build_path(p, pastset=pastset) for p in plan.paths]


def parse_counts(text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]; each count >= 1, each once (a run would measure it twice)."""
    try:
        counts = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of counts, got {text!r}") from None
    if not counts or min(counts) < 1 or max(counts) > MAX_THREADS:
        raise argparse.ArgumentTypeError(f"counts must be from 1 to {MAX_THREADS} (the most threads a run places), "
                                         f"got {text!r}")
    _each_once(counts, text, "count")
    return counts


def _each_once(items: list, text: str, what: str) -> None:
    """A list option names each item once: a run would measure one given twice twice."""
    twice = sorted({str(item) for item in items if items.count(item) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"{', '.join(twice)} given more than once in {text!r}: expected each {what} once")


def parse_trees(text: str) -> list[str]:
    """'flat,fanin4' -> ['flat', 'fanin4']."""
    trees = [t for t in text.split(",") if t]
    if not trees:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of trees (flat, faninK), got {text!r}")
    _each_once(trees, text, "tree")
    for t in trees:
        if t != "flat" and not (t.startswith("fanin") and t[5:].isdigit() and 2 <= int(t[5:]) <= MAX_FANIN):
            raise argparse.ArgumentTypeError(f"unknown tree {t!r} (expected flat or faninK with K from 2 to "
                                             f"{MAX_FANIN})")
    return trees
