"""A benchmark's measurements as a CSV file: one row per measurement, the given columns (a row's
missing ones left empty)."""

from __future__ import annotations

import argparse
import csv
import os


def write_rows(path: str, columns: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def check_output(parser: argparse.ArgumentParser, option: str, path: str | None) -> None:
    """A usage error (exit 2) now, not a traceback after a long run, for a file that has no
    folder to be written in."""
    folder = os.path.dirname(os.path.abspath(path)) if path else ""
    if path and not os.path.isdir(folder):
        parser.error(f"{option} {path}: no folder {folder} to write it in")
