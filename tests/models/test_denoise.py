"""WebRTC noise suppression of the input (audio.input.noise_reduction), on real speech
under white noise: quieter noise, the speech kept, and sample k out is sample k in."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from bench.speech import load_wav, silence
from models.listening.denoise import Denoiser

CHUNK = 480  # 20 ms at 24 kHz, as a client appends


def noisy() -> tuple[npt.NDArray[np.int16], npt.NDArray[np.int16], slice]:
    clean = np.concatenate([silence(500), load_wav("weather"), silence(500)])
    noise = np.random.default_rng(7).normal(0, 1500, len(clean))
    mixed = np.clip(clean + noise, -32768, 32767).astype(np.int16)
    return clean, mixed, slice(2400, 9600)  # 100-400 ms: noise only


def run(denoiser: Denoiser, pcm: npt.NDArray[np.int16]) -> npt.NDArray[np.int16]:
    out = [denoiser.process(pcm[i : i + CHUNK]) for i in range(0, len(pcm), CHUNK)]
    return np.concatenate([*out, denoiser.flush()])


def db(pcm: npt.NDArray[np.int16]) -> float:
    return float(20 * np.log10(np.sqrt(np.mean(pcm.astype(np.float64) ** 2)) + 1e-9))


@pytest.mark.parametrize("kind", ["near_field", "far_field"])
def test_noise_is_suppressed_and_the_clock_kept(kind: str) -> None:
    clean, mixed, quiet = noisy()
    out = run(Denoiser(kind), mixed)  # type: ignore[arg-type]
    # Every sample comes out once the streams are flushed (a frame's padding is dropped).
    assert abs(len(out) - len(mixed)) <= 24
    assert db(mixed[quiet]) - db(out[quiet]) >= 10  # the noise floor
    speech = slice(12_000, len(clean) - 12_000)
    assert db(out[speech]) >= db(clean[speech]) - 6  # the speech stays
    # Aligned: the output correlates best with the clean speech at no shift.
    a, b = clean[speech].astype(np.float64), out[speech].astype(np.float64)
    shifts = range(-48, 49)
    best = max(shifts, key=lambda k: float(np.dot(a[48:-48], b[48 + k : len(b) - 48 + k])))
    assert abs(best) <= 2


def test_far_field_suppresses_harder() -> None:
    _, mixed, quiet = noisy()
    near = run(Denoiser("near_field"), mixed)
    far = run(Denoiser("far_field"), mixed)
    assert db(far[quiet]) < db(near[quiet])
