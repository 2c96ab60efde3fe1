"""Regenerates tests/models/fixtures/turn_question.wav: a spoken question for the
Smart Turn tests, 16 kHz mono int16, from Parley's bundled Piper voice.

    PYTHONPATH=. .venv/bin/python tests/support/make_turn_question.py

Piper, not the espeak-ng fixtures of bench/speech/: Smart Turn judges prosody, and
espeak's flat voice scores questions cut mid-phrase as complete as whole ones.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np
import soxr

from models.speech.tts import bundled_voice

TEXT = "What is the weather like today?"
OUT = Path(__file__).resolve().parents[1] / "models" / "fixtures" / "turn_question.wav"
RATE = 16_000


def main() -> None:
    model, _config = bundled_voice()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "question.wav"
        subprocess.run(
            [sys.executable, "-m", "piper", "-m", str(model), "-f", str(raw)],
            input=TEXT,
            text=True,
            check=True,
            capture_output=True,
        )
        with wave.open(str(raw)) as w:
            rate = w.getframerate()
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    resampled = soxr.resample(pcm.astype(np.float32) / 32768.0, rate, RATE)
    out = np.clip(np.round(resampled * 32768.0), -32768, 32767).astype(np.int16)
    with wave.open(str(OUT), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(out.tobytes())
    print(f"wrote {OUT} ({out.size / RATE:.2f} s)")


if __name__ == "__main__":
    main()
