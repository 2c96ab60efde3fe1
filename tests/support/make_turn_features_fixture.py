"""Regenerates tests/models/fixtures/turn_features.npz: reference Smart Turn features.

The reference is transformers' WhisperFeatureExtractor, configured as Smart Turn v3
uses it (pipecat's LocalSmartTurnAnalyzerV3: chunk_length=8, do_normalize=True, the
last 8 s zero-padded at the front). transformers is not a Parley dependency, so run
this in a scratch venv (torch is not needed):

    python3 -m venv /tmp/tfx && /tmp/tfx/bin/pip install transformers numpy soxr
    /tmp/tfx/bin/python tests/support/make_turn_features_fixture.py

It stores the exact 16 kHz int16 input beside the features, so the test does not
depend on the resampler. Two cases: a short question (padding) and the same question
tiled past 8 s (truncation to the last 8 s).
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import soxr
from transformers import WhisperFeatureExtractor

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "bench" / "speech" / "weather.wav"
OUT = ROOT / "tests" / "models" / "fixtures" / "turn_features.npz"
RATE = 16_000
WINDOW = 8 * RATE
LONG_REPEATS = 5  # the question five times: 9.1 s, longer than the window


def question_16k() -> np.ndarray:
    with wave.open(str(SOURCE)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    resampled = soxr.resample(pcm.astype(np.float32) / 32768.0, rate, RATE)
    return np.clip(np.round(resampled * 32768.0), -32768, 32767).astype(np.int16)


def reference(extractor: WhisperFeatureExtractor, pcm: np.ndarray) -> np.ndarray:
    audio = pcm.astype(np.float32) / 32768.0
    audio = audio[-WINDOW:]
    audio = np.pad(audio, (WINDOW - audio.size, 0))
    out = extractor(
        audio,
        sampling_rate=RATE,
        padding="max_length",
        max_length=WINDOW,
        truncation=True,
        do_normalize=True,
        return_tensors="np",
    )
    return np.asarray(out.input_features[0], dtype=np.float32)


def main() -> None:
    extractor = WhisperFeatureExtractor(chunk_length=8)
    pcm = question_16k()
    long_pcm = np.tile(pcm, LONG_REPEATS)
    np.savez_compressed(
        OUT,
        pcm=pcm,
        short=reference(extractor, pcm),
        long_repeats=np.array(LONG_REPEATS),
        long=reference(extractor, long_pcm),
    )
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
