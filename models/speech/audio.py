"""Converting model audio to the rate an executor speaks at."""

from __future__ import annotations

import numpy as np
import soxr


def resample_int16(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """int16 mono audio at `rate` as int16 at `target`."""
    if rate == target or not len(audio):
        same: np.ndarray = audio.astype(np.int16, copy=False)
        return same
    out: np.ndarray = soxr.resample(audio.astype(np.float32), rate, target)
    resampled: np.ndarray = np.clip(np.rint(out), -32768, 32767).astype(np.int16)
    return resampled
