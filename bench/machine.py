"""Machine facts for the benchmarks: what ran where, and who else used the CPU."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(packages: list[str]) -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for package in packages:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "packages": versions,
        "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()],
    }


def proc_stat(pid: str) -> tuple[int, int] | None:
    """(parent pid, clock ticks of CPU used by `pid` and its reaped children)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after "pid (comm)"
    return int(fields[1]), sum(int(f) for f in fields[11:15])


def process_tree(root: int) -> tuple[set[str], dict[str, tuple[int, int]]]:
    """The pids of `root` and its descendants, and every process's proc_stat."""
    stats = {pid: s for pid in os.listdir("/proc") if pid.isdigit() if (s := proc_stat(pid))}
    tree = {str(root)}
    while children := {pid for pid, (ppid, _) in stats.items() if str(ppid) in tree} - tree:
        tree |= children
    return tree, stats


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds used so far by `root` and its descendants."""
    tree, stats = process_tree(root)
    return sum(stats[pid][1] for pid in tree if pid in stats) / os.sysconf("SC_CLK_TCK")


def tree_rss_bytes(root: int) -> int:
    tree, _ = process_tree(root)
    total = 0
    for pid in tree:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def machine_ticks() -> tuple[float, float, float]:
    """(busy, steal, total) CPU seconds of the whole machine so far, all cores."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:9]]
    except OSError:
        return 0.0, 0.0, 0.0
    busy = sum(ticks) - ticks[3] - ticks[4] - ticks[7]  # all but idle, iowait and steal
    return busy / tick, ticks[7] / tick, sum(ticks) / tick


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds used so far by the whole machine and by this process tree, to tell
    whether anything else ran during the bench."""
    busy, _, _ = machine_ticks()
    return busy, tree_cpu_seconds(os.getpid())
