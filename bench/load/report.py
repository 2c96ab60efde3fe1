"""What a run prints between and after its stages, and the results it writes:
bench/results/<name>.json and <name>.png."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.load.measure import WARMUP_S
from bench.load.plot import plot
from bench.load.points import P99_LIMIT_MS, SCORE_P99_LIMIT_MS, SLIP_LIMIT_MS, Point
from bench.load.search import Bench
from bench.load.servers import SEMANTIC_VAD
from bench.load.stats import Dist, dist
from bench.load.table import fmt
from bench.speech import PCM_RATE
from engine.turns import ServerVadParams

RESULTS = Path(__file__).parent.parent / "results"
BARGE_KEYS = (
    "done_wall_ms",
    "done_audio_ms",
    "last_delta_wall_ms",
    "last_delta_audio_ms",
    "started_to_done_ms",
    "started_to_last_delta_ms",
)


def print_vad_cost(cost: dict[str, dict[str, float]]) -> None:
    for name, c in cost.items():
        print(
            f"  {name}: {c['us_per_audio_s']:.0f} µs/audio s,"
            f" 100 sessions = {c['core_pct_100_sessions']:.1f} % of one core"
            + (
                f" ({c['loop_us_per_audio_s']:.0f} µs on the loop)"
                if "loop_us_per_audio_s" in c
                else ""
            )
        )


def barge_summary(points: list[Point]) -> dict[str, Dist]:
    rows = [r for p in points for r in p.barge]
    keys = rows[0].keys() if rows else []
    return {k: dist([v for r in rows if (v := r[k]) is not None]) for k in keys}


def print_barge_in(b: dict[str, Any], p: Point) -> None:
    print("barge-in (ms from the first chunk of interrupting speech) | n | p50 | p99")
    for key in BARGE_KEYS:
        if key in b:
            print(f"  {key} | {b[key]['n']} | {fmt(b[key]['p50'], 1)} | {fmt(b[key]['p99'], 1)}")
    print(f"  responses done: {p.responses_done}, slip max {fmt(p.slip_ms['max'], 1)} ms")


def ratios(cap20: dict[str, int]) -> dict[str, float | None]:
    """Each Parley's capacity over each other target's (None where that one is 0)."""
    return {
        f"{p}/{f}": round(cap20[p] / cap20[f], 2) if cap20.get(f) else None
        for p in ("parley", "parley-semantic", "parley-webrtc", "parley-2w")
        if p in cap20
        for f in ("echo", "vad", "parley-1w", "parley")
        if f in cap20 and f != p
    }


def finish(
    bench: Bench, result: dict[str, Any], capacity: dict[str, dict[str, int]], wall: float
) -> None:
    """The run's results: completed, summarized on stdout, written with the plot."""
    args = bench.args
    cap20 = capacity["20"]
    result["machine"]["run_wall_s"] = round(wall, 1)
    result["setup"] = {
        "vad_backend": args.vad_backend,
        "window_s": args.window,
        "warmup_s": WARMUP_S,
        "sweep": args.sweep,
        "p99_limit_ms": P99_LIMIT_MS,
        "slip_limit_ms": SLIP_LIMIT_MS,
        "clip_s": len(bench.clip.pcm) / PCM_RATE,
        "turn_detection": asdict(ServerVadParams()),
        "turn_detection_mode": args.turn_detection,
        "semantic_turn_detection": SEMANTIC_VAD,  # parley-semantic's session.update
        "score_p99_limit_ms": SCORE_P99_LIMIT_MS,
    }
    result["capacity"] = capacity
    result["capacity_lower_bound"] = bench.unbounded  # never failed: at least this
    result["ratios"] = ratios(cap20)
    result["points"] = [asdict(p) for p in bench.points]
    print(f"\ncapacity (sessions, 20 ms chunks): {cap20}; ratios {result['ratios']}")
    if bench.unbounded:
        print(f"  (no failing N reached for {', '.join(bench.unbounded)}: a lower bound)")
    for key, value in capacity.items():
        if key != "20":
            print(f"capacity {key}: {value}")
    others = [p.other_cpu_pct for p in bench.points if p.messages]
    steal = [p.steal_pct for p in bench.points if p.messages]
    if others:
        print(
            f"other processes: median {np.median(others):.0f} % of a core"
            f" (max {max(others):.0f}); steal median {np.median(steal):.1f} %"
            f" (max {max(steal):.1f}); run {wall:.0f} s"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = args.name
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    title = (
        f"{result['machine']['cpu']}, {result['machine']['cores']} cores, "
        f"{result['machine']['date']}; capacity {cap20}"
    )
    plot(bench.points, cap20, RESULTS / f"{name}.png", title)
    print(f"wrote {RESULTS / (name + '.json')} and {RESULTS / (name + '.png')}")
