"""A WebRTC caller for tests (bench/rtc_client.py's), its data channel read as an
`Events` stream and what it sends recorded."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aiortc import RTCPeerConnection

from bench.rtc_client import Call, Heard, Microphone, call
from tests.support.events import Events
from tests.support.servers import RunningServer


@dataclass
class RtcCall:
    call: Call
    events: Events
    sent: list[dict[str, Any]] = field(default_factory=list)

    # What the tests reach for on the call itself.
    @property
    def mic(self) -> Microphone:
        return self.call.mic

    @property
    def pc(self) -> RTCPeerConnection:
        return self.call.pc

    @property
    def call_id(self) -> str:
        return self.call.call_id

    @property
    def heard(self) -> list[Heard]:
        return self.call.heard

    def audible_since(self, t: float) -> list[Heard]:
        return self.call.audible_since(t)

    async def until_heard(self, condition: Callable[[], bool], timeout_s: float) -> None:
        await self.call.until_heard(condition, timeout_s)

    async def until_closed(self, timeout_s: float) -> None:
        """Wait until the server has closed the peer connection."""
        ended = asyncio.Event()
        self.pc.on("connectionstatechange", ended.set)
        async with asyncio.timeout(timeout_s):
            while self.pc.connectionState != "closed":
                ended.clear()
                await ended.wait()

    def send(self, event: dict[str, Any]) -> None:
        self.sent.append(event)
        self.call.send_json(json.dumps(event))


@contextlib.asynccontextmanager
async def rtc_call(
    server: RunningServer, *, key: str = "x", session: dict[str, Any] | None = None
) -> AsyncIterator[RtcCall]:
    async with call(server.http_url, key=key, session=session) as made:
        yield RtcCall(made, Events(made.inbox.get))
