"""The echo guard, for clients without echo cancellation (telephony bridges, many
native apps) that feed the assistant's own voice back into the microphone:
Parley's `audio.input.echo_cancellation` extension.

- `FarEnd`: what the client is playing, by wall time. The writer records each audio
  delta as it sends it: a client plays an answer continuously from its first delta,
  so a chunk plays at max(end of the previous chunk, its send time). Audio the writer
  drops (a cancelled answer) is never sent, so never recorded; a barge-in (the client
  flushes its playback on `speech_started`) cuts what was still to play.
- `EchoCanceller`: keeps the raw microphone by wall time (an append covers the wall
  interval that ends at its arrival) and, with `cancel` (`cancel_input`), runs WebRTC's
  AEC3 (`pywebrtc-audio`) on it, each 10 ms frame paired with the far end playing when
  it was heard. Like models/listening/denoise.py it runs at 16 kHz
  (models/listening/frame_stage.py): resampled as streams, AEC3's own 8 ms delay cut,
  sample k out is sample k in. AEC3 takes the user for echo while it has no echo path
  learnt, so it is not the default (docs/turn-taking.md).
- `own_voice_score`: how much a stretch of the microphone is the recently played far
  end (correlation of band-energy envelopes over lags 0-500 ms), for the held-speech
  check.

Measured (bench/echo.py, 2 cores): ~20 ms of CPU per second of audio; a real-speech
echo at -10/-20 dB, 50-200 ms late, down by 29-47 dB (22-40 dB in its first second,
46-60 dB after); the user talking over a learnt echo keeps all but 1.5-3 dB of its
level, over none the first words can lose 16-75 dB.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt
import soxr

from models.base import PCM_RATE
from models.errors import ModelMissing
from models.listening.frame_stage import RATE, Floats, FrameStage, Pcm16, pcm16

# AEC3's own delay at 16 kHz (measured: its output is its input 128 samples late).
DELAY = 128
KEEP_S = 4.0  # far end and raw near end kept this long after they played
MAX_AHEAD_S = 120.0  # far end scheduled further ahead is not kept (bounds it: ~7.7 MB)
MAX_LAG_S = 0.5  # the own-voice check looks this far back for the echo
FIX = "pip install pywebrtc-audio==0.2.0"

Clock = Callable[[], float]


def wall_index(t: float) -> int:
    """A wall time (seconds, monotonic) as a 16 kHz sample index."""
    return round(t * RATE)


@dataclass(frozen=True)
class _Segment:
    start: int  # wall index of its first sample
    pcm: Floats  # 16 kHz

    @property
    def end(self) -> int:
        return self.start + len(self.pcm)


class FarEnd:
    """The playout timeline of what was sent, at 16 kHz by wall time; the past is kept
    for KEEP_S, the future as far as it was sent."""

    def __init__(self, clock: Clock, keep_s: float = KEEP_S) -> None:
        self.clock = clock
        self._keep = round(keep_s * RATE)
        self._segments: list[_Segment] = []
        self._starts: list[int] = []
        self._end = 0  # where the next chunk plays, at the earliest

    def sent(self, pcm: Pcm16) -> None:
        """A delta of 24 kHz audio taken for the wire now."""
        now = wall_index(self.clock())
        self._prune(now)
        if not len(pcm) or self._end > now + round(MAX_AHEAD_S * RATE):
            return
        audio = soxr.resample(pcm.astype(np.float32), PCM_RATE, RATE, quality="HQ")
        start = max(self._end, now)
        self._segments.append(_Segment(start, audio))
        self._starts.append(start)
        self._end = start + len(audio)

    def cut(self) -> None:
        """The client stopped playing now (it flushes on `speech_started`)."""
        now = wall_index(self.clock())
        kept = [
            seg if seg.end <= now else _Segment(seg.start, seg.pcm[: now - seg.start])
            for seg in self._segments
            if seg.start < now
        ]
        self._segments = kept
        self._starts = [s.start for s in kept]
        self._end = min(self._end, now)

    def playing_until(self) -> int:
        """The wall index where the audio sent so far ends."""
        return self._end

    def read(self, start: int, n: int) -> Floats:
        """What plays at wall indices [start, start + n): zeros where nothing does."""
        out = np.zeros(n, np.float32)
        first = max(bisect.bisect_right(self._starts, start) - 1, 0)
        for seg in self._segments[first:]:
            if seg.start >= start + n:
                break
            lo, hi = max(seg.start, start), min(seg.end, start + n)
            if lo < hi:
                out[lo - start : hi - start] = seg.pcm[lo - seg.start : hi - seg.start]
        return out

    def _prune(self, now: int) -> None:
        old = 0
        while old < len(self._segments) and self._segments[old].end < now - self._keep:
            old += 1
        if old:
            del self._segments[:old], self._starts[:old]


class EchoCanceller:
    """One session's echo canceller: stateful, so one per input stream. It keeps the
    raw microphone (16 kHz, by wall time) for `heard_own_voice`."""

    def __init__(self, far: FarEnd, *, cancel: bool = True) -> None:
        try:
            from pywebrtc_audio import EchoCanceller as Aec3
        except ImportError as exc:
            raise ModelMissing("The pywebrtc-audio package is not installed.", FIX) from exc
        self.far = far
        # False: the input passes unchanged (the stage still runs, to keep the raw
        # microphone and its wall clock for `own_voice_score`).
        self.cancel = cancel
        self._aec = Aec3(sample_rate=RATE)
        self._fed24 = 0  # 24 kHz samples taken, ever (the buffer's input clock)
        # (24 kHz input count, wall index of the 16 kHz sample it ends at) per append
        self._anchors: deque[tuple[int, int]] = deque(maxlen=round(KEEP_S * 100))
        self._raw = _NearRing(round(KEEP_S * RATE))
        self._stage = FrameStage(self._cancel, DELAY, heard=self._raw.append)
        self.reset()

    def process(self, pcm: Pcm16, arrived: float | None = None) -> Pcm16:
        """Cancel the echo in a chunk of 24 kHz microphone audio that ended at
        `arrived` (the far end's clock; None: now); returns what is ready."""
        self._fed24 += len(pcm)
        end_wall = wall_index(self.far.clock() if arrived is None else arrived)
        self._anchors.append((self._fed24, end_wall))
        # Where the next 16 kHz sample handed to AEC3 sits in wall time: the chunk's
        # end, less the 16 kHz samples of input after it.
        framed = self._framed_base + self._stage.framed
        self._wall_of_next = end_wall - (self._fed24 * RATE // PCM_RATE - framed)
        out = self._stage.process(pcm)
        return out if self.cancel else pcm

    def flush(self) -> Pcm16:
        """The rest of the input (a commit ends it for now): the partial frame and
        AEC3's delay are pushed out with silence, which is then cut away. The
        adaptive filter is kept: the room has not changed."""
        out = self._stage.flush()
        self.reset()
        return out if self.cancel else out[:0]

    def reset(self) -> None:
        """A new input stream (a clear, a commit): the resamplers start over; the
        filter keeps what it learnt of the echo path."""
        self._stage.reset()
        self._framed_base = self._fed24 * RATE // PCM_RATE  # the input clock, for wall time
        self._wall_of_next = 0

    def raw_near(self, start24: int, end24: int) -> tuple[Floats, int]:
        """The microphone as it came (16 kHz) for input samples [start24, end24) of
        this canceller's input clock, and the wall index of its first sample."""
        start16, end16 = start24 * RATE // PCM_RATE, end24 * RATE // PCM_RATE
        wall = self._wall_at(start24)
        return self._raw.read(start16, end16 - start16), wall

    def _wall_at(self, pos24: int) -> int:
        """The wall index of input sample `pos24`, by the append that carried it."""
        for count, wall in self._anchors:
            if count > pos24:
                return wall - (count - pos24) * RATE // PCM_RATE
        count, wall = self._anchors[-1] if self._anchors else (self._fed24, 0)
        return wall - (count - pos24) * RATE // PCM_RATE

    def _cancel(self, near: Pcm16) -> Pcm16:
        """Whole 10 ms frames, each paired with the far end playing when it was heard
        (padding at a flush pairs with what follows)."""
        far = pcm16(self.far.read(self._wall_of_next, len(near)))
        self._wall_of_next += len(near)
        if not self.cancel:
            return near
        out: Pcm16 = self._aec.process(near, far)
        return out


class _NearRing:
    """The last `size` samples of a 16 kHz stream, by stream position."""

    def __init__(self, size: int) -> None:
        self._buf = np.zeros(size, np.float32)
        self._end = 0

    def append(self, audio: Floats) -> None:
        audio = audio[-len(self._buf) :]
        at = self._end % len(self._buf)
        head = min(len(audio), len(self._buf) - at)
        self._buf[at : at + head] = audio[:head]
        self._buf[: len(audio) - head] = audio[head:]
        self._end += len(audio)

    def read(self, start: int, n: int) -> Floats:
        out = np.zeros(max(n, 0), np.float32)
        lo, hi = max(start, self._end - len(self._buf)), min(start + n, self._end)
        if lo < hi:
            idx = np.arange(lo, hi) % len(self._buf)
            out[lo - start : hi - start] = self._buf[idx]
        return out


# The own-voice score compares band-energy envelopes, not samples: 10 ms frames every
# 5 ms, log energy in five bands (rfft bins of a 10 ms frame are 100 Hz apart).
_FRAME, _HOP = RATE // 100, RATE // 200
_BAND_EDGES = (1, 4, 10, 20, 40, 81)  # 100-400 Hz, -1 k, -2 k, -4 k, -8 k
_FLOOR = 1e-6  # -60 dB under the loudest frame: digital silence is not -inf


def band_envelope(audio: Floats) -> npt.NDArray[np.float64]:
    """(frames, 5) log band energies of 16 kHz audio, 10 ms frames every 5 ms."""
    n = 1 + (len(audio) - _FRAME) // _HOP if len(audio) >= _FRAME else 0
    index = np.arange(_FRAME)[None, :] + _HOP * np.arange(n)[:, None]
    frames = audio.astype(np.float64)[index] * np.hanning(_FRAME)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    bands = np.stack([power[:, lo:hi].sum(axis=1) for lo, hi in pairwise(_BAND_EDGES)], axis=1)
    envelope: npt.NDArray[np.float64] = np.log10(bands + bands.max(initial=0.0) * _FLOOR + 1e-12)
    return envelope


def own_voice_score(near: Floats, far: Floats, max_lag: int) -> float:
    """How much `near` (n samples) is the far end heard 0..max_lag samples late: the
    largest correlation of their band-energy envelopes over those lags (-1..1; the
    echo alone ~0.85-1.0, another voice, alone or over a -10 dB echo, ~0.35).
    `far` holds the far end from max_lag samples before `near` starts to its end
    (n + max_lag).

    Envelopes, because the echo is not one delayed copy of what was sent: each
    append's place in wall time is known to a few milliseconds (when it arrived), and
    a 3 ms jitter between 20 ms appends takes a sample correlation of the echo from
    1.0 to ~0.2, while its envelope still scores ~0.95 (tests/models/test_echo.py)."""
    if len(far) != len(near) + max_lag:
        raise ValueError("far must cover near and max_lag samples before it")
    a, b = band_envelope(near), band_envelope(far)
    lags = max_lag // _HOP
    if len(a) < 2:
        return 0.0
    a = a - a.mean(axis=0)
    best = 0.0
    for lag in range(lags + 1):
        w = b[lags - lag : lags - lag + len(a)]
        if len(w) < len(a):
            continue
        w = w - w.mean(axis=0)
        norm = float(np.sqrt((a * a).sum() * (w * w).sum()))
        if norm > 0:
            best = max(best, float((a * w).sum()) / norm)
    return best
