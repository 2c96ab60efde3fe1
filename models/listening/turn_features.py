"""Whisper-style log-mel features for Smart Turn v3.2, in numpy.

The model was trained on `transformers.WhisperFeatureExtractor(chunk_length=8)` output
with `do_normalize=True`; this reproduces it (checked against a fixture the extractor
made, tests/models/test_turn_features.py) without importing transformers or torch.
The window is the turn's last 8 s, zero-padded at the start when shorter, as the
reference analyzer (pipecat's LocalSmartTurnAnalyzerV3) feeds it.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import numpy.typing as npt

RATE = 16_000
WINDOW_S = 8
WINDOW_SAMPLES = RATE * WINDOW_S
N_FFT = 400
HOP = 160
N_MELS = 80
FRAMES = WINDOW_SAMPLES // HOP  # 800: the extractor drops the STFT's last frame
_MEL_FLOOR = 1e-10
_VARIANCE_EPS = 1e-7  # transformers' zero_mean_unit_var_norm


def _hz_to_mel(hz: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Slaney mel scale: linear below 1 kHz, logarithmic above (librosa's htk=False)."""
    mel = 3.0 * hz / 200.0
    log_part = hz >= 1000.0
    mel[log_part] = 15.0 + np.log(hz[log_part] / 1000.0) * (27.0 / np.log(6.4))
    return mel


def _mel_to_hz(mel: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    hz = 200.0 * mel / 3.0
    log_part = mel >= 15.0
    hz[log_part] = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel[log_part] - 15.0))
    return hz


@cache
def mel_filters() -> npt.NDArray[np.float64]:
    """(N_MELS, N_FFT // 2 + 1) triangular filters from 0 Hz to Nyquist, each scaled
    to unit area (Slaney normalization), as Whisper and librosa build them."""
    edges_mel = np.linspace(
        _hz_to_mel(np.array([0.0]))[0], _hz_to_mel(np.array([RATE / 2]))[0], N_MELS + 2
    )
    edges = _mel_to_hz(edges_mel)
    fft_hz = np.linspace(0.0, RATE // 2, N_FFT // 2 + 1)
    widths = np.diff(edges)
    slopes = edges[np.newaxis, :] - fft_hz[:, np.newaxis]
    rising = -slopes[:, :-2] / widths[:-1]
    falling = slopes[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(rising, falling))
    filters *= 2.0 / (edges[2 : N_MELS + 2] - edges[:N_MELS])
    return np.ascontiguousarray(filters.T)


@cache
def _hann() -> npt.NDArray[np.float64]:
    """The periodic Hann window (torch.hann_window's default)."""
    return np.hanning(N_FFT + 1)[:-1]


def last_window(pcm: npt.NDArray[np.int16]) -> npt.NDArray[np.float32]:
    """The last 8 s of 16 kHz int16 audio as float32 in [-1, 1), zeros in front
    when the turn is shorter (the model saw speech ending at the window's end)."""
    tail = pcm[-WINDOW_SAMPLES:].astype(np.float32) / 32768.0
    out = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
    out[WINDOW_SAMPLES - tail.size :] = tail
    return out


def log_mel(window: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """(N_MELS, FRAMES) features of exactly WINDOW_SAMPLES float32 samples."""
    if window.shape != (WINDOW_SAMPLES,):
        raise ValueError(f"expected {WINDOW_SAMPLES} samples, got shape {window.shape}")
    # Zero-mean unit-variance over the whole padded window, in float32 like the
    # extractor, before the spectrogram.
    x = (window - window.mean()) / np.sqrt(window.var() + np.float32(_VARIANCE_EPS))
    padded = np.pad(x.astype(np.float64), N_FFT // 2, mode="reflect")  # centred frames
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP]
    power = np.abs(np.fft.rfft(frames * _hann(), axis=-1)) ** 2  # (FRAMES + 1, bins)
    mel = np.maximum(_MEL_FLOOR, mel_filters() @ power.T)
    logs = np.log10(mel)[:, :-1]
    logs = np.maximum(logs, logs.max() - 8.0)  # 80 dB dynamic range
    scaled: npt.NDArray[np.float32] = ((logs + 4.0) / 4.0).astype(np.float32)
    return scaled


def features(pcm: npt.NDArray[np.int16]) -> npt.NDArray[np.float32]:
    """Smart Turn's input for one turn: log-mel of its last 8 s, shape (80, 800)."""
    return log_mel(last_window(pcm))
