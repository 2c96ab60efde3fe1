"""One soak connection: the WebSocket, a reader that keeps what the actions wait for,
and waits on that state (never on an event that may already have passed)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from bench.soak.tally import Tally
from bench.ws import connect_lean

KEEP_RESPONSES = 64  # finished responses remembered per connection
KEEP_EVENTS = 40  # the latest event types, to show what preceded a timeout


@dataclass
class ResponseSeen:
    created_t: float
    first_delta_t: float | None = None
    done_t: float | None = None
    status: str | None = None
    audio_items: list[str] = field(default_factory=list)  # assistant items with audio


class Conn:
    def __init__(self, ws: ClientConnection, tally: Tally) -> None:
        self.ws, self.tally = ws, tally
        self.responses: dict[str, ResponseSeen] = {}
        self.counts: dict[str, int] = {}  # events received, by type
        self.recent: deque[str] = deque(maxlen=KEEP_EVENTS)  # sent ">type", received type
        self.last_committed_t: float | None = None
        self.errors = 0
        self.closed = False  # no more events will come
        # Parley's resume extension: the newest token, and the last event processed
        self.resume_token: str | None = None
        self.last_event_id: str | None = None
        self.ended = False  # we have finished with it and counted its close
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str, tally: Tally, api_key: str | None) -> Self:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        ws = await connect_lean(url, close_timeout=5, headers=headers)
        tally.connections += 1
        return cls(ws, tally)

    async def send(self, event: dict[str, Any] | str) -> None:
        if isinstance(event, dict):
            self.recent.append(f">{event.get('type')}")
            event = json.dumps(event)
        elif not event.startswith('{"type": "input_audio_buffer.append"'):
            self.recent.append(">" + event[:40])
        await self.ws.send(event)

    def count(self, kind: str) -> int:
        return self.counts.get(kind, 0)

    def busy(self) -> bool:
        """Whether a response this connection saw created has not ended yet."""
        return any(r.done_t is None for r in self.responses.values())

    async def until(self, ready: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until `ready()` holds (checked after every event); False on timeout or
        when the connection closes first."""
        try:
            async with asyncio.timeout(timeout_s):
                while not ready():
                    if self.closed:
                        return False
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            return False
        return True

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                self._handle(json.loads(message), time.monotonic())
                self._changed.set()
        except ConnectionClosed:
            pass
        finally:
            self.closed = True
            self._changed.set()

    def _handle(self, event: dict[str, Any], now: float) -> None:
        kind = str(event.get("type"))
        self.last_event_id = event.get("event_id", self.last_event_id)
        if kind == "parley.resume_token":
            self.resume_token = event["resume_token"]
        if kind != "response.output_audio.delta":
            self.recent.append(kind)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if kind == "response.output_audio.delta":
            seen = self.responses.get(event.get("response_id", ""))
            if seen is not None and seen.first_delta_t is None:
                seen.first_delta_t = now
        elif kind == "response.created":
            self._forget_old()
            self.responses[event["response"]["id"]] = ResponseSeen(now)
        elif kind == "response.done":
            response = event["response"]
            seen = self.responses.setdefault(response["id"], ResponseSeen(now))
            seen.done_t, seen.status = now, response["status"]
            self.tally.statuses[response["status"]] += 1
            # Out-of-band answers' items are not in the conversation: not truncatable.
            in_band = response.get("conversation_id") is not None
            seen.audio_items = [
                o["id"]
                for o in response.get("output") or []
                if in_band
                and o.get("type") == "message"
                and any(c.get("type") == "output_audio" for c in o.get("content") or [])
            ]
        elif kind == "input_audio_buffer.committed":
            self.last_committed_t = now
        elif kind == "error":
            self.errors += 1
            error = event.get("error") or {}
            self.tally.error(str(error.get("code")), str(error.get("message")))

    def _forget_old(self) -> None:
        done = [rid for rid, r in self.responses.items() if r.done_t is not None]
        for rid in done[: max(0, len(self.responses) - KEEP_RESPONSES)]:
            del self.responses[rid]

    def created_since(self, t: float) -> tuple[str, ResponseSeen] | None:
        """The first response created at or after `t`."""
        return next(((k, r) for k, r in self.responses.items() if r.created_t >= t), None)

    async def close(self) -> None:
        """A polite close; records the code the server answered with."""
        with contextlib.suppress(Exception):
            await self.ws.close()
        await self._end()
        self.tally.closes[str(self.ws.close_code)] += 1

    async def abort(self) -> None:
        """Drop the TCP connection without a close frame, as a phone losing signal."""
        self.ws.transport.abort()
        await self._end()
        self.tally.closes["abort"] += 1

    async def lost(self) -> None:
        """The server closed the connection: record its code."""
        await self._end()
        self.tally.closes[str(self.ws.close_code)] += 1

    async def _end(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader
        self.closed = self.ended = True
