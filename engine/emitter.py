"""Outbound events: built as the SDK's own models, fenced by epoch, bounded.

Every server event is an instance of the official SDK's pydantic model for its type
(`openai.types.realtime`), so the wire shape is the SDK's by construction.

The outbox sits between the session (and its response tasks) and the connection's
writer task. It is bounded: producers of output (audio deltas) wait when it is full,
which throttles generation to what the client reads. Control events (errors,
terminal events, VAD events) never wait: a reserve above the limit keeps room for
them, and a client that lets even the reserve fill is not reading at all. The limit
and its reserve are counted twice, in events and in characters of JSON, so what a
client that stops reading holds is bounded in memory too: an output event can carry
a sentence of audio (~1 MB) and a control event can echo a client's largest message
(a `session.updated` with its instructions).

Output carries the epoch of the response that produced it. The writer checks it
when it takes an event off the queue, so output queued before a cancel or barge-in
is dropped before the wire, however deep the queue was.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar, get_args

import numpy as np
import numpy.typing as npt
from openai import BaseModel as SdkModel
from openai.types.realtime import RealtimeErrorEvent

from engine.protocol import ProtocolError

E = TypeVar("E", bound=SdkModel)


class OutboxOverflow(Exception):
    """The client stopped reading: even the control reserve is full."""


class Flush(Enum):
    """Where playback of the answer is flushed (`OutEvent.flush`): at speech_started,
    marked by the session that decides the barge-in, so no transport re-decides it.
    Two kinds, as the players differ: a client that plays the audio itself flushes
    at every speech_started (the echo guard's far end is cut there), the server's
    own playout (a WebRTC call) only when the speech interrupts the answer."""

    CLIENT = "client"  # interrupt_response is off: the server's playout plays on
    ALL = "all"  # the speech interrupts the answer: every playout goes silent


@dataclass(frozen=True)
class OutEvent:
    text: str
    type: str
    epoch: int | None = None  # None: control event, never dropped
    lane: str = "conversation"  # whose epoch `epoch` is (out-of-band responses have their own)
    item_id: str | None = None  # for audio deltas: the item whose audio is counted
    samples: int = 0  # audio samples this event carries
    pcm: npt.NDArray[np.int16] | None = None  # its 24 kHz audio, for the echo guard's far end
    response_id: str | None = None  # the response it belongs to (or carries: response.done)
    flush: Flush | None = None  # playback is flushed here (speech_started)
    event_id: str = ""  # as in `text`: what a resuming client names (server/resume.py)


class Ids:
    """Ids shaped like OpenAI's (`event_…`, `item_…`, `resp_…`): a random
    per-session prefix and a counter, cheap on the hot path."""

    def __init__(self) -> None:
        self._prefix = os.urandom(6).hex()
        self._n = itertools.count(1)

    def new(self, kind: str) -> str:
        return f"{kind}_{self._prefix}{next(self._n):06d}"


def _type_of(cls: type[SdkModel]) -> str:
    (value,) = get_args(cls.model_fields["type"].annotation)
    return str(value)


_TYPES: dict[type[SdkModel], str] = {}


def build(cls: type[E], event_id: str, **fields: Any) -> E:
    """An SDK event model with its `type` filled in (and validated by pydantic)."""
    kind = _TYPES.get(cls)
    if kind is None:
        kind = _TYPES[cls] = _type_of(cls)
    return cls(type=kind, event_id=event_id, **fields)


class Outbox:
    def __init__(
        self,
        limit: int = 256,
        reserve: int = 64,
        limit_chars: int = 8 << 20,
        reserve_chars: int = 24 << 20,
        *,
        current_epoch: Callable[[str], int] = lambda lane: 0,
        on_taken: Callable[[OutEvent], None] = lambda event: None,
    ) -> None:
        """`current_epoch`: a lane's epoch now (output of another is stale);
        `on_taken`: told of every event taken for the wire (what the client hears,
        engine/playback.py)."""
        self._queue: deque[OutEvent] = deque()
        self._limit = limit
        self._reserve = reserve
        self._limit_chars = limit_chars
        self._reserve_chars = reserve_chars
        self.chars = 0  # JSON characters queued
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._closed = False
        self._current_epoch = current_epoch
        self._on_taken = on_taken

    def __len__(self) -> int:
        return len(self._queue)

    def full(self) -> bool:
        """Output must wait: the queue is at its limit in events or in characters."""
        return len(self._queue) >= self._limit or self.chars >= self._limit_chars

    def _push(self, event: OutEvent) -> None:
        self._queue.append(event)
        self.chars += len(event.text)
        self._readable.set()
        if self.full():
            self._writable.clear()

    async def put(self, event: OutEvent) -> None:
        """Queue output, waiting while the queue is at its limit."""
        while self.full() and not self._closed:
            await self._writable.wait()
        if not self._closed:
            self._push(event)

    def put_control(self, event: OutEvent) -> None:
        if self._closed:
            return
        if len(self._queue) >= self._limit + self._reserve:
            raise OutboxOverflow(f"{len(self._queue)} events unread")
        # An empty queue takes any event: one event is bounded by the largest
        # client message it can echo.
        if self._queue and self.chars + len(event.text) > self._limit_chars + self._reserve_chars:
            raise OutboxOverflow(f"{self.chars} characters unread")
        self._push(event)

    def _is_stale(self, event: OutEvent) -> bool:
        return event.epoch is not None and event.epoch != self._current_epoch(event.lane)

    def drop_stale(self) -> int:
        """Free the room held by output of an old epoch (the writer would skip it)."""
        before = len(self._queue)
        self._queue = deque(e for e in self._queue if not self._is_stale(e))
        self.chars = sum(len(e.text) for e in self._queue)
        self._after_take()
        return before - len(self._queue)

    def holds_output_of(self, lane: str) -> bool:
        """Output of `lane` is still queued (the writer may yet send or count it)."""
        return any(e.epoch is not None and e.lane == lane for e in self._queue)

    def holds_audio_of(self, item_id: str) -> bool:
        """Audio of the item is still queued (the writer may yet send it)."""
        return any(e.item_id == item_id for e in self._queue)

    def _after_take(self) -> None:
        if not self.full():
            self._writable.set()
        if not self._queue:
            self._readable.clear()

    async def get(self) -> OutEvent | None:
        """The next event to send, or None once closed and drained."""
        while True:
            while not self._queue:
                if self._closed:
                    return None
                await self._readable.wait()
            event = self._queue.popleft()
            self.chars -= len(event.text)
            self._after_take()
            if self._is_stale(event):
                continue  # never sent, so never played: not on the far end either
            self._on_taken(event)
            return event

    def close(self) -> None:
        self._closed = True
        self._readable.set()
        self._writable.set()


def _response_of(event: SdkModel) -> str | None:
    """The response a control event belongs to: its `response_id`, or the id of the
    response it carries (`response.created`, `response.done`), so that a transport
    reads it without parsing the JSON."""
    carried = getattr(event, "response", None)
    response_id = getattr(event, "response_id", None) or getattr(carried, "id", None)
    return response_id if isinstance(response_id, str) else None


class Emitter:
    """Builds events, assigns event ids, and queues them with their epoch."""

    def __init__(self, outbox: Outbox, ids: Ids) -> None:
        self.outbox = outbox
        self.ids = ids

    def _event(self, cls: type[E], fields: dict[str, Any]) -> tuple[E, str, str]:
        """The event, its JSON and its id."""
        event_id = self.ids.new("event")
        event = build(cls, event_id, **fields)
        return event, event.model_dump_json(exclude_unset=True), event_id

    def control(self, cls: type[SdkModel], **fields: Any) -> None:
        self.send(self.build(cls, **fields))

    def flushing(self, cls: type[SdkModel], flush: Flush, **fields: Any) -> None:
        """A control event at which playback of the answer is flushed."""
        self.send(dataclasses.replace(self.build(cls, **fields), flush=flush))

    def build(self, cls: type[SdkModel], **fields: Any) -> OutEvent:
        """A control event, serialized but not queued: for a change that is made
        only once its event is known to serialize (then `send` it)."""
        event, text, event_id = self._event(cls, fields)
        return OutEvent(text, _TYPES[cls], response_id=_response_of(event), event_id=event_id)

    def error(self, exc: ProtocolError) -> None:
        """An `error` event in OpenAI's shape (type, code, message, param, event_id)."""
        self.control(
            RealtimeErrorEvent,
            error={
                "type": exc.type,
                "code": exc.code,
                "message": exc.message,
                "param": exc.param,
                "event_id": exc.event_id,
            },
        )

    def send(self, event: OutEvent) -> None:
        """Queue a control event from `build`."""
        self.outbox.put_control(event)

    async def output(
        self,
        cls: type[SdkModel],
        epoch: int,
        *,
        lane: str = "conversation",
        counts_for: str | None = None,
        samples: int = 0,
        pcm: npt.NDArray[np.int16] | None = None,
        **fields: Any,
    ) -> None:
        """Queue output of `epoch`; `samples` of audio (`pcm`, at 24 kHz) are counted
        for the item `counts_for` when the writer sends it (a WebRTC call plays `pcm`
        on its track)."""
        _, text, event_id = self._event(cls, fields)
        response_id = fields.get("response_id")
        await self.outbox.put(
            OutEvent(
                text,
                _TYPES[cls],
                epoch,
                lane,
                counts_for,
                samples,
                pcm,
                response_id,
                event_id=event_id,
            )
        )
