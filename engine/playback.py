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
