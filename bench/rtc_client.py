"""A WebRTC caller in Python (aiortc), as a browser calls Parley: a microphone track
that plays queued speech in real time (silence between), the `oai-events` data
channel, the SDP offer POSTed to `/v1/realtime/calls`, and the answer's audio track
measured frame by frame on arrival. The voice-to-voice benchmark and the tests use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame

from server.rtc_audio import FRAME, FrameClock, audio_frame, track_pcm

AUDIBLE_RMS = 200.0  # a frame louder than this carries sound (pcm16 units)


class Microphone(MediaStreamTrack):
    """Speech queued by `say`, silence otherwise, 20 ms a frame in real time. Records
    when the latest frame with sound left (`last_audible`) and when each `say` began."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._pending: npt.NDArray[np.int16] = np.zeros(0, np.int16)
        self._starts: list[int] = []  # where each `say` not yet begun begins in _pending
        self._frames = FrameClock()
        self.spoke_at: list[float] = []  # time.monotonic() when each `say` began to go out
        self.last_audible: float | None = None  # when the latest frame with sound went out

    def say(self, pcm: npt.NDArray[np.int16]) -> None:
        self._starts.append(len(self._pending))
        self._pending = np.concatenate([self._pending, pcm.astype(np.int16)])

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        pts = await self._frames.next_pts()
        out = np.zeros(FRAME, np.int16)
        take = min(FRAME, len(self._pending))
        if take:
            now = time.monotonic()
            while self._starts and self._starts[0] < take:  # a `say` begins in this frame
                self.spoke_at.append(now)
                self._starts.pop(0)
            self._starts = [start - take for start in self._starts]
            out[:take] = self._pending[:take]
            self._pending = self._pending[take:]
            if np.sqrt(np.mean(out.astype(np.float64) ** 2)) > AUDIBLE_RMS:
                self.last_audible = now
        return audio_frame(out, pts)


@dataclass
class Heard:
    at: float  # time.monotonic() of arrival
    rms: float


@dataclass
class Call:
    pc: RTCPeerConnection
    mic: Microphone
    channel: Any  # aiortc's RTCDataChannel
    inbox: asyncio.Queue[str]  # the data channel's messages
    call_id: str
    heard: list[Heard] = field(default_factory=list)
    news: asyncio.Event = field(default_factory=asyncio.Event)  # set at every frame heard

    def send_json(self, text: str) -> None:
        self.channel.send(text)

    async def until_heard(self, condition: Callable[[], bool], timeout_s: float) -> None:
        """Wait until `condition` holds of what was heard (checked at every frame)."""
        async with asyncio.timeout(timeout_s):
            while not condition():
                self.news.clear()
                await self.news.wait()

    def audible_since(self, t: float, threshold: float = AUDIBLE_RMS) -> list[Heard]:
        return [h for h in self.heard if h.at >= t and h.rms > threshold]


async def _listen(track: MediaStreamTrack, heard: list[Heard], news: asyncio.Event) -> None:
    async for at, pcm in track_pcm(track):
        heard.append(Heard(at, float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2)))))
        news.set()


async def offer_sdp(pc: RTCPeerConnection) -> str:
    await pc.setLocalDescription(await pc.createOffer())
    return str(pc.localDescription.sdp)


class CallRefused(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


@contextlib.asynccontextmanager
async def call(
    base_url: str,
    *,
    key: str = "x",
    model: str | None = None,
    session: dict[str, Any] | None = None,
    params: dict[str, str] | None = None,
) -> AsyncIterator[Call]:
    """A call to the Parley at `base_url`, hung up (peer connection closed) at the end;
    with `session`, the offer is OpenAI's multipart form of `sdp` and `session`;
    `params`: more of the query (`resume=true`, …)."""
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
        query = ({"model": model} if model else {}) | (params or {})
        async with httpx.AsyncClient(base_url=base_url) as http:
            auth = {"Authorization": f"Bearer {key}"}
            path = "/v1/realtime/calls"
            if session is None:
                answer = await http.post(
                    path,
                    content=sdp,
                    headers={**auth, "Content-Type": "application/sdp"},
                    params=query,
                )
            else:
                form = {"sdp": (None, sdp), "session": (None, json.dumps(session))}
                answer = await http.post(path, files=form, headers=auth, params=query)
        if answer.status_code != 201:
            raise CallRefused(answer.status_code, answer.text)
        call_id = answer.headers["location"].rsplit("/", 1)[-1]
        await pc.setRemoteDescription(RTCSessionDescription(answer.text, "answer"))
        yield Call(pc, mic, channel, inbox, call_id, heard, news)
    finally:
        await pc.close()
        for task in listening:
            task.cancel()
