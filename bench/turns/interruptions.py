"""Interruptions: what the server does with sound heard while the assistant talks.

Per item: a session with the mode's turn detection at the server's defaults otherwise
(`create_response` and `interrupt_response` on), a `response.create` with instructions
and no user turn, and the microphone streamed at real time in 20 ms appends from then
on: silence, or for an echo item what the client's speaker played (the audio deltas it
received, played as they arrive) at the item's level and delay. Once the first audio
delta has arrived, plus the item's seeded 0.5-1.5 s, its sound is mixed in; the stream
goes on for the mode's trailing time after it, so a commit is seen. The server is
`parley serve --executor scripted` whose replies speak the speech fixtures (about 16 s,
PARLEY_SCRIPTED_SPEECH) at real time.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.load.servers import Server
from bench.soak.audio import append_text
from bench.soak.tally import Tally
from bench.speech import silence
from bench.turns.interrupt_score import Heard, Reaction, react, summarize_kind
from bench.turns.noise import Pcm16
from bench.turns.run import Mode, server_target
from bench.turns.scenarios import Scenario, assistant_wav
from bench.turns.speaker import Speaker, echo_of
from bench.turns.stream import CHUNK_MS, SETTLE_S, TurnConn, configure
from models.base import PCM_RATE

CHUNK = PCM_RATE * CHUNK_MS // 1000
# The user's earlier turn (--earlier-turn): silence before and after it (until the
# mode ends it: semantic_vad may wait seconds), sent this many times faster than real
# time (the VAD runs on the audio's clock; the server takes up to 10x).
EARLIER_TURN_PAD_MS = (300, 5000)  # after it: silence until committed, at most this
EARLIER_TURN_SPEED = 4.0
FIRST_AUDIO_TIMEOUT_MS = 10_000  # no audio delta by then: the item is not measured
INSTRUCTIONS = "Tell the user about tomorrow's weather, at length."
# Semantic eagerness changes when a turn ends, not when speech starts: one semantic
# mode is enough. The modes below are the default; any mode of bench/turns/run.py can
# be asked for.
DEFAULT_MODES = [
    "server_vad/silero",
    "server_vad/webrtc",
    "semantic_vad/auto",
    "server_vad/silero+instant",
    "server_vad/silero+aec",
    "server_vad/silero+aec3",
]


class InterruptConn(TurnConn):
    """A turn connection that also plays the assistant's audio on its speaker and
    notes every speech_started."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.t0 = time.monotonic()  # the stream's clock; reset when streaming starts
        self.speaker = Speaker()
        self.speech_started_t: list[float] = []
        self.earlier_turns = 0  # committed before the answer: the user's earlier turn
        super().__init__(*args, **kwargs)

    def _handle(self, event: dict[str, Any], now: float) -> None:
        super()._handle(event, now)
        kind = event.get("type")
        if kind == "response.output_audio.delta":
            pcm = np.frombuffer(base64.b64decode(event["delta"]), "<i2").astype(np.int16)
            self.speaker.play(pcm, now - self.t0)
        elif kind == "input_audio_buffer.speech_started" and self.responses:
            self.speech_started_t.append(now)
        elif kind == "response.done" and event["response"]["status"] == "cancelled":
            self.speaker.stop(now - self.t0)

    def heard(self, onset_sent_t: float | None) -> Heard:
        first = next(iter(self.responses.values()), None)  # the one asked for
        return Heard(
            first_delta_t=None if first is None else first.first_delta_t,
            onset_sent_t=onset_sent_t,
            speech_started_t=list(self.speech_started_t),
            committed=sum(t.committed_t is not None for t in self.turns()) - self.earlier_turns,
            status=None if first is None else first.status,
            done_t=None if first is None else first.done_t,
        )


def mic_chunk(k: int, start: int | None, item: Scenario, speaker: Speaker) -> np.ndarray:
    """Microphone chunk k: the item's sound from chunk `start` on, plus echo."""
    mic = np.zeros(CHUNK, np.int32)
    if start is not None and k >= start:
        piece = item.audio[(k - start) * CHUNK : (k - start + 1) * CHUNK]
        mic[: len(piece)] += piece
    if item.echo_db is not None:
        delay = item.echo_delay_ms * PCM_RATE // 1000
        mic += echo_of(speaker.heard(k * CHUNK - delay, CHUNK), item.echo_db)
    return np.clip(mic, -32768, 32767).astype(np.int16)


