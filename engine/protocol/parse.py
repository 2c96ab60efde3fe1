"""One WebSocket text frame -> one client event, in GA shape, or a ProtocolError.

`input_audio_buffer.append` arrives 25-50 times a second per session, so it takes a
lean path: one `json.loads`, a dispatch on `type`, a strict base64 decode. Every
other event is validated by its pydantic model, then normalized (beta spellings
moved to their GA fields) so the engine reads GA only.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from pydantic import ValidationError

from engine.protocol import events
from engine.protocol.errors import ProtocolError, validation_error
from engine.protocol.events import ClientEvent, InputAudioBufferAppend, ValidatedEvent
from engine.protocol.normalize import normalize

# Client event type -> its model: every event but the append.
EVENT_MODELS: dict[str, type[ValidatedEvent]] = {
    "session.update": events.SessionUpdate,
    "input_audio_buffer.commit": events.InputAudioBufferCommit,
    "input_audio_buffer.clear": events.InputAudioBufferClear,
    "response.create": events.ResponseCreate,
    "response.cancel": events.ResponseCancel,
    "conversation.item.truncate": events.ConversationItemTruncate,
    "conversation.item.create": events.ConversationItemCreate,
    "conversation.item.retrieve": events.ConversationItemRetrieve,
    "conversation.item.delete": events.ConversationItemDelete,
    "output_audio_buffer.clear": events.OutputAudioBufferClear,
}
# Beta names that differ from GA ones (client side: none of this events
# were renamed, but beta clients may still send the transcription session update).
_ALIASES: dict[str, str] = {"transcription_session.update": "session.update"}

APPEND = "input_audio_buffer.append"
SUPPORTED_TYPES = sorted([APPEND, *EVENT_MODELS])


def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not a JSON value")


def loads_json(text: str | bytes) -> Any:
    """json.loads without Python's extensions: NaN and Infinity are refused as
    OpenAI refuses them, never taken in and echoed back as null."""
    return json.loads(text, parse_constant=_not_json)


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
        raw = loads_json(text)
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
    model = EVENT_MODELS.get(_ALIASES.get(kind, kind))
    if model is None:
        raise ProtocolError(
            "invalid_value",
            f"Invalid value: '{kind[:64]}'. Supported values are: {', '.join(SUPPORTED_TYPES)}.",
            "type",
            event_id,
        )
    raw["type"] = _ALIASES.get(kind, kind)
    try:
        event = model.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(exc, event_id) from None
    return normalize(event)  # type: ignore[arg-type]


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
