"""The `/v1/realtime` WebSocket transport: a reader and a writer task around one
session of the hub (server/sessions.py).

reader: frame -> parsed client event -> session mailbox (waits when it is full)
writer: session outbox -> frame (skips output fenced by a cancel); every send, the
        close frame too, within `write_timeout_s`, else the connection is aborted

`?call_id=` attaches a sideband to a WebRTC call the hub holds; behind a load
balancer, one held by another replica is relayed there (server/call_forward.py).
`?resume=true` makes the session resumable (server/resume.py): its connection may
drop and a new one take it back with `?resume_token=…&last_event_id=…`.
While the hub drains, upgrades get HTTP 503; a session it ends closes with 1001, and
the drain's last resort aborts the connection.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from typing import Any

from fastapi import WebSocket
from fastapi.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect, WebSocketState

from engine.emitter import OutboxOverflow
from engine.protocol import (
    BETA_HEADER,
    ClientEvent,
    InputAudioBufferAppend,
    ProtocolError,
    to_beta_text,
    wants_beta,
)
from engine.replay_journal import Journaled
from engine.session import Session
from engine.transcription_session import intent_of
from server.auth import Admitted, ApiError, KeyStore, bad_request, presented_key
from server.call_forward import CallForwarder
from server.logs import session_var
from server.origins import check_origin
from server.resume import (
    Attachment,
    NotResumed,
    Resumable,
    ResumeRegistry,
    resume_flag,
    resume_refusal,
    unchanged,
)
from server.sessions import (
    SHUTDOWN_REASON,
    WIND_DOWN_S,
    Seat,
    Served,
    SessionHub,
    submit_text,
)
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
    runner: asyncio.Task[None], writer: asyncio.Task[Any], done: set[asyncio.Task[Any]]
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


async def closing(served: Served) -> Ending:
    """How a served session's connection closes (`ending_of`), its failures logged;
    when the session ended itself, once its last events are sent (the writer ends
    then, or the write deadline aborts it)."""
    ending = ending_of(served.runner, served.writer, served.done)
    if ending.code == CLOSE_INTERNAL:
        for name, error in served.failures():
            log.error("%s failed", name, exc_info=error)
    if ending.code == CLOSE_GOING_AWAY:
        await served.last_events()
        if served.writer.done() and isinstance(served.writer.exception(), WriteTimeout):
            ending = Ending(abort=True)
    return ending


class RealtimeEndpoint:
    """`/v1/realtime`: WebSocket sessions of the hub, and sidebands of its calls."""

    def __init__(
        self,
        hub: SessionHub,
        keys: KeyStore,
        resumes: ResumeRegistry,
        forwarder: CallForwarder | None = None,
    ) -> None:
        self.hub = hub
        self.keys = keys
        self.resumes = resumes
        self.forwarder = forwarder  # None: a single server

    async def handle(
        self,
        ws: WebSocket,
        model: str | None = None,
        call_id: str | None = None,
        intent: str | None = None,
        resume: str | None = None,
        resume_token: str | None = None,
        last_event_id: str | None = None,
    ) -> None:
        hub = self.hub
        try:  # a web page the operator did not allow: before anything else
            check_origin(ws.headers, hub.settings.allowed_origins, open_server=self.keys.open)
        except ApiError as refusal:
            await _deny(ws, refusal)
            return
        if hub.draining:
            await _deny(
                ws, ApiError(503, "server_shutting_down", SHUTDOWN_REASON, type="server_error")
            )
            return
        if call_id is not None:
            await self._sideband(ws, call_id)
            return
        if resume_token is not None:
            await self._resume(ws, resume_token, last_event_id)
            return
        try:
            resumable = resume_flag(resume)
        except ApiError as refusal:
            await _deny(ws, refusal)
            return
        offered = ws.scope.get("subprotocols") or []
        key = presented_key(ws.headers, offered)
        try:
            ephemeral = self.keys.authenticate(key, websocket=True)
        except ApiError as refusal:
            await _deny(ws, refusal)
            return
        subprotocol = SUBPROTOCOL if SUBPROTOCOL in offered else None
        # A beta client (`OpenAI-Beta: realtime=v1`) is answered in beta names.
        beta = wants_beta(ws.headers.get(BETA_HEADER), offered)
        if (full := hub.at_capacity()) is not None:
            # Accepted first so the client gets a close code it can act on.
            await ws.accept(subprotocol=subprotocol)
            await self._close(ws, Ending(CLOSE_TRY_AGAIN, full))
            hub.closed(None, CLOSE_TRY_AGAIN)
            return
        try:  # per-key limits (429), and an ephemeral key spent (401 once used up)
            admitted = self.keys.admit(key, ephemeral, ws.client.host if ws.client else None)
        except ApiError as refusal:
            await _deny(ws, refusal)
            return
        # From the check to here nothing awaits, so concurrent handshakes cannot both
        # take the last seat. Seated until its connection is closed, so that the drain
        # can abort it.
        seat = hub.admit(functools.partial(abort_connection, ws))
        handed_on = False  # to a resumable session, which releases them when it ends
        try:
            # A key's preset the server now refuses (its MCP policy tightened), a
            # transcription session this server cannot serve or its key does not allow
            try:
                seat.session = session = hub.new_session(
                    ephemeral.model if ephemeral else model or hub.settings.model,
                    ephemeral.preset if ephemeral else None,
                    intent_of(intent),
                )
            except ProtocolError as exc:
                await _deny(ws, bad_request(exc))
                return
            await ws.accept(subprotocol=subprotocol)
            # Every log line of this connection's tasks names its session (server/logs.py).
            session_var.set(session.session_id)
            if resumable:
                link = Resumable(
                    session,
                    self.keys.owner(key, ephemeral),
                    self.resumes,
                    functools.partial(_release, hub, seat, admitted),
                )
                self.resumes.add(link)
                seat.abort, handed_on = link.abort, True
                attachment = self._attach(ws, link, None, beta)
                attachment.opened.set()
                ending = await self._serve_resumable(ws, link, attachment)
            else:
                ending = await self._run(ws, session, beta)
            await self._close(ws, ending)
        finally:
            if not handed_on:
                _release(hub, seat, admitted)
        # An aborted connection ends without a close frame: 1006 as the client sees it.
        hub.closed(session.session_id, CLOSE_ABNORMAL if ending.abort else ending.code)

    async def _resume(self, ws: WebSocket, token: str, last_event_id: str | None) -> None:
        """A client takes its resumable session back (server/resume.py): refused
        before the upgrade when it cannot, else every event it missed, then on."""
        offered = ws.scope.get("subprotocols") or []
        try:
            owner = self.keys.resuming(presented_key(ws.headers, offered))
        except ApiError as refusal:
            await _deny(ws, refusal)
            return
        claimed = self.resumes.claim(token, owner, last_event_id)
        if isinstance(claimed, NotResumed):
            if self.hub.observer is not None:
                self.hub.observer.resume_refused(claimed.code)
            await _deny(ws, resume_refusal(claimed))
            return
        link = claimed.resumable
        beta = wants_beta(ws.headers.get(BETA_HEADER), offered)
        # Attached before the accept's await: from the claim on, nothing else takes
        # the session's events, so what it missed is exactly what the claim found.
        attachment = self._attach(ws, link, claimed.missed, beta)
        try:
            await ws.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
        except Exception:
            link.detach(attachment)  # gone during the handshake: its window runs out
            raise
        attachment.opened.set()
        session_var.set(link.session_id)
        log.info("session resumed: %d missed event(s) replayed", len(claimed.missed))
        ending = await self._serve_resumable(ws, link, attachment)
        await self._close(ws, ending)
        self.hub.closed(link.session_id, CLOSE_ABNORMAL if ending.abort else ending.code)

    def _attach(
        self, ws: WebSocket, link: Resumable, missed: tuple[Journaled, ...] | None, beta: bool
    ) -> Attachment:
        send = functools.partial(_send, ws, deadline=self.hub.settings.write_timeout_s)
        convert = to_beta_text if beta else unchanged
        return link.attach(send, convert, functools.partial(abort_connection, ws), missed)

    async def _serve_resumable(
        self, ws: WebSocket, link: Resumable, attachment: Attachment
    ) -> Ending:
        """Serve a resumable session over this connection until the session ends
        (closed as `_run` closes it), the client ends it (1000), or the connection
        drops or is taken over (the session is detached, or stays with the new one)."""
        reader = asyncio.create_task(self._read(ws, link.session), name=f"reader:{link.session_id}")
        cut = asyncio.create_task(attachment.superseded.wait())
        writer = attachment.writer
        try:
            done, _ = await asyncio.wait(
                {link.runner, writer, reader, cut}, return_when=asyncio.FIRST_COMPLETED
            )
            if attachment.superseded.is_set():
                return Ending(abort=True)  # cut off by attach(): the session went on
            if writer in done and not writer.cancelled() and writer.exception() is None:
                if writer.result():  # the outbox closed: the session is ending
                    await asyncio.wait({link.runner}, timeout=WIND_DOWN_S)
                    done = {t for t in (link.runner, writer, reader) if t.done()}
            served = Served(link.runner, writer, reader, done)
            if link.runner.done():  # it ended itself: closed as `_run` closes one
                ending = await closing(served)
                await link.finish()
                return ending
            if reader in done and not reader.cancelled() and reader.result() == CLOSE_NORMAL:
                link.finish()  # the client ended it
                return Ending(CLOSE_NORMAL)
            return self._dropped(link, attachment, served)
        finally:
            cut.cancel()
            reader.cancel()

    def _dropped(self, link: Resumable, attachment: Attachment, served: Served) -> Ending:
        """The connection dropped, or stopped reading: the session waits for its
        client to come back (or ends, if the server is draining)."""
        writer, reader, done = served.writer, served.reader, served.done
        failed = writer in done and not writer.cancelled() and writer.exception() is not None
        if failed and not isinstance(writer.exception(), WriteTimeout):
            log.warning("writer failed; detaching", exc_info=writer.exception())
        if self.hub.draining:
            link.finish()
        else:
            link.detach(attachment)
        if reader in done and not reader.cancelled():
            return Ending(reader.result())  # the client's code; no frame is sent
        return Ending(abort=True)

    async def _sideband(self, ws: WebSocket, call_id: str) -> None:
        """The application's server attached to a WebRTC call's session: it gets the
        call's events and may send client events. A real API key only: an ephemeral
        key belongs to the browser, which must not steer the call from aside."""
        offered = ws.scope.get("subprotocols") or []
        forwarder, upstream = self.forwarder, None
        try:
            self.keys.authenticate(presented_key(ws.headers), websocket=False)
            held = self.hub.holds(call_id)
            if forwarder and (holder := forwarder.holder(call_id, ws.headers, held=held)):
                # Held by another replica, which checks the key again.
                upstream = await forwarder.connect(holder, call_id, ws.headers, offered)
            else:
                call = self.hub.find_call(call_id)
        except ApiError as refusal:
            await _deny(ws, refusal)
            return
        if forwarder and upstream:
            log.info("call %s: sideband relayed to the replica holding it", call_id)
            await forwarder.relay(ws, upstream)
            return
        await ws.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
        sideband = call.attach()
        session_var.set(call.session.session_id)
        log.info("call %s: sideband attached", call_id)

        async def write() -> None:
            while (text := await sideband.queue.get()) is not None:
                async with asyncio.timeout(self.hub.settings.write_timeout_s):
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

    async def _close(self, ws: WebSocket, ending: Ending) -> None:
        if ending.abort:
            log.info("aborting a connection: the client is not reading")
            abort_connection(ws)
        elif ws.client_state is WebSocketState.CONNECTED:
            try:
                async with asyncio.timeout(self.hub.settings.write_timeout_s):
                    await ws.close(code=ending.code, reason=ending.reason)
            except TimeoutError:
                abort_connection(ws)
            except Exception:  # the client went away meanwhile
                log.debug("close failed", exc_info=True)

    async def _run(self, ws: WebSocket, session: Session, beta: bool) -> Ending:
        """Serve the session until it, the reader or the writer ends; how to close."""
        write, read = self._write(ws, session, beta), self._read(ws, session)
        async with self.hub.serving(session, write, read, label=session.session_id) as served:
            ending = await closing(served)
            reader = served.reader
            if ending == Ending() and reader in served.done and not reader.cancelled():
                # The client closed first: its code, for the observer (no frame is sent).
                ending = Ending(reader.result())
            return ending

    async def _read(self, ws: WebSocket, session: Session, *, on_call: bool = False) -> int:
        """Hand the client's events to the session until it disconnects; its close
        code (1005: none given). `on_call`: a sideband of a WebRTC call, whose audio
        comes from the call's track."""
        limit = self.hub.settings.max_message_bytes
        observe = None if self.hub.observer is None else functools.partial(self._observe, session)
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
        assert self.hub.observer is not None
        self.hub.observer.frame_parsed(session.session_id, event.type)
        if isinstance(event, InputAudioBufferAppend):
            return dataclasses.replace(event, received_at=time.monotonic())
        return event

    async def _write(self, ws: WebSocket, session: Session, beta: bool) -> None:
        deadline = self.hub.settings.write_timeout_s
        while True:
            event = await session.outbox.get()
            if event is None:
                return
            text = to_beta_text(event.text) if beta else event.text
            # None: no beta equivalent
            if text is not None and not await _send(ws, text, deadline):
                return


async def _send(ws: WebSocket, text: str, deadline: float) -> bool:
    """One frame, within the write deadline (else WriteTimeout); False when the
    client left while we sent (its reader may not know yet): the connection is over,
    which is no failure of ours."""
    try:
        async with asyncio.timeout(deadline):
            await ws.send_text(text)
    except TimeoutError:
        raise WriteTimeout(f"no send completed in {deadline} s") from None
    except WebSocketDisconnect:
        return False
    return True


def _release(hub: SessionHub, seat: Seat, admitted: Admitted) -> None:
    hub.release(seat)
    admitted.release()


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
