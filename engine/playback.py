"""What the client hears: the assistant's audio from the moment it is sent until it
has played, and the reports of a transport that plays it itself (WebRTC).

The transport owns the playout; the session reads one audible clock from here.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class TrackAudio:
    """Input from a WebRTC call's media track: 24 kHz pcm16, decoded by the transport
    (the session's input format is the wire's, and a track has its own codec)."""

    pcm: npt.NDArray[np.int16]
    received_at: float | None = None


@dataclass(frozen=True)
class Playback:
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


class PlaybackClock:
    """When the last answer stops being audible at the client, on the input audio's
    clock (ms since the session began): held speech is held until then, and
    `idle_timeout_ms` counts from then.

    When an answer ends the clock is estimated from its length, counted from that
    moment (Parley does not know when the client began playing it, so this is an
    upper bound); a transport that plays the audio itself (WebRTC) reports when its
    playout ended, which moves the clock back to then."""

    def __init__(self) -> None:
        self.end_ms: int | None = None  # the last answer's audio ends here, at the client
        self.answer: str | None = None  # the response `end_ms` is for
        self.idle_from_ms: int | None = None  # idle_timeout_ms counts from here
        self.spoke = False  # an answer was heard: the voice can no longer change

    def answer_ended(
        self, response_id: str | None, now_ms: int, audio_ms: int | None, spoke: bool
    ) -> None:
        if audio_ms is not None:
            self.end_ms = self.idle_from_ms = now_ms + audio_ms
            self.answer = response_id
        self.spoke = self.spoke or spoke

    def reported(self, played: Playback, now_ms: int) -> None:
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
