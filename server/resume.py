"""Resumable sessions (Parley's resume extension, off unless the client asks): a
session that outlives its connection for a window, so a client whose network dropped
gets it back, with every server event it missed, in order, exactly once.

attached:  the connection's writer takes each event from the session's outbox, keeps
           it in the session's replay journal (engine/replay_journal.py), then sends
           it; the connection is announced a resume token (server/resume_tokens.py)
detached:  the connection dropped (any close but the client's 1000, a dead socket,
           a write that did not complete): a pump keeps taking events into the
           journal, so the response in flight goes on, until it has taken
           DETACHED_CHARS; past that the outbox fills and the response waits, as
           for a client that reads slowly. The session keeps its seat and its key's
           count (it still counts toward every limit)
resumed:   a connection that presents the token and the same key within the window
           attaches: a new token first, then every journaled event after the one the
           client names (`last_event_id`), then the outbox as it comes. A connection
           the server still thought attached is cut off: one client, one connection
expired:   at the window's end the session is closed as if its client had left; no
           model work outlives it

One taker of the outbox at a time: the attached connection's writer, the pump, or
nobody from a claim to its attach (so a claimant's handshake loses nothing). What
each outbox event becomes is the transport's (`Take`): over the WebSocket its text,
journaled and sent; on a WebRTC call (server/resumable_call.py) audio goes to the
call's playout instead and every other event also to its sidebands, attached or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from engine.emitter import Ids, OutEvent
from engine.observer import DetachEnd, Observer
from engine.replay_journal import CannotReplay, Journaled, Missed, ReplayJournal
from engine.session import Session
from server.auth import ApiError
from server.resume_tokens import Claimed, Refused, ResumeTokens

log = logging.getLogger(__name__)

TOKEN_EVENT = "parley.resume_token"
# What the pump takes after a drop (in characters of events' JSON) before the response
# must wait: half the journal, so the events the client may not have received before
# the drop stay replayable (about 30 s of a response's audio; for a call, the audio it
# holds in its playout).
DETACHED_CHARS = 2 * 1024 * 1024
WIND_DOWN_S = 2.0  # as server/sessions.py gives a session whose connection ended

Send = Callable[[str], Awaitable[bool]]  # one frame: False when the connection is gone
Convert = Callable[[str], str | None]  # an event's text as this client reads it
# What of an outbox event is journaled and sent (None: neither); called once for each
# event, attached or detached, and never awaits (see `attach`).
Take = Callable[[OutEvent], str | None]


def event_text(event: OutEvent) -> str:
    """A WebSocket's take: every event, as it is."""
    return event.text


def unchanged(text: str) -> str:
    """The `Convert` of a client that reads events as they are."""
    return text


def token_event(event_id: str, token: str, window_s: float) -> str:
    """The announcement of a connection's resume token (never journaled)."""
    return json.dumps(
        {"type": TOKEN_EVENT, "event_id": event_id, "resume_token": token, "window_s": window_s},
        separators=(",", ":"),
    )


def resume_flag(value: str | None) -> bool:
    """The `?resume=` query parameter, on either transport."""
    if value is None or value.lower() in ("false", "0"):
        return False
    if value.lower() in ("true", "1"):
        return True
    raise ApiError(
        400, "invalid_value", f"'resume' must be true or false, not '{value}'.", "resume"
    )


def resume_refusal(not_resumed: NotResumed) -> ApiError:
    """How a resume that cannot be is refused, on either transport."""
    lost = not_resumed.code == "resume_events_lost"
    return ApiError(
        409 if lost else 404,
        not_resumed.code,
        not_resumed.message,
        "last_event_id" if lost else "resume_token",
    )


@dataclass(eq=False)
class Attachment:
    """One connection of a resumable session."""

    # True once the session's outbox closed (it is ending), False when the
    # connection is gone
    writer: asyncio.Task[bool]
    abort: Callable[[], object]  # cut the connection off
    superseded: asyncio.Event = field(default_factory=asyncio.Event)
    # Set once the connection is accepted: the writer sends nothing before (it is
    # attached before the handshake ends, so that nothing else takes events meanwhile).
    opened: asyncio.Event = field(default_factory=asyncio.Event)


