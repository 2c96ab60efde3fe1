"""One voice or several (models/listening/crowd.py): the kurtosis and pitch clarity of
real speech, of the interruption set's babble, and of signals whose measures are known."""

from __future__ import annotations

import numpy as np
import pytest

from bench.speech import FIXTURES, load_wav
from bench.turns.scenarios import make_scenarios
from bench.vad_backends import speech_extent_ms
from engine.interruption import CROWD_KURTOSIS, ONE_VOICE_CLARITY, ONE_VOICE_KURTOSIS
from models.base import PCM_RATE
from models.listening.crowd import kurtosis, pitch_clarity


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


def test_pitch_clarity_of_known_signals() -> None:
    t = np.arange(PCM_RATE) / PCM_RATE
    sine = (8000 * np.sin(2 * np.pi * 150 * t)).astype(np.int16)
    assert pitch_clarity(sine, PCM_RATE) == pytest.approx(1.0, abs=0.02)
    noise = np.random.default_rng(1).normal(0, 3000, PCM_RATE).astype(np.int16)
    assert pitch_clarity(noise, PCM_RATE) < 0.3
    assert pitch_clarity(np.zeros(PCM_RATE, np.int16), PCM_RATE) == 0.0
    assert pitch_clarity(sine[: PCM_RATE // 100], PCM_RATE) == 0.0  # less than a frame
    # The rate is the input's: a 16 kHz sine is as clear.
    t16 = np.arange(16_000) / 16_000
    sine16 = (8000 * np.sin(2 * np.pi * 150 * t16)).astype(np.int16)
    assert pitch_clarity(sine16, 16_000) == pytest.approx(1.0, abs=0.02)


def test_a_voiced_sound_with_a_flat_waveform_has_a_clear_pitch() -> None:
    """A vowel-like sound (a 120 Hz voice with twelve harmonics at random phases, its
    pitch gliding, its level rising and falling at a syllable rate) measures a kurtosis
    inside the background-talk band, as a compressed recorded voice does; its pitch is
    clear all the same."""
    rng = np.random.default_rng(3)
    t = np.arange(PCM_RATE) / PCM_RATE
    f0 = 120.0 * (1.0 + 0.05 * np.sin(2 * np.pi * 3.0 * t))
    phase = 2 * np.pi * np.cumsum(f0) / PCM_RATE
    voice = sum(np.sin(k * phase + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 13))
    envelope = 0.6 + 0.4 * np.sin(2 * np.pi * 4.0 * t)
    pcm = (voice * envelope / np.max(np.abs(voice)) * 12000).astype(np.int16)
    assert 3.0 <= kurtosis(pcm) < CROWD_KURTOSIS
    assert pitch_clarity(pcm, PCM_RATE) >= 0.95


def test_five_talkers_over_each_other_have_no_clear_pitch_from_400_ms() -> None:
    """The babble bursts of seeds 15-17, from the onset and from up to 200 ms into them
    (the VAD's onset may come later than the sound's)."""
    bursts = [
        it.audio
        for seed in (15, 16, 17)
        for it in make_scenarios(seed).items
        if it.text == "babble"
    ]
    for pcm in bursts:
        for skip in (0, 100, 200):
            for ms in range(400, 1000, 100):
                part = pcm[skip * PCM_RATE // 1000 : (skip + ms) * PCM_RATE // 1000]
                assert pitch_clarity(part, PCM_RATE) < ONE_VOICE_CLARITY, (skip, ms)
