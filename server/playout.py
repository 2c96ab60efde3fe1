"""The assistant's audio on a WebRTC call, played by the server in real time.

Over a WebSocket the client plays the audio and tells the server what it played
(`conversation.item.truncate`). On a call the server paces the audio onto the
outgoing track itself, 20 ms a frame, so it knows what was played: `PlayoutQueue`
keeps that ledger (pure bookkeeping, tested directly) and reports the playout's
moves as OpenAI's WebRTC events: `output_audio_buffer.started` when a response's
first audio is played, `stopped` once all of it is (its `response.done` passed and
the queue ran dry), `cleared` when the rest is dropped (barge-in, cancel, clear),
with what of the item was played, for the session to truncate it to.
`PlayoutTrack` is the aiortc track that paces it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame

from engine.playback import PlaybackReport
from models.base import PCM_RATE
from server.rtc_audio import FRAME, FrameClock, audio_frame


@dataclass
class _Chunk:
    response_id: str
    item_id: str | None
    pcm: npt.NDArray[np.int16]
    at: int = 0  # samples of it already played


class PlayoutQueue:
    """What is queued for the track and what of each item was played."""

    def __init__(self, report: Callable[[PlaybackReport], None]) -> None:
        self._report = report
        self._chunks: deque[_Chunk] = deque()
        self.played: dict[str, int] = {}  # item id → samples played
        self.playing: str | None = None  # the response whose audio is audible
        self._finished: set[str] = set()  # responses whose response.done passed
        self._item: str | None = None  # the item whose audio was played last

    @property
    def queued_samples(self) -> int:
        return sum(len(c.pcm) - c.at for c in self._chunks)

    def push(self, response_id: str, item_id: str | None, pcm: npt.NDArray[np.int16]) -> None:
        if len(pcm):
            self._chunks.append(_Chunk(response_id, item_id, pcm))

    def finish(self, response_id: str) -> None:
        """The response's `response.done` passed: no more of its audio will come."""
        self._finished.add(response_id)
        self._stop_if_done()

    def _stop_if_done(self) -> None:
        playing = self.playing
        if playing is not None and playing in self._finished:
            if not any(c.response_id == playing for c in self._chunks):
                self.playing = None
                self._finished.discard(playing)
                self._report(PlaybackReport("stopped", playing))

    def next_frame(self) -> npt.NDArray[np.int16]:
        """The next FRAME samples to play: queued audio, then silence."""
        out = np.zeros(FRAME, np.int16)
        filled = 0
        while filled < FRAME and self._chunks:
            chunk = self._chunks[0]
            if chunk.response_id != self.playing:
                if self.playing is not None:  # a new response while one still played
                    self._report(PlaybackReport("stopped", self.playing))
                    self._finished.discard(self.playing)
                self.playing = chunk.response_id
                self._report(PlaybackReport("started", chunk.response_id))
            take = min(FRAME - filled, len(chunk.pcm) - chunk.at)
            out[filled : filled + take] = chunk.pcm[chunk.at : chunk.at + take]
            chunk.at += take
            filled += take
            if chunk.item_id is not None:
                self.played[chunk.item_id] = self.played.get(chunk.item_id, 0) + take
                self._item = chunk.item_id
            if chunk.at == len(chunk.pcm):
                self._chunks.popleft()
        self._stop_if_done()
        return out

    def clear(self, *, announce: bool = True) -> bool:
        """Drop what is queued, now. The item audible now and each item whose audio
        was dropped are reported with what of them was played (the first report
        `cleared` when `announce`, else and after it `dropped`: no event, truncation
        only). False when nothing was queued or audible."""
        response = self.playing or (self._chunks[0].response_id if self._chunks else None)
        if response is None:
            return False
        cut: list[str] = [self._item] if self.playing and self._item else []
        for chunk in self._chunks:
            if chunk.item_id is not None and chunk.item_id not in cut:
                cut.append(chunk.item_id)
        self._chunks.clear()
        self.playing = None
        self._finished.clear()
        kind: str = "cleared" if announce else "dropped"
        if not cut:
            if announce:
                self._report(PlaybackReport("cleared", response))
            return True
        for item_id in cut:
            played_ms = self.played.get(item_id, 0) * 1000 // PCM_RATE
            self._report(PlaybackReport(kind, response, item_id, played_ms))  # type: ignore[arg-type]
            kind = "dropped"
        return True


class PlayoutTrack(MediaStreamTrack):
    """The call's outgoing audio: a frame of the queue every 20 ms of wall time
    (aiortc encodes it to Opus at 48 kHz)."""

    kind = "audio"

    def __init__(self, queue: PlayoutQueue, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.queue = queue
        self._frames = FrameClock(clock)

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        pts = await self._frames.next_pts()
        return audio_frame(self.queue.next_frame(), pts)
