"""The microphone's path in a session (engine/input_audio.py): what it hands on, and
a `session.update` built before it is applied."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from engine import protocol
from engine.audio_format import PCMU
from engine.input_audio import InputAudio
from engine.session_config import SessionConfig
from models.errors import ModelMissing


def test_input_goes_into_the_buffer_and_a_clear_empties_it() -> None:
    audio = InputAudio(SessionConfig(model="m"), clock=lambda: 0.0)
    pcm = audio.decode(protocol.InputAudioBufferAppend(bytes(4), "e1"))
    assert audio.take(pcm, None) is pcm and audio.held_ms() == 0  # 2 samples
    audio.take(np.ones(2400, np.int16), None)
    assert audio.held_ms() == 100 and not audio.guards_echo and audio.far_end is None
    assert not audio.own_voice(0, audio.buffer.end)  # no echo guard, no echo
    audio.clear()
    assert len(audio.buffer) == 0 and audio.buffer.end == 2402


def test_odd_bytes_are_refused_with_the_clients_event_id() -> None:
    audio = InputAudio(SessionConfig(model="m"), clock=lambda: 0.0)
    with pytest.raises(protocol.ProtocolError) as refused:
        audio.decode(protocol.InputAudioBufferAppend(bytes(3), "e2"))
    assert (refused.value.code, refused.value.param, refused.value.event_id) == (
        "invalid_value",
        "audio",
        "e2",
    )


def test_an_update_is_built_first_and_applied_only_when_told() -> None:
    old = SessionConfig(model="m")
    audio = InputAudio(old, clock=lambda: 0.0)
    decoder = audio.decoder
    new = replace(old, input_format=PCMU, noise_reduction="near_field")
    change = audio.prepare(old, new, "e3")
    assert audio.decoder is decoder and audio.denoiser is None  # nothing changed yet
    audio.apply(change)
    assert audio.decoder is change.decoder is not decoder
    assert audio.denoiser is change.denoiser is not None
    unchanged = audio.prepare(new, new, None)
    assert unchanged.decoder is None and not unchanged.denoiser_changed
    assert not unchanged.echo_changed


def test_a_missing_model_refuses_the_update_by_its_param(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(kind: str) -> None:
        raise ModelMissing("denoise", "no suppressor")

    monkeypatch.setattr("engine.input_audio.Denoiser", missing)
    old = SessionConfig(model="m")
    audio = InputAudio(old, clock=lambda: 0.0)
    with pytest.raises(protocol.ProtocolError) as refused:
        audio.prepare(old, replace(old, noise_reduction="far_field"), "e4")
    assert refused.value.param == "session.audio.input.noise_reduction"
    assert refused.value.event_id == "e4"


def test_dropped_track_audio_is_told_once_a_run() -> None:
    audio = InputAudio(SessionConfig(model="m"), clock=lambda: 0.0)
    assert [audio.track_dropped(d) for d in (True, True, False, True, True)] == [
        True,
        False,
        False,
        True,
        False,
    ]
