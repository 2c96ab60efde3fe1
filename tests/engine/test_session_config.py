"""session.update applied to the session config, and the config as the wire shows it."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from engine import session as session_module
from engine.interruption import InterruptionParams
from engine.protocol import ProtocolError, SessionUpdate, parse_client_event
from engine.session_config import SessionConfig, apply_update, to_wire
from engine.turns import ServerVadParams
from tests.support.harness import Harness
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


def detection(value: dict[str, Any]) -> ServerVadParams | None:
    config = apply_update(
        BASE, update({"audio": {"input": {"turn_detection": value}}}).session, audio_started=False
    )
    return config.turn_detection


@pytest.mark.parametrize("kind", ["server_vad", "semantic_vad"])
def test_qualified_interruption_is_on_unless_turned_off(kind: str) -> None:
    """On by default (docs/turn-taking.md); null or enabled false turn it off."""
    assert BASE.turn_detection is not None and BASE.turn_detection.interruption is not None
    default = detection({"type": kind})
    assert default is not None and default.interruption == InterruptionParams()
    off = detection({"type": kind, "interruption": None})
    assert off is not None and off.interruption is None
    disabled = detection({"type": kind, "interruption": {"enabled": False}})
    assert disabled is not None and disabled.interruption is not None
    assert not disabled.interruption.enabled
    tuned = detection({"type": kind, "interruption": {"min_speech_ms": 300}})
    assert tuned is not None and tuned.interruption == InterruptionParams(min_speech_ms=300)


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


# --- validate, then apply: a refused session.update changes nothing ------------------


def deep_schema(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        value = {"type": "object", "properties": {"a": value}}
    return value


def assert_refused(h: Harness, param: str, event_id: str) -> None:
    """The session sent one error: the update `event_id` has an invalid value at `param`."""
    (error,) = h.errors()
    assert (error["type"], error["code"], error["param"], error["event_id"]) == (
        "invalid_request_error",
        "invalid_value",
        param,
        event_id,
    )


SETUP = {
    "type": "session.update",
    "session": {
        "type": "realtime",
        "instructions": "be brief",
        "tools": [{"type": "function", "name": "get_weather", "parameters": deep_schema(2)}],
        "audio": {"output": {"voice": "verse"}},
    },
}


async def test_a_too_deep_schema_is_refused_and_the_session_keeps_its_config() -> None:
    async with Harness() as h:
        await h.send(SETUP)
        await h.settle()
        before = h.session.config
        (setup,) = h.of("session.updated")
        tool = {"type": "function", "name": "deep", "parameters": deep_schema(300)}
        await h.send(
            {
                "type": "session.update",
                "event_id": "e1",
                "session": {"type": "realtime", "instructions": "changed", "tools": [tool]},
            }
        )
        await h.settle()
        assert_refused(h, "session.tools[0].parameters", "e1")
        assert h.session.config == before
        assert len(h.of("session.updated")) == 1

        # The session takes the next update, and keeps what that one does not touch.
        await h.send(
            {"type": "session.update", "session": {"type": "realtime", "instructions": "new"}}
        )
        await h.settle()
        assert len(h.errors()) == 1
        updated = h.of("session.updated")[-1]["session"]
        assert updated["instructions"] == "new"
        assert updated["tools"] == setup["session"]["tools"]
        assert updated["audio"]["output"]["voice"] == "verse"


async def test_an_update_whose_wire_form_fails_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Everything is built before anything is applied: when the session.updated event
    cannot be made, the config, decoder and turn detector stay as they were."""
    async with Harness() as h:
        await h.send(SETUP)
        await h.settle()
        config, decoder, detector = (
            h.session.config,
            h.session.input.decoder,
            h.session.user_turns.detection.detector,
        )
        assert detector is not None

        def broken(config: SessionConfig) -> dict[str, Any]:
            raise ValueError("cannot serialize")

        monkeypatch.setattr(session_module, "to_wire", broken)
        await h.send(
            {
                "type": "session.update",
                "event_id": "e2",
                "session": {
                    "type": "realtime",
                    "instructions": "changed",
                    "audio": {"input": {"format": {"type": "audio/pcmu"}, "turn_detection": None}},
                },
            }
        )
        await h.settle()
        assert_refused(h, "session", "e2")
        assert h.session.config == config
        assert h.session.input.decoder is decoder
        assert h.session.user_turns.detection.detector is detector
        assert len(h.of("session.updated")) == 1

        monkeypatch.undo()
        await h.send(
            {"type": "session.update", "session": {"type": "realtime", "instructions": "new"}}
        )
        await h.settle()
        assert h.of("session.updated")[-1]["session"]["instructions"] == "new"
        assert h.session.config == replace(config, instructions="new")