class Resumable:
    """A session whose service outlives each of its connections: its task, its
    journal, and the connection (or pump) that takes its events."""

    def __init__(
        self,
        session: Session,
        owner: str,
        registry: ResumeRegistry,
        release: Callable[[], None],
        take: Take = event_text,
    ) -> None:
        self.session = session
        self.owner = owner  # the key it was opened with (an id or a hash)
        self.registry = registry
        self.journal = ReplayJournal()
        self._release = release
        self._take = take
        self._ids = Ids()  # token announcements' ids: the session's own stay in order
        self.attachment: Attachment | None = None
        self._pump: asyncio.Task[None] | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._finishing: asyncio.Task[None] | None = None
        self._detached = False  # between a drop and its end (resumed, expired, closed)
        self.runner = asyncio.create_task(session.run(), name=f"session:{session.session_id}")
        self.runner.add_done_callback(self._on_session_ended)

    @property
    def session_id(self) -> str:
        return self.session.session_id

    @property
    def detached(self) -> bool:
        """Between a drop and its end (resumed, expired, closed)."""
        return self._detached

    @property
    def ending(self) -> bool:
        return self._finishing is not None

    def attach(
        self,
        send: Send,
        convert: Convert,
        abort: Callable[[], object],
        missed: Sequence[Journaled] | None,
    ) -> Attachment:
        """A connection takes the session: `missed` is what to replay first (None: a
        new session, whose first event is `session.created`)."""
        self._stop_takers()
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if self._detached:
            self._detached = False
            self.registry.observe_end(self.session_id, "resumed")
        token = self.registry.tokens.issue(self.session_id, self.owner)
        announced = self._ids.new("event")
        announcement = token_event(announced, token, self.registry.tokens.window_s)
        opened = asyncio.Event()
        writer = asyncio.create_task(
            self._write(send, convert, (announced, announcement), missed, opened),
            name=f"writer:{self.session_id}",
        )
        self.attachment = Attachment(writer, abort, opened=opened)
        return self.attachment

    def hold(self) -> None:
        """Claimed: nothing takes the session's events until its claimant attaches,
        so what it missed stays exactly what the claim found however long its
        handshake takes. A connection still attached is cut off. The window still
        runs: a claimant that never attaches lets the session expire."""
        self._stop_takers()
        if self._expiry is None:
            window = self.registry.tokens.window_s
            self._expiry = asyncio.get_running_loop().call_later(window, self._expire)

    def _stop_takers(self) -> None:
        if (old := self.attachment) is not None:
            self.attachment = None
            old.superseded.set()
            old.writer.cancel()
            old.abort()
        if self._pump is not None:
            # Parked in the outbox's get (nothing taken is ever held between awaits),
            # so cancelling it loses no event.
            self._pump.cancel()
            self._pump = None

    def detach(self, attachment: Attachment) -> None:
        """`attachment`'s connection is gone without ending the session."""
        if attachment is not self.attachment or self._finishing is not None:
            return  # superseded, or the session is ending anyway
        self.attachment = None
        attachment.writer.cancel()
        if self.runner.done():  # it ended as the connection dropped: nothing to resume
            self.finish()
            return
        self._pump = asyncio.create_task(self._take_detached(), name=f"pump:{self.session_id}")
        self._detached = True
        if (observer := self.registry.observer) is not None:
            observer.session_detached(self.session_id)
        for evicted in self.registry.tokens.detach(self.session_id):
            self.registry.end(evicted)
        window = self.registry.tokens.window_s
        self._expiry = asyncio.get_running_loop().call_later(window, self._expire)
        log.info("session detached; resumable for %.0f s", window)

    def finish(self, how: DetachEnd = "closed") -> asyncio.Task[None]:
        """End the session (its client ended it, its window passed, the server ends
        it): closed, given WIND_DOWN_S, then every task of it cancelled."""
        if self._finishing is None:
            if self._detached:
                self._detached = False
                self.registry.observe_end(self.session_id, how)
            self._finishing = asyncio.create_task(self._finish(), name=f"finish:{self.session_id}")
        return self._finishing

    def abort(self) -> None:
        """The drain's last resort: cut the connection off, or end a detached session."""
        if self.attachment is not None:
            self.attachment.abort()
        else:
            self.finish()

    async def _finish(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        self.registry.forget(self)
        self.session.close()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(self.runner), timeout=WIND_DOWN_S)
        tasks = [self.runner, self._pump, self.attachment.writer if self.attachment else None]
        for task in tasks:
            if task is not None:
                task.cancel()
        self._release()

    def _expire(self) -> None:
        self._expiry = None
        if self.attachment is None:
            log.info("session not resumed within its window: closed")
            self.finish("expired")

    def _on_session_ended(self, runner: asyncio.Task[None]) -> None:
        # Attached, the connection's handler sees it end; detached, nobody would.
        if self.attachment is None:
            self.finish()

    async def _write(
        self,
        send: Send,
        convert: Convert,
        announcement: tuple[str, str],  # its event id, its text
        missed: Sequence[Journaled] | None,
        opened: asyncio.Event,
    ) -> bool:
        outbox, journal, take = self.session.outbox, self.journal, self._take
        announced_id, announced = announcement
        await opened.wait()
        if missed is None:  # a new session: the token follows session.created
            if (first := await outbox.get()) is None:
                return True
            if (text := take(first)) is not None:
                journal.add(first.event_id, text)
                if not await _send_converted(send, convert, text):
                    return False
        journal.alias(announced_id)
        if not await send(announced):
            return False
        for event in missed or ():
            if not await _send_converted(send, convert, event.text):
                return False
        while (taken := await outbox.get()) is not None:
            if (text := take(taken)) is None:
                continue
            journal.add(taken.event_id, text)
            if not await _send_converted(send, convert, text):
                return False
        return True

    async def _take_detached(self) -> None:
        taken_chars = 0
        while taken_chars < DETACHED_CHARS:
            if (event := await self.session.outbox.get()) is None:
                return
            if (text := self._take(event)) is not None:
                self.journal.add(event.event_id, text)
            # Every event counts, journaled or not: a call's audio goes to its playout,
            # which must not take a whole answer while nobody listens.
            taken_chars += len(event.text)


