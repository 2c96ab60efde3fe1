"""What the client hears: the assistant's audio from the moment the writer sends it
until it has played, and the reports of a transport that plays it itself (WebRTC).

`Playback` is the one owner of it: how much of each item was sent (what truncation
clamps to and an interrupted answer keeps), what the echo guard's far end is fed,
and when the last answer stops being audible (what held speech and
`idle_timeout_ms` read). The transport owns the playout itself.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from openai import BaseModel as SdkModel
from openai.types.realtime.realtime_server_event import (
    OutputAudioBufferCleared,
    OutputAudioBufferStarted,
    OutputAudioBufferStopped,
)

from engine.emitter import OutEvent
from models.listening.echo import FarEnd


@dataclass(frozen=True)
class TrackAudio:
    """Input from a WebRTC call's media track: 24 kHz pcm16, decoded by the transport
    (the session's input format is the wire's, and a track has its own codec)."""

    pcm: npt.NDArray[np.int16]
    received_at: float | None = None


@dataclass(frozen=True)
class PlaybackReport:
    """A WebRTC call's playout, which the transport paces: the first audio of a
    response played (`started`), all of it played (`stopped`), or the rest dropped
    (`cleared`, with what of `item_id` was played, to truncate the item to)."""

    # `dropped`: cleared on the client's `output_audio_buffer.clear`, whose
    # `output_audio_buffer.cleared` the responder sent already.
    kind: Literal["started", "stopped", "cleared", "dropped"]
    response_id: str
    item_id: str | None = None
    played_ms: int = 0


# What each playout report tells the client ("dropped" tells nothing: its event went).
PLAYBACK_EVENTS: dict[str, type[SdkModel]] = {
    "started": OutputAudioBufferStarted,
    "stopped": OutputAudioBufferStopped,
    "cleared": OutputAudioBufferCleared,
}


class Playback:
    """What the client hears, one owner (module docstring). The writer hands it every
    event it takes for the wire (`taken`); the session, answers that end and the
    transport's reports.

    When an answer ends, the time it is audible is estimated from its length,
    counted from that moment on the input audio's clock (ms since the session
    began; Parley does not know when the client began playing it, so this is an
    upper bound); a transport that plays the audio itself reports when its playout
    ended, which moves that back to then."""

    def __init__(
        self,
        far_end: Callable[[], FarEnd | None] = lambda: None,
        first_audio: Callable[[str], None] | None = None,
        queued: Callable[[str], bool] = lambda item_id: False,
    ) -> None:
        """`far_end`: the echo guard's record of what plays (None: the guard is
        off); `first_audio`: told the id of an item whose first audio is sent;
        `queued`: whether an item's audio still waits in the outbox."""
        self._far_end = far_end
        self._first_audio = first_audio
        self._queued = queued
        self._sent: dict[str, int] = {}  # audio samples per item sent to the client
        self.end_ms: int | None = None  # the last answer's audio ends here, at the client
        self.answer: str | None = None  # the response `end_ms` is for
        self.idle_from_ms: int | None = None  # idle_timeout_ms counts from here
        self.spoke = False  # an answer was heard: the voice can no longer change

    # --- what was sent ----------------------------------------------------------------

    def taken(self, event: OutEvent) -> None:
        """The writer took `event` for the wire (output of an old epoch never is)."""
        far_end = self._far_end()
        if far_end is not None:
            if event.pcm is not None:
                far_end.sent(event.pcm)
            elif event.flush is not None:
                far_end.cut()  # the client flushes its playback on it
        if event.item_id is not None:
            sent = self._sent.get(event.item_id)
            if sent is None and self._first_audio is not None:
                self._first_audio(event.item_id)
            self._sent[event.item_id] = (sent or 0) + event.samples

    def sent_samples(self, item_id: str) -> int:
        return self._sent.get(item_id, 0)

    def sent_items(self) -> Collection[str]:
        """The items the ledger holds (as many as the history keeps, at most)."""
        return self._sent.keys()

    def forget(self, item_id: str) -> None:
        """The item is gone: its entry goes, unless its audio is still queued (the
        writer would count it again as a first audio)."""
        if not self._queued(item_id):
            self._sent.pop(item_id, None)

    # --- when it is audible -------------------------------------------------------------

    def answer_ended(
        self, response_id: str | None, now_ms: int, audio_ms: int | None, spoke: bool
    ) -> None:
        if audio_ms is not None:
            self.end_ms = self.idle_from_ms = now_ms + audio_ms
            self.answer = response_id
        self.spoke = self.spoke or spoke

    def reported(self, played: PlaybackReport, now_ms: int) -> None:
        """The transport's playout of `played.response_id` ended (stopped or cleared)."""
        if played.kind == "started" or played.response_id != self.answer:
            return
        if self.end_ms is not None:
            self.end_ms = min(self.end_ms, now_ms)
        if self.idle_from_ms is not None:
            self.idle_from_ms = min(self.idle_from_ms, now_ms)

    def audible(self, now_ms: int) -> bool:
        """The last answer's audio may still be playing at the client."""
        return self.end_ms is not None and now_ms < self.end_ms

    def user_spoke(self) -> None:
        self.idle_from_ms = None  # no idle timeout after the user spoke

    def idle_since(self, now_ms: int, timeout_ms: int) -> int | None:
        """Where the idle time began if `timeout_ms` of it has passed by `now_ms`
        (and the timeout is then spent); else None."""
        since = self.idle_from_ms
        if since is None or now_ms < since + timeout_ms:
            return None
        self.idle_from_ms = None
        return since
