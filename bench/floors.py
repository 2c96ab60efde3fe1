"""The physical floor for bench/load: WebSocket servers that do the least a
realtime server must do with each `input_audio_buffer.append`.

- `echo`: a bare FastAPI/uvicorn WebSocket endpoint that parses each append (JSON,
  base64, int16 samples) and acknowledges it with a small text frame.
- `vad`: the same, plus the audio work no voice server can skip: a per-session
  streaming 24 -> 16 kHz resampler (soxr, float32, as engine/vad.py) and webrtcvad
  (one instance, 30 ms frames) on every chunk, before the acknowledgement.

Neither imports Parley's engine: they are the floor, not a copy of it. Both are served
by bench/probed_server.py with the same uvicorn options as `parley serve`, and the
client measures each acknowledgement's round trip as its latency.
"""

from __future__ import annotations

import base64
import json
from typing import Literal

import numpy as np
import soxr
import webrtcvad
from fastapi import FastAPI, WebSocket
from starlette.websockets import WebSocketDisconnect

from models.base import PCM_RATE

FloorKind = Literal["echo", "vad"]
VAD_RATE = 16_000
FRAME = VAD_RATE * 30 // 1000  # webrtcvad's 30 ms frame at 16 kHz
ACK = '{"type":"ack"}'


class _Audio:
    """Per-session audio work of the `vad` floor: resample, frame, score."""

    def __init__(self) -> None:
        self.resampler = soxr.ResampleStream(PCM_RATE, VAD_RATE, 1, dtype="float32")
        self.vad = webrtcvad.Vad(2)
        self.pending = np.zeros(0, dtype=np.int16)
        self.speech_frames = 0

    def feed(self, pcm: np.ndarray) -> None:
        out = self.resampler.resample_chunk(pcm.astype(np.float32))
        pcm16 = np.clip(np.rint(out), -32768, 32767).astype(np.int16)
        buf = np.concatenate([self.pending, pcm16])
        n = len(buf) // FRAME
        for i in range(n):
            if self.vad.is_speech(buf[i * FRAME : (i + 1) * FRAME].tobytes(), VAD_RATE):
                self.speech_frames += 1
        self.pending = buf[n * FRAME :].copy()


def create_floor_app(kind: FloorKind) -> FastAPI:
    app = FastAPI(title=f"floor-{kind}")
    open_sessions = 0

    @app.get("/healthz")
    async def healthz() -> dict[str, object]:
        return {"status": "ok", "sessions": open_sessions}

    async def realtime(ws: WebSocket) -> None:
        nonlocal open_sessions
        await ws.accept()
        audio = _Audio() if kind == "vad" else None
        open_sessions += 1
        try:
            while True:
                text = await ws.receive_text()
                event = json.loads(text)
                if event.get("type") == "input_audio_buffer.append":
                    pcm = np.frombuffer(base64.b64decode(event["audio"]), dtype="<i2")
                    if audio is not None:
                        audio.feed(pcm)
                await ws.send_text(ACK)
        except WebSocketDisconnect:
            return
        finally:
            open_sessions -= 1

    app.add_api_websocket_route("/v1/realtime", realtime)
    return app
