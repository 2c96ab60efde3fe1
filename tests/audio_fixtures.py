"""Speech fixtures and synthetic audio at the protocol's input format."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt

FIXTURES = Path(__file__).parent / "fixtures"
RATE = 24000


def load_wav(name: str) -> npt.NDArray[np.int16]:
    """A fixture ("weather" or "weather.wav") as 24 kHz mono int16 samples."""
    path = FIXTURES / (name if name.endswith(".wav") else f"{name}.wav")
    with wave.open(str(path), "rb") as wav:
        if (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) != (RATE, 1, 2):
            raise ValueError(f"{path.name} is not 24 kHz mono pcm16")
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").astype(np.int16)


def silence(ms: int) -> npt.NDArray[np.int16]:
    return np.zeros(ms * RATE // 1000, dtype=np.int16)
