"""Held speech heard by Whisper (models/listening/hearing.py), spoken by espeak-ng: what
the session then makes of it (engine/interruption.py), and the hearing window."""

from __future__ import annotations

import numpy as np
import pytest

from bench.speech import silence
from bench.turns.synth import speak
from engine.interruption import DEFAULT_BACKCHANNELS, Heard, heard_of
from models.listening.hearing import Hearing, WhisperHearing, hearing_of
from models.speech.whisper_window import MAX_WINDOW_S, MIN_WINDOW_S, window_s


@pytest.fixture(scope="module")
def recognizer() -> WhisperHearing:
    return WhisperHearing()


@pytest.mark.parametrize(
    ("said", "heard"),
    [
        ("Wait, stop.", Heard.WORDS),
        ("No, that's wrong.", Heard.WORDS),
        ("yeah", Heard.BACKCHANNEL),
        ("okay", Heard.BACKCHANNEL),
        ("mm-hm", Heard.BACKCHANNEL),
    ],
)
async def test_what_held_speech_is_heard_as(
    recognizer: WhisperHearing, said: str, heard: Heard
) -> None:
    pcm = np.concatenate([silence(200), speak(said, "en-us", 160), silence(300)])
    hearing = await recognizer.transcribe(pcm)
    assert hearing is not None
    assert heard_of(hearing.text, DEFAULT_BACKCHANNELS, sure=hearing.sure) is heard, hearing


async def test_silence_is_no_words(recognizer: WhisperHearing) -> None:
    hearing = await recognizer.transcribe(silence(800))
    assert hearing is not None and hearing.text == ""


async def test_speech_over_the_shortest_window_is_heard_in_a_longer_one(
    recognizer: WhisperHearing,
) -> None:
    # Words that start past the shortest window: heard only if the window grows.
    said = "Sorry, can you say that again?"
    pcm = np.concatenate([silence(MIN_WINDOW_S * 1000), speak(said, "en-us", 160), silence(300)])
    hearing = await recognizer.transcribe(pcm)
    assert hearing is not None and "can you say" in hearing.text.lower(), hearing


def test_the_window_grows_with_held_speech_within_whispers() -> None:
    assert window_s(16_000) == MIN_WINDOW_S
    assert window_s(16_000 * 6) == 7  # and half a second of silence after it
    assert window_s(16_000 * 60) == MAX_WINDOW_S


def test_what_whisper_is_sure_of() -> None:
    assert hearing_of("Wait, stop.", -0.5, 0.2) == Hearing("Wait, stop.", sure=True)
    assert hearing_of("Oh, God.", -2.5, 0.4) == Hearing("Oh, God.", sure=False)
    assert hearing_of("No.", -1.0, 0.55) == Hearing("No.", sure=False)
    assert hearing_of("Thank you.", -1.4, 0.9) == Hearing("")  # silent, as faster-whisper


def test_prepare_loads_the_model_in_the_background() -> None:
    fresh = WhisperHearing()
    try:
        loading = fresh.prepare()  # returns at once; the load runs on a hearing thread
        assert loading.result(timeout=60) is fresh._whisper is not None
    finally:
        fresh.close()


def test_closing_frees_the_models_weights() -> None:
    """CTranslate2 keeps weights past the model object's last reference: a test
    process making a server per test grew by them until the kernel killed it."""
    fresh = WhisperHearing()
    whisper = fresh.prepare().result(timeout=60)
    assert whisper.model.model_is_loaded
    fresh.close()
    assert fresh._whisper is None and not whisper.model.model_is_loaded
