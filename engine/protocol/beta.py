"""The beta Realtime protocol for old clients: GA server events in the beta shape.

Parley speaks GA. Beta spellings a client sends are moved to their GA fields by
`engine.protocol.normalize`, with the tables below; this module is the way out. A
client that connects with `OpenAI-Beta: realtime=v1` (the SDK's
`client.beta.realtime.connect`, or a browser offering the `openai-beta.realtime-v1`
subprotocol) reads the beta protocol, so the writer passes each outgoing frame
through `to_beta_text`. The translation is pure and shape-only:

- renamed events: `response.output_audio.*` -> `response.audio.*`,
  `response.output_audio_transcript.*` -> `response.audio_transcript.*`,
  `response.output_text.*` -> `response.text.*`, `conversation.item.added` ->
  `conversation.item.created`;
- rebuilt objects: the session (flat: `modalities`, `voice`, `input_audio_format`…),
  items (assistant content `text`/`audio`), responses (`modalities`, `voice`,
  `output_audio_format`);
- dropped events (None), which beta never had: `conversation.item.done` (beta
  announced an item once; its final state comes in `response.output_item.done`),
  `input_audio_buffer.timeout_triggered`, `.dtmf_event_received`,
  `conversation.item.input_audio_transcription.segment`, the MCP events, events
  carrying an MCP item, and any type this module does not know.

Every other field is kept only if the beta type declares it. The ground truth is the
SDK's beta union, `openai.types.beta.realtime.RealtimeServerEvent`, which
tests/protocol/test_beta.py validates every translation against, strictly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

BETA_HEADER = "openai-beta"  # its value `realtime=v1`, among others comma-separated
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"  # what browsers offer instead

Event = dict[str, Any]

_ID = frozenset({"event_id", "type"})
_PART = _ID | {"response_id", "item_id", "output_index", "content_index"}
_DELTA = _PART | {"delta"}

# Beta type -> the top-level fields its SDK model declares.
_FIELDS: dict[str, frozenset[str]] = {
    "session.created": _ID | {"session"},
    "session.updated": _ID | {"session"},
    "conversation.created": _ID | {"conversation"},
    "conversation.item.created": _ID | {"item", "previous_item_id"},
    "conversation.item.retrieved": _ID | {"item"},
    "conversation.item.deleted": _ID | {"item_id"},
    "conversation.item.truncated": _ID | {"item_id", "content_index", "audio_end_ms"},
    "conversation.item.input_audio_transcription.completed": _ID
    | {"item_id", "content_index", "transcript", "usage", "logprobs"},
    "conversation.item.input_audio_transcription.delta": _ID
    | {"item_id", "content_index", "delta", "logprobs"},
    "conversation.item.input_audio_transcription.failed": _ID
    | {"item_id", "content_index", "error"},
    "input_audio_buffer.committed": _ID | {"item_id", "previous_item_id"},
    "input_audio_buffer.cleared": _ID,
    "input_audio_buffer.speech_started": _ID | {"item_id", "audio_start_ms"},
    "input_audio_buffer.speech_stopped": _ID | {"item_id", "audio_end_ms"},
    "output_audio_buffer.started": _ID | {"response_id"},
    "output_audio_buffer.stopped": _ID | {"response_id"},
    "output_audio_buffer.cleared": _ID | {"response_id"},
    "response.created": _ID | {"response"},
    "response.done": _ID | {"response"},
    "response.output_item.added": _ID | {"response_id", "output_index", "item"},
    "response.output_item.done": _ID | {"response_id", "output_index", "item"},
    "response.content_part.added": _PART | {"part"},
    "response.content_part.done": _PART | {"part"},
    "response.audio.delta": _DELTA,
    "response.audio.done": _PART,
    "response.audio_transcript.delta": _DELTA,
    "response.audio_transcript.done": _PART | {"transcript"},
    "response.text.delta": _DELTA,
    "response.text.done": _PART | {"text"},
    "response.function_call_arguments.delta": _ID
    | {"response_id", "item_id", "output_index", "call_id", "delta"},
    "response.function_call_arguments.done": _ID
    | {"response_id", "item_id", "output_index", "call_id", "arguments"},
    "rate_limits.updated": _ID | {"rate_limits"},
    "error": _ID | {"error"},
}

# GA type -> beta type, where they differ. A GA type in neither this nor _FIELDS
# has no beta equivalent and is dropped.
RENAMED: dict[str, str] = {
    "conversation.item.added": "conversation.item.created",
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
}

# The beta session's `model` is a closed set; other names (Parley's own) are left out.
BETA_MODELS = frozenset(
    {
        "gpt-realtime",
        "gpt-realtime-2025-08-28",
        "gpt-4o-realtime-preview",
        "gpt-4o-realtime-preview-2024-10-01",
        "gpt-4o-realtime-preview-2024-12-17",
        "gpt-4o-realtime-preview-2025-06-03",
        "gpt-4o-mini-realtime-preview",
        "gpt-4o-mini-realtime-preview-2024-12-17",
    }
)
# GA audio format type -> beta format name.
FORMATS = {"audio/pcm": "pcm16", "audio/pcmu": "g711_ulaw", "audio/pcma": "g711_alaw"}
# GA assistant content type -> beta's (user content types are the same in both).
ASSISTANT_CONTENT = {"output_text": "text", "output_audio": "audio"}
_CONTENT_TYPES = {
    "input_text": "input_text",
    "input_audio": "input_audio",
    **ASSISTANT_CONTENT,
    "text": "text",
    "audio": "audio",
}
_ITEM_TYPES = frozenset({"message", "function_call", "function_call_output"})
_ITEM_FIELDS = ("id", "object", "type", "status", "role", "call_id", "name", "arguments", "output")
_TURN_DETECTION_FIELDS = (
    "type",
    "threshold",
    "prefix_padding_ms",
    "silence_duration_ms",
    "create_response",
    "interrupt_response",
    "eagerness",
)


def wants_beta(header: str | None, subprotocols: Iterable[str] = ()) -> bool:
    """Whether a connecting client asked for the beta protocol: the `OpenAI-Beta`
    header holds `realtime=v1`, or it offered the `openai-beta.realtime-v1`
    subprotocol."""
    if header and any(p.strip().lower() == "realtime=v1" for p in header.split(",")):
        return True
    return BETA_SUBPROTOCOL in subprotocols


def beta_type(kind: str) -> str | None:
    """The beta type of a GA server event type, or None when beta has no such event."""
    beta_kind = RENAMED.get(kind, kind)
    return beta_kind if beta_kind in _FIELDS else None


def to_beta(event: Event) -> Event | None:
    """The beta form of one GA server event, or None when beta has no such event."""
    kind = event.get("type")
    if not isinstance(kind, str):
        return None
    beta_kind = beta_type(kind)
    if beta_kind is None:
        return None
    fields = _FIELDS[beta_kind]
    out: Event = {k: v for k, v in event.items() if k in fields}
    out["type"] = beta_kind
    if "item" in out:
        item = _item(out["item"])
        if item is None:
            return None  # an MCP item: beta never had one
        out["item"] = item
    if "session" in out:
        out["session"] = _session(out["session"])
    if "response" in out:
        out["response"] = _response(out["response"])
    return out


# Events whose GA and beta forms differ only in `type`, which the SDK's models
# serialize last: the writer renames them in the text without parsing their audio.
_TYPE_KEY = '"type":"'
_FAST = {
    ga: beta
    for ga, beta in RENAMED.items()
    if ga.startswith(("response.output_audio", "response.output_text"))
}


def to_beta_text(text: str) -> str | None:
    """`to_beta` on one JSON text frame: the frame to send instead, or None."""
    at = text.rfind(_TYPE_KEY)
    if at >= 0 and text.endswith('"}'):
        kind = text[at + len(_TYPE_KEY) : -2]
        beta = _FAST.get(kind)
        if beta is not None:
            # A quote inside a JSON string is escaped, so this key is the event's own.
            return f"{text[:at]}{_TYPE_KEY}{beta}" + '"}'
    try:
        event = json.loads(text)
    except ValueError:
        return None
    if not isinstance(event, dict):
        return None
    beta_event = to_beta(event)
    if beta_event is None:
        return None
    return json.dumps(beta_event, ensure_ascii=False, separators=(",", ":"))


# --- objects --------------------------------------------------------------------------


def _pick(value: Any, keys: Iterable[str]) -> Event:
    if not isinstance(value, dict):
        return {}
    return {k: value[k] for k in keys if k in value}


def _obj(value: Any) -> Event:
    return value if isinstance(value, dict) else {}


def _format(fmt: Any) -> str | None:
    return FORMATS.get(fmt.get("type", "")) if isinstance(fmt, dict) else None


def _item(item: Any) -> Event | None:
    if not isinstance(item, dict) or item.get("type") not in _ITEM_TYPES:
        return None
    out = _pick(item, _ITEM_FIELDS)
    if isinstance(item.get("content"), list):
        content: list[Event] = []
        for part in item["content"]:
            kind = _CONTENT_TYPES.get(part.get("type", "")) if isinstance(part, dict) else None
            if kind is not None:  # input_image: beta had none
                content.append({**_pick(part, ("text", "audio", "transcript")), "type": kind})
        out["content"] = content
    return out


def _modalities(value: Any) -> Any:
    # Beta pairs audio with its transcript: ["text", "audio"], never ["audio"] alone.
    if isinstance(value, list) and "audio" in value:
        return ["text", "audio"]
    return value


def _voice(value: Any) -> Any:
    return value.get("id") if isinstance(value, dict) else value  # a custom voice's id


def _session(session: Any) -> Event:
    if not isinstance(session, dict):
        return {}
    out = _pick(session, ("id", "instructions"))
    if session.get("model") in BETA_MODELS:
        out["model"] = session["model"]
    if "output_modalities" in session:
        out["modalities"] = _modalities(session["output_modalities"])
    if "max_output_tokens" in session:
        out["max_response_output_tokens"] = session["max_output_tokens"]
    audio = _obj(session.get("audio"))
    audio_in, audio_out = _obj(audio.get("input")), _obj(audio.get("output"))
    if (fmt := _format(audio_in.get("format"))) is not None:
        out["input_audio_format"] = fmt
    if "turn_detection" in audio_in:
        vad = audio_in["turn_detection"]
        out["turn_detection"] = None if vad is None else _pick(vad, _TURN_DETECTION_FIELDS)
    if "transcription" in audio_in:
        t = audio_in["transcription"]
        out["input_audio_transcription"] = (
            None if t is None else _pick(t, ("model", "language", "prompt"))
        )
    if "noise_reduction" in audio_in:
        nr = audio_in["noise_reduction"]
        out["input_audio_noise_reduction"] = None if nr is None else _pick(nr, ("type",))
    if (fmt := _format(audio_out.get("format"))) is not None:
        out["output_audio_format"] = fmt
    if audio_out.get("voice") is not None:
        out["voice"] = _voice(audio_out["voice"])
    if "speed" in audio_out:
        out["speed"] = audio_out["speed"]
    if isinstance(session.get("tools"), list):
        out["tools"] = [
            _pick(t, ("type", "name", "description", "parameters"))
            for t in session["tools"]
            if isinstance(t, dict) and t.get("type", "function") == "function"
        ]
    if isinstance(session.get("tool_choice"), str):
        out["tool_choice"] = session["tool_choice"]  # beta names no function here
    if "tracing" in session:
        tracing = session["tracing"]
        if isinstance(tracing, dict):
            tracing = _pick(tracing, ("group_id", "metadata", "workflow_name"))
        out["tracing"] = tracing  # or "auto", or None
    return out


def _response(response: Any) -> Event:
    if not isinstance(response, dict):
        return {}
    out = _pick(
        response,
        ("id", "object", "status", "conversation_id", "max_output_tokens", "metadata"),
    )
    if "status_details" in response:
        details = response["status_details"]
        out["status_details"] = (
            None
            if details is None
            else {
                **_pick(details, ("type", "reason")),
                **(
                    {"error": _pick(details["error"], ("type", "code", "message"))}
                    if isinstance(details.get("error"), dict)
                    else {}
                ),
            }
        )
    if "output_modalities" in response:
        out["modalities"] = _modalities(response["output_modalities"])
    if isinstance(response.get("output"), list):
        out["output"] = [i for i in map(_item, response["output"]) if i is not None]
    audio_out = _obj(_obj(response.get("audio")).get("output"))
    if (fmt := _format(audio_out.get("format"))) is not None:
        out["output_audio_format"] = fmt
    if audio_out.get("voice") is not None:
        out["voice"] = _voice(audio_out["voice"])
    if isinstance(response.get("usage"), dict):
        usage = response["usage"]
        out["usage"] = _pick(usage, ("total_tokens", "input_tokens", "output_tokens"))
        if isinstance(usage.get("input_token_details"), dict):
            out["usage"]["input_token_details"] = _pick(
                usage["input_token_details"], ("audio_tokens", "cached_tokens", "text_tokens")
            )
        if isinstance(usage.get("output_token_details"), dict):
            out["usage"]["output_token_details"] = _pick(
                usage["output_token_details"], ("audio_tokens", "text_tokens")
            )
    return out
