"""Transcription sessions in the engine: the pure decisions of
engine/transcription_session.py, and a session that commits and transcribes turns
but never answers them."""

from __future__ import annotations

import pytest

from engine.protocol import ProtocolError, SessionIn
from engine.protocol.events import ResponseCreate
from engine.session_config import apply_update, new_config, to_wire
from engine.transcription_session import intent_of, opened_type, refusal, session_type
from models.base import Executor
from models.scripted import ScriptedExecutor
from tests.support.audio import say
from tests.support.controlled_executor import ControlledExecutor
from tests.support.harness import Harness


def session(**fields: object) -> SessionIn:
    return SessionIn.model_validate(fields)


def test_the_type_is_fixed_when_the_session_opens() -> None:
    assert session_type([]) == "realtime"
    assert session_type([session(type="transcription")]) == "transcription"
    assert session_type([session()], "transcription") == "transcription"
    with pytest.raises(ProtocolError) as clash:
        session_type([session(type="realtime")], "transcription")
    assert clash.value.param == "session.type"
    assert intent_of("transcription") == "transcription"
    assert intent_of("conversation") is None and intent_of(None) is None


def test_an_update_may_not_change_the_type_or_set_realtime_fields() -> None:
    config = new_config("m", "transcription")
    assert config.input_transcription is not None  # on unless turned off
    with pytest.raises(ProtocolError) as retype:
        apply_update(config, session(type="realtime"), audio_started=False, event_id="e")
    assert (retype.value.param, retype.value.event_id) == ("session.type", "e")
    with pytest.raises(ProtocolError) as voice:
        apply_update(config, session(audio={"output": {"voice": "ash"}}), audio_started=False)
    assert voice.value.param == "session.audio.output"
    with pytest.raises(ProtocolError) as instructions:
        apply_update(config, session(instructions="hi"), audio_started=False)
    assert instructions.value.param == "session.instructions"
    with pytest.raises(ProtocolError):
        apply_update(new_config("m"), session(type="transcription"), audio_started=False)
    off = apply_update(
        config, session(audio={"input": {"transcription": None}}), audio_started=False
    )
    assert to_wire(off) == {
        "type": "transcription",
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "turn_detection": to_wire(new_config("m"))["audio"]["input"]["turn_detection"],
                "transcription": None,
                "noise_reduction": None,
            }
        },
        "include": None,
    }


def test_response_events_are_refused_and_input_events_are_not() -> None:
    refused = refusal(ResponseCreate.model_validate({"type": "response.create", "event_id": "r"}))
    assert refused is not None
    assert (refused.type, refused.param, refused.event_id) == ("invalid_request_error", "type", "r")
    assert "'response.create'" in refused.message


def test_an_executor_without_a_recognizer_opens_no_transcription_session() -> None:
    class Deaf(ControlledExecutor):
        transcribe = Executor.transcribe

    assert opened_type(ScriptedExecutor(), [], "transcription") == "transcription"
    assert opened_type(Deaf(), [], None) == "realtime"
    with pytest.raises(ProtocolError) as refused:
        opened_type(Deaf(), [], "transcription")
    assert refused.value.code == "unsupported_session_type"


async def test_a_spoken_turn_is_transcribed_and_never_answered() -> None:
    async with Harness(intent="transcription") as h:
        assert h.of("session.created")[0]["session"]["type"] == "transcription"
        await say(h, "weather")
        await h.run_until(
            lambda: bool(h.of("conversation.item.input_audio_transcription.completed"))
        )
        await h.settle()
        (committed,) = h.of("input_audio_buffer.committed")
        (completed,) = h.of("conversation.item.input_audio_transcription.completed")
        assert completed["item_id"] == committed["item_id"]
        # server_vad's create_response is on by default: still no answer, no model work.
        assert not [t for t in h.types() if t.startswith("response.")]
        assert h.scripted.prompts == [] and h.scripted.prepared == []
        assert not h.errors()
