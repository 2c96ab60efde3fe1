"""The default `max_sessions`: sized from the CPUs this process may use and the
executor, from the capacities measured in docs/performance.md ("Load").

- One process holds what its event loop holds. With the scripted executor (the model
  time elsewhere, as with `vllm` on a GPU or `openai_compat`) and the default Silero
  VAD, one process held 100-175 real-time sessions on 2 cores (20 ms appends, p99 of
  the end of turn under 50 ms), using about 1.2 cores: the loop and Silero's batch
  thread. More cores do not raise it (a second worker needs a core of its own), so
  the default is the low end, 100, and 50 per usable core below 2 cores.
- The cascade runs the models on this host's CPU, one call per stage at a time
  (`model_concurrency`): an answer keeps them busy for about a second (recognition
  ~0.3 s, first audio ~0.4 s after it, then the rest of the answer). At a turn every
  few seconds per session a core serves a few talking sessions before every answer
  waits for another's: 4 per usable core.

These are caps, not promises: measure with `make bench` (bench/load) and set
`--max-sessions`; 0 means no limit.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

LOOP_SESSIONS = 100
SESSIONS_PER_CORE = 50
CASCADE_SESSIONS_PER_CORE = 4
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def cgroup_cores(cpu_max: str) -> float | None:
    """The CPU quota of cgroup v2's `cpu.max` ("200000 100000": 2 cores), None when
    unlimited ("max 100000") or unreadable."""
    fields = cpu_max.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def usable_cores() -> float:
    """The CPUs this process may run on, capped by its container's CPU quota."""
    cores: float = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    cores = cores or os.cpu_count() or 1
    try:
        quota = cgroup_cores(CGROUP_CPU_MAX.read_text())
    except OSError:
        quota = None
    return min(cores, quota) if quota is not None else cores


def default_max_sessions(executor: str, cores: float) -> int:
    """The session limit of a process with `cores` usable CPUs (see above)."""
    per_core = CASCADE_SESSIONS_PER_CORE if executor == "cascade" else SESSIONS_PER_CORE
    return max(1, min(LOOP_SESSIONS, math.floor(per_core * cores)))
