"""Capacity and server-added latency under load, side by side with the floor.

Run from the repository root:  .venv/bin/python -m bench.load  (or `make bench`)

The load generator is this process; every server is a separate one on a free
loopback port (bench/probed_server.py): Parley as `parley serve --executor scripted`
builds it (zero model time: PARLEY_SCRIPTED_CHUNK_DELAY_S=0) with server VAD on,
with the server's default VAD (Silero) and with webrtcvad, Parley whose clients set
semantic_vad (eagerness auto) by a session.update before streaming (`parley-semantic`,
--turn-detection), and the two floors of
bench/floors.py (`echo`: parse each append and acknowledge it; `vad`: the same plus
24 -> 16 kHz resampling and webrtcvad). Each of N sessions streams the speech
fixtures, looped with silence so VAD turns happen, at real-time pace in 20 ms
`input_audio_buffer.append` chunks (the clip rotated per session so turns do not
line up, and the sessions' send times spread over one chunk).

Per target and N, over a measurement window after a warm-up:
- Parley (a) `stop`: speech_stopped received minus the send of the chunk that
  completed the silence window. The bench knows that chunk exactly: it runs the
  same VadStream + TurnDetector over the same chunks beforehand (the VAD is
  deterministic and does not depend on timing). Client-side, so it includes
  loopback both ways and both event loops; "in server" is the same span inside the
  server (frame parsed -> speech_stopped emitted).
  With semantic_vad most turns stop when the end-of-turn model answers (a call takes
  longer than the silence a confident answer needs), which no plan can know: (a)
  runs from the send of the chunk holding speech_stopped's audio_end_ms, so it holds
  up to a VAD frame and a chunk by construction and is not judged; `score`, each of
  the model's calls in the server with its queue, is (p99 under 500 ms to pass).
- Parley (b) `delta`: first audio delta taken by the writer minus the executor's
  first chunk (server-side probe).
- Floors `ack`: acknowledgement received minus its append sent.
- `loop lag`: the server's event-loop lag (a 10 ms sleep's oversleep); `slip`: how
  late the generator sent a chunk behind its real-time schedule; the server's CPU%
  (of one core) and RSS, CPU µs per append message; other processes' CPU and steal.

A point passes when p99 of (a) and (b) (floors: ack) is under 50 ms and no send
slipped more than 20 ms; a failing point is run once more (--retries) and passes if
either run does. The targets run back to back at each N of the sweep; a target
leaves at its first failing N, then --refine bisects its knee (once by default).
Capacity is the largest passing N.

Also, in this order, each with time kept for it from the sweep: VAD CPU per audio
second per backend; barge-in reaction (Parley with answers paced like real-time
synthesis, interrupting speech during every answer); `parley serve --workers 2`
searched from above the one process's knee; Parley's capacity at 40 and 100 ms
chunks. With --targets parley-1w parley-2w, `parley serve` with 1 and 2 worker
processes are swept side by side; with --profile N, py-spy's top frames of the
server at N.

Writes bench/results/load.json and bench/results/load.png. Every run is bounded:
a window of --window seconds per point, at most --max-n sessions, a timeout per
point and a budget for the whole run (--budget).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

from bench.load.report import finish
from bench.load.search import Bench
from bench.load.servers import targets
from bench.load.stages import (
    CHUNKS_S,
    above_knee,
    barge_in,
    capacity_sweep,
    larger_chunks,
    plan,
    profile_point,
    two_workers,
    vad_cost_stage,
)
from bench.machine import machine
from bench.vad_backends import BACKENDS

PACKAGES = ["fastapi", "uvicorn", "websockets", "starlette", "numpy", "soxr", "onnxruntime"]
# Coarse, then one bisection at each knee (--refine): the knees move from about 75 to
# 300 sessions with how busy this shared machine is.
DEFAULT_SWEEP = [1, 25, 50, 100, 150, 200, 250, 300, 350, 400]
TARGETS = [
    "parley",
    "parley-semantic",
    "parley-webrtc",
    "echo",
    "vad",
    "parley-1w",
    "parley-2w",
    "parley-webrtc-nofreeze",
]


async def main_async(args: argparse.Namespace) -> None:
    load_before = [round(x, 2) for x in os.getloadavg()]
    if load_before[0] > 0.5:
        print(f"warning: load average {load_before[0]} before start; numbers will be noisy")
    bench = Bench(args)
    servers = targets(args.vad_backend)
    result: dict[str, Any] = {"machine": {**machine(PACKAGES), "loadavg_before": load_before}}
    t_start = time.monotonic()

    result["vad_cost"] = await vad_cost_stage(bench.clip)
    if args.profile:
        await profile_point(bench, servers[args.profile_target], args.profile, result)
        return

    stages = plan(args)
    capacity = {
        "20": await capacity_sweep(bench, [servers[n] for n in stages.names], stages.keep_s)
    }
    if args.barge and not bench.out_of_time():
        result["barge_in"] = await barge_in(
            bench, servers["parley-barge"], args.barge, args.barge_window
        )
    if stages.workers and not bench.out_of_time():
        keep_s = CHUNKS_S if stages.larger else 0.0
        capacity["20"]["parley-2w"] = await two_workers(
            bench, servers["parley-2w"], above_knee(capacity["20"]), args.workers_search, keep_s
        )
    if stages.larger and not bench.out_of_time():
        capacity |= await larger_chunks(
            bench, servers["parley"], stages.larger, above_knee(capacity["20"])
        )
    finish(bench, result, capacity, time.monotonic() - t_start)


def parser() -> argparse.ArgumentParser:
    assert __doc__
    parser = argparse.ArgumentParser(
        prog="python -m bench.load", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--window", type=float, default=4.0, help="seconds measured per point")
    parser.add_argument("--retries", type=int, default=1, help="reruns of a failing point")
    parser.add_argument("--sweep", type=int, nargs="+", default=DEFAULT_SWEEP)
    parser.add_argument("--max-n", type=int, default=400)
    parser.add_argument(
        "--refine", type=int, default=1, help="bisection steps at each knee, after the sweep"
    )
    parser.add_argument("--chunks", type=int, nargs="+", default=[20, 40, 100])
    parser.add_argument("--search-points", type=int, default=3)
    parser.add_argument("--vad-backend", default="silero", choices=list(BACKENDS))
    parser.add_argument(
        "--turn-detection",
        default="both",
        choices=["server_vad", "semantic_vad", "both"],
        help="Parley's sessions: server_vad (the default), semantic_vad (set by a "
        "session.update before streaming: target parley-semantic), or both side by side",
    )
    parser.add_argument(
        "--workers-search",
        type=int,
        default=4,
        metavar="POINTS",
        help="points to search `parley serve --workers 2` at 20 ms chunks (0: skip)",
    )
    parser.add_argument("--barge", type=int, default=10, help="barge-in sessions (0: skip)")
    parser.add_argument("--barge-window", type=float, default=15.0)
    parser.add_argument(
        "--targets",
        nargs="+",
        default=["parley", "parley-webrtc", "echo", "vad"],
        choices=TARGETS,
        help="servers to sweep back to back; parley-1w and parley-2w are `parley serve "
        "--workers 1|2` (client-side figures only)",
    )
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for the whole run")
    parser.add_argument("--name", default="load", help="results file name")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="only profile the server (py-spy) with N sessions",
    )
    parser.add_argument("--profile-target", default="parley", choices=["parley", "echo", "vad"])
    return parser


def main(argv: list[str] | None = None) -> None:
    asyncio.run(main_async(parser().parse_args(argv)))


if __name__ == "__main__":
    main()
