"""session.update applied to the session config, and the config as the wire shows it."""

from __future__ import annotations

import json

import pytest

from engine.protocol import ProtocolError, SessionUpdate, parse_client_event
from engine.session_config import SessionConfig, apply_update, to_wire
from engine.turns import ServerVadParams
from tests.support.sdk_check import assert_sdk_event


def update(session: dict[str, object]) -> SessionUpdate:
    event = parse_client_event(json.dumps({"type": "session.update", "session": session}), 1 << 20)
    assert isinstance(event, SessionUpdate)
    return event


BASE = SessionConfig(model="m")


def test_ga_nested_turn_detection_is_merged_with_defaults() -> None:
    patch = update(
        {
            "type": "realtime",
            "audio": {
                "input": {
                    "turn_detection": {
                        "type": "server_vad",
                        "silence_duration_ms": 800,
                        "interrupt_response": False,
                    }
                }
            },
        }
    )
    config = apply_update(BASE, patch.session, audio_started=False)
    assert config.turn_detection == ServerVadParams(
        silence_duration_ms=800, interrupt_response=False
    )


def test_beta_flat_fields_are_accepted() -> None:
    patch = update(
        {
            "modalities": ["text"],
            "voice": "verse",
            "input_audio_format": "pcm16",
            "turn_detection": {"type": "server_vad", "threshold": 0.7},
            "max_response_output_tokens": 50,
            "instructions": "be brief",
        }
    )
    config = apply_update(BASE, patch.session, audio_started=False)
    assert config.output_modalities == ("text",)
    assert config.voice == "verse"
    assert config.turn_detection == ServerVadParams(threshold=0.7)
    assert config.max_output_tokens == 50
    assert config.instructions == "be brief"


def test_null_turn_detection_disables_and_absent_keeps() -> None:
    off = apply_update(
        BASE, update({"audio": {"input": {"turn_detection": None}}}).session, audio_started=False
    )
    assert off.turn_detection is None
    kept = apply_update(off, update({"instructions": "x"}).session, audio_started=False)
    assert kept.turn_detection is None
    assert (
        apply_update(kept, update({"instructions": ""}).session, audio_started=False).instructions
        == ""
    )


@pytest.mark.parametrize(
    ("session", "code", "param"),
    [
        ({"model": "other"}, "invalid_value", "session.model"),
        ({"output_modalities": ["text", "text"]}, "invalid_value", "session.output_modalities"),
        (
            {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
            "unsupported_audio_format",
            "session.audio.input.format",
        ),
    ],
)
def test_session_update_refusals(session: dict[str, object], code: str, param: str) -> None:
    with pytest.raises(ProtocolError) as info:
        apply_update(BASE, update(session).session, audio_started=False)
    assert (info.value.code, info.value.param) == (code, param)


def test_beta_text_and_audio_modalities_mean_audio() -> None:
    patch = update({"modalities": ["text", "audio"], "output_audio_format": "g711_alaw"})
    config = apply_update(BASE, patch.session, audio_started=False)
    assert config.output_modalities == ("audio",)
    assert config.output_format.kind == "pcma"


def test_voice_is_fixed_once_the_assistant_spoke() -> None:
    with pytest.raises(ProtocolError):
        apply_update(BASE, update({"voice": "ash"}).session, audio_started=True)
    assert apply_update(BASE, update({"voice": "alloy"}).session, audio_started=True) == BASE


@pytest.mark.parametrize("vad", [ServerVadParams(), None])
def test_session_wire_shape_is_sdk_valid(vad: ServerVadParams | None) -> None:
    config = SessionConfig(model="m", turn_detection=vad)
    assert_sdk_event({"type": "session.updated", "event_id": "e", "session": to_wire(config)})
