"""Tests that synthesize speech with espeak-ng fail without it (not skip), saying how
to install it: `make test` must not pass on a machine that silently skipped them."""

from __future__ import annotations

import shutil

import pytest

from bench.turns.synth import INSTALL_HINT


def require_espeak() -> None:
    if shutil.which("espeak-ng") is None:
        pytest.fail(INSTALL_HINT)
