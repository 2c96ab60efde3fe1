"""The wire protocol: client events parsed into pydantic models, protocol errors.

Client events are our own models (GA names first, beta spellings accepted) so that a
bad field gets a precise `param` in the error. Server events are the official SDK's
models (`openai.types.realtime`), built by `engine.emitter`, so the wire matches the
SDK by construction.

`input_audio_buffer.append` arrives 25-50 times a second per session, so it takes a
lean path: one `json.loads`, a dispatch on `type`, a strict base64 decode.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


@dataclass
class ProtocolError(Exception):
    """A refusal reported to the client as an OpenAI-style `error` event."""

    code: str
    message: str
    param: str | None = None
    event_id: str | None = None
    type: str = "invalid_request_error"

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class _Event(BaseModel):
    # Unknown fields are ignored rather than refused: newer clients send fields this
    # server does not know yet, and refusing them would break those clients.
    model_config = ConfigDict(extra="ignore", frozen=True)
    event_id: str | None = None


# --- session configuration (GA nested and beta flat) -----------------------------


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class TurnDetectionIn(_Loose):
    type: Literal["server_vad", "semantic_vad"] = "server_vad"
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    prefix_padding_ms: int | None = Field(default=None, ge=0, le=10_000)
    silence_duration_ms: int | None = Field(default=None, ge=0, le=60_000)
    create_response: bool | None = None
    interrupt_response: bool | None = None
    idle_timeout_ms: int | None = Field(default=None, ge=0)
    eagerness: Literal["low", "medium", "high", "auto"] | None = None


class AudioFormatIn(_Loose):
    type: Literal["audio/pcm", "audio/pcmu", "audio/pcma"]
    rate: int | None = None


class TranscriptionIn(_Loose):
    model: str | None = None
    language: str | None = None
    prompt: str | None = None


class AudioInputIn(_Loose):
    format: AudioFormatIn | None = None
    turn_detection: TurnDetectionIn | None = None
    transcription: TranscriptionIn | None = None
    noise_reduction: dict[str, Any] | None = None


class AudioOutputIn(_Loose):
    format: AudioFormatIn | None = None
    voice: str | None = None
    speed: float | None = Field(default=None, ge=0.25, le=1.5)


class AudioIn(_Loose):
    input: AudioInputIn | None = None
    output: AudioOutputIn | None = None


BetaAudioFormat = Literal["pcm16", "g711_ulaw", "g711_alaw"]


class ToolIn(_Loose):
    type: Literal["function"] = "function"
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolChoiceFunction(_Loose):
    type: Literal["function"]
    name: str


# "auto", "none", "required", a function ({"type": "function", "name": ...}), or in
# beta a function's bare name.
ToolChoiceIn = ToolChoiceFunction | str


class ContentIn(_Loose):
    # GA names, and beta's "text"/"audio" for assistant content.
    type: Literal["input_text", "input_audio", "output_text", "output_audio", "text", "audio"]
    text: str | None = None
    audio: str | None = None  # base64, in the session's input format
    transcript: str | None = None


class ItemIn(_Loose):
    id: str | None = Field(default=None, max_length=64)
    type: Literal["message", "function_call", "function_call_output", "item_reference"]
    role: Literal["user", "assistant", "system"] | None = None
    content: list[ContentIn] | None = None
    status: Literal["completed", "incomplete", "in_progress"] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None


class SessionIn(_Loose):
    """A partial session configuration. Which fields were sent matters (`null` for
    turn detection disables it; absent leaves it), so read `model_fields_set`."""

    type: Literal["realtime"] | None = None
    model: str | None = None
    instructions: str | None = None
    output_modalities: list[Literal["text", "audio"]] | None = None
    audio: AudioIn | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    # Beta (flat) spellings.
    modalities: list[Literal["text", "audio"]] | None = None
    voice: str | None = None
    input_audio_format: BetaAudioFormat | None = None
    output_audio_format: BetaAudioFormat | None = None
    turn_detection: TurnDetectionIn | None = None
    input_audio_transcription: TranscriptionIn | None = None
    tools: list[ToolIn] | None = None
    tool_choice: ToolChoiceIn | None = None
    max_response_output_tokens: int | Literal["inf"] | None = None


# --- client events ----------------------------------------------------------------


class SessionUpdate(_Event):
    type: Literal["session.update"]
    session: SessionIn


@dataclass(frozen=True)
class InputAudioBufferAppend:
    """Built by the lean path in `parse_client_event`; `pcm` is the decoded bytes,
    in the session's input format. A plain dataclass: it is the one event that
    arrives 25-50 times a second per session, and its fields are checked there."""

    pcm: bytes
    event_id: str | None = None
    type: Literal["input_audio_buffer.append"] = "input_audio_buffer.append"


class InputAudioBufferCommit(_Event):
    type: Literal["input_audio_buffer.commit"]


class InputAudioBufferClear(_Event):
    type: Literal["input_audio_buffer.clear"]


class ResponseIn(_Loose):
    instructions: str | None = None
    tools: list[ToolIn] | None = None
    tool_choice: ToolChoiceIn | None = None
    input: list[ItemIn] | None = None
    output_modalities: list[Literal["text", "audio"]] | None = None
    modalities: list[Literal["text", "audio"]] | None = None
    conversation: str | None = None
    metadata: dict[str, str] | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    max_response_output_tokens: int | Literal["inf"] | None = None  # beta spelling


class ResponseCreate(_Event):
    type: Literal["response.create"]
    response: ResponseIn | None = None


class ResponseCancel(_Event):
    type: Literal["response.cancel"]
    response_id: str | None = None


class ConversationItemTruncate(_Event):
    type: Literal["conversation.item.truncate"]
    item_id: str
    content_index: int = Field(ge=0)
    audio_end_ms: int = Field(ge=0)


class ConversationItemCreate(_Event):
    type: Literal["conversation.item.create"]
    item: ItemIn
    previous_item_id: str | None = None


class ConversationItemRetrieve(_Event):
    type: Literal["conversation.item.retrieve"]
    item_id: str


class ConversationItemDelete(_Event):
    type: Literal["conversation.item.delete"]
    item_id: str


class OutputAudioBufferClear(_Event):
    type: Literal["output_audio_buffer.clear"]


ClientEvent = (
    SessionUpdate
    | InputAudioBufferAppend
    | InputAudioBufferCommit
    | InputAudioBufferClear
    | ResponseCreate
    | ResponseCancel
    | ConversationItemTruncate
    | ConversationItemCreate
    | ConversationItemRetrieve
    | ConversationItemDelete
    | OutputAudioBufferClear
)

_MODELS: dict[str, type[_Event]] = {
    "session.update": SessionUpdate,
    "input_audio_buffer.commit": InputAudioBufferCommit,
    "input_audio_buffer.clear": InputAudioBufferClear,
    "response.create": ResponseCreate,
    "response.cancel": ResponseCancel,
    "conversation.item.truncate": ConversationItemTruncate,
    "conversation.item.create": ConversationItemCreate,
    "conversation.item.retrieve": ConversationItemRetrieve,
    "conversation.item.delete": ConversationItemDelete,
    "output_audio_buffer.clear": OutputAudioBufferClear,
}
# Beta names that differ from GA ones (client side: none of this events
# were renamed, but beta clients may still send the transcription session update).
_ALIASES: dict[str, str] = {"transcription_session.update": "session.update"}

APPEND = "input_audio_buffer.append"
SUPPORTED_TYPES = sorted([APPEND, *_MODELS])


def parse_client_event(text: str | bytes, max_bytes: int) -> ClientEvent:
    """Parse one WebSocket text frame into a client event, or raise ProtocolError."""
    size = len(text)
    if isinstance(text, str) and 4 * size > max_bytes:
        # The limit is in bytes; a character takes up to 4 of them in UTF-8, so only
        # frames that might exceed it pay for measuring.
        size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise ProtocolError(
            "message_too_large",
            f"Message of {size} bytes exceeds the limit of {max_bytes} bytes.",
        )
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        # ValueError covers JSONDecodeError and UnicodeDecodeError, and also what
        # json raises for integers too long to convert; RecursionError is deep nesting.
        raise ProtocolError("invalid_json", f"The message is not valid JSON: {exc}.") from None
    if not isinstance(raw, dict):
        raise ProtocolError("invalid_json", "The message must be a JSON object.")
    event_id = raw.get("event_id") if isinstance(raw.get("event_id"), str) else None
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(
            "missing_required_parameter", "Missing required parameter: 'type'.", "type", event_id
        )
    if kind == APPEND:
        return InputAudioBufferAppend(_decode_audio(raw.get("audio"), event_id), event_id)
    model = _MODELS.get(_ALIASES.get(kind, kind))
    if model is None:
        raise ProtocolError(
            "invalid_value",
            f"Invalid value: '{kind[:64]}'. Supported values are: {', '.join(SUPPORTED_TYPES)}.",
            "type",
            event_id,
        )
    raw["type"] = _ALIASES.get(kind, kind)
    try:
        return model.model_validate(raw)  # type: ignore[return-value]
    except ValidationError as exc:
        raise validation_error(exc, event_id) from None


def _decode_audio(audio: object, event_id: str | None) -> bytes:
    if audio is None:
        raise ProtocolError(
            "missing_required_parameter", "Missing required parameter: 'audio'.", "audio", event_id
        )
    if not isinstance(audio, str):
        raise ProtocolError(
            "invalid_type", "Invalid type for 'audio': expected a base64 string.", "audio", event_id
        )
    try:
        pcm = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(
            "invalid_value", "Invalid value for 'audio': not valid base64.", "audio", event_id
        ) from None
    return pcm  # whether the bytes fit the session's format is the session's check


def validation_error(exc: ValidationError, event_id: str | None) -> ProtocolError:
    """The first pydantic error as an OpenAI-style error with a dotted `param`."""
    first = exc.errors()[0]
    param = ".".join(str(part) for part in first["loc"])
    if first["type"] == "missing":
        return ProtocolError(
            "missing_required_parameter", f"Missing required parameter: '{param}'.", param, event_id
        )
    wrong_type = first["type"].endswith(("_type", "_parsing"))
    code = "invalid_type" if wrong_type else "invalid_value"
    return ProtocolError(code, f"Invalid '{param}': {first['msg']}.", param, event_id)