@dataclass
class ItemRun:
    item: Scenario
    refused: str | None = None
    heard: Heard | None = None
    reaction: Reaction | None = None
    error_codes: list[str] = field(default_factory=list)


async def say_earlier_turn(
    conn: InterruptConn,
    turn_detection: dict[str, Any],
    audio_input: dict[str, Any] | None,
    turn: Pcm16,
) -> str | None:
    """The user's turn before the answer, said while the assistant is silent and
    committed without an answer of its own (the session learns their voice from it);
    sent at EARLIER_TURN_SPEED times real time. A turn the server never commits (too
    quiet for its VAD) is cleared: the session learned nothing, as it would live.
    None, or why the server refused the mode."""
    quiet = {**turn_detection, "create_response": False}
    refused = await configure(conn, quiet, audio_input)
    if refused is not None:
        return refused
    audio = np.concatenate([silence(EARLIER_TURN_PAD_MS[0]), turn])
    chunks = [audio[at : at + CHUNK] for at in range(0, len(audio), CHUNK)]
    quiet_chunks = EARLIER_TURN_PAD_MS[1] // CHUNK_MS
    for k in range(len(chunks) + quiet_chunks):
        if k >= len(chunks) and conn.count("input_audio_buffer.committed"):
            break
        await conn.send(append_text(chunks[k] if k < len(chunks) else silence(CHUNK_MS)))
        await asyncio.sleep(CHUNK_MS / 1000 / EARLIER_TURN_SPEED)
    if not await conn.until(lambda: conn.count("input_audio_buffer.committed") > 0, 2.0):
        await conn.send({"type": "input_audio_buffer.clear"})
        await conn.until(lambda: conn.count("input_audio_buffer.cleared") > 0, 2.0)
    conn.earlier_turns = conn.count("input_audio_buffer.committed")
    return None


