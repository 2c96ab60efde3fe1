"""Smart Turn's log-mel features match the extractor the model was trained on.

The reference (transformers' WhisperFeatureExtractor as Smart Turn v3 uses it) is
stored in fixtures/turn_features.npz by tests/support/make_turn_features_fixture.py,
with the exact 16 kHz input it saw."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.listening.turn_features import (
    FRAMES,
    N_MELS,
    WINDOW_SAMPLES,
    features,
    last_window,
    log_mel,
)

FIXTURE = Path(__file__).parent / "fixtures" / "turn_features.npz"


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(FIXTURE) as data:
        return {name: data[name] for name in data.files}


def test_a_short_turn_matches_the_reference(reference: dict[str, np.ndarray]) -> None:
    ours = features(reference["pcm"])
    assert ours.shape == (N_MELS, FRAMES) and ours.dtype == np.float32
    assert np.abs(ours - reference["short"]).max() < 1e-3


def test_a_turn_longer_than_the_window_matches_the_reference(
    reference: dict[str, np.ndarray],
) -> None:
    long_pcm = np.tile(reference["pcm"], int(reference["long_repeats"]))
    assert long_pcm.size > WINDOW_SAMPLES
    assert np.abs(features(long_pcm) - reference["long"]).max() < 1e-3


def test_the_window_keeps_the_last_8_s_with_zeros_in_front() -> None:
    short = np.full(100, 16384, dtype=np.int16)
    window = last_window(short)
    assert window.shape == (WINDOW_SAMPLES,)
    assert not window[:-100].any() and (window[-100:] == 0.5).all()
    long = np.arange(WINDOW_SAMPLES + 7, dtype=np.int64).astype(np.int16)
    assert (last_window(long) == long[7:].astype(np.float32) / 32768).all()


def test_log_mel_refuses_a_window_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="expected 128000 samples"):
        log_mel(np.zeros(1000, dtype=np.float32))
