"""A session's one inbox: client events from its transport and what its own tasks
post, taken one at a time by the session's task (the single writer).

Client events and track audio take a slot: when every slot is taken, the transport's
reader waits, which pushes back on the client without losing anything. What the
session's own tasks post (results, playout reports, lifecycle) never waits.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engine import protocol
from engine.held_speech import HearingDone
from engine.mcp.tools import McpListed
from engine.partials import PartialHeard
from engine.pause_scoring import EndOfTurnScored
from engine.playback import PlaybackReport, TrackAudio
from engine.prepare_chain import Preparation
from engine.response import ResponseFinished
from engine.transcription import TranscriptionFinished


@dataclass(frozen=True)
class PreparationFinished:
    preparation: Preparation
    error: BaseException | None


@dataclass(frozen=True)
class Reject:
    """A client frame that did not parse, reported in wire order."""

    error: protocol.ProtocolError


@dataclass(frozen=True)
class Close:
    """The connection is gone: end now, telling nobody."""


@dataclass(frozen=True)
class Drain:
    """End the session once it has nothing left to answer."""


@dataclass(frozen=True)
class End:
    """End the session now, every response closed with its `response.done`."""


# What the session's own tasks and its transport's playout post.
InternalMessage = (
    PreparationFinished
    | ResponseFinished
    | TranscriptionFinished
    | PartialHeard
    | EndOfTurnScored
    | HearingDone
    | PlaybackReport
    | McpListed
)
Message = protocol.ClientEvent | TrackAudio | Reject | InternalMessage | Close | Drain | End


class Mailbox:
    def __init__(self, slots: int) -> None:
        self._queue: asyncio.Queue[Message] = asyncio.Queue()
        self._slots = asyncio.Semaphore(slots)

    async def submit(self, event: protocol.ClientEvent | protocol.ProtocolError) -> None:
        """A client event (or its parse error); waits for a slot."""
        await self._slots.acquire()
        self._queue.put_nowait(
            Reject(event) if isinstance(event, protocol.ProtocolError) else event
        )

    async def feed(self, pcm: npt.NDArray[np.int16], received_at: float | None) -> None:
        """Audio from a media track (24 kHz pcm16); waits for a slot."""
        await self._slots.acquire()
        self._queue.put_nowait(TrackAudio(pcm, received_at))

    def post(self, message: Message) -> None:
        """A message of the session's own, or of its transport's; never waits."""
        self._queue.put_nowait(message)

    async def get(self) -> Message:
        return await self._queue.get()

    def taken(self, message: Message) -> None:
        """`message` is handled: a client's frees its slot."""
        if not isinstance(message, InternalMessage | Close | Drain | End):
            self._slots.release()

    def empty(self) -> bool:
        return self._queue.empty()
