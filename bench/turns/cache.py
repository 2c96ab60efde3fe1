"""The synthesized sets are made once per seed and kept in the temp dir, under a key
of everything they were made from (so a changed list of sentences makes a new set)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def spec_key(spec: list[object]) -> str:
    """A short hash of what a set is made from."""
    return hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:16]


def cached(
    path: Path | None,
    make: Callable[[], T],
    save: Callable[[T, Path], None],
    load: Callable[[Path], T],
) -> T:
    """What `load` reads from `path` when it was made before; else what `make` makes,
    saved there (no cache when `path` is None)."""
    if path is not None and path.exists():
        return load(path)
    made = make()
    if path is not None:
        save(made, path)
    return made
