"""The conversation: an ordered list of items, and truncation of assistant audio.

Owned by the session task. Audio is kept as int16 PCM at the item's rate so that a
truncation can cut it exactly and a later prompt can hold the real audio.
"""

from __future__ import annotations

import base64
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Role = Literal["user", "assistant", "system"]
Status = Literal["in_progress", "completed", "incomplete"]


@dataclass(frozen=True)
class TranscriptMark:
    """After `samples` samples of audio, `chars` characters of transcript were spoken."""

    samples: int
    chars: int


def transcript_at(transcript: str, marks: list[TranscriptMark], samples: int) -> str:
    """The part of `transcript` spoken within the first `samples` of audio.

    Text is attributed to audio chunk by chunk as the executor produced them: text
    that came with audio not yet reached is cut, so the kept transcript never says
    more than the listener heard.
    """
    keys = [m.samples for m in marks]
    i = bisect_right(keys, samples)
    return transcript[: marks[i - 1].chars] if i else ""


def clamp_audio_end_ms(requested_ms: int, available_samples: int, rate: int) -> int:
    """`audio_end_ms` clamped to the audio the client actually received."""
    return max(0, min(requested_ms, available_samples * 1000 // rate))


@dataclass
class Item:
    id: str
    role: Role
    status: Status = "completed"
    audio: np.ndarray | None = None  # int16 mono
    rate: int = 24_000
    transcript: str = ""
    text: str | None = None
    marks: list[TranscriptMark] = field(default_factory=list)

    @property
    def audio_ms(self) -> int:
        return 0 if self.audio is None else len(self.audio) * 1000 // self.rate

    def wire(self, *, with_audio: bool = False) -> dict[str, Any]:
        """The item as the SDK's `ConversationItem` (a message)."""
        if self.role == "assistant":
            content: dict[str, Any] = {"type": "output_audio", "transcript": self.transcript}
            if self.text is not None:
                content = {"type": "output_text", "text": self.text}
        elif self.text is not None:
            content = {"type": "input_text", "text": self.text}
        else:
            content = {"type": "input_audio", "transcript": self.transcript or None}
        if with_audio and self.audio is not None:
            content["audio"] = base64.b64encode(self.audio.tobytes()).decode("ascii")
        return {
            "id": self.id,
            "object": "realtime.item",
            "type": "message",
            "role": self.role,
            "status": self.status,
            "content": [content],
        }


class Conversation:
    def __init__(self, conversation_id: str) -> None:
        self.id = conversation_id
        self.items: list[Item] = []

    def append(self, item: Item) -> str | None:
        """Add `item` at the end; returns the id of the item before it."""
        previous = self.items[-1].id if self.items else None
        self.items.append(item)
        return previous

    def get(self, item_id: str) -> Item | None:
        return next((i for i in self.items if i.id == item_id), None)

    def truncate(self, item: Item, audio_end_ms: int, available_samples: int) -> int:
        """Cut an assistant item's audio at `audio_end_ms`, clamped to the
        `available_samples` the client received, and its transcript to match.
        Returns the clamped value."""
        assert item.audio is not None
        end_ms = clamp_audio_end_ms(audio_end_ms, available_samples, item.rate)
        keep = end_ms * item.rate // 1000
        item.audio = item.audio[:keep]
        item.transcript = transcript_at(item.transcript, item.marks, keep)
        item.marks = [m for m in item.marks if m.samples <= keep]
        return end_ms
