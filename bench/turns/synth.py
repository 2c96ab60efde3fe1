"""Speech from espeak-ng at the protocol's input format (24 kHz mono pcm16)."""

from __future__ import annotations

import io
import shutil
import subprocess
import wave

import numpy as np
import numpy.typing as npt
import soxr

from bench.vad_backends import speech_extent_ms
from models.base import PCM_RATE

Pcm16 = npt.NDArray[np.int16]

INSTALL_HINT = (
    "espeak-ng is needed to synthesize the turn-taking set: `make system-deps` "
    "(as root) or `sudo apt-get install espeak-ng`"
)


class EspeakMissing(RuntimeError):
    pass


def require_espeak() -> str:
    path = shutil.which("espeak-ng")
    if path is None:
        raise EspeakMissing(INSTALL_HINT)
    return path


def speak(text: str, voice: str, rate_wpm: int) -> Pcm16:
    """`text` in espeak-ng's `voice` at `rate_wpm` words per minute, resampled to 24 kHz."""
    argv = [require_espeak(), "--stdout", "-v", voice, "-s", str(rate_wpm), text]
    wav_bytes = subprocess.run(argv, capture_output=True, check=True, timeout=60).stdout
    # espeak-ng streams its WAV with unknown lengths in the header: read the data after it.
    with wave.open(io.BytesIO(wav_bytes), "rb") as wav:
        rate, header = wav.getframerate(), len(wav_bytes) - _data_bytes(wav_bytes)
    pcm = np.frombuffer(wav_bytes[header:], dtype="<i2")[: (len(wav_bytes) - header) // 2]
    out: npt.NDArray[np.float32] = soxr.resample(pcm.astype(np.float32), rate, PCM_RATE)
    return np.clip(np.rint(out), -32768, 32767).astype(np.int16)


def _data_bytes(wav_bytes: bytes) -> int:
    """How many bytes follow the `data` chunk header."""
    at = wav_bytes.find(b"data")
    if at < 0:
        raise ValueError("espeak-ng wrote no WAV data chunk")
    return len(wav_bytes) - (at + 8)


def trimmed(pcm: Pcm16) -> Pcm16:
    """From the first to the last audible 10 ms block."""
    start, end = speech_extent_ms(pcm)
    return pcm[start * PCM_RATE // 1000 : end * PCM_RATE // 1000]
