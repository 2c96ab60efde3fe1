"""What a benchmark shows and keeps: its table on stdout, one row a line with the
cells apart by ` | `, and its figures as JSON under bench/results/."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path


def print_table(header: str, rows: Iterable[Iterable[object]]) -> None:
    print(header)
    for row in rows:
        print(" | ".join(str(cell) for cell in row))


def write_results(path: Path, figures: object, indent: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=indent) + "\n")
    print(f"wrote {path}")
