"""Audio on a WebRTC track, both ways, as 24 kHz mono pcm16: 20 ms frames paced in
real time onto a track (`FrameClock`, `audio_frame`), and a track's frames as they
arrive (`track_pcm`). A call's playout (server/playout.py) and its input
(server/webrtc.py) use them, and so does the benchmark's caller (bench/rtc_client.py).
"""

from __future__ import annotations

import asyncio
import fractions
import time
from collections.abc import AsyncIterator, Callable

import numpy as np
import numpy.typing as npt
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame, AudioResampler

from models.base import PCM_RATE

FRAME_MS = 20
FRAME = PCM_RATE * FRAME_MS // 1000  # samples per frame at 24 kHz


class FrameClock:
    """When each frame of an outgoing track is due: the first at once, then one every
    FRAME_MS of wall time from it (late frames do not push the later ones back)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start: float | None = None
        self._pts = 0

    async def next_pts(self) -> int:
        """Wait until the next frame is due; its timestamp, in samples."""
        if self._start is None:
            self._start = self._clock()
            return self._pts
        self._pts += FRAME
        wait = self._start + self._pts / PCM_RATE - self._clock()
        if wait > 0:
            await asyncio.sleep(wait)
        return self._pts


def audio_frame(pcm: npt.NDArray[np.int16], pts: int) -> AudioFrame:
    """24 kHz mono pcm16 as the frame aiortc encodes (to Opus at 48 kHz)."""
    frame = AudioFrame.from_ndarray(pcm[None, :], format="s16", layout="mono")
    frame.sample_rate = PCM_RATE
    frame.pts = pts
    frame.time_base = fractions.Fraction(1, PCM_RATE)
    return frame


async def track_pcm(track: MediaStreamTrack) -> AsyncIterator[tuple[float, npt.NDArray[np.int16]]]:
    """A track's audio as it arrives: (time.monotonic() of arrival, 24 kHz mono pcm16),
    until the track ends. Opus decodes to 48 kHz stereo."""
    resampler = AudioResampler(format="s16", layout="mono", rate=PCM_RATE)
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        received = time.monotonic()
        if not isinstance(frame, AudioFrame):
            continue
        for out in resampler.resample(frame):
            yield received, out.to_ndarray().reshape(-1).astype(np.int16)
