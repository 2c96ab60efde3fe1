"""The modes measured, the servers they need, and one mode's run over the set."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from bench.load.servers import Server, Target
from bench.soak.run import serve_target
from bench.turns.corpus import Corpus, Item
from bench.turns.score import Outcome, Truth, classify
from bench.turns.stream import CHUNK_MS, Streamed, stream_item

LEAD_MS = 1200  # microphone open before the user speaks
SERVER_VAD_TRAIL_MS = 3000  # the 500 ms silence window and room for a late turn
# OpenAI's longest wait per eagerness; a semantic mode streams this plus SEMANTIC_MARGIN_MS
# after the speech, so its slowest commit is seen.
SEMANTIC_MAX_WAIT_MS = {"low": 8000, "medium": 4000, "high": 2000, "auto": 4000}
SEMANTIC_MARGIN_MS = 1500


@dataclass(frozen=True)
class Mode:
    name: str  # "server_vad/silero", "semantic_vad/auto"
    backend: str  # the server's --vad-backend
    turn_detection: dict[str, Any]
    trail_ms: int
    # More of audio.input for the session.update ("+aec": Parley's echo_cancellation).
    audio_input: dict[str, Any] = field(default_factory=dict)


def all_modes() -> list[Mode]:
    quiet = {"create_response": False, "interrupt_response": False}
    modes = [
        Mode(f"server_vad/{b}", b, {"type": "server_vad", **quiet}, SERVER_VAD_TRAIL_MS)
        for b in ("silero", "webrtc")
    ]
    for eagerness, wait_ms in SEMANTIC_MAX_WAIT_MS.items():
        detection = {"type": "semantic_vad", "eagerness": eagerness, **quiet}
        modes.append(
            Mode(f"semantic_vad/{eagerness}", "silero", detection, wait_ms + SEMANTIC_MARGIN_MS)
        )
    # Qualified interruption (engine/interruption.py) is the default; "+qualified" asks
    # for it explicitly (PARLEY_EVAL_INTERRUPTION to try other settings), "+instant"
    # turns it off (every speech start interrupts). They only change what happens while
    # the assistant talks, so only the interruption scenarios run them.
    for base in ("server_vad/silero", "semantic_vad/auto"):
        mode = next(m for m in modes if m.name == base)
        detection = {**mode.turn_detection, "interruption": QUALIFIED}
        modes.append(Mode(f"{base}+qualified", mode.backend, detection, mode.trail_ms))
    for base in ("server_vad/silero", "server_vad/webrtc", "semantic_vad/auto"):
        mode = next(m for m in modes if m.name == base)
        detection = {**mode.turn_detection, "interruption": None}
        modes.append(Mode(f"{base}+instant", mode.backend, detection, mode.trail_ms))
    # The echo guard (models/listening/echo.py): also only for the interruption scenarios;
    # "+aec3" also cancels the echo in the input with WebRTC's AEC3.
    for base in ("server_vad/silero", "server_vad/silero+qualified"):
        mode = next(m for m in modes if m.name == base)
        modes.append(replace(mode, name=f"{base}+aec", audio_input=AEC))
    silero = next(m for m in modes if m.name == "server_vad/silero")
    modes.append(replace(silero, name="server_vad/silero+aec3", audio_input=AEC3))
    return modes


# The interruption settings the "+qualified" modes ask for: the engine's defaults
# (engine/interruption.py), or PARLEY_EVAL_INTERRUPTION (JSON) to try others.
QUALIFIED: dict[str, object] = json.loads(os.environ.get("PARLEY_EVAL_INTERRUPTION", "{}")) or {
    "enabled": True
}
# What the "+aec" and "+aec3" modes add to audio.input.
AEC = {"echo_cancellation": {"type": "server"}}
AEC3 = {"echo_cancellation": {"type": "server", "cancel_input": True}}
MODES = {m.name: m for m in all_modes()}
# What `python -m bench.turns` measures turn ends with by default.
TURN_MODES = [name for name in MODES if "+" not in name]


@dataclass
class ItemResult:
    item: Item
    outcome: Outcome | None  # None when the server refused the mode
    streamed: Streamed


@dataclass
class ModeResult:
    mode: Mode
    refused: str | None = None  # "not supported by this server" when set
    items: list[ItemResult] = field(default_factory=list)


def truth_of(spans: list[tuple[int, int]], sent_t: list[float]) -> Truth:
    """The truth on the wall clock too: the chunk holding the last speech sample."""
    last_chunk = min(len(sent_t) - 1, (spans[-1][1] - 1) // CHUNK_MS)
    return Truth(spans, sent_t[last_chunk])


async def run_item(url: str, mode: Mode, corpus: Corpus, item: Item, speed: float) -> ItemResult:
    pcm, spans = corpus.stream(item, LEAD_MS, mode.trail_ms)
    streamed = await stream_item(url, mode.turn_detection, pcm, speed)
    if streamed.refused is not None:
        return ItemResult(item, None, streamed)
    return ItemResult(item, classify(streamed.turns, truth_of(spans, streamed.sent_t)), streamed)


async def run_mode(
    url: str, mode: Mode, corpus: Corpus, items: list[Item], speed: float, concurrency: int
) -> ModeResult:
    """Every item through one server, `concurrency` streams at a time; a mode the server
    refuses on the first item is not streamed further."""
    result = ModeResult(mode)
    first = await run_item(url, mode, corpus, items[0], speed)
    if first.streamed.refused is not None:
        result.refused = first.streamed.refused
        return result
    gate = asyncio.Semaphore(concurrency)

    async def one(item: Item) -> ItemResult:
        async with gate:
            return await run_item(url, mode, corpus, item, speed)

    rest = await asyncio.gather(*(one(item) for item in items[1:]))
    result.items = [first, *rest]
    return result


def server_target(backend: str) -> Target:
    """`parley serve --executor scripted` from this checkout with this VAD backend
    (PARLEY_EVAL_EXECUTOR=cascade: with a recognizer, for PARLEY_TEXT_END_OF_TURN)."""
    target = serve_target(os.environ.get("PARLEY_EVAL_EXECUTOR", "scripted"))
    target.argv += ["--vad-backend", backend]
    target.name = f"turns-{backend}"
    return target


@asynccontextmanager
async def served(backend: str) -> AsyncIterator[str]:
    server = Server(server_target(backend))
    try:
        await server.ready(timeout_s=120.0)
        yield f"ws://127.0.0.1:{server.port}/v1/realtime"
    finally:
        server.stop()


async def run(
    modes: list[Mode], corpus: Corpus, items: list[Item], speed: float, concurrency: int
) -> list[ModeResult]:
    """The modes in order, one server per VAD backend they need."""
    results: list[ModeResult] = []
    for backend in dict.fromkeys(m.backend for m in modes):
        async with served(backend) as url:
            for mode in (m for m in modes if m.backend == backend):
                results.append(await run_mode(url, mode, corpus, items, speed, concurrency))
    order = [m.name for m in modes]
    return sorted(results, key=lambda r: order.index(r.mode.name))