async def _send_converted(send: Send, convert: Convert, text: str) -> bool:
    converted = convert(text)
    return True if converted is None else await send(converted)


@dataclass(frozen=True)
class Resumed:
    """A claimed session and what its client missed."""

    resumable: Resumable
    missed: tuple[Journaled, ...]


@dataclass(frozen=True)
class NotResumed:
    code: str  # resume_token_invalid | resume_events_lost
    message: str


class ResumeRegistry:
    """The process's resumable sessions by id, and their tokens."""

    def __init__(self, tokens: ResumeTokens, observer: Observer | None = None) -> None:
        self.tokens = tokens
        self.observer = observer
        self._by_id: dict[str, Resumable] = {}

    def observe_end(self, session_id: str, how: DetachEnd) -> None:
        if self.observer is not None:
            self.observer.detach_ended(session_id, how)

    def add(self, resumable: Resumable) -> None:
        self._by_id[resumable.session_id] = resumable

    def forget(self, resumable: Resumable) -> None:
        if self._by_id.get(resumable.session_id) is resumable:
            del self._by_id[resumable.session_id]
        self.tokens.forget(resumable.session_id)

    def end(self, session_id: str) -> None:
        if (resumable := self._by_id.get(session_id)) is not None:
            resumable.finish()

    @property
    def detached(self) -> int:
        return sum(1 for r in self._by_id.values() if r.detached)

    def claim(self, token: str, owner: str, last_event_id: str | None) -> Resumed | NotResumed:
        """Take a session back with its token and key, and find the events its
        client missed after `last_event_id`. A session whose events cannot be replayed
        exactly is ended: its client must start afresh either way."""
        claimed = self.tokens.claim(token, owner)
        resumable = self._by_id.get(claimed.session_id) if isinstance(claimed, Claimed) else None
        if isinstance(claimed, Refused) or resumable is None or resumable.ending:
            # One answer for every refusal: a guessed token learns nothing.
            return NotResumed(
                "resume_token_invalid",
                "The resume token is unknown, already used, expired, or was issued to "
                "another key; open a new session.",
            )
        missed = resumable.journal.after(last_event_id)
        if isinstance(missed, CannotReplay):
            resumable.finish()
            what = (
                f"'{last_event_id}' is not an event this session sent"
                if missed.reason == "unknown_event"
                else f"events after '{last_event_id}' are no longer kept"
            )
            return NotResumed(
                "resume_events_lost",
                f"The session cannot be resumed exactly: {what}. It was closed; open a "
                "new session.",
            )
        assert isinstance(missed, Missed)
        resumable.hold()
        return Resumed(resumable, missed.events)
