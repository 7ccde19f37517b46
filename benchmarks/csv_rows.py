"""A benchmark's measurements as a CSV file: one row per measurement, the given columns (a row's
missing ones left empty)."""

from __future__ import annotations

import csv


def write_rows(path: str, columns: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
