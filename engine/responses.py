"""A response's state, from request to `response.done`, and its wire shape."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from engine.audio_format import OutputEncoder
from engine.conversation import Item, TranscriptMark
from engine.prepare_chain import Preparation
from models.base import Tool

Modality = Literal["text", "audio"]
CancelReason = Literal["turn_detected", "client_cancelled"]
CONVERSATION = "conversation"  # the output lane of the default conversation


@dataclass(frozen=True)
class ResponseRequest:
    from_client: bool
    event_id: str | None = None
    instructions: str | None = None
    modalities: tuple[Modality, ...] | None = None
    metadata: dict[str, str] | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    tools: tuple[Tool, ...] | None = None  # None: the session's
    tool_choice: str | None = None
    # Explicit input instead of the conversation (resolved items).
    input: tuple[Item, ...] | None = None
    # conversation: "none": outside the conversation, beside the active response.
    out_of_band: bool = False


@dataclass
class ActiveResponse:
    """A response from `response.created` to its `response.done`.

    The message buffers, `calls` and `finish` are written only by the response task;
    the session reads them once the response is fenced or has finished.
    """

    id: str
    epoch: int
    modalities: tuple[Modality, ...]
    request: ResponseRequest
    max_output_tokens: int | Literal["inf"]
    # The assistant message. In the conversation from the start (so it keeps its
    # place after the turn it answers) but announced only with its first output.
    message: Item
    encoder: OutputEncoder  # to the session's output format, state carried per response
    task: asyncio.Task[None] | None = None
    message_open: bool = False
    audio: list[np.ndarray] = field(default_factory=list)
    samples: int = 0
    unsent_samples: int = 0  # generated but held back by the encoder
    transcript: str = ""
    marks: list[TranscriptMark] = field(default_factory=list)
    calls: list[Item] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)  # item ids by output_index
    finish: Literal["length"] | None = None
    finalized: bool = False
    after_prepare: int = 0  # the model waits for preparations up to this sequence number
    inputs: tuple[Preparation, ...] = ()  # those preparations, to see whether one failed

    @property
    def item_id(self) -> str:
        return self.message.id

    @property
    def audio_out(self) -> bool:
        return "audio" in self.modalities

    @property
    def lane(self) -> str:
        return self.id if self.request.out_of_band else CONVERSATION

    def output_index(self, item_id: str) -> int:
        return self.outputs.index(item_id)


def response_wire(
    resp: ActiveResponse,
    status: str,
    *,
    conversation_id: str,
    voice: str,
    audio_format: dict[str, Any],
    details: dict[str, Any] | None = None,
    output: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The SDK's `RealtimeResponse`."""
    wire: dict[str, Any] = {
        "id": resp.id,
        "object": "realtime.response",
        "status": status,
        "status_details": details,
        "output": output or [],
        "conversation_id": None if resp.request.out_of_band else conversation_id,
        "output_modalities": list(resp.modalities),
        "max_output_tokens": resp.max_output_tokens,
        "metadata": resp.request.metadata,
    }
    if resp.audio_out:
        wire["audio"] = {"output": {"format": audio_format, "voice": voice}}
    return wire


@dataclass(frozen=True)
class ResponseFinished:
    """Mailbox message: a response task's stream ended (with `error` if it failed)."""

    response: ActiveResponse
    error: BaseException | None
