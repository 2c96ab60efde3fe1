"""Held speech heard by Whisper (models/speech/snippets.py), spoken by espeak-ng: what
the session then makes of it (engine/interruption.py)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.speech import silence
from bench.turns.synth import speak
from engine.interruption import DEFAULT_BACKCHANNELS, Heard, heard_of
from models.speech.snippets import WhisperSnippets


@pytest.fixture(scope="module")
def snippets() -> WhisperSnippets:
    return WhisperSnippets()


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
    snippets: WhisperSnippets, said: str, heard: Heard
) -> None:
    pcm = np.concatenate([silence(200), speak(said, "en-us", 160), silence(300)])
    text = await snippets.transcribe(pcm)
    assert text is not None
    assert heard_of(text, DEFAULT_BACKCHANNELS) is heard, text


async def test_silence_is_no_words(snippets: WhisperSnippets) -> None:
    assert await snippets.transcribe(silence(800)) == ""
