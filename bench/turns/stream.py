"""One item through a server: a session configured for the mode, the item's audio
streamed as a microphone would (one append per chunk once that chunk is "captured"),
and the turn events with their arrival times."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from bench.soak.actor import ACK_TIMEOUT_S, session_update
from bench.soak.audio import chunk_texts
from bench.soak.tally import Tally
from bench.soak.wire import Conn
from bench.turns.noise import Pcm16
from bench.turns.score import Turn

CHUNK_MS = 20
SETTLE_S = 0.5  # after the last chunk: events still on their way


class TurnConn(Conn):
    """A soak connection that also keeps the turn events, by item, with arrival times."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.turn_events: dict[str, dict[str, Any]] = {}  # item_id -> what was seen
        self.error_codes: list[str] = []
        self.session_seen: dict[str, Any] | None = None  # the latest session.updated
        super().__init__(*args, **kwargs)

    def _handle(self, event: dict[str, Any], now: float) -> None:
        super()._handle(event, now)
        kind = event.get("type")
        if kind == "input_audio_buffer.speech_started":
            self.turn_events[event["item_id"]] = {"start_ms": event["audio_start_ms"]}
        elif kind == "input_audio_buffer.speech_stopped":
            seen = self.turn_events.setdefault(event["item_id"], {"start_ms": 0})
            seen |= {"end_ms": event["audio_end_ms"], "stopped_t": now}
        elif kind == "input_audio_buffer.committed":
            self.turn_events.setdefault(event["item_id"], {"start_ms": 0})["committed_t"] = now
        elif kind == "session.updated":
            self.session_seen = event.get("session")
        elif kind == "error":
            self.error_codes.append(str((event.get("error") or {}).get("code")))

    def turns(self) -> list[Turn]:
        return [Turn(**seen) for seen in self.turn_events.values()]


@dataclass
class Streamed:
    refused: str | None = None  # why the server did not take the mode
    turns: list[Turn] = field(default_factory=list)
    sent_t: list[float] = field(default_factory=list)  # when each chunk went out
    error_codes: list[str] = field(default_factory=list)


def applied_type(session: dict[str, Any] | None) -> str | None:
    """The turn detection type a session.updated reports."""
    audio_input = ((session or {}).get("audio") or {}).get("input") or {}
    detection = audio_input.get("turn_detection") or {}
    kind = detection.get("type")
    return str(kind) if kind is not None else None


async def configure(
    conn: TurnConn, turn_detection: dict[str, Any], audio_input: dict[str, Any] | None = None
) -> str | None:
    """Send the mode (`audio_input`: more of audio.input); None when the server applied
    it, else why not."""
    update = session_update(turn_detection)
    update["session"]["audio"]["input"].update(audio_input or {})
    updated, errors = conn.count("session.updated"), conn.count("error")
    await conn.send(update)
    answered = await conn.until(
        lambda: conn.count("session.updated") > updated or conn.count("error") > errors,
        ACK_TIMEOUT_S,
    )
    if not answered:
        return "no session.updated"
    if conn.count("error") > errors:
        return f"error {conn.error_codes[errors]} after session.update"
    got = applied_type(conn.session_seen)
    if got != turn_detection["type"]:
        return f"turn_detection applied as {got}"
    return None


async def stream_item(
    url: str, turn_detection: dict[str, Any], pcm: Pcm16, speed: float = 1.0
) -> Streamed:
    """`pcm` streamed in CHUNK_MS appends, each sent when its last sample would have
    been captured (`speed` times faster than real time when above 1)."""
    conn = await TurnConn.open(url, Tally(), None)
    out = Streamed()
    try:
        out.refused = await configure(conn, turn_detection)
        if out.refused is not None:
            return out
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for k, chunk in enumerate(chunk_texts(pcm, CHUNK_MS)):
            delay = t0 + (k + 1) * CHUNK_MS / 1000 / speed - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await conn.send(chunk)
            out.sent_t.append(time.monotonic())
        await asyncio.sleep(SETTLE_S)
        out.turns, out.error_codes = conn.turns(), list(conn.error_codes)
    finally:
        await conn.close()
    return out
