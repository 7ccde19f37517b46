"""CPU sets: the Linux list syntax ("0-3,8"), and a machine's CPUs shared out among the nodes
emulated on it."""

from __future__ import annotations

import argparse

MAX_CPU = (1 << 16) - 1  # the largest CPU number taken: Linux numbers at most 8192 CPUs


def cpu_list(text: str) -> set[int]:
    """'0-3,8' -> {0, 1, 2, 3, 8}; an argparse type, so a bad list is a usage error."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high if dash else low)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected CPU numbers and ranges like 0-3,8, got {text!r}") from None
        if first < 0 or last < first or last > MAX_CPU:
            raise argparse.ArgumentTypeError(f"expected ranges low-high with 0 <= low <= high <= {MAX_CPU}, got {part!r} "
                                             f"in {text!r}")
        cpus.update(range(first, last + 1))
    return cpus


def format_cpu_list(cpus) -> str:
    """{0, 1, 2, 3, 8} -> '0-3,8'."""
    ordered, runs = sorted(cpus), []
    for cpu in ordered:
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def cpu_shares(nodes: int, cpus: list[int]) -> list[list[int]]:
    """Node k of `nodes` gets cpus[k*C//nodes : (k+1)*C//nodes] of the C cpus, or, with more
    nodes than CPUs, the one CPU cpus[k*C//nodes] (nodes then share CPUs evenly)."""
    count = len(cpus)
    return [cpus[k * count // nodes:(k + 1) * count // nodes] or [cpus[k * count // nodes]] for k in range(nodes)]
