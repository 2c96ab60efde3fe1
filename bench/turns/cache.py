"""The synthesized sets are made once per seed and kept in the temp dir, under a key
of everything they were made from (so a changed list of sentences makes a new set)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from bench.turns.noise import Pcm16

T = TypeVar("T")
Meta = list[dict[str, Any]]


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


def save_npz(path: Path, meta: Meta, tracks: list[Pcm16]) -> None:
    """`meta` as JSON in arr_0, then each track; written aside, then renamed in place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, np.array(json.dumps(meta)), *tracks)
    tmp.replace(path)


def load_npz(path: Path) -> tuple[Meta, list[Pcm16]]:
    """What `save_npz` wrote: the metadata and the tracks, in order."""
    with np.load(path) as data:
        meta: Meta = json.loads(str(data["arr_0"]))
        tracks = [data[f"arr_{i}"].astype(np.int16) for i in range(1, len(data.files))]
    return meta, tracks


def load_json(path: Path | None) -> dict[str, Any]:
    """A JSON cache kept across runs: what `path` holds, else nothing yet."""
    if path is None or not path.exists():
        return {}
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def save_json(path: Path | None, cache: dict[str, Any]) -> None:
    """Keep a JSON cache in `path` (None: not kept)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache))
