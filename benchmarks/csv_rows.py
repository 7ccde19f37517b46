"""A benchmark's measurements as a CSV file: one row per measurement, the given columns (a row's
missing ones left empty)."""

from __future__ import annotations

import argparse
import csv

from paths.cli.run import check_output_files


def write_rows(path: str, columns: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def check_outputs(parser: argparse.ArgumentParser, outputs: dict[str, str | None]) -> None:
    """A usage error (exit 2) now, not a traceback after a long run, for an output file (option ->
    its file) that has no folder to be written in, or that two options name."""
    try:
        check_output_files(outputs)
    except ValueError as e:
        parser.error(str(e))
