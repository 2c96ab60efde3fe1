"""Speech for tests: the bench/speech fixtures framed as a turn, and sent in chunks."""

from __future__ import annotations

import base64
import json
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from websockets.asyncio.client import ClientConnection

from bench.speech import PCM_RATE, load_wav, silence
from tests.support.harness import Harness

CHUNK = 480  # 20 ms at 24 kHz
Chunkable = TypeVar("Chunkable", npt.NDArray[np.int16], bytes)


def utterance(name: str, lead_ms: int = 0) -> npt.NDArray[np.int16]:
    """A fixture after `lead_ms` of silence, then the second of silence that ends a turn."""
    return np.concatenate([silence(lead_ms), load_wav(name), silence(1000)]).astype(np.int16)


def split(data: Chunkable, sizes: list[int]) -> list[Chunkable]:
    """`data` cut into pieces of the given sizes (cycled), covering all of it."""
    pieces, i, k = [], 0, 0
    while i < len(data):
        size = sizes[k % len(sizes)]
        pieces.append(data[i : i + size])
        i, k = i + size, k + 1
    return pieces


def b64_pcm(pcm: npt.NDArray[np.int16]) -> str:
    """Samples as the base64 little-endian pcm16 of `input_audio_buffer.append`."""
    return base64.b64encode(pcm.astype("<i2").tobytes()).decode("ascii")


async def append_chunked(h: Harness, pcm: npt.NDArray[Any], chunk: int = CHUNK) -> None:
    """Append `pcm` to an in-process session in `chunk`-sample pieces, back to back."""
    for i in range(0, len(pcm), chunk):
        await h.append(pcm[i : i + chunk])


async def say(h: Harness, name: str) -> None:
    """A spoken turn in 100 ms appends, as a client would send it."""
    await append_chunked(h, utterance(name, lead_ms=300), chunk=2400)


async def sdk_append_chunked(conn: Any, pcm: npt.NDArray[Any], chunk_ms: int) -> None:
    """Back to back over an SDK connection: faster than real time, as a client sending a
    file would."""
    step = chunk_ms * PCM_RATE // 1000
    for i in range(0, len(pcm), step):
        await conn.input_audio_buffer.append(audio=b64_pcm(pcm[i : i + step]))


async def ws_append_chunked(ws: ClientConnection, pcm: npt.NDArray[np.int16]) -> int:
    """Append `pcm` over a raw WebSocket in CHUNK-sample frames, back to back; how many
    frames were sent."""
    frames = split(pcm, [CHUNK])
    for frame in frames:
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": b64_pcm(frame)}))
    return len(frames)
