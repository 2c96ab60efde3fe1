"""The default VAD backend finds every turn in noise (see bench/vad_backends.py).

The measurement is the benchmark's: the four fixtures with 1 s gaps, white
noise at a fixed seed, VadStream + TurnDetector with default ServerVadParams.
"""

from __future__ import annotations

from functools import cache

import pytest

from bench.vad_backends import BACKENDS, FIXTURES, Score, measure
from server.config import Settings

DEFAULT = Settings.model_fields["vad_backend"].default
# RMS as a fraction of full scale; the speech is ~0.1 RMS, so ~24 and ~14 dB SNR.
NOISE = [0.0, 0.0065, 0.02]


@cache
def score(backend: str, noise_rms: float) -> Score:
    return measure(backend, BACKENDS[backend](), noise_rms)


@pytest.mark.parametrize("noise_rms", NOISE)
def test_default_backend_finds_every_turn_and_no_other(noise_rms: float) -> None:
    s = score(DEFAULT, noise_rms)
    assert (s.turns_found, s.false_turns) == (len(FIXTURES), 0)
    assert s.mean_start_err_ms is not None and s.mean_start_err_ms <= 64  # two frames
    # Silero's score decays over ~100 ms after the last phoneme.
    assert s.mean_end_err_ms is not None and s.mean_end_err_ms <= 150


@pytest.mark.parametrize("noise_rms", NOISE)
def test_default_backend_is_at_least_as_good_as_the_others(noise_rms: float) -> None:
    best = score(DEFAULT, noise_rms)
    for other in BACKENDS.keys() - {DEFAULT}:
        s = score(other, noise_rms)
        assert (best.turns_found, -best.false_turns) >= (s.turns_found, -s.false_turns)


def test_webrtc_starts_a_false_turn_in_noise() -> None:
    # Why it is not the default: it takes ~100 ms to adapt to a new noise
    # floor, so noise that switches on (a microphone opening) reads as speech.
    assert score("webrtc", 0.0065).false_turns >= 1
