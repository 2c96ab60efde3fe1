"""A WebRTC client for tests: an aiortc peer that calls Parley as a browser does.

It offers an Opus microphone track (`Microphone`: real speech queued by the test,
silence between, paced in real time) and the `oai-events` data channel, posts the
offer to `/v1/realtime/calls`, and records what comes back: events from the
channel (`events`, an `Events` reader) and the loudness of every 20 ms of audio on
the answer's track, with its arrival time (`heard`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame, AudioResampler

from tests.support.events import Events
from tests.support.servers import RunningServer

RATE = 24_000
FRAME = 480  # 20 ms


class Microphone(MediaStreamTrack):
    """Speech the test queues (`say`), silence otherwise, 20 ms a frame in real time."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._queued: deque[int] = deque()
        self._pending: npt.NDArray[np.int16] = np.zeros(0, np.int16)
        self._start: float | None = None
        self._pts = 0
        self.spoke_at: list[float] = []  # when each `say` began to be sent

    def say(self, pcm: npt.NDArray[np.int16]) -> None:
        self._pending = np.concatenate([self._pending, pcm.astype(np.int16)])
        self._queued.append(len(pcm))

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        else:
            self._pts += FRAME
            await asyncio.sleep(max(0.0, self._start + self._pts / RATE - time.monotonic()))
        out = np.zeros(FRAME, np.int16)
        take = min(FRAME, len(self._pending))
        if take:
            if self._queued and sum(self._queued) == len(self._pending):
                self.spoke_at.append(time.monotonic())
                self._queued.popleft()
            out[:take] = self._pending[:take]
            self._pending = self._pending[take:]
        frame = AudioFrame.from_ndarray(out[None, :], format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = self._pts
        frame.time_base = fractions.Fraction(1, RATE)
        return frame


@dataclass
class Heard:
    at: float  # time.monotonic() of arrival
    rms: float


@dataclass
class RtcCall:
    pc: RTCPeerConnection
    mic: Microphone
    channel: Any
    events: Events
    call_id: str
    heard: list[Heard] = field(default_factory=list)
    news: asyncio.Event = field(default_factory=asyncio.Event)  # set at every frame heard
    sent: list[dict[str, Any]] = field(default_factory=list)

    def send(self, event: dict[str, Any]) -> None:
        self.sent.append(event)
        self.channel.send(json.dumps(event))

    async def until_heard(self, condition: Callable[[], bool], timeout_s: float) -> None:
        """Wait until `condition` holds of what was heard (checked at every frame)."""
        async with asyncio.timeout(timeout_s):
            while not condition():
                self.news.clear()
                await self.news.wait()

    def audible_since(self, t: float, threshold: float = 200.0) -> list[Heard]:
        return [h for h in self.heard if h.at >= t and h.rms > threshold]


async def _listen(track: MediaStreamTrack, heard: list[Heard], news: asyncio.Event) -> None:
    resampler = AudioResampler(format="s16", layout="mono", rate=RATE)
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        assert isinstance(frame, AudioFrame)
        for out in resampler.resample(frame):
            pcm = out.to_ndarray().reshape(-1).astype(np.float64)
            heard.append(Heard(time.monotonic(), float(np.sqrt(np.mean(pcm**2)))))
            news.set()


async def offer_sdp(pc: RTCPeerConnection) -> str:
    await pc.setLocalDescription(await pc.createOffer())
    return str(pc.localDescription.sdp)


@contextlib.asynccontextmanager
async def rtc_call(
    server: RunningServer, *, key: str = "x", path: str = "/v1/realtime/calls"
) -> AsyncIterator[RtcCall]:
    """A connected call; hung up (the peer connection closed) when the block ends."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    mic = Microphone()
    pc.addTrack(mic)
    channel = pc.createDataChannel("oai-events")
    inbox: asyncio.Queue[str] = asyncio.Queue()
    channel.on("message", inbox.put_nowait)
    heard: list[Heard] = []
    news = asyncio.Event()
    listening: list[asyncio.Task[None]] = []

    @pc.on("track")
    def _on_track(track: MediaStreamTrack) -> None:
        listening.append(asyncio.create_task(_listen(track, heard, news)))

    try:
        sdp = await offer_sdp(pc)
        async with httpx.AsyncClient(base_url=server.http_url) as http:
            answer = await http.post(
                path,
                content=sdp,
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/sdp"},
            )
        assert answer.status_code == 201, answer.text
        assert answer.headers["content-type"].startswith("application/sdp")
        call_id = answer.headers["location"].rsplit("/", 1)[-1]
        await pc.setRemoteDescription(RTCSessionDescription(answer.text, "answer"))
        call = RtcCall(pc, mic, channel, Events(inbox.get), call_id, heard, news)
        yield call
    finally:
        await pc.close()
        for task in listening:
            task.cancel()
