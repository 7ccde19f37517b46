"""`paths run`'s progress lines, which it writes to stderr when that is not a terminal (a batch
job's log): one as each thread count is measured. Tests that look at what else it says drop them."""

import re

LINE = re.compile(r"paths run: (?P<what>.+ on \S+, policy \S+): (?P<threads>\d+) threads? measured "
                  r"\((?P<index>\d+) of (?P<counts>\d+) thread counts, \d+\.\d s\)")


def progress(stderr: str) -> list[re.Match]:
    return [m for m in map(LINE.fullmatch, stderr.splitlines()) if m]


def without_progress(stderr: str) -> str:
    return "".join(line for line in stderr.splitlines(keepends=True) if not LINE.fullmatch(line.rstrip("\n")))
