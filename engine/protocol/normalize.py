"""Beta spellings on input, moved to their GA fields: the engine reads GA only.

Every client may use them (the beta SDK does; so do clients written against it):

- session: flat `modalities`, `voice`, `input_audio_format`/`output_audio_format`
  ("pcm16", "g711_ulaw", "g711_alaw"), `turn_detection`, `input_audio_transcription`,
  `input_audio_noise_reduction`
  and `max_response_output_tokens`; the GA nested field wins where both are sent;
- response: `modalities` and `max_response_output_tokens`, where GA's are empty;
- modalities ["text", "audio"]: beta's audio with its transcript, GA's ["audio"];
- assistant content `text`/`audio`: GA's `output_text`/`output_audio`.

`normalize` is pure and runs after validation, so a bad beta field is still refused
under the name the client sent (`session.input_audio_format`...): a beta audio format
Parley does not know is refused here, `unsupported_audio_format`. An event without
beta spellings comes back as it was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from engine.protocol.beta import ASSISTANT_CONTENT, FORMATS
from engine.protocol.errors import ProtocolError
from engine.protocol.events import (
    AudioFormatIn,
    AudioIn,
    AudioInputIn,
    AudioOutputIn,
    ClientEvent,
    ConversationItemCreate,
    ItemIn,
    ResponseCreate,
    ResponseIn,
    SessionIn,
    SessionUpdate,
    ToolIn,
)

Modalities = list[Literal["text", "audio"]]
M = TypeVar("M", bound=BaseModel)

_GA_FORMATS = {beta: ga for ga, beta in FORMATS.items()}
_GA_ASSISTANT_CONTENT = {beta: ga for ga, beta in ASSISTANT_CONTENT.items()}
_BETA_SESSION_FIELDS = (
    "modalities",
    "voice",
    "input_audio_format",
    "output_audio_format",
    "turn_detection",
    "input_audio_transcription",
    "input_audio_noise_reduction",
    "max_response_output_tokens",
)


def normalize(event: ClientEvent) -> ClientEvent:
    """The GA form of a client event."""
    match event:
        case SessionUpdate():
            try:
                session = normalize_session(event.session)
            except ProtocolError as exc:
                raise dataclasses.replace(exc, event_id=event.event_id) from None
            return event if session is event.session else _rebuilt(event, {"session": session})
        case ResponseCreate(response=ResponseIn() as response):
            try:
                _check_tools(response.tools, "response.tools", allow_mcp=False)
            except ProtocolError as exc:
                raise dataclasses.replace(exc, event_id=event.event_id) from None
            ga = _response(response)
            return event if ga is response else _rebuilt(event, {"response": ga})
        case ConversationItemCreate():
            item = _item(event.item)
            return event if item is event.item else _rebuilt(event, {"item": item})
        case _:
            return event


def _check_tools(tools: list[ToolIn] | None, param: str, *, allow_mcp: bool = True) -> None:
    """A function tool needs its name, an MCP tool its label and its server's URL
    (Parley reaches no connectors); an MCP tool is refused where nothing else of the
    event could still apply (a response's tools)."""
    for i, tool in enumerate(tools or ()):
        if tool.type == "mcp" and not allow_mcp:
            raise ProtocolError(
                "unsupported_value",
                "MCP tools are set with session.update, where the server is listed "
                "first; a response cannot add one.",
                f"{param}[{i}].type",
            )
        if tool.type == "mcp" and tool.server_url is None and tool.connector_id is not None:
            raise ProtocolError(
                "unsupported_value",
                "MCP connectors are not supported; give the server's server_url.",
                f"{param}[{i}].connector_id",
            )
        required = ("name",) if tool.type == "function" else ("server_label", "server_url")
        for field in required:
            if getattr(tool, field) is None:
                where = f"{param}[{i}].{field}"
                raise ProtocolError(
                    "missing_required_parameter", f"Missing required parameter: '{where}'.", where
                )


def normalize_session(session: SessionIn) -> SessionIn:
    """A session configuration with its beta fields moved to the GA ones (also for
    the presets of ephemeral keys, which arrive outside any event)."""
    _check_tools(session.tools, "session.tools")
    sent = session.model_fields_set
    changes: dict[str, Any] = {}
    moved: dict[str, str] = {}
    if "output_modalities" not in sent and "modalities" in sent:
        moved["output_modalities"] = "modalities"
    modalities = _unpaired(
        session.output_modalities if "output_modalities" in sent else session.modalities
    )
    if modalities != session.output_modalities:
        changes["output_modalities"] = modalities
    if "max_output_tokens" not in sent and "max_response_output_tokens" in sent:
        changes["max_output_tokens"] = session.max_response_output_tokens
        moved["max_output_tokens"] = "max_response_output_tokens"

    audio_in = session.audio.input if session.audio else None
    audio_out = session.audio.output if session.audio else None
    input_changes: dict[str, Any] = {}
    output_changes: dict[str, Any] = {}
    for field, beta in (
        ("turn_detection", "turn_detection"),
        ("transcription", "input_audio_transcription"),
        ("noise_reduction", "input_audio_noise_reduction"),
    ):
        # GA's nested field wins when it is sent, also as null (which turns it off).
        if beta in sent and (audio_in is None or field not in audio_in.model_fields_set):
            input_changes[field] = getattr(session, beta)
            moved[f"audio.input.{field}"] = beta
    for side, nested, side_changes in (
        ("input", audio_in, input_changes),
        ("output", audio_out, output_changes),
    ):
        name = getattr(session, f"{side}_audio_format")
        if name is not None and (nested is None or nested.format is None):
            if name not in _GA_FORMATS:
                raise ProtocolError(
                    "unsupported_audio_format",
                    f"unsupported audio format {name!r} (supported: {', '.join(_GA_FORMATS)})",
                    f"session.{side}_audio_format",
                )
            side_changes["format"] = AudioFormatIn(type=_GA_FORMATS[name])
            moved[f"audio.{side}.format"] = f"{side}_audio_format"
    # GA's voice wins unless it is empty; an empty one alone is no voice.
    ga_voice = audio_out.voice if audio_out else None
    if not ga_voice and session.voice is not None:
        output_changes["voice"] = session.voice
        moved["audio.output.voice"] = "voice"
    elif ga_voice == "":
        output_changes["voice"] = None
    if input_changes or output_changes:
        audio_changes: dict[str, Any] = {}
        if input_changes:
            audio_changes["input"] = _rebuilt(audio_in or AudioInputIn(), input_changes)
        if output_changes:
            audio_changes["output"] = _rebuilt(audio_out or AudioOutputIn(), output_changes)
        changes["audio"] = _rebuilt(session.audio or AudioIn(), audio_changes)

    beta_sent = sent.intersection(_BETA_SESSION_FIELDS)
    if not changes and not beta_sent:
        return session
    ga = _rebuilt(session, changes, drop=beta_sent)
    ga._moved_from = moved
    return ga


def _response(response: ResponseIn) -> ResponseIn:
    changes: dict[str, Any] = {}
    modalities = _unpaired(response.output_modalities or response.modalities)
    if modalities != response.output_modalities:
        changes["output_modalities"] = modalities
    tokens = response.max_output_tokens or response.max_response_output_tokens
    if tokens != response.max_output_tokens:
        changes["max_output_tokens"] = tokens
    if response.input is not None:
        items = [_item(item) for item in response.input]
        if any(ga is not item for ga, item in zip(items, response.input, strict=True)):
            changes["input"] = items
    beta_sent = response.model_fields_set.intersection(("modalities", "max_response_output_tokens"))
    if not changes and not beta_sent:
        return response
    return _rebuilt(response, changes, drop=beta_sent)


def _item(item: ItemIn) -> ItemIn:
    # Only assistant content was renamed; "text" from anyone else stays a refusal
    # that names what the client sent.
    if item.role != "assistant" or not item.content:
        return item
    if not any(part.type in _GA_ASSISTANT_CONTENT for part in item.content):
        return item
    content = [
        _rebuilt(part, {"type": _GA_ASSISTANT_CONTENT[part.type]})
        if part.type in _GA_ASSISTANT_CONTENT
        else part
        for part in item.content
    ]
    return _rebuilt(item, {"content": content})


def _unpaired(modalities: Modalities | None) -> Modalities | None:
    """Beta clients ask for ["text", "audio"]: audio with its transcript, which is
    what GA calls ["audio"]."""
    if modalities is not None and set(modalities) == {"text", "audio"}:
        return ["audio"]
    return modalities


def _rebuilt(model: M, changes: Mapping[str, Any], drop: Iterable[str] = ()) -> M:
    """`model` with `changes` set (as if sent) and `drop` unsent."""
    fields = {name: getattr(model, name) for name in model.model_fields_set}
    fields.update(changes)
    for name in drop:
        fields.pop(name, None)
    return type(model)(**fields)
