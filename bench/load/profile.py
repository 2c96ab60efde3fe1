"""py-spy on a server during a point, and the top frames of what it sampled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# The event loop's and the launcher's own frames hold every sample: left out.
GENERIC_FRAMES = (
    "asyncio/base_events.py",
    "asyncio/runners.py",
    "<frozen runpy>",
    "probed_server.py",
    "asyncio/events.py",
)


def start_py_spy(pid: int, seconds: float, path: Path) -> subprocess.Popen[bytes]:
    """Sample the server's Python stacks (only while running Python: idle waits in
    the selector are left out) into py-spy's collapsed "raw" format."""
    spy = Path(sys.executable).with_name("py-spy")
    argv = [
        str(spy),
        "record",
        "-p",
        str(pid),
        "-d",
        str(int(seconds)),
        "-r",
        "200",
        "-f",
        "raw",
        "--function",
        "--nonblocking",
        "-o",
        str(path),
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def top_frames(path: Path, limit: int = 15) -> dict[str, list[tuple[str, float]]]:
    """Self and inclusive share of samples per frame, from collapsed stacks."""
    self_: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        leaf = frames[-1]
        self_[leaf] = self_.get(leaf, 0) + n
        for frame in set(frames):
            incl[frame] = incl.get(frame, 0) + n

    def top(d: dict[str, int]) -> list[tuple[str, float]]:
        ranked = sorted(
            ((f, c) for f, c in d.items() if not any(g in f for g in GENERIC_FRAMES)),
            key=lambda kv: -kv[1],
        )[:limit]
        return [(frame, round(100 * c / total, 1)) for frame, c in ranked]

    return {"samples": [("total", float(total))], "self": top(self_), "inclusive": top(incl)}
