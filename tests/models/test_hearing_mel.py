"""The hearing recognizer's features (models/listening/hearing.py `mel_window`): the
speech and a margin of silence transformed, the rest of the window filled, are the
features of the whole padded window."""

from __future__ import annotations

import numpy as np
import pytest
import soxr
from faster_whisper.feature_extractor import FeatureExtractor

from bench.speech import load_wav
from models.speech.whisper_files import WHISPER_RATE
from models.speech.whisper_window import mel_window, window_s


def whole_window(features: FeatureExtractor, audio: np.ndarray, seconds: int) -> np.ndarray:
    """What the recognizer computed before: every sample of the padded window."""
    padded = np.zeros(seconds * WHISPER_RATE, np.float32)
    padded[: len(audio)] = audio
    return np.asarray(features(padded)[:, : seconds * WHISPER_RATE // features.hop_length])


@pytest.mark.parametrize("ms", [100, 450, 1800, 4950, 6300])
def test_the_window_of_held_speech_has_the_whole_windows_features(ms: int) -> None:
    features = FeatureExtractor(feature_size=80)
    speech = soxr.resample(load_wav("weather").astype(np.float32) / 32768, 24_000, WHISPER_RATE)
    audio = np.resize(speech.astype(np.float32), ms * WHISPER_RATE // 1000)
    seconds = window_s(len(audio))
    expected = whole_window(features, audio, seconds)
    got = mel_window(features, audio, seconds, features.hop_length)
    assert got.shape == expected.shape == (80, seconds * 100)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_silence_alone_has_the_whole_windows_features() -> None:
    features = FeatureExtractor(feature_size=80)
    audio = np.zeros(WHISPER_RATE // 2, np.float32)
    np.testing.assert_allclose(
        mel_window(features, audio, 5, features.hop_length), whole_window(features, audio, 5)
    )
