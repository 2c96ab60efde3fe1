"""One voice or several (models/listening/crowd.py): the kurtosis of real speech, of the
interruption set's babble, and of signals whose kurtosis is known."""

from __future__ import annotations

import numpy as np
import pytest

from bench.speech import FIXTURES, load_wav
from bench.turns.scenarios import make_scenarios
from bench.vad_backends import speech_extent_ms
from engine.interruption import CROWD_KURTOSIS, ONE_VOICE_KURTOSIS
from models.base import PCM_RATE
from models.listening.crowd import kurtosis


def test_known_signals() -> None:
    assert kurtosis(np.zeros(4800, np.int16)) == 0.0
    assert kurtosis(np.zeros(0, np.int16)) == 0.0
    noise = np.random.default_rng(1).normal(0, 3000, 48_000).astype(np.int16)
    assert kurtosis(noise) == pytest.approx(3.0, abs=0.1)
    t = np.arange(48_000) / PCM_RATE
    sine = (8000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)
    assert kurtosis(sine) == pytest.approx(1.5, abs=0.05)
    # Silence around a signal raises it (why the session measures from the onset).
    padded = np.concatenate([np.zeros(48_000, np.int16), noise])
    assert kurtosis(padded) == pytest.approx(6.0, abs=0.3)


@pytest.mark.parametrize("name", FIXTURES)
def test_one_talker_sounds_like_one_voice(name: str) -> None:
    pcm = load_wav(name)
    start, end = speech_extent_ms(pcm)
    assert kurtosis(pcm[start * PCM_RATE // 1000 : end * PCM_RATE // 1000]) >= ONE_VOICE_KURTOSIS


def test_five_talkers_over_each_other_sound_like_several_from_400_ms() -> None:
    """The babble bursts of `make eval-turns`' interruption set (seed 15), as the session
    measures held speech: from the onset, at every 20 ms append."""
    babble = [it.audio for it in make_scenarios(15).items if it.text == "babble"]
    assert len(babble) == 2
    for pcm in babble:
        for ms in range(400, len(pcm) * 1000 // PCM_RATE, 20):
            assert kurtosis(pcm[: ms * PCM_RATE // 1000]) < CROWD_KURTOSIS, ms
