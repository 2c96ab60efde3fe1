"""The `/v1/realtime` WebSocket: a reader and a writer task around one session.

reader: frame -> parsed client event -> session mailbox (waits when it is full)
writer: session outbox -> frame (skips output fenced by a cancel)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time

from fastapi import WebSocket
from fastapi.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect, WebSocketState

from engine.emitter import OutboxOverflow
from engine.limits import EngineLimits
from engine.observer import Observer
from engine.protocol import (
    BETA_HEADER,
    ClientEvent,
    InputAudioBufferAppend,
    ProtocolError,
    parse_client_event,
    to_beta_text,
    wants_beta,
)
from engine.session import Session
from engine.vad import VadBackend
from models.base import Executor
from server.auth import ApiError, KeyStore, presented_key
from server.config import Settings
from server.logs import session_var

log = logging.getLogger(__name__)

# Browsers cannot set headers; they offer these subprotocols and expect the first
# one echoed.
SUBPROTOCOL = "realtime"


class RealtimeEndpoint:
    def __init__(
        self,
        settings: Settings,
        executor: Executor,
        vad: VadBackend,
        keys: KeyStore,
        observer: Observer | None = None,
    ) -> None:
        self.settings = settings
        self.observer = observer
        self.executor = executor
        self.vad = vad
        self.keys = keys
        self.sessions = 0
        # Set while no session is open (for tests and graceful shutdown).
        self.drained = asyncio.Event()
        self.drained.set()

    async def handle(self, ws: WebSocket, model: str | None = None) -> None:
        offered = ws.scope.get("subprotocols") or []
        try:
            ephemeral = self.keys.authenticate(presented_key(ws.headers, offered), websocket=True)
        except ApiError as refusal:
            await _deny(ws, refusal)
            return
        subprotocol = SUBPROTOCOL if SUBPROTOCOL in offered else None
        # A beta client (`OpenAI-Beta: realtime=v1`) is answered in beta names.
        beta = wants_beta(ws.headers.get(BETA_HEADER), offered)
        limit = self.settings.max_sessions
        if limit is not None and self.sessions >= limit:
            # Accepted first so the client gets a close code it can act on.
            await ws.accept(subprotocol=subprotocol)
            await ws.close(code=1013, reason=f"At capacity ({limit} sessions); try again later.")
            self._closed(None, 1013)
            return
        # From the check to here nothing awaits, so concurrent handshakes cannot both
        # take the last slot. (An ephemeral key is not used up: it opens sessions until
        # it expires, server/ephemeral_keys.py.)
        self.sessions += 1
        self.drained.clear()
        try:
            await ws.accept(subprotocol=subprotocol)
            session = Session(
                self.executor,
                self.vad,
                model=ephemeral.model if ephemeral else model or self.settings.model,
                limits=EngineLimits(
                    max_buffer_ms=self.settings.max_buffer_ms,
                    max_out_of_band_responses=self.settings.max_out_of_band_responses,
                    max_history_audio_ms=self.settings.max_history_audio_ms,
                    max_history_items=self.settings.max_history_items,
                    max_history_text_chars=self.settings.max_history_text_chars,
                ),
                preset=ephemeral.preset if ephemeral else None,
                observer=self.observer,
            )
            # Every log line of this connection's tasks names its session (server/logs.py).
            session_var.set(session.session_id)
            close_code = await self._run(ws, session, beta)
        finally:
            self.sessions -= 1
            if not self.sessions:
                self.drained.set()
        if ws.client_state is WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                await ws.close(code=close_code)
        self._closed(session.session_id, close_code)

    def _closed(self, session_id: str | None, code: int) -> None:
        if self.observer is not None:
            self.observer.connection_closed(session_id, code)

    async def _run(self, ws: WebSocket, session: Session, beta: bool) -> int:
        """Serve the session until it, the reader or the writer ends; the close code
        (the client's, when the client closed first)."""
        runner = asyncio.create_task(session.run(), name=f"session:{session.session_id}")
        writer = asyncio.create_task(self._write(ws, session, beta), name="writer")
        reader = asyncio.create_task(self._read(ws, session), name="reader")
        try:
            done, _ = await asyncio.wait(
                {runner, writer, reader}, return_when=asyncio.FIRST_COMPLETED
            )
            if runner in done and isinstance(runner.exception(), OutboxOverflow):
                return 1008
            if any(t.exception() for t in done if not t.cancelled()):
                return 1011
            if reader in done and not reader.cancelled():
                return reader.result()
            return 1000
        finally:
            reader.cancel()
            session.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(runner), timeout=2.0)
            runner.cancel()
            writer.cancel()

    async def _read(self, ws: WebSocket, session: Session) -> int:
        """Hand the client's events to the session until it disconnects; its close
        code (1005: none given)."""
        limit = self.settings.max_message_bytes
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    return int(message.get("code") or 1005)
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
                if self.observer is not None:
                    event = self._observe(session, event)
                await session.submit(event)
        except WebSocketDisconnect as gone:
            return gone.code

    def _observe(self, session: Session, event: ClientEvent) -> ClientEvent:
        """Report a parsed frame; an append is stamped with its arrival, which the
        session hands on with the turn it ends (engine/observer.py)."""
        assert self.observer is not None
        self.observer.frame_parsed(session.session_id, event.type)
        if isinstance(event, InputAudioBufferAppend):
            return dataclasses.replace(event, received_at=time.monotonic())
        return event

    async def _write(self, ws: WebSocket, session: Session, beta: bool) -> None:
        while True:
            event = await session.outbox.get()
            if event is None:
                return
            text = to_beta_text(event.text) if beta else event.text
            if text is not None:  # None: no beta equivalent
                await ws.send_text(text)


async def _deny(ws: WebSocket, refusal: ApiError) -> None:
    """Refuse the handshake with an HTTP status and the error envelope, before the
    upgrade, so clients see 401/403 rather than an opened-then-closed socket."""
    log.info("realtime handshake refused: %s %s", refusal.status, refusal.code)
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        response = JSONResponse(refusal.body(), refusal.status, refusal.headers())
        await ws.send_denial_response(response)
    else:
        # Without ASGI's denial-response extension, a close before accept is the only
        # refusal there is; the server answers it with a bare 403.
        await ws.close(code=1008)
