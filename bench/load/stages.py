"""The stages of a run, each printing as it goes: the VAD cost, the capacity sweep,
barge-in, `parley serve --workers 2`, larger chunks; or one profiled point."""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.load.clips import Clip
from bench.load.measure import run_point
from bench.load.profile import top_frames
from bench.load.report import RESULTS, barge_summary, print_barge_in, print_vad_cost
from bench.load.search import Bench
from bench.load.servers import Target, started
from bench.load.table import HEADER, row
from bench.load.vad_cost import vad_cost

# Seconds of the budget each later stage needs, kept from the sweep so that it runs:
BARGE_S = 30.0  # barge-in: one 15 s point
WORKERS_S = 50.0  # parley serve --workers 2: up to 4 points
CHUNKS_S = 60.0  # 40 and 100 ms chunks: up to 3 points each


@dataclass(frozen=True)
class Plan:
    """The targets the sweep runs, the stages after it and the time kept for them."""

    names: list[str]
    workers: bool  # search `parley serve --workers 2`
    larger: list[int]  # chunk sizes (ms) to search Parley at after 20 ms
    keep_s: float


def with_turn_detection(names: list[str], turn_detection: str) -> list[str]:
    """The targets with Parley's sessions in semantic_vad instead of, or beside,
    server_vad (parley-semantic right after parley)."""
    if turn_detection == "server_vad" or "parley" not in names:
        return names
    out = [n for n in names if n != "parley-semantic"]
    at = out.index("parley")
    if turn_detection == "semantic_vad":
        return [*out[:at], "parley-semantic", *out[at + 1 :]]
    return [*out[: at + 1], "parley-semantic", *out[at + 1 :]]


def plan(args: argparse.Namespace) -> Plan:
    names = with_turn_detection(args.targets, args.turn_detection)
    if args.vad_backend == "webrtc" and "parley-webrtc" in names:
        names = [n for n in names if n != "parley-webrtc"]  # "parley" is that already
    workers = bool(args.workers_search) and "parley" in names
    larger = [c for c in args.chunks if c != 20] if names[0] == "parley" else []
    keep_s = (
        (BARGE_S if args.barge else 0.0)
        + (WORKERS_S if workers else 0.0)
        + (CHUNKS_S if larger else 0.0)
    )
    return Plan(names, workers, larger, keep_s)


def above_knee(cap20: dict[str, int]) -> int:
    """Where a search starts: a quarter above one Parley process's 20 ms capacity."""
    return max(1, cap20.get("parley", 1) * 5 // 4)


async def vad_cost_stage(clip: Clip) -> dict[str, dict[str, float]]:
    print("VAD CPU per second of audio (resampling included):", flush=True)
    cost = await vad_cost(clip)
    print_vad_cost(cost)
    return cost


async def capacity_sweep(bench: Bench, targets: list[Target], keep_s: float) -> dict[str, int]:
    args = bench.args
    print(
        f"\ncapacity sweep, 20 ms chunks, VAD {args.vad_backend}, turn detection"
        f" {args.turn_detection} ({args.window:.0f} s window):"
    )
    async with started(*targets) as servers:
        await bench.warm(servers)
        return await bench.sweep(servers, 20, keep_s)


async def barge_in(bench: Bench, target: Target, sessions: int, window_s: float) -> dict[str, Any]:
    """One point of Parley with paced answers and speech that interrupts each of them."""
    print(f"\nbarge-in: {sessions} sessions, paced answers (100 ms chunks at real time)")
    clip = Clip.build(lead_ms=0, trail_ms=800)
    chunk_ms = 20
    texts = clip.texts(chunk_ms)
    onsets = {ms // chunk_ms for ms in clip.onsets_ms}
    async with started(target) as (server,):
        p = await run_point(server, sessions, chunk_ms, texts, window_s, None, onsets)
        await server.drained()
    bench.points.append(p)
    summary = {"sessions": sessions, **barge_summary([p])}
    print_barge_in(summary, p)
    return summary


async def two_workers(bench: Bench, target: Target, start: int, points: int, keep_s: float) -> int:
    """`parley serve --workers 2` (client-side figures only), from above the one
    process's 20 ms knee: what the second core adds."""
    print("\nparley serve --workers 2: capacity at 20 ms chunks", flush=True)
    async with started(target) as servers:
        await bench.warm(servers)
        return await bench.search(servers[0], 20, start, points, keep_s=keep_s)


async def larger_chunks(
    bench: Bench, target: Target, chunks: list[int], start: int
) -> dict[str, dict[str, int]]:
    """Larger chunks save per-message work: Parley's capacity at each, searched from
    above the 20 ms figure."""
    capacity: dict[str, dict[str, int]] = {}
    async with started(target) as (server,):
        await bench.warm([server])
        for chunk_ms in chunks:
            print(f"\nparley: capacity at {chunk_ms} ms chunks", flush=True)
            capacity[str(chunk_ms)] = {
                "parley": await bench.search(server, chunk_ms, start, bench.args.search_points)
            }
    return capacity


async def profile_point(bench: Bench, target: Target, n: int, result: dict[str, Any]) -> None:
    """One point with py-spy on the server; prints and saves the top frames."""
    path = Path(tempfile.mkdtemp(prefix="parley-bench-")) / "profile.txt"
    plans = None if target.vad_backend is None else bench.plans_for(20, target.vad_backend)
    async with started(target) as (server,):
        print(HEADER)
        p = await run_point(
            server, n, 20, bench.texts_for(20), bench.args.window, plans, profile_to=path
        )
        print(row(p))
    frames = top_frames(path)
    for kind in ("self", "inclusive"):
        print(f"\ntop frames by {kind} share of the server's busy samples:")
        for frame, share in frames[kind]:
            print(f"  {share:5.1f} %  {frame}")
    result["profile"] = {"point": asdict(p), **frames, "raw": str(path)}
    out = RESULTS / f"{bench.args.name}-profile.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}; collapsed stacks in {path}")
