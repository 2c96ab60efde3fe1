"""Seeded background noise: babble (other espeak sentences talking over each other) plus
pink noise, mixed under speech at a given SNR."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Pcm16 = npt.NDArray[np.int16]
Floats = npt.NDArray[np.float64]

BLOCK = 240  # 10 ms at 24 kHz: the blocks speech power is measured over
AUDIBLE_RMS = 100.0  # a block this loud is speech (as bench/vad_backends.py finds it)


def pink(n: int, rng: np.random.Generator) -> Floats:
    """Unit-RMS pink (1/f power) noise: white noise shaped by 1/sqrt(f) in frequency."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.arange(len(spectrum), dtype=np.float64)
    f[0] = 1.0
    out = np.fft.irfft(spectrum / np.sqrt(f), n)
    return out / (np.sqrt(np.mean(out**2)) or 1.0)


def babble(voices: list[Pcm16], n: int, rng: np.random.Generator) -> Floats:
    """Unit-RMS babble: each talker's sentences looped from a seeded offset, summed."""
    out = np.zeros(n)
    for pcm in voices:
        track = np.tile(pcm.astype(np.float64), n // len(pcm) + 2)
        start = int(rng.integers(0, len(pcm)))
        out += track[start : start + n]
    return out / (np.sqrt(np.mean(out**2)) or 1.0)


def speech_rms(pcm: Pcm16) -> float:
    """RMS over the audible 10 ms blocks only: the speech's power, not its pauses'."""
    blocks = pcm[: len(pcm) // BLOCK * BLOCK].astype(np.float64).reshape(-1, BLOCK)
    rms = np.sqrt((blocks**2).mean(axis=1))
    loud = blocks[rms > AUDIBLE_RMS]
    return float(np.sqrt((loud**2).mean())) if len(loud) else 0.0


def noise_bed(voices: list[Pcm16], n: int, seed: int) -> Floats:
    """Unit-RMS noise: babble and pink noise at equal power."""
    rng = np.random.default_rng(seed)
    bed = babble(voices, n, rng) + pink(n, rng)
    return bed / (np.sqrt(np.mean(bed**2)) or 1.0)


def mix(pcm: Pcm16, bed: Floats, snr_db: float, reference_rms: float) -> Pcm16:
    """pcm plus the bed scaled to `snr_db` below `reference_rms` (the speech's power)."""
    scale = reference_rms / 10 ** (snr_db / 20)
    out = pcm.astype(np.float64) + bed[: len(pcm)] * scale
    return np.clip(np.rint(out), -32768, 32767).astype(np.int16)