async def stream_scenario(
    url: str,
    turn_detection: dict[str, Any],
    item: Scenario,
    trail_ms: int,
    audio_input: dict[str, Any] | None = None,
    earlier: Pcm16 | None = None,
) -> ItemRun:
    conn = await InterruptConn.open(url, Tally(), None)
    out = ItemRun(item)
    try:
        if earlier is not None:
            out.refused = await say_earlier_turn(conn, turn_detection, audio_input, earlier)
            if out.refused is not None:
                return out
        out.refused = await configure(conn, turn_detection, audio_input)
        if out.refused is not None:
            return out
        conn.t0 = t0 = time.monotonic()
        await conn.send({"type": "response.create", "response": {"instructions": INSTRUCTIONS}})
        start: int | None = None  # the chunk the item's sound begins in
        sent_t: list[float] = []
        item_chunks = -(-len(item.audio) // CHUNK)
        k = 0
        while True:
            delay = t0 + (k + 1) * CHUNK_MS / 1000 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            first = next(iter(conn.responses.values()), None)
            if start is None and first is not None and first.first_delta_t is not None:
                at_ms = (first.first_delta_t - t0) * 1000 + item.offset_ms
                start = max(k, -(-int(at_ms) // CHUNK_MS))
            await conn.send(append_text(mic_chunk(k, start, item, conn.speaker)))
            sent_t.append(time.monotonic())
            if start is None and k * CHUNK_MS > FIRST_AUDIO_TIMEOUT_MS:
                break
            if start is not None and k >= start + item_chunks + trail_ms // CHUNK_MS:
                break
            k += 1
        await asyncio.sleep(SETTLE_S)
        onset = sent_t[start] if start is not None and item.has_onset else None
        out.heard = conn.heard(onset)
        out.reaction = react(out.heard)
        out.error_codes = list(conn.error_codes)
    finally:
        await conn.close()
    return out


def interrupting(mode: Mode) -> dict[str, Any]:
    """The mode as a voice client would set it: answers and barge-in on."""
    return {**mode.turn_detection, "create_response": True, "interrupt_response": True}


@dataclass
class ModeRun:
    mode: Mode
    refused: str | None = None
    items: list[ItemRun] = field(default_factory=list)


async def run_mode(
    url: str,
    mode: Mode,
    items: list[Scenario],
    concurrency: int,
    earlier: dict[str, Pcm16] | None = None,
) -> ModeRun:
    """`earlier`: the user's earlier turn by item name (bench/turns/earlier_turns.py)."""
    result = ModeRun(mode)
    detection = interrupting(mode)
    turns = earlier or {}

    async def stream(item: Scenario) -> ItemRun:
        return await stream_scenario(
            url, detection, item, mode.trail_ms, mode.audio_input, turns.get(item.name)
        )

    first = await stream(items[0])
    if first.refused is not None:
        result.refused = first.refused
        return result
    gate = asyncio.Semaphore(concurrency)

    async def one(item: Scenario) -> ItemRun:
        async with gate:
            return await stream(item)

    result.items = [first, *await asyncio.gather(*(one(it) for it in items[1:]))]
    return result


@asynccontextmanager
async def served(backend: str) -> AsyncIterator[str]:
    """The scripted server with this VAD backend, its replies the assistant's speech."""
    target = server_target(backend)
    target.env = {**target.env, "PARLEY_SCRIPTED_SPEECH": str(assistant_wav())}
    server = Server(target)
    try:
        await server.ready(timeout_s=120.0)
        yield f"ws://127.0.0.1:{server.port}/v1/realtime"
    finally:
        server.stop()


async def run(
    modes: list[Mode],
    items: list[Scenario],
    concurrency: int,
    earlier: dict[str, Pcm16] | None = None,
) -> list[ModeRun]:
    results: list[ModeRun] = []
    for backend in dict.fromkeys(m.backend for m in modes):
        async with served(backend) as url:
            for mode in (m for m in modes if m.backend == backend):
                results.append(await run_mode(url, mode, items, concurrency, earlier))
    order = [m.name for m in modes]
    return sorted(results, key=lambda r: order.index(r.mode.name))


def group_of(item: Scenario) -> str:
    """The report's row: the kind, echo by its level, recorded voices by their part."""
    kind = f"echo {item.echo_db:.0f} dB" if item.kind == "echo" else item.kind
    return f"{kind} real-{item.part}" if item.part else kind


def mode_report(result: ModeRun) -> dict[str, Any]:
    mode = result.mode
    out: dict[str, Any] = {
        "mode": mode.name,
        "vad_backend": mode.backend,
        "turn_detection": interrupting(mode),
        "trail_ms": mode.trail_ms,
        "supported": result.refused is None,
    }
    if result.refused is not None:
        note = f"not supported by this server ({result.refused})"
        return out | {"note": note, "kinds": {}, "items": []}
    by_group = {
        g: [r.reaction for r in result.items if group_of(r.item) == g and r.reaction is not None]
        for g in dict.fromkeys(group_of(r.item) for r in result.items)
    }
    # A row's first word is its kind ("sentence real-dev", "echo -10 dB").
    out["kinds"] = {g: summarize_kind(g.split()[0], rs) for g, rs in by_group.items() if rs}
    out["errors"] = sorted({code for r in result.items for code in r.error_codes})
    out["items"] = [
        {
            "name": r.item.name,
            "kind": r.item.kind,
            "text": r.item.text,
            "voice": r.item.voice,
            "part": r.item.part,
            "audio_ms": r.item.audio_ms,
            "offset_ms": r.item.offset_ms,
            "echo_db": r.item.echo_db,
            "echo_delay_ms": r.item.echo_delay_ms,
        }
        | ({} if r.reaction is None else r.reaction.__dict__)
        | ({} if r.heard is None else {"status": r.heard.status})
        for r in result.items
    ]
    return out


def build(results: list[ModeRun], seed: int, concurrency: int, run_s: float) -> dict[str, Any]:
    return {
        "seed": seed,
        "concurrency": concurrency,
        "chunk_ms": CHUNK_MS,
        "instructions": INSTRUCTIONS,
        "run_s": round(run_s, 1),
        "modes": [mode_report(r) for r in results],
    }
