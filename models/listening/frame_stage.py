"""A 10 ms frame processor at 16 kHz run on the session's 24 kHz input: what the
noise suppressor (denoise.py) and the echo canceller (echo.py) share.

Each chunk is resampled down, handed to the processor in whole 10 ms frames (a
partial frame waits for the next chunk) and resampled back, all as streams; the
processor's own delay is cut from the start, so sample k out is sample k in. A flush
(a commit) pushes the partial frame and the delay out with silence, which is then
cut away.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import soxr

from models.base import PCM_RATE

RATE = 16_000  # the band the recognizers and the VAD use, and WebRTC's processors
FRAME = RATE // 100  # WebRTC's 10 ms

Pcm16 = npt.NDArray[np.int16]
Floats = npt.NDArray[np.float32]


def pcm16(audio: Floats) -> Pcm16:
    return np.asarray(np.clip(np.rint(audio), -32768, 32767), dtype=np.int16)


class FrameStage:
    """`frames` takes whole 10 ms frames (int16, 16 kHz) and returns as many samples,
    `delay` of them late; `heard` is told the real 16 kHz input as it comes."""

    def __init__(
        self,
        frames: Callable[[Pcm16], npt.NDArray[np.int16]],
        delay: int,
        *,
        heard: Callable[[Floats], None] | None = None,
    ) -> None:
        self._frames = frames
        self._delay = delay
        self._heard = heard
        self.reset()

    def process(self, pcm: Pcm16) -> Pcm16:
        """A chunk of 24 kHz audio in; what is ready out."""
        down = self._down.resample_chunk(pcm.astype(np.float32))
        return pcm16(self._up.resample_chunk(self._run(down)))

    def flush(self) -> Pcm16:
        """The rest of the input, then a new stream (the processor keeps its state)."""
        pieces = [self._run(self._down.resample_chunk(np.zeros(0, np.float32), last=True))]
        while self._emitted < self._fed:
            pieces.append(self._run(np.zeros(FRAME - len(self._carry), np.float32), real=False))
        clean = np.concatenate(pieces)
        clean = clean[: len(clean) - (self._emitted - self._fed)]
        out = pcm16(self._up.resample_chunk(clean, last=True))
        self.reset()
        return out

    def reset(self) -> None:
        """A new input stream: the resamplers start over."""
        self._down = soxr.ResampleStream(PCM_RATE, RATE, 1, dtype="float32", quality="HQ")
        self._up = soxr.ResampleStream(RATE, PCM_RATE, 1, dtype="float32", quality="HQ")
        self._carry = np.zeros(0, dtype=np.float32)
        self._fed = 0  # real 16 kHz samples taken in this stream
        self.framed = 0  # 16 kHz samples handed to `frames`, flush padding included
        self._dropped = 0  # of the delay, cut from the start of what came back
        self._emitted = 0  # samples handed on

    def _run(self, audio: Floats, *, real: bool = True) -> Floats:
        if real:
            if self._heard is not None:
                self._heard(audio)
            self._fed += len(audio)
        audio = np.concatenate([self._carry, audio])
        whole = len(audio) // FRAME * FRAME
        self._carry = audio[whole:]
        if not whole:
            return np.zeros(0, np.float32)
        self.framed += whole
        clean = self._frames(pcm16(audio[:whole])).astype(np.float32)
        skip = min(self._delay - self._dropped, len(clean))
        self._dropped += skip
        self._emitted += len(clean) - skip
        return clean[skip:]
