"""Non-speech sounds a microphone hears while the assistant talks, made in numpy from a
seed: a cough (shaped noise bursts), a knock (decaying impulses), typing (a click
train), babble (other talkers, the turn set's bed) and music (a few tones). Unit peak
(floats in [-1, 1]); the set scales them to a level."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bench.turns.noise import Floats, Pcm16, babble
from models.base import PCM_RATE

BURSTS = ["cough", "knock", "typing", "babble", "music"]


def _seconds(ms: float) -> int:
    return int(ms * PCM_RATE / 1000)


def _peak(x: Floats) -> Floats:
    return x / (np.max(np.abs(x)) or 1.0)


def _band(x: Floats, low_hz: float, high_hz: float) -> Floats:
    """`x` with only the band between low_hz and high_hz (a brick-wall FFT filter)."""
    spectrum = np.fft.rfft(x)
    f = np.fft.rfftfreq(len(x), 1 / PCM_RATE)
    spectrum[(f < low_hz) | (f > high_hz)] = 0
    return np.fft.irfft(spectrum, len(x))


def cough(rng: np.random.Generator) -> Floats:
    """One or two coughs: band-limited noise, a 10 ms attack and a 150-250 ms decay."""
    out: list[Floats] = []
    for _ in range(int(rng.integers(1, 3))):
        n = _seconds(rng.uniform(250, 400))
        t = np.arange(n) / PCM_RATE
        envelope = np.minimum(t / 0.01, 1.0) * np.exp(-t / rng.uniform(0.15, 0.25) * 3)
        out += [_band(rng.standard_normal(n), 300, 3500) * envelope, np.zeros(_seconds(150))]
    return _peak(np.concatenate(out))


def knock(rng: np.random.Generator) -> Floats:
    """Two to four knocks on wood: damped 150-400 Hz resonances, 150-250 ms apart."""
    out = np.zeros(_seconds(1000))
    at = 0
    for _ in range(int(rng.integers(2, 5))):
        n = _seconds(120)
        t = np.arange(n) / PCM_RATE
        hit = np.sin(2 * np.pi * rng.uniform(150, 400) * t) * np.exp(-t / 0.015)
        hit[: _seconds(2)] += rng.standard_normal(_seconds(2)) * 0.5  # the strike's click
        out[at : at + n] += hit[: len(out) - at]
        at += _seconds(rng.uniform(150, 250))
    return _peak(out)


def typing(rng: np.random.Generator) -> Floats:
    """About 1.5 s of typing: 2 ms high-passed clicks at 80-200 ms intervals."""
    out = np.zeros(_seconds(1500))
    at = 0
    while at < len(out) - _seconds(10):
        n = _seconds(rng.uniform(2, 5))
        click = _band(rng.standard_normal(_seconds(10)), 2000, 8000)[:n] * rng.uniform(0.5, 1.0)
        out[at : at + n] += click * np.exp(-np.arange(n) / n * 3)
        at += _seconds(rng.uniform(80, 200))
    return _peak(out)


def music(rng: np.random.Generator) -> Floats:
    """Two seconds of a tune: 250 ms notes of a major scale, each with two harmonics."""
    scale = [0, 2, 4, 5, 7, 9, 11, 12]
    root = rng.uniform(196, 330)
    notes: list[Floats] = []
    for _ in range(8):
        f = root * 2 ** (scale[int(rng.integers(0, len(scale)))] / 12)
        t = np.arange(_seconds(250)) / PCM_RATE
        tone = sum(np.sin(2 * np.pi * f * k * t) / k for k in (1, 2, 3))
        notes.append(tone * np.minimum(1.0, np.minimum(t / 0.01, (0.25 - t) / 0.02)))
    return _peak(np.concatenate(notes))


def babble_burst(voices: list[Pcm16], rng: np.random.Generator) -> Floats:
    """1.5 s of the turn set's babble: other talkers over each other."""
    n = _seconds(1500)
    t = np.arange(n) / PCM_RATE
    fade = np.minimum(1.0, np.minimum(t / 0.05, (1.5 - t) / 0.05))
    return _peak(babble(voices, n, rng) * fade)


def make_burst(kind: str, voices: list[Pcm16], seed: int) -> Floats:
    rng = np.random.default_rng(seed)
    if kind == "babble":
        return babble_burst(voices, rng)
    made: dict[str, Callable[[np.random.Generator], Floats]] = {
        "cough": cough,
        "knock": knock,
        "typing": typing,
        "music": music,
    }
    return made[kind](rng)
