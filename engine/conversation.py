"""The conversation: an ordered list of items, and truncation of assistant audio.

Owned by the session task. Audio is kept as int16 PCM at the item's rate so that a
truncation can cut it exactly and a later prompt can hold the real audio, until the
history bound releases it (engine/history.py): the item then keeps its transcript
and the length its audio had.
"""

from __future__ import annotations

import base64
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from models.base import PCM_RATE, PromptImage

Role = Literal["user", "assistant", "system"]
Status = Literal["in_progress", "completed", "incomplete"]


@dataclass(frozen=True, slots=True)  # one per output chunk, kept for history: small
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


ItemKind = Literal[
    "message",
    "function_call",
    "function_call_output",
    # MCP (engine/mcp/): a server's tool listing, a call the server ran, a call
    # waiting for the client's approval, and that approval.
    "mcp_list_tools",
    "mcp_call",
    "mcp_approval_request",
    "mcp_approval_response",
]


@dataclass
class McpFields:
    """What only an `mcp_*` item has (its name, arguments and output are the
    item's, as a function call's are)."""

    server_label: str | None = None  # all but mcp_approval_response
    tools: list[dict[str, Any]] | None = None  # mcp_list_tools, as listed
    error: dict[str, Any] | None = None  # mcp_call
    approval_request_id: str | None = None  # mcp_call, mcp_approval_response
    approve: bool | None = None  # mcp_approval_response
    reason: str | None = None  # mcp_approval_response


@dataclass
class Item:
    id: str
    role: Role
    status: Status = "completed"
    audio: np.ndarray | None = None  # int16 mono
    rate: int = PCM_RATE
    # The length of audio released by the history bound (then `audio` is None).
    released_samples: int | None = None
    transcript: str = ""
    text: str | None = None  # typed text (user, system) or a text-only answer
    images: tuple[PromptImage, ...] = ()  # a user message's, checked (engine/images.py)
    marks: list[TranscriptMark] = field(default_factory=list)
    kind: ItemKind = "message"
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None
    mcp: McpFields = field(default_factory=McpFields)  # mcp_* items only

    @property
    def has_audio(self) -> bool:
        """The item has audio content, held or released (an assistant item the
        client created has a transcript only)."""
        return self.audio is not None or self.released_samples is not None

    @property
    def audio_samples(self) -> int:
        """The length of the item's audio, held or released."""
        if self.audio is not None:
            return len(self.audio)
        return self.released_samples or 0

    @property
    def audio_ms(self) -> int:
        return self.audio_samples * 1000 // self.rate

    def release_audio(self) -> None:
        """Let the audio go, keeping its length, transcript and marks."""
        if self.audio is not None:
            self.released_samples = len(self.audio)
            self.audio = None

    def _content(self, with_audio: bool) -> list[dict[str, Any]]:
        """The content parts; audio and image data only `with_audio` (retrieve): the
        client sent them, and added/done would carry them twice more."""
        audio = None
        if with_audio and self.audio is not None:
            audio = base64.b64encode(self.audio.tobytes()).decode("ascii")
        if self.role == "assistant":
            if self.text is not None:
                return [{"type": "output_text", "text": self.text}]
            part: dict[str, Any] = {"type": "output_audio", "transcript": self.transcript}
        else:
            parts: list[dict[str, Any]] = []
            if self.text is not None:
                parts.append({"type": "input_text", "text": self.text})
            for image in self.images:
                shown: dict[str, Any] = {"type": "input_image", "detail": image.detail}
                if with_audio:
                    shown["image_url"] = image.data_url
                parts.append(shown)
            if not self.has_audio or self.role == "system":
                return parts
            part = {"type": "input_audio", "transcript": self.transcript or None}
            if audio is not None:
                part["audio"] = audio
            return [*parts, part]
        if audio is not None:
            part["audio"] = audio
        return [part]

    def wire(self, *, with_audio: bool = False) -> dict[str, Any]:
        """The item as the SDK's `ConversationItem`."""
        common = {"id": self.id, "object": "realtime.item", "status": self.status}
        if self.kind == "function_call":
            return {
                **common,
                "type": "function_call",
                "call_id": self.call_id,
                "name": self.name,
                "arguments": self.arguments or "",
            }
        if self.kind == "function_call_output":
            return {
                **common,
                "type": "function_call_output",
                "call_id": self.call_id,
                "output": self.output or "",
            }
        if self.kind.startswith("mcp_"):
            return self._mcp_wire()
        return {
            **common,
            "type": "message",
            "role": self.role,
            "content": self._content(with_audio),
        }

    def _mcp_wire(self) -> dict[str, Any]:
        """An MCP item, as the SDK's `RealtimeMcp*` models have it (no `object` or
        `status`)."""
        mcp = self.mcp
        base: dict[str, Any] = {"id": self.id, "type": self.kind}
        if self.kind == "mcp_list_tools":
            return {**base, "server_label": mcp.server_label, "tools": mcp.tools or []}
        if self.kind == "mcp_approval_response":
            return {
                **base,
                "approval_request_id": mcp.approval_request_id,
                "approve": bool(mcp.approve),
                "reason": mcp.reason,
            }
        call = {
            **base,
            "server_label": mcp.server_label,
            "name": self.name,
            "arguments": self.arguments or "",
        }
        if self.kind == "mcp_approval_request":
            return call
        return {
            **call,
            "output": self.output,
            "error": mcp.error,
            "approval_request_id": mcp.approval_request_id,
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

    def insert_after(self, item: Item, previous_id: str | None) -> None:
        """Insert `item` right after `previous_id` (None: at the start)."""
        index = 0 if previous_id is None else self.index(previous_id) + 1
        self.items.insert(index, item)

    def index(self, item_id: str) -> int:
        return next(i for i, item in enumerate(self.items) if item.id == item_id)

    def previous_id(self, item_id: str) -> str | None:
        index = self.index(item_id)
        return self.items[index - 1].id if index else None

    def get(self, item_id: str) -> Item | None:
        return next((i for i in self.items if i.id == item_id), None)

    def remove(self, item_id: str) -> None:
        del self.items[self.index(item_id)]

    def truncate(self, item: Item, audio_end_ms: int, available_samples: int) -> int:
        """Cut an assistant item's audio at `audio_end_ms`, clamped to the
        `available_samples` the client received, and its transcript to match.
        Returns the clamped value.

        Audio the history bound released is cut by its length. An item without
        audio (the client wrote its transcript) clamps to 0 and keeps its text,
        which was never tied to audio the client could have stopped."""
        end_ms = clamp_audio_end_ms(audio_end_ms, available_samples, item.rate)
        if not item.has_audio:
            return end_ms
        keep = end_ms * item.rate // 1000
        if item.audio is not None:
            item.audio = item.audio[:keep]
        else:
            item.released_samples = min(item.audio_samples, keep)
        item.transcript = transcript_at(item.transcript, item.marks, keep)
        item.marks = [m for m in item.marks if m.samples <= keep]
        return end_ms
