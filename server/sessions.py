"""The server's sessions, whichever transport serves them. The WebSocket
(server/realtime.py) and WebRTC (server/calls.py, server/webrtc.py) are siblings
over this hub: neither imports the other.

admission: `at_capacity` (`max_sessions`), then `admit` a seat, `release` it at the end
sessions:  `new_session`, with the process's executor, VAD and shared models
serving:   `serving`, the one loop around a session: its task, the transport's
           writer and reader (and watchers) until the first ends; then the session
           is closed and gets WIND_DOWN_S to finish before its task is cancelled
events in: `submit_text`, one client event from either transport into the session
calls:     the WebRTC calls in progress by id, where a WebSocket sideband
           (`/v1/realtime?call_id=`) attaches to a call and a hang-up finds it
drain:     graceful shutdown (`drain`, run by server/serving.py on SIGTERM): no new
           sessions, idle ones end at once, the others when their answers are done;
           at the deadline every session still open is ended (its responses
           cancelled, each with its `response.done`), and those that cannot take
           their last events within END_GRACE_S are cut off by their transport
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from typing import Any, Protocol

from engine.end_of_turn import EndOfTurnModel
from engine.interruption import HearingRecognizer
from engine.limits import EngineLimits
from engine.mcp.client import McpClient
from engine.observer import Observer
from engine.prompts import PromptLibrary
from engine.protocol import (
    ClientEvent,
    InputAudioBufferAppend,
    ProtocolError,
    SessionIn,
    parse_client_event,
)
from engine.session import Session
from engine.transcription_session import SessionType
from engine.vad import VadBackend
from models.base import Executor
from server.auth import ApiError
from server.config import Settings

log = logging.getLogger(__name__)

SHUTDOWN_REASON = "Server shutting down; reconnect."
# At the drain deadline: how long the ended sessions get to send their last events
# (and close frame) before their transports cut them off.
END_GRACE_S = 2.0
# After its connection ends: how long a session may take to wind down (its
# responses aborted) before its task is cancelled.
WIND_DOWN_S = 2.0
# Events queued for one sideband WebSocket; past this it is not reading and is dropped.
SIDEBAND_QUEUE = 1024


@dataclasses.dataclass(eq=False)
class Sideband:
    """A server-side WebSocket attached to a call: the call's events, in order."""

    queue: asyncio.Queue[str | None] = dataclasses.field(
        default_factory=lambda: asyncio.Queue(SIDEBAND_QUEUE)
    )


class HeldCall(Protocol):
    """A WebRTC call (server/webrtc.py's `Call`) as the hub holds it: a sideband
    attaches to it, a hang-up ends it."""

    session: Session

    def attach(self) -> Sideband: ...

    def detach(self, sideband: Sideband) -> None: ...

    def hang_up(self, reason: str) -> None: ...


@dataclasses.dataclass(eq=False)
class Seat:
    """An admitted session, from `admit` to `release`, as the drain sees it."""

    abort: Callable[[], object]  # its transport cuts it off now (the drain's last resort)
    session: Session | None = None  # None until the transport has opened it


@dataclasses.dataclass(frozen=True)
class Served:
    """A session being served: its tasks, and those that ended first (`done`)."""

    runner: asyncio.Task[None]  # the session's own task
    writer: asyncio.Task[Any]
    reader: asyncio.Task[Any]
    done: set[asyncio.Task[Any]]

    def failures(self) -> list[tuple[str, BaseException]]:
        """The tasks of `done` that failed: each one's name and its exception."""
        return [
            (task.get_name(), error)
            for task in self.done
            if not task.cancelled() and (error := task.exception()) is not None
        ]

    async def last_events(self, timeout_s: float | None = None) -> None:
        """The session ended itself: its last events (`response.done`, …) are in the
        outbox, which it closed, and the writer ends once they are sent. Wait for
        that, or for the reader to end (the client left), for up to `timeout_s`."""
        if not self.writer.done():
            await asyncio.wait(
                {self.writer, self.reader},
                timeout=timeout_s,
                return_when=asyncio.FIRST_COMPLETED,
            )


