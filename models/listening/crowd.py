"""One voice or several: the kurtosis of the waveform (its fourth central moment over
its variance squared; a Gaussian's is 3).

One talker's speech is peaky: loud syllables between quiet gaps, glottal pulses within
them. Several talkers at once fill each other's gaps, and their sum tends to a
Gaussian as the central limit theorem says. Measured on `make eval-turns`'
interruption set (seeds 15-28, from the speech onset): single espeak-ng sentences
score a median of 9-13 over their first 200-800 ms, while five talkers over each
other, as loud as the user, score 4-5 from 400 ms on and below 6 in 82% of their
first 200 ms. Qualified interruption (engine/interruption.py) uses it to tell background
talk from the user, whose words the recognizer hears alike."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import soxr


def kurtosis(pcm: npt.NDArray[np.int16]) -> float:
    """The waveform's kurtosis; 0.0 for silence (no voice at all)."""
    x = pcm.astype(np.float64)
    x -= x.mean() if len(x) else 0.0
    variance = float(np.mean(x**2)) if len(x) else 0.0
    if variance <= 0.0:
        return 0.0
    return float(np.mean(x**4)) / variance**2


# Pitch clarity: how periodic the loud part of held speech is. One voice is periodic in
# its voiced syllables whatever the recording did to its kurtosis (a telephone prompt's
# level compression and a far-field room bring a single recorded voice down to 3-6,
# the band of several talkers); several talkers at once mix their pitches, and no lag
# repeats the sum well. Measured from the onset of held speech (200-900 ms) with
# bench/turns/voice_count.py: five espeak-ng talkers 0.43-0.67 (p10-p90), recorded
# single voices 0.5-0.99 (median 0.8-0.95), espeak sentences 0.4-0.94.
CLARITY_RATE = 8000  # pitch lives well below 4 kHz
CLARITY_FRAME = CLARITY_RATE * 40 // 1000  # two periods of a 50 Hz voice
CLARITY_HOP = CLARITY_RATE * 20 // 1000
LOWEST_PITCH_HZ, HIGHEST_PITCH_HZ = 60, 400


def pitch_clarity(pcm: npt.NDArray[np.int16], rate: int) -> float:
    """The median, over the louder half of its 40 ms frames, of each frame's highest
    normalized autocorrelation at a pitch lag (1 for a pure tone, near 0 for white
    noise); 0.0 when there is less than one frame."""
    x = soxr.resample(pcm.astype(np.float32), rate, CLARITY_RATE)
    n = CLARITY_FRAME
    if len(x) < n:
        return 0.0
    frames = np.lib.stride_tricks.sliding_window_view(x, n)[::CLARITY_HOP].astype(np.float64)
    frames = frames - frames.mean(axis=1, keepdims=True)
    energy = np.einsum("ij,ij->i", frames, frames)
    frames = frames[(energy >= np.median(energy)) & (energy > 0.0)]
    if not len(frames):
        return 0.0
    spectrum = np.fft.rfft(frames, 2 * n, axis=1)
    autocorrelation = np.fft.irfft(spectrum * np.conj(spectrum), axis=1)[:, :n]
    lo, hi = CLARITY_RATE // HIGHEST_PITCH_HZ, CLARITY_RATE // LOWEST_PITCH_HZ
    lags = np.arange(lo, hi)
    # Each lag sums fewer products: scale back to a full frame's worth.
    r = autocorrelation[:, lo:hi] / autocorrelation[:, :1] * (n / (n - lags))
    return float(np.median(r.max(axis=1)))
