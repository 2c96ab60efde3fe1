"""`parley bench`: the benchmarks of a source checkout, as `make bench` runs them.

The benchmarks live in the repository's `bench/` (they read the speech fixtures in
`tests/fixtures` and start their servers with `python -m bench.…`), so they run from
a checkout with the `bench` extra installed; this command finds that checkout and
runs each benchmark in its own process, the way `make bench` does.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

# `parley bench <name>` -> the module it runs; "all" runs them in this order.
BENCHMARKS = {
    "voice-to-voice": "bench.voice_to_voice",
    "vad-backends": "bench.vad_backends",
    "load": "bench.load",
}
CHOICES = ["all", *BENCHMARKS]
EXTRA_FIX = "pip install -e '.[bench]' in the checkout (make bench does it)"


def checkout_root() -> Path | None:
    """The source checkout this install runs from, if it is one (an editable install:
    `server/` sits beside `bench/` and `tests/fixtures`)."""
    root = Path(__file__).resolve().parent.parent
    if (root / "bench" / "load.py").is_file() and (root / "tests" / "fixtures").is_dir():
        return root
    return None


def extra_installed() -> bool:
    """Whether the `bench` extra (matplotlib for the plot) is in this environment."""
    return importlib.util.find_spec("matplotlib") is not None


def commands(which: str, extra: Sequence[str]) -> list[list[str]]:
    """The command lines `parley bench which extra…` runs, in order. Extra arguments
    go to the one benchmark named (`all` takes none)."""
    if which == "all":
        if extra:
            raise ValueError("arguments go to one benchmark: parley bench load --sweep 1 25")
        return [[sys.executable, "-m", module] for module in BENCHMARKS.values()]
    return [[sys.executable, "-m", BENCHMARKS[which], *extra]]


def run(
    which: str,
    extra: Sequence[str],
    *,
    root: Path | None = None,
    call: Callable[..., int] = subprocess.call,
) -> int:
    root = root or checkout_root()
    if root is None:
        print(
            "parley bench: the benchmarks run from a source checkout of Parley "
            "(git clone, then make bench); this install has no bench/ beside it",
            file=sys.stderr,
        )
        return 2
    if not extra_installed():
        print(f"parley bench: the bench extra is missing; {EXTRA_FIX}", file=sys.stderr)
        return 2
    try:
        argvs = commands(which, extra)
    except ValueError as exc:
        print(f"parley bench: {exc}", file=sys.stderr)
        return 2
    for argv in argvs:
        code = call(argv, cwd=root)
        if code != 0:
            return code
    return 0
