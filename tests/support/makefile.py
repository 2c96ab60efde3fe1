"""The Makefile's recipes, for the tests that check what a `make` target runs."""

from __future__ import annotations

import re
from pathlib import Path

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"


def recipe(target: str) -> str:
    """The tab-indented lines under `target:`; the test fails when there is no such
    target."""
    found = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", MAKEFILE.read_text(), re.M)
    assert found is not None, f"no {target} target in the Makefile"
    return found.group(1)
