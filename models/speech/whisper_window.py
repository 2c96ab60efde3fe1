"""Whisper in a window as short as the audio allows, instead of its fixed 30 s.

Whisper's encoder takes a fixed window of log-mel frames (30 s); faster-whisper's
`transcribe` pads every input to it, and the encoder over 30 s takes ~450 ms on one
thread, over 5 s ~25 ms. A turn or held speech is a few seconds, so it is heard in a
window of whole seconds just longer than it, at least MIN_WINDOW_S (the shortest that
kept tiny's transcripts as good as the 30 s window's on the interruption set: shorter
windows made it repeat itself and invent words). Used by the hearing recognizer
(models/listening/hearing.py) and the cascade's recognizer (models/speech/asr.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from models.speech.whisper_files import WHISPER_RATE

MIN_WINDOW_S = 5
MAX_WINDOW_S = 30  # Whisper's own; longer audio is heard by its last 30 s

# The log-mel of the silence that pads held speech to its window is one value (Whisper
# clamps every frame to 8 below the loudest, and silence is below that), so only the
# speech and this much silence after it are transformed and the rest of the window is
# filled with that value: the same features for a fraction of the FFTs (a second of
# held speech in a 5 s window, a fifth). More than an FFT frame (400 samples) past
# the speech, so the last column is silence alone.
MEL_MARGIN = WHISPER_RATE // 10


def mel_window(
    features: Callable[[npt.NDArray[np.float32]], npt.NDArray[np.float32]],
    audio: npt.NDArray[np.float32],
    seconds: int,
    hop: int,
) -> npt.NDArray[np.float32]:
    """The log-mel features (n_mels, frames) of `audio` padded with silence to
    `seconds`, as `features` computes them over the whole padded window."""
    frames = seconds * WHISPER_RATE // hop
    padded = np.zeros(min(seconds * WHISPER_RATE, len(audio) + MEL_MARGIN), np.float32)
    padded[: len(audio)] = audio
    mel = features(padded)
    if mel.shape[1] >= frames:
        return np.ascontiguousarray(mel[:, :frames])
    out = np.empty((mel.shape[0], frames), np.float32)
    out[:, : mel.shape[1]] = mel
    out[:, mel.shape[1] :] = mel[:, -1:]
    return out


def window_s(samples_16k: int, least: int = MIN_WINDOW_S) -> int:
    """The window audio is heard in: whole seconds, at least `least`, with half a
    second of silence after it."""
    return max(least, min(MAX_WINDOW_S, math.ceil(samples_16k / WHISPER_RATE + 0.5)))
