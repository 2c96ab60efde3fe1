"""The `/v1/realtime` WebSocket: a reader and a writer task around one session.

reader: frame -> parsed client event -> session mailbox (waits when it is full)
writer: session outbox -> frame (skips output fenced by a cancel)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketState

from engine.emitter import OutboxOverflow
from engine.session import EngineLimits, Session
from engine.vad import VadBackend
from models.base import Executor
from server.config import Settings
from server.protocol import ProtocolError, parse_client_event

log = logging.getLogger(__name__)

# Browsers cannot set headers; they offer these subprotocols and expect the first
# one echoed.
SUBPROTOCOL = "realtime"


class RealtimeEndpoint:
    def __init__(self, settings: Settings, executor: Executor, vad: VadBackend) -> None:
        self.settings = settings
        self.executor = executor
        self.vad = vad
        self.sessions = 0

    async def handle(self, ws: WebSocket, model: str | None = None) -> None:
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
        session = Session(
            self.executor,
            self.vad,
            model=model or self.settings.model,
            limits=EngineLimits(max_buffer_ms=self.settings.max_buffer_ms),
        )
        self.sessions += 1
        runner = asyncio.create_task(session.run(), name=f"session:{session.session_id}")
        writer = asyncio.create_task(self._write(ws, session), name="writer")
        reader = asyncio.create_task(self._read(ws, session), name="reader")
        try:
            done, _ = await asyncio.wait(
                {runner, writer, reader}, return_when=asyncio.FIRST_COMPLETED
            )
            close_code = 1000
            if runner in done and isinstance(runner.exception(), OutboxOverflow):
                close_code = 1008
            elif any(t.exception() for t in done if not t.cancelled()):
                close_code = 1011
        finally:
            reader.cancel()
            session.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(runner), timeout=2.0)
            runner.cancel()
            writer.cancel()
            self.sessions -= 1
        if ws.client_state is WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                await ws.close(code=close_code)

    async def _read(self, ws: WebSocket, session: Session) -> None:
        limit = self.settings.max_message_bytes
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                text = message.get("text")
                if text is None:
                    await session.submit(
                        ProtocolError(
                            "invalid_json", "Binary frames are not accepted; send JSON text."
                        )
                    )
                    continue
                try:
                    event = parse_client_event(text, limit)
                except ProtocolError as exc:
                    await session.submit(exc)
                    continue
                await session.submit(event)

    async def _write(self, ws: WebSocket, session: Session) -> None:
        while True:
            event = await session.outbox.get()
            if event is None:
                return
            await ws.send_text(event.text)