@dataclasses.dataclass(eq=False)
class SessionHub:
    """The process's sessions, on both transports: what every session is made of,
    the seats (admission, drain) and the calls in progress."""

    settings: Settings
    executor: Executor
    vad: VadBackend
    observer: Observer | None = None
    # semantic_vad's end-of-turn model, shared by the process's sessions (None: its
    # turns end on fixed silence).
    end_of_turn: EndOfTurnModel | None = None
    hearing: HearingRecognizer | None = None  # hears held speech
    mcp_client: McpClient | None = None  # reaches the MCP servers sessions name (None: none)
    prompts: PromptLibrary | None = None  # the operator's, for `session.prompt`
    draining: bool = dataclasses.field(default=False, init=False)
    # Set while no session is open (for tests and graceful shutdown).
    drained: asyncio.Event = dataclasses.field(default_factory=asyncio.Event, init=False)
    _seats: set[Seat] = dataclasses.field(default_factory=set, init=False)
    _calls: dict[str, HeldCall] = dataclasses.field(default_factory=dict, init=False)
    # The ephemeral key (its id) that made each call; absent: an API key or an open
    # server made it.
    _call_owners: dict[str, str] = dataclasses.field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.drained.set()

    # --- admission ----------------------------------------------------------------------

    @property
    def sessions(self) -> int:
        """Sessions admitted and not yet released, on either transport."""
        return len(self._seats)

    def at_capacity(self) -> str | None:
        """Why no session may open now (`max_sessions` are open), or None. Nothing
        may await between this check and `admit`, so that concurrent handshakes
        cannot both take the last seat."""
        limit = self.settings.max_sessions
        if limit is not None and self.sessions >= limit:
            return f"At capacity ({limit} sessions); try again later."
        return None

    def admit(self, abort: Callable[[], object], session: Session | None = None) -> Seat:
        """A session opens (WebSocket or call); `abort` cuts its transport off.
        `release` the seat when the session ends."""
        seat = Seat(abort, session)
        self._seats.add(seat)
        self.drained.clear()
        return seat

    def release(self, seat: Seat) -> None:
        self._seats.discard(seat)
        if not self._seats:
            self.drained.set()

    def closed(self, session_id: str | None, code: int) -> None:
        """A connection closed with `code` (its session's, if it had one opened)."""
        if self.observer is not None:
            self.observer.connection_closed(session_id, code)

    def new_session(
        self,
        model: str,
        preset: SessionIn | tuple[SessionIn, ...] | None = None,
        intent: SessionType | None = None,
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
                ingest_speed=self.settings.ingest_speed,
                ingest_burst_s=self.settings.ingest_burst_s,
                partial_transcript_ms=self.settings.partial_transcript_ms,
            ),
            preset=preset,
            observer=self.observer,
            end_of_turn=self.end_of_turn,
            hearing=self.hearing,
            mcp_client=self.mcp_client,
            prompts=self.prompts,
            intent=intent,
        )

    # --- serving ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def serving(
        self,
        session: Session,
        write: Coroutine[Any, Any, None],
        read: Coroutine[Any, Any, Any],
        *,
        label: str,
        watch: Iterable[Coroutine[Any, Any, object]] = (),
    ) -> AsyncIterator[Served]:
        """Run the session, its transport's writer and reader and the `watch`
        coroutines (anything else that ends the service) until the first of them
        ends; the body, the transport's, decides from what `Served` holds how the
        connection ends. Then the reader stops, the session is closed and gets
        WIND_DOWN_S to finish, and every task still running is cancelled."""
        runner = asyncio.create_task(session.run(), name=f"session:{label}")
        writer = asyncio.create_task(write, name=f"writer:{label}")
        reader = asyncio.create_task(read, name=f"reader:{label}")
        watchers = [asyncio.create_task(w, name=f"watch:{label}") for w in watch]
        if self.draining:  # admitted while the drain began
            session.drain()
        try:
            done, _ = await asyncio.wait(
                {runner, writer, reader, *watchers}, return_when=asyncio.FIRST_COMPLETED
            )
            yield Served(runner, writer, reader, done)
        finally:
            reader.cancel()
            session.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(runner), timeout=WIND_DOWN_S)
            for task in (runner, writer, *watchers):
                task.cancel()

    # --- calls ----------------------------------------------------------------------

    def add_call(self, call_id: str, call: HeldCall, owner: str | None = None) -> None:
        """`owner`: the id of the ephemeral key that made the call, if one did."""
        self._calls[call_id] = call
        if owner is not None:
            self._call_owners[call_id] = owner

    def drop_call(self, call_id: str) -> None:
        self._calls.pop(call_id, None)
        self._call_owners.pop(call_id, None)

    def holds(self, call_id: str) -> bool:
        """Whether the call is in progress here (whoever may reach it)."""
        return call_id in self._calls

    def find_call(self, call_id: str, ephemeral_key_id: str | None = None) -> HeldCall:
        """The call in progress by that id (HTTP 404 when there is none). Asked with
        an ephemeral key (its id), only a call that key made is found: another key
        gets the same 404 as for an unknown id."""
        call = self._calls.get(call_id)
        if call is None or (
            ephemeral_key_id is not None and self._call_owners.get(call_id) != ephemeral_key_id
        ):
            raise ApiError(404, "call_not_found", f"No call '{call_id}' is in progress.")
        return call

    def hang_up_calls(self, reason: str) -> None:
        for call in list(self._calls.values()):
            call.hang_up(reason)

    # --- drain --------------------------------------------------------------------------

    async def drain(self, cut: asyncio.Event | None = None) -> None:
        """Graceful shutdown: refuse new sessions, let every session finish what it is
        answering for up to `drain_timeout_s` (or until `cut` is set), then end the rest
        (terminal events, 1001); transports that cannot take their last events
        within END_GRACE_S are cut off. Returns when no session is open, or at the
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
                for seat in list(self._seats):
                    seat.abort()
                # Cut-off readers end at once, and a session winds down within
                # WIND_DOWN_S; uvicorn's shutdown cancels whatever still runs after it.
                await _wait_for(self.drained, END_GRACE_S)

    def _open_sessions(self) -> list[Session]:
        return [seat.session for seat in self._seats if seat.session is not None]


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


async def submit_text(
    session: Session,
    text: str,
    limit: int,
    *,
    on_call: bool,
    observe: Callable[[ClientEvent], ClientEvent] | None = None,
) -> None:
    """Parse one client event and hand it (or its error) to the session, after
    `observe` (an observer's stamp). On a call (its data channel, a sideband), audio
    comes from the track, never as `input_audio_buffer.append`."""
    try:
        event = parse_client_event(text, limit)
    except ProtocolError as exc:
        await session.submit(exc)
        return
    if on_call and isinstance(event, InputAudioBufferAppend):
        await session.submit(
            ProtocolError(
                "invalid_request_error",
                "input_audio_buffer.append is not accepted on a WebRTC call: the "
                "audio comes from the call's media track.",
                "type",
                event.event_id,
            )
        )
        return
    await session.submit(event if observe is None else observe(event))
