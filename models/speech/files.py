"""Where model files come from: installed packages and Parley's cache directory."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from models.errors import ModelMissing


@dataclass(frozen=True)
class ModelInfo:
    """One line of `parley models`."""

    stage: str
    name: str
    path: str
    size_bytes: int
    license: str
    source: str


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def cache_dir() -> Path:
    root = os.environ.get("PARLEY_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    return Path(root) / "parley" if root else Path.home() / ".cache" / "parley"


def package_dir(module: str, problem: str, fix: str) -> Path:
    """The folder of an installed package, found without importing it (weights ship
    as package data); ModelMissing(problem, fix) when it is not installed."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelMissing(problem, fix)
    return Path(next(iter(spec.submodule_search_locations)))


def join_parts(parts: list[Path], target: Path, expected_sha256: str | None, fix: str) -> None:
    """Concatenate `parts` into `target` once, checking the result's sha256; a
    stamp beside the target records a verified join so later starts skip it."""
    stamp = target.with_name(target.name + ".sha256")
    if target.is_file() and stamp.is_file():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    partial = target.with_name(target.name + ".partial")
    with partial.open("wb") as out:
        for part in parts:
            if not part.is_file():
                partial.unlink()
                raise ModelMissing(f"Model part {part} is missing.", fix)
            with part.open("rb") as src:
                while block := src.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    actual = digest.hexdigest()
    if expected_sha256 is not None and actual != expected_sha256:
        partial.unlink()
        raise ModelMissing(
            f"Joining {', '.join(p.name for p in parts)} gave checksum {actual}, "
            f"expected {expected_sha256}.",
            f"reinstall the parts ({fix} --force-reinstall)",
        )
    partial.rename(target)
    stamp.write_text(actual + "\n")
