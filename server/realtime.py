"""The `/v1/realtime` WebSocket: a reader and a writer task around one session.

reader: frame -> parsed client event -> session mailbox (waits when it is full)
writer: session outbox -> frame (skips output fenced by a cancel); every send, the
        close frame too, within `write_timeout_s`, else the connection is aborted

Graceful drain (`RealtimeEndpoint.drain`, run by server/serving.py on SIGTERM): new
upgrades get HTTP 503, idle sessions close with 1001 at once, the others when their
answers are done; at the deadline every session still open is ended (its responses
cancelled, each with its `response.done`) and closed with 1001.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from typing import Any

from fastapi import WebSocket
from fastapi.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect, WebSocketState

from engine.emitter import OutboxOverflow
from engine.end_of_turn import EndOfTurnModel
from engine.interruption import SnippetRecognizer
from engine.limits import EngineLimits
from engine.mcp.client import McpClient
from engine.observer import Observer
from engine.protocol import (
    BETA_HEADER,
    ClientEvent,
    InputAudioBufferAppend,
    ProtocolError,
    SessionIn,
    to_beta_text,
    wants_beta,
)
from engine.session import Session
from engine.vad import VadBackend
from models.base import Executor
from server.auth import ApiError, KeyStore, presented_key
from server.config import Settings
from server.logs import session_var
from server.webrtc import Call, submit_text
from server.ws_protocol import abort_connection

log = logging.getLogger(__name__)

# Browsers cannot set headers; they offer these subprotocols and expect the first
# one echoed.
SUBPROTOCOL = "realtime"

# The close codes the server sends (docs/operations.md lists them).
CLOSE_NORMAL = 1000  # the session ended (the client went away)
CLOSE_GOING_AWAY = 1001  # drain: the server is shutting down
CLOSE_NOT_READING = 1008  # the client let the outbox's control reserve fill
CLOSE_INTERNAL = 1011  # a failure of the server
CLOSE_TRY_AGAIN = 1013  # at --max-sessions
CLOSE_ABNORMAL = 1006  # never sent: what an aborted connection is, for the observer
# (1009, a message over twice max_message_bytes, is sent by the protocol itself.)
SHUTDOWN_REASON = "Server shutting down; reconnect."
# At the drain deadline: how long the ended sessions get to send their last events
# and close frame before their connections are aborted.
END_GRACE_S = 2.0


class WriteTimeout(Exception):
    """A send did not reach the socket within `write_timeout_s`: the client is not
    reading."""


@dataclasses.dataclass(frozen=True)
class Ending:
    """How a connection ends: a close frame with this code and reason, or, when
    `abort`, a dropped transport (no frame can reach a client that does not read)."""

    code: int = CLOSE_NORMAL
    reason: str = ""
    abort: bool = False


def ending_of(
    runner: asyncio.Task[None], writer: asyncio.Task[None], done: set[asyncio.Task[Any]]
) -> Ending:
    """Why the first of a connection's tasks (`done`) ended, as a close: pure, so
    each case is tested directly."""
    failures = [t.exception() for t in done if not t.cancelled() and t.exception()]
    if writer in done and isinstance(writer.exception(), WriteTimeout):
        return Ending(abort=True)
    if runner in done and isinstance(runner.exception(), OutboxOverflow):
        return Ending(CLOSE_NOT_READING, "Client is not reading.")
    if failures:
        return Ending(CLOSE_INTERNAL)
    if runner in done:  # the session ended itself: only drain() or end() do that
        return Ending(CLOSE_GOING_AWAY, SHUTDOWN_REASON)
    return Ending()


@dataclasses.dataclass(eq=False)
class _Connection:
    """A session being served, as the drain sees it."""

    ws: WebSocket
    session: Session | None = None  # None until the upgrade is accepted


class RealtimeEndpoint:
    def __init__(
        self,
        settings: Settings,
        executor: Executor,
        vad: VadBackend,
        keys: KeyStore,
        observer: Observer | None = None,
        end_of_turn: EndOfTurnModel | None = None,
        hearing: SnippetRecognizer | None = None,
        mcp_client: McpClient | None = None,
    ) -> None:
        self.settings = settings
        self.observer = observer
        # semantic_vad's end-of-turn model, shared by the process's sessions (None:
        # its turns end on fixed silence).
        self.end_of_turn = end_of_turn
        self.hearing = hearing
        self.mcp_client = mcp_client  # reaches the MCP servers sessions name (None: none)
        self.executor = executor
        self.vad = vad
        self.keys = keys
        self.sessions = 0
        # Set while no session is open (for tests and graceful shutdown).
        self.drained = asyncio.Event()
        self.drained.set()
        self.draining = False
        self._connections: set[_Connection] = set()
        # WebRTC calls by id (server/calls.py): sessions too, drained alike.
        self.calls: dict[str, Call] = {}

    async def drain(self, cut: asyncio.Event | None = None) -> None:
        """Graceful shutdown: refuse new sessions, let every session finish what it is
        answering for up to `drain_timeout_s` (or until `cut` is set), then end the rest
        (terminal events, 1001); connections that cannot take their last events
        within END_GRACE_S are aborted. Returns when no session is open, or at the
        latest twice END_GRACE_S after the deadline."""
        self.draining = True
        timeout_s = self.settings.drain_timeout_s
        log.info("draining %d session(s), for up to %.1f s", self.sessions, timeout_s)
        for session in self._open_sessions():
            session.drain()
        if not await _wait_for(self.drained, timeout_s, cut):
            log.warning("drain deadline: ending %d session(s)", self.sessions)
            for session in self._open_sessions():
                session.end()
            if not await _wait_for(self.drained, END_GRACE_S):
                for connection in self._connections:
                    abort_connection(connection.ws)
                for call in list(self.calls.values()):
                    call.hang_up(SHUTDOWN_REASON)
                # Aborted readers end at once, and a session's shutdown takes at most
                # 2 s (_run); uvicorn's shutdown cancels whatever still runs after it.
                await _wait_for(self.drained, END_GRACE_S)

    def _open_sessions(self) -> list[Session]:
        sessions = [c.session for c in self._connections if c.session is not None]
        return sessions + [call.session for call in self.calls.values()]

    async def handle(
        self, ws: WebSocket, model: str | None = None, call_id: str | None = None
    ) -> None:
        if self.draining:
            await _deny(
                ws, ApiError(503, "server_shutting_down", SHUTDOWN_REASON, type="server_error")
            )
            return
        if call_id is not None:
            await self._sideband(ws, call_id)
            return
        offered = ws.scope.get("subprotocols") or []
        try:
            ephemeral = self.keys.authenticate(presented_key(ws.headers, offered), websocket=True)
        except ApiError as refusal:
            await _deny(ws, refusal)
            return
        subprotocol = SUBPROTOCOL if SUBPROTOCOL in offered else None
        # A beta client (`OpenAI-Beta: realtime=v1`) is answered in beta names.
        beta = wants_beta(ws.headers.get(BETA_HEADER), offered)
        if self.at_capacity():
            # Accepted first so the client gets a close code it can act on.
            await ws.accept(subprotocol=subprotocol)
            reason = f"At capacity ({self.settings.max_sessions} sessions); try again later."
            await self._close(ws, Ending(CLOSE_TRY_AGAIN, reason))
            self._closed(None, CLOSE_TRY_AGAIN)
            return
        # From the check to here nothing awaits, so concurrent handshakes cannot both
        # take the last slot. (An ephemeral key is not used up: it opens sessions until
        # it expires, server/ephemeral_keys.py.)
        self.admit()
        # Tracked until its connection is closed, so that the drain can abort it.
        connection = _Connection(ws)
        self._connections.add(connection)
        try:
            await ws.accept(subprotocol=subprotocol)
            connection.session = session = self.new_session(
                ephemeral.model if ephemeral else model or self.settings.model,
                ephemeral.preset if ephemeral else None,
            )
            # Every log line of this connection's tasks names its session (server/logs.py).
            session_var.set(session.session_id)
            ending = await self._run(ws, session, beta)
            await self._close(ws, ending)
        finally:
            self._connections.discard(connection)
            self.release()
        # An aborted connection ends without a close frame: 1006 as the client sees it.
        self._closed(session.session_id, CLOSE_ABNORMAL if ending.abort else ending.code)

    def at_capacity(self) -> bool:
        limit = self.settings.max_sessions
        return limit is not None and self.sessions >= limit

    def admit(self) -> None:
        """A session opens (WebSocket or call); `release` when it ends."""
        self.sessions += 1
        self.drained.clear()

    def release(self) -> None:
        self.sessions -= 1
        if not self.sessions:
            self.drained.set()

    def new_session(
        self, model: str, preset: SessionIn | tuple[SessionIn, ...] | None = None
    ) -> Session:
        return Session(
            self.executor,
            self.vad,
            model=model,
            limits=EngineLimits(
                max_buffer_ms=self.settings.max_buffer_ms,
                max_out_of_band_responses=self.settings.max_out_of_band_responses,
                max_history_audio_ms=self.settings.max_history_audio_ms,
                max_history_items=self.settings.max_history_items,
                max_history_text_chars=self.settings.max_history_text_chars,
            ),
            preset=preset,
            observer=self.observer,
            end_of_turn=self.end_of_turn,
            snippets=self.hearing,
            mcp_client=self.mcp_client,
        )

    async def _sideband(self, ws: WebSocket, call_id: str) -> None:
        """The application's server attached to a WebRTC call's session: it gets the
        call's events and may send client events. A real API key only: an ephemeral
        key belongs to the browser, which must not steer the call from aside."""
        try:
            self.keys.authenticate(presented_key(ws.headers), websocket=False)
            call = self.calls.get(call_id)
            if call is None:
                raise ApiError(404, "call_not_found", f"No call '{call_id}' is in progress.")
        except ApiError as refusal:
            await _deny(ws, refusal)
            return
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
        sideband = call.attach()
        session_var.set(call.session.session_id)
        log.info("call %s: sideband attached", call_id)

        async def write() -> None:
            while (text := await sideband.queue.get()) is not None:
                async with asyncio.timeout(self.settings.write_timeout_s):
                    await ws.send_text(text)

        writer = asyncio.create_task(write(), name="sideband-writer")
        reader = asyncio.create_task(
            self._read(ws, call.session, on_call=True), name="sideband-reader"
        )
        try:
            done, _ = await asyncio.wait({writer, reader}, return_when=asyncio.FIRST_COMPLETED)
            if writer in done:  # the call ended (or this socket stopped reading)
                failed = not writer.cancelled() and writer.exception() is not None
                await self._close(
                    ws, Ending(abort=True) if failed else Ending(CLOSE_NORMAL, "Call ended.")
                )
        finally:
            call.detach(sideband)
            reader.cancel()
            writer.cancel()

    def _closed(self, session_id: str | None, code: int) -> None:
        if self.observer is not None:
            self.observer.connection_closed(session_id, code)

    async def _close(self, ws: WebSocket, ending: Ending) -> None:
        if ending.abort:
            log.info("aborting a connection: the client is not reading")
            abort_connection(ws)
        elif ws.client_state is WebSocketState.CONNECTED:
            try:
                async with asyncio.timeout(self.settings.write_timeout_s):
                    await ws.close(code=ending.code, reason=ending.reason)
            except TimeoutError:
                abort_connection(ws)
            except Exception:  # the client went away meanwhile
                log.debug("close failed", exc_info=True)

    async def _run(self, ws: WebSocket, session: Session, beta: bool) -> Ending:
        """Serve the session until it, the reader or the writer ends; how to close."""
        runner = asyncio.create_task(session.run(), name=f"session:{session.session_id}")
        writer = asyncio.create_task(self._write(ws, session, beta), name="writer")
        reader = asyncio.create_task(self._read(ws, session), name="reader")
        if self.draining:  # accepted while the drain began
            session.drain()
        try:
            done, _ = await asyncio.wait(
                {runner, writer, reader}, return_when=asyncio.FIRST_COMPLETED
            )
            ending = ending_of(runner, writer, done)
            if ending.code == CLOSE_INTERNAL:
                for task in done:
                    if not task.cancelled() and task.exception() is not None:
                        log.error("%s failed", task.get_name(), exc_info=task.exception())
            if ending.code == CLOSE_GOING_AWAY and writer not in done:
                # The session's last events (response.done, …) are in the outbox,
                # which it closed: the writer ends once they are sent (or the
                # write deadline aborts it).
                await asyncio.wait({writer, reader}, return_when=asyncio.FIRST_COMPLETED)
                if writer.done() and isinstance(writer.exception(), WriteTimeout):
                    ending = Ending(abort=True)
            if ending == Ending() and reader in done and not reader.cancelled():
                # The client closed first: its code, for the observer (no frame is sent).
                ending = Ending(reader.result())
            return ending
        finally:
            reader.cancel()
            session.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(runner), timeout=2.0)
            runner.cancel()
            writer.cancel()

    async def _read(self, ws: WebSocket, session: Session, *, on_call: bool = False) -> int:
        """Hand the client's events to the session until it disconnects; its close
        code (1005: none given). `on_call`: a sideband of a WebRTC call, whose audio
        comes from the call's track."""
        limit = self.settings.max_message_bytes
        observe = None if self.observer is None else functools.partial(self._observe, session)
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
                await submit_text(session, text, limit, on_call=on_call, observe=observe)
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
        deadline = self.settings.write_timeout_s
        while True:
            event = await session.outbox.get()
            if event is None:
                return
            text = to_beta_text(event.text) if beta else event.text
            if text is not None:  # None: no beta equivalent
                try:
                    async with asyncio.timeout(deadline):
                        await ws.send_text(text)
                except TimeoutError:
                    raise WriteTimeout(f"no send completed in {deadline} s") from None
                except WebSocketDisconnect:
                    # The client left while we sent (its reader may not know yet): the
                    # connection is over, which is no failure of ours.
                    return


async def _wait_for(
    event: asyncio.Event, timeout_s: float, cut: asyncio.Event | None = None
) -> bool:
    """Wait until `event` is set (True), `cut` is set or `timeout_s` passes (False)."""
    waits = {asyncio.create_task(event.wait())}
    if cut is not None:
        waits.add(asyncio.create_task(cut.wait()))
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()
    return event.is_set()


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
