"""The speech fixtures and synthetic audio at the protocol's input format.

Four utterances spoken by espeak-ng (make_fixtures.sh, `make fixtures`), stored beside
this module as 24 kHz mono pcm16 WAV. The benchmarks and the tests both read them
from here (tests may import bench; bench never imports tests).
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt

# The rate of the files (the protocol's audio/pcm), exported for their readers.
from models.base import PCM_RATE as PCM_RATE

SPEECH_DIR = Path(__file__).parent
FIXTURES = ["weather", "joke", "timer", "lights"]  # every utterance, in the benchmarks' order


def load_wav(name: str) -> npt.NDArray[np.int16]:
    """A fixture ("weather" or "weather.wav") as 24 kHz mono int16 samples."""
    path = SPEECH_DIR / (name if name.endswith(".wav") else f"{name}.wav")
    with wave.open(str(path), "rb") as wav:
        if (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) != (PCM_RATE, 1, 2):
            raise ValueError(f"{path.name} is not 24 kHz mono pcm16")
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").astype(np.int16)


def silence(ms: int) -> npt.NDArray[np.int16]:
    return np.zeros(ms * PCM_RATE // 1000, dtype=np.int16)
