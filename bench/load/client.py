"""One load client: streams its rotation of the clip at real time over its own
WebSocket and times the events it reads."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from bench.ws import connect_lean

CONNECT_CONCURRENCY = 16
CONFIGURE_TIMEOUT_S = 20.0

# Where a client finds the chunk whose arrival let the server stop a turn, from the
# speech_stopped's audio_end_ms (None: not known).
StopPlan = Callable[[int], int | None]


def chunk_holding(audio_end_ms: int, chunk_ms: int) -> int:
    """The chunk holding the end of audio `audio_end_ms` (chunk k covers [k, k+1)
    chunk_ms of the session's audio clock): semantic_vad's stops, which depend on
    when the model answers, so that no plan can know them beforehand. The server may
    hold back a few ms of audio (resampling), so this can be a chunk early."""
    return max(0, -(-audio_end_ms // chunk_ms) - 1)


@dataclass
class Samples:
    """Everything the clients of one point recorded (ms), in the window."""

    slip: list[float] = field(default_factory=list)
    stop: list[float] = field(default_factory=list)
    ack: list[float] = field(default_factory=list)
    unmatched_stops: int = 0
    sent: int = 0  # appends sent in the window
    errors: list[str] = field(default_factory=list)
    barge: list[dict[str, float | None]] = field(default_factory=list)
    responses_done: int = 0


async def open_connections(url: str, n: int) -> list[ClientConnection]:
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

    async def one() -> ClientConnection:
        async with gate:
            return await connect_lean(url, close_timeout=2)

    results = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
    conns = [r for r in results if isinstance(r, ClientConnection)]
    failed = [r for r in results if not isinstance(r, ClientConnection)]
    if failed:
        for ws in conns:
            with contextlib.suppress(Exception):
                await ws.close()
        raise RuntimeError(f"{len(failed)} of {n} connections failed: {failed[0]!r}")
    return conns


async def configure(conns: list[ClientConnection], turn_detection: dict[str, Any]) -> None:
    """Every session's turn detection set by a session.update, before any audio."""
    update = json.dumps(
        {
            "type": "session.update",
            "session": {"type": "realtime", "audio": {"input": {"turn_detection": turn_detection}}},
        }
    )

    async def one(ws: ClientConnection) -> None:
        await ws.send(update)
        async with asyncio.timeout(CONFIGURE_TIMEOUT_S):
            async for message in ws:
                kind = json.loads(message).get("type")
                if kind == "session.updated":
                    return
                if kind == "error":
                    raise RuntimeError(f"session.update refused: {message!r}")

    await asyncio.gather(*(one(ws) for ws in conns))


class LoadClient:
    """One client: streams its rotation of the clip at real time and reads events."""

    def __init__(
        self,
        ws: ClientConnection,
        texts: list[str],
        offset: int,
        start: float,
        n_send: int,
        chunk_s: float,
        window: tuple[float, float],
        out: Samples,
        plan: StopPlan | None,
        floor: bool,
        onset_chunks: set[int] | None = None,
    ) -> None:
        self.ws, self.texts, self.offset = ws, texts, offset
        self.start, self.n_send, self.chunk_s, self.window = start, n_send, chunk_s, window
        self.out, self.plan, self.floor = out, plan, floor
        self.onset_chunks = onset_chunks  # clip chunk indices where speech starts (barge-in)
        self.send_t: list[float] = []
        self.pending: deque[float] = deque()
        self.last_delta: dict[str, float] = {}
        self.started_t: list[float] = []
        self.cancelled: list[tuple[str, float]] = []

    def in_window(self, t: float) -> bool:
        return self.window[0] <= t < self.window[1]

    async def send(self) -> None:
        loop = asyncio.get_running_loop()
        texts, m = self.texts, len(self.texts)
        for k in range(self.n_send):
            due = self.start + k * self.chunk_s  # the chunk's audio has been "recorded"
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            now = loop.time()
            self.send_t.append(now)
            if self.in_window(due):
                self.out.slip.append((now - due) * 1000)
                self.out.sent += 1
            if self.floor:
                self.pending.append(now)
            await self.ws.send(texts[(self.offset + k) % m])

    async def receive(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(ConnectionClosed):
            async for message in self.ws:
                now = loop.time()
                assert isinstance(message, str)
                if self.floor:
                    sent = self.pending.popleft()
                    if self.in_window(sent):
                        self.out.ack.append((now - sent) * 1000)
                    continue
                tail = message[-80:]
                if tail.endswith('"response.output_audio.delta"}'):
                    i = tail.rfind('"response_id":"')
                    if i >= 0:
                        self.last_delta[tail[i + 15 : tail.index('"', i + 15)]] = now
                    continue
                if len(message) > 20_000:
                    continue  # a large non-delta event: nothing to time here
                event = json.loads(message)
                kind = event.get("type")
                if kind == "input_audio_buffer.speech_stopped":
                    k = None if self.plan is None else self.plan(event["audio_end_ms"])
                    if k is None or k >= len(self.send_t):
                        self.out.unmatched_stops += 1
                    elif self.in_window(self.send_t[k]):
                        self.out.stop.append((now - self.send_t[k]) * 1000)
                elif kind == "input_audio_buffer.speech_started":
                    self.started_t.append(now)
                elif kind == "response.done":
                    self.out.responses_done += 1
                    if event["response"]["status"] == "cancelled":
                        self.cancelled.append((event["response"]["id"], now))
                elif kind == "error":
                    self.out.errors.append(str(event.get("error", {}).get("message")))

    def barge_results(self, chunk_ms: int) -> None:
        """For each cancelled response: reaction times from the first chunk of the
        interrupting speech (the latest speech onset sent before the cancel)."""
        if self.onset_chunks is None:
            return
        m = len(self.texts)
        for rid, t_done in self.cancelled:
            sent = bisect.bisect_right(self.send_t, t_done)  # chunks sent by then
            onset = next(
                (k for k in range(sent - 1, -1, -1) if (self.offset + k) % m in self.onset_chunks),
                None,
            )
            if onset is None or not self.in_window(self.send_t[onset]):
                continue
            t0 = self.send_t[onset]
            t_last = self.last_delta.get(rid)
            i = bisect.bisect_right(self.started_t, t_done) - 1
            t_started = self.started_t[i] if i >= 0 else None

            def ms(a: float | None, b: float | None) -> float | None:
                return None if a is None or b is None else (b - a) * 1000

            sent_last = None if t_last is None else bisect.bisect_right(self.send_t, t_last)
            self.out.barge.append(
                {
                    "done_wall_ms": ms(t0, t_done),
                    "done_audio_ms": float((sent - onset) * chunk_ms),
                    "last_delta_wall_ms": ms(t0, t_last),
                    "last_delta_audio_ms": None
                    if sent_last is None
                    else float((sent_last - onset) * chunk_ms),
                    "started_to_done_ms": ms(t_started, t_done),
                    "started_to_last_delta_ms": ms(t_started, t_last),
                }
            )
