"""Tests of the sets synthesized with espeak-ng (bench/turns/). They fail without it
(not skip), saying how to install it: `make test` must not pass on a machine that
silently skipped them."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from bench.turns.synth import INSTALL_HINT

T = TypeVar("T")


def require_espeak() -> None:
    if shutil.which("espeak-ng") is None:
        pytest.fail(INSTALL_HINT)


def made_twice(make: Callable[[int, Path], T], cache_dir: Path, prefix: str) -> tuple[T, T]:
    """The set for seed 4, made and then made again, with the one file the first wrote
    in `cache_dir` (named `prefix`-4-…)."""
    require_espeak()
    made = make(4, cache_dir)
    assert len(list(cache_dir.glob(f"{prefix}-4-*.npz"))) == 1
    return made, make(4, cache_dir)
