"""`normalize`: beta spellings on input moved to their GA fields, as a pure function.

Each beta event goes in through `parse_client_event` (which validates, then
normalizes) and must come out as the GA event a GA client would have sent; GA
events come out untouched.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from engine.audio_format import PCM24, PCMA, PCMU, AudioFormat
from engine.protocol import (
    ClientEvent,
    ConversationItemCreate,
    InputAudioBufferCommit,
    ProtocolError,
    ResponseCreate,
    SessionUpdate,
    normalize,
    parse_client_event,
)
from engine.semantic_turns import SemanticVadParams
from engine.session_config import SessionConfig, apply_update

MAX_BYTES = 1 << 20


def parse(event: dict[str, Any]) -> ClientEvent:
    return parse_client_event(json.dumps(event), MAX_BYTES)


def session(fields: dict[str, Any]) -> SessionUpdate:
    event = parse({"type": "session.update", "session": fields})
    assert isinstance(event, SessionUpdate)
    return event


def sent(event: ClientEvent) -> dict[str, Any]:
    """What the event holds, as the fields the client sent."""
    assert isinstance(event, BaseModel)
    return event.model_dump(exclude_unset=True)


BETA_SESSION = {
    "modalities": ["text", "audio"],
    "voice": "verse",
    "input_audio_format": "g711_ulaw",
    "output_audio_format": "g711_alaw",
    "turn_detection": {"type": "server_vad", "threshold": 0.7},
    "input_audio_transcription": {"model": "whisper-1", "language": "en"},
    "max_response_output_tokens": 50,
    "instructions": "Be brief.",
}
GA_SESSION = {
    "output_modalities": ["audio"],
    "max_output_tokens": 50,
    "instructions": "Be brief.",
    "audio": {
        "input": {
            "format": {"type": "audio/pcmu"},
            "turn_detection": {"type": "server_vad", "threshold": 0.7},
            "transcription": {"model": "whisper-1", "language": "en"},
        },
        "output": {"format": {"type": "audio/pcma"}, "voice": "verse"},
    },
}


def test_beta_session_becomes_the_ga_one() -> None:
    assert sent(session(BETA_SESSION)) == sent(session(GA_SESSION))


@pytest.mark.parametrize(
    ("model", "event"),
    [
        (SessionUpdate, {"type": "session.update", "session": GA_SESSION}),
        (SessionUpdate, {"type": "session.update", "session": {"audio": {"output": {}}}}),
        (ResponseCreate, {"type": "response.create", "response": {"output_modalities": ["text"]}}),
        (ResponseCreate, {"type": "response.create"}),
        (
            ConversationItemCreate,
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "hi"}],
                },
            },
        ),
        (InputAudioBufferCommit, {"type": "input_audio_buffer.commit"}),
    ],
)
def test_ga_events_come_back_as_they_were(model: type[BaseModel], event: dict[str, Any]) -> None:
    validated = model.model_validate(event)
    assert normalize(validated) is validated  # type: ignore[arg-type]


def test_ga_nested_fields_win_over_beta_flat_ones() -> None:
    both = session(
        {
            **BETA_SESSION,
            "output_modalities": ["text"],
            "max_output_tokens": 7,
            "audio": {
                "input": {"format": {"type": "audio/pcm"}, "turn_detection": None},
                "output": {"voice": "ash"},
            },
        }
    ).session
    assert both.output_modalities == ["text"]
    assert both.max_output_tokens == 7
    assert both.audio is not None and both.audio.input is not None
    assert both.audio.input.format is not None and both.audio.input.format.type == "audio/pcm"
    assert both.audio.input.turn_detection is None  # GA's null: turned off
    assert "turn_detection" in both.audio.input.model_fields_set
    assert both.audio.input.transcription is not None  # beta's, where GA sent none
    assert both.audio.output is not None and both.audio.output.voice == "ash"
    assert both.audio.output.format is not None and both.audio.output.format.type == "audio/pcma"


def test_beta_fields_are_gone_after_normalize() -> None:
    ga = session(BETA_SESSION).session
    assert not ga.model_fields_set & {"modalities", "voice", "turn_detection"}
    assert ga.modalities is ga.voice is ga.turn_detection is None


def test_an_empty_ga_voice_is_no_voice_and_beta_fills_it() -> None:
    empty = session({"audio": {"output": {"voice": ""}}}).session
    assert empty.audio is not None and empty.audio.output is not None
    assert empty.audio.output.voice is None
    filled = session({"voice": "verse", "audio": {"output": {"voice": ""}}}).session
    assert filled.audio is not None and filled.audio.output is not None
    assert filled.audio.output.voice == "verse"


def test_errors_name_the_field_as_the_client_spelled_it() -> None:
    beta = session({"turn_detection": {"type": "semantic_vad", "eagerness": "low"}})
    assert beta.session.param("audio.input.turn_detection") == "session.turn_detection"
    assert beta.session.param("audio.input.format") == "session.audio.input.format"
    config = apply_update(SessionConfig(model="m"), beta.session, audio_started=False)
    assert config.turn_detection == SemanticVadParams(eagerness="low")
    ga = session({"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}})
    assert ga.session.param("audio.input.turn_detection") == "session.audio.input.turn_detection"


def test_beta_formats() -> None:
    for name, fmt in (("pcm16", PCM24), ("g711_ulaw", PCMU), ("g711_alaw", PCMA)):
        ga = session({"input_audio_format": name, "output_audio_format": name}).session
        assert ga.audio is not None and ga.audio.input is not None and ga.audio.output is not None
        for nested in (ga.audio.input.format, ga.audio.output.format):
            assert nested is not None
            assert AudioFormat.from_wire(nested.type, nested.rate) == fmt


@pytest.mark.parametrize("name", ["audio/pcm", "g722", "pcm", "PCM16", ""])
def test_beta_refusals(name: str) -> None:
    with pytest.raises(ProtocolError) as info:
        session({"input_audio_format": name})
    assert (info.value.code, info.value.param) == (
        "unsupported_audio_format",
        "session.input_audio_format",
    )
    assert "supported: pcm16, g711_ulaw, g711_alaw" in info.value.message


def test_beta_response_becomes_the_ga_one() -> None:
    item = {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "Hi."}]}
    beta = parse(
        {
            "type": "response.create",
            "response": {
                "modalities": ["audio", "text"],
                "max_response_output_tokens": 9,
                "input": [item, {"type": "item_reference", "id": "item_1"}],
            },
        }
    )
    ga_item = {**item, "content": [{"type": "output_text", "text": "Hi."}]}
    ga = parse(
        {
            "type": "response.create",
            "response": {
                "output_modalities": ["audio"],
                "max_output_tokens": 9,
                "input": [ga_item, {"type": "item_reference", "id": "item_1"}],
            },
        }
    )
    assert isinstance(beta, ResponseCreate)
    assert sent(beta) == sent(ga)


def test_only_assistant_content_is_renamed() -> None:
    def item(role: str, part: str) -> ConversationItemCreate:
        event = parse(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": role, "content": [{"type": part}]},
            }
        )
        assert isinstance(event, ConversationItemCreate)
        return event

    for beta, ga in (("text", "output_text"), ("audio", "output_audio")):
        content = item("assistant", beta).item.content
        assert content is not None and content[0].type == ga
    # Beta's names were for assistant content only: a user's "text" stays as sent,
    # so the session's refusal names it.
    content = item("user", "text").item.content
    assert content is not None and content[0].type == "text"


def test_normalize_is_idempotent() -> None:
    for event in (session(BETA_SESSION), session(GA_SESSION)):
        assert normalize(event) is event


def test_a_beta_format_is_refused_with_its_event_id_unless_the_ga_one_is_sent() -> None:
    with pytest.raises(ProtocolError) as info:
        parse({"type": "session.update", "event_id": "e1", "session": {"output_audio_format": "x"}})
    assert (info.value.code, info.value.param, info.value.event_id) == (
        "unsupported_audio_format",
        "session.output_audio_format",
        "e1",
    )
    ga_wins = session(
        {"output_audio_format": "x", "audio": {"output": {"format": {"type": "audio/pcmu"}}}}
    )
    assert ga_wins.session.audio is not None and ga_wins.session.audio.output is not None
    fmt = ga_wins.session.audio.output.format
    assert fmt is not None and fmt.type == "audio/pcmu"
