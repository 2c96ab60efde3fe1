"""The server events a resumable session sent, kept so that a client whose connection
dropped gets, when it resumes, exactly the events it did not receive: in order, each
once (Parley's resume extension).

The client names the last event it processed (its `event_id`); the journal answers
with every later one, or refuses when it cannot be exact: the id is not one this
session sent, or events after it were already let go. It is bounded twice, in events
and in characters of JSON, like the outbox: a journal that is full lets its oldest
events go, so a client away too long (or sent too much audio meanwhile) is told its
events are lost rather than given a conversation with a hole in it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Literal

# About a minute of a response's audio deltas and its events at 24 kHz pcm16, base64
# (64 KB of JSON a second).
MAX_EVENTS = 4096
MAX_CHARS = 4 * 1024 * 1024
MAX_ALIASES = 8  # a session's last few connections' announcements

Refusal = Literal["unknown_event", "events_lost"]


@dataclass(frozen=True)
class Journaled:
    seq: int  # 1 for the session's first event
    event_id: str
    text: str  # the event's JSON, as it went on the wire


@dataclass(frozen=True)
class Missed:
    """What a resuming client did not receive, oldest first."""

    events: tuple[Journaled, ...]


@dataclass(frozen=True)
class CannotReplay:
    reason: Refusal


class ReplayJournal:
    """Events in the order they went on the wire. One writer: the connection's."""

    def __init__(self, max_events: int = MAX_EVENTS, max_chars: int = MAX_CHARS) -> None:
        self.max_events = max_events
        self.max_chars = max_chars
        self._events: deque[Journaled] = deque()
        self._seq_of: dict[str, int] = {}
        self._chars = 0
        self._last_seq = 0
        self._forgotten_through = 0  # the highest seq let go
        self._forgotten_id: str | None = None  # its event id
        self._aliases: deque[str] = deque()

    def add(self, event_id: str, text: str) -> None:
        self._last_seq += 1
        self._events.append(Journaled(self._last_seq, event_id, text))
        self._seq_of[event_id] = self._last_seq
        self._chars += len(text)
        while self._events and (
            len(self._events) > self.max_events or self._chars > self.max_chars
        ):
            self._forget_oldest()

    def alias(self, event_id: str) -> None:
        """An event sent but not kept (a connection's resume token, which is no use
        to replay): a client that processed it processed every event before it."""
        self._seq_of[event_id] = self._last_seq
        self._aliases.append(event_id)
        if len(self._aliases) > MAX_ALIASES:
            self._seq_of.pop(self._aliases.popleft(), None)

    def after(self, last_event_id: str | None) -> Missed | CannotReplay:
        """The events after `last_event_id` (None: the client processed none)."""
        if last_event_id is None:
            seen = 0
        elif (found := self._seq_of.get(last_event_id)) is not None:
            seen = found
        else:
            # Not kept: an id this session never sent, or one let go. Either way the
            # events right after it cannot be shown to be all here.
            return CannotReplay("events_lost" if self._forgotten_through else "unknown_event")
        if seen < self._forgotten_through:
            return CannotReplay("events_lost")
        return Missed(tuple(e for e in self._events if e.seq > seen))

    @property
    def chars(self) -> int:
        return self._chars

    def __len__(self) -> int:
        return len(self._events)

    def _forget_oldest(self) -> None:
        oldest = self._events.popleft()
        self._chars -= len(oldest.text)
        self._forgotten_through = oldest.seq
        # Its id stays answerable while it is the newest forgotten (a client that
        # processed exactly it misses nothing that was let go); the one before goes.
        if self._forgotten_id is not None:
            self._seq_of.pop(self._forgotten_id, None)
        self._forgotten_id = oldest.event_id
