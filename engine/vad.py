"""Frame-level voice activity scoring.

A `VadBackend` is shared by all sessions; each session owns a `VadStream`
that resamples its input to 16 kHz, cuts it into fixed frames and asks the
backend for a speech score in [0, 1] per frame. Turn logic lives in
`engine.turns`; this module only produces `FrameScore`s. The backends themselves
(webrtcvad, Silero) are models: models/listening/vad.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import soxr

from models.base import PCM_RATE
from models.listening.vad import VAD_RATE

_SAMPLES_PER_MS = VAD_RATE // 1000

Pcm16 = npt.NDArray[np.int16]


@dataclass(frozen=True)
class FrameScore:
    """Score of one frame; times are ms on the session's input audio clock."""

    start_ms: int
    end_ms: int
    score: float


class VadBackend(Protocol):
    """Scores 16 kHz int16 frames of `16 * frame_ms` samples.

    The backend is shared; everything that depends on a session's history
    lives in the opaque state from `new_state()`, passed back to `score()`.
    """

    @property
    def frame_ms(self) -> int: ...

    def new_state(self) -> object: ...

    def score(self, state: object, frame: Pcm16) -> float: ...


@runtime_checkable
class OffLoopScorer(Protocol):
    """What a `VadStream` awaits to have frames scored off the event loop (the
    `VadBatcher` of models/listening/vad_batch.py is one)."""

    async def score_frames(self, state: object, frames: list[Pcm16]) -> list[float]: ...


@dataclass
class _ScriptState:
    index: int = 0


class ScriptedScorer:
    """Test backend: frame i of a session scores `script(i)` or `script[i]`.

    Frames past the end of a sequence score 0.0 (silence), so tests can
    feed trailing audio without padding the script.
    """

    def __init__(
        self, script: Callable[[int], float] | Sequence[float], frame_ms: int = 30
    ) -> None:
        self.frame_ms = frame_ms
        self._script = script

    def new_state(self) -> object:
        return _ScriptState()

    def score(self, state: object, frame: Pcm16) -> float:
        if not isinstance(state, _ScriptState):
            raise TypeError("state does not come from ScriptedScorer.new_state()")
        i = state.index
        state.index += 1
        if callable(self._script):
            return self._script(i)
        return self._script[i] if i < len(self._script) else 0.0


def _new_resampler(input_rate: int) -> soxr.ResampleStream | None:
    if input_rate == VAD_RATE:
        return None
    # float32, not int16: libsoxr dithers int16 output, which makes the
    # samples depend on how the input was chunked (and turns digital silence
    # into +-1 LSB noise). The float path is exactly chunking-invariant.
    return soxr.ResampleStream(input_rate, VAD_RATE, 1, dtype="float32")


class VadStream:
    """Per-session scorer: pcm16 at `input_rate` in, `FrameScore`s out.

    Frame k (counted from the last reset) covers input time
    [origin + k*frame_ms, origin + (k+1)*frame_ms). soxr's streaming
    resampler compensates its filter delay, so these times are exact; it
    does hold back output, so a frame is only returned once roughly 6-37 ms
    (24 kHz, HQ) of later audio has arrived, on top of waiting for the frame
    to fill. Scores do not depend on how the input is chunked.
    """

    def __init__(self, backend: VadBackend, input_rate: int = PCM_RATE) -> None:
        self.backend = backend
        self._off_loop = backend if isinstance(backend, OffLoopScorer) else None
        self.input_rate = input_rate
        self._samples_in = 0
        self._state: object
        self._resampler: soxr.ResampleStream | None
        self._pending: Pcm16
        self._origin_ms: int
        self._frames: int
        self.reset()

    @property
    def position_ms(self) -> int:
        """Input audio received so far, in ms (floored)."""
        return self._samples_in * 1000 // self.input_rate

    def process(self, pcm: Pcm16) -> list[FrameScore]:
        """Scores of the frames `pcm` completes, scored here."""
        frames = self._cut(pcm)
        return self._label([self.backend.score(self._state, f) for f in frames])

    async def score(self, pcm: Pcm16, *, offload: bool = False) -> list[FrameScore]:
        """As `process`, but off the event loop where it can be: a `VadBatcher`
        backend scores on its worker thread, and with `offload` (a large append) the
        resampling runs in a thread too, as does a plain backend's scoring."""
        if self._off_loop is None:
            return await asyncio.to_thread(self.process, pcm) if offload else self.process(pcm)
        frames = await asyncio.to_thread(self._cut, pcm) if offload else self._cut(pcm)
        return self._label(await self._off_loop.score_frames(self._state, frames))

    def skip(self, samples: int) -> None:
        """Input the session took without scoring it (turn detection off): the clock
        moves past it, so frames after the next reset start where the input is."""
        self._samples_in += samples

    def _cut(self, pcm: Pcm16) -> list[Pcm16]:
        """Resample `pcm` and return the whole frames it completes."""
        if pcm.ndim != 1 or pcm.dtype != np.int16:
            raise ValueError("expected mono int16 samples")
        self._samples_in += len(pcm)
        resampled = self._to_vad_rate(pcm)
        buf = np.concatenate([self._pending, resampled]) if len(self._pending) else resampled
        frame_len = self.backend.frame_ms * _SAMPLES_PER_MS
        n = len(buf) // frame_len
        # Copy so the leftover does not pin the whole buffer.
        self._pending = buf[n * frame_len :].copy()
        return [buf[i * frame_len : (i + 1) * frame_len] for i in range(n)]

    def _label(self, scores: list[float]) -> list[FrameScore]:
        """FrameScores on the session clock for the next `len(scores)` frames."""
        frame_ms = self.backend.frame_ms
        out = []
        for score in scores:
            start = self._origin_ms + self._frames * frame_ms
            out.append(FrameScore(start, start + frame_ms, score))
            self._frames += 1
        return out

    def reset(self) -> None:
        """Forget everything heard so far; keep the session clock.

        The next frame starts at the current input position, so frame times
        stay on the session clock that event timestamps use. Audio still
        inside the resampler or in a partial frame belongs to before the
        reset and is dropped with it (a fresh resampler is made), and the
        backend state starts over: after a reset, the stream scores the
        following audio exactly as a new stream would, shifted in time.
        """
        self._state = self.backend.new_state()
        self._resampler = _new_resampler(self.input_rate)
        self._pending = np.zeros(0, dtype=np.int16)
        # Floored: a reset between two ms boundaries labels the next frames
        # up to 1 ms early, which no consumer can notice.
        self._origin_ms = self.position_ms
        self._frames = 0

    def _to_vad_rate(self, pcm: Pcm16) -> Pcm16:
        if self._resampler is None:
            return pcm
        out: npt.NDArray[np.float32] = self._resampler.resample_chunk(pcm.astype(np.float32))
        np.rint(out, out=out)
        out.clip(-32768, 32767, out=out)  # in place: the method skips np.clip's wrapper
        return out.astype(np.int16)
