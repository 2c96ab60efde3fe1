"""A point: what N sessions against one target measured, and its verdict."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.load.servers import Target
from bench.load.stats import Dist, dist

P99_LIMIT_MS = 50.0
SLIP_LIMIT_MS = 20.0
# semantic_vad: p99 of the end-of-turn model's calls, queue included. Alone a call
# takes ~100-250 ms on one core (models/listening/smart_turn.py); over this the calls
# wait behind other sessions' more than they run, and every turn ends that much later.
SCORE_P99_LIMIT_MS = 500.0


def no_samples() -> Dist:
    return dist([])


@dataclass(kw_only=True)
class Point:
    """Figures in ms unless named otherwise; a point that could not run keeps the
    defaults (no samples) and says why."""

    target: str
    n: int
    chunk_ms: int
    passed: bool = False
    why: str = ""  # what failed, or ""
    stop_ms: Dist = field(default_factory=no_samples)  # (a) client-side
    stop_server_ms: Dist = field(default_factory=no_samples)  # (a) inside the server
    delta_ms: Dist = field(default_factory=no_samples)  # (b)
    ack_ms: Dist = field(default_factory=no_samples)  # floors
    loop_lag_ms: Dist = field(default_factory=no_samples)
    gc_ms: Dist = field(default_factory=no_samples)  # full collections in the window: n, pauses
    score_ms: Dist = field(default_factory=no_samples)  # semantic_vad's model calls
    slip_ms: Dist = field(default_factory=no_samples)
    server_cpu_pct: float = 0.0  # of one core
    cpu_us_per_msg: float | None = None
    server_rss_mb: float = 0.0
    generator_cpu_pct: float = 0.0
    other_cpu_pct: float = 0.0  # other processes on the machine, of one core
    steal_pct: float = 0.0  # of all cores' time
    messages: int = 0
    unmatched_stops: int = 0
    responses_done: int = 0
    errors: list[str] = field(default_factory=list)
    window_s: float
    barge: list[dict[str, float | None]] = field(default_factory=list)
    attempt: int = 1
    decisive: bool = False  # the run the sweep's verdict for this N came from


def judge(p: Point, target: Target) -> tuple[bool, str]:
    """Pass iff no errors, no send slipped over SLIP_LIMIT_MS and each latency the
    target has (floors: ack; Parley: stop, and delta where probed) has p99 under
    P99_LIMIT_MS; with semantic_vad the end-of-turn model's calls (p99 under
    SCORE_P99_LIMIT_MS) stand in for stop; from 10 sessions on, a latency without samples fails.
    Returns (passed, what failed)."""
    fails = []
    if p.errors:
        fails.append("errors")
    slip = p.slip_ms["max"]
    if slip is None or slip > SLIP_LIMIT_MS:
        fails.append(f"slip {slip or 0:.0f}")
    checks = {"ack": p.ack_ms} if target.floor else {"stop": p.stop_ms}
    if target.semantic:
        # Its stops mostly come with the model's answer, not with an append, so (a)
        # times the model's answer, not the server: the model's calls are judged.
        checks = {"score": p.score_ms}
    if not target.floor and target.probed:
        checks["delta"] = p.delta_ms
    limits = dict.fromkeys(checks, P99_LIMIT_MS) | {"score": SCORE_P99_LIMIT_MS}
    for name, d in checks.items():
        p99 = d["p99"]
        if p99 is not None and p99 >= limits[name]:
            fails.append(f"{name} p99 {p99:.0f}")
        elif p99 is None and p.n >= 10:
            fails.append(f"no {name}")
    return not fails, ", ".join(fails)
