"""A small OpenAI-compatible speech server on 127.0.0.1 for the remote speech stages:
`/v1/models`, `/v1/audio/transcriptions` (multipart, JSON `{"text": ...}`) and
`/v1/audio/speech` (JSON in, raw 24 kHz pcm16 out, chunked), under any number of
base paths, each a replica with its own behaviour (`http://127.0.0.1:PORT/NAME`):

- normal: transcribes every turn as `transcript`; speaks `CHUNKS` chunks of a tone;
- error: HTTP 500 with an error body;
- silent: accepts the request and never answers;
- garbage: HTTP 200 with a body that is not the answer (HTML; an odd byte count);
- dies: speaks one chunk, then drops the connection.

Paced like a real server when asked (bench/stage_servers.py; every pause 0 by
default): a transcription answers after `transcribe_s`; speech sends its first bytes
`first_byte_s` after the request, then a chunk every `chunk_s`, `seconds_per_word` of
audio per word of its input (0: CHUNKS chunks). Each step is stamped (`stamps`).

`hold()` makes every speech chunk after the first wait for a permit (`release(n)`);
`closed` counts speech streams the client closed before they ended
(`stream_closed` is set then). `uploads` keeps each transcription's form.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from bench.fakes.serving import bound_socket, serving
from bench.fakes.throttle import Throttled

CHUNKS = 4
FAILURES = {"error": (500, "model overloaded"), "silent": (503, "late")}
CHUNK = (800 * np.sin(np.arange(2400) / 10)).astype("<i2").tobytes()  # 0.1 s at 24 kHz


@dataclass
class FakeSpeech(Throttled):
    port: int = 0
    transcript: str = "What is the weather like today?"
    behaviour: dict[str, str] = field(default_factory=dict)  # replica name → behaviour
    uploads: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    spoken: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)  # each request's Authorization
    closed: int = 0  # speech streams the client closed early
    finished: int = 0
    never: asyncio.Event = field(default_factory=asyncio.Event)
    stream_closed: asyncio.Event = field(default_factory=asyncio.Event)  # `closed` went up
    first_chunk_sent: asyncio.Event = field(default_factory=asyncio.Event)
    transcribe_s: float = 0.0
    first_byte_s: float = 0.0
    chunk_s: float = 0.0
    seconds_per_word: float = 0.0

    def url(self, name: str, behaviour: str = "normal") -> str:
        self.behaviour.setdefault(name, behaviour)
        return f"http://127.0.0.1:{self.port}/{name}"

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/{name}/v1/models")
        async def models(name: str) -> dict[str, Any]:
            return {"object": "list", "data": [{"id": f"speech-{name}", "object": "model"}]}

        @app.post("/{name}/v1/audio/transcriptions", response_model=None)
        async def transcriptions(name: str, request: Request) -> Any:
            self.stamp("asr_request")
            self.keys.append(request.headers.get("authorization"))
            form = await request.form()
            upload = form["file"]
            assert not isinstance(upload, str)
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
            self.uploads.append((name, fields | {"file": await upload.read()}))
            if (failed := await self._failure(name)) is not None:
                return failed
            await self.pause(self.transcribe_s)
            self.stamp("asr_answer", self.transcript)
            return {"text": f" {self.transcript} "}

        @app.post("/{name}/v1/audio/speech", response_model=None)
        async def speech(name: str, request: Request) -> Any:
            self.keys.append(request.headers.get("authorization"))
            body = await request.json()
            self.stamp("tts_request", body.get("input", ""))
            self.spoken.append((name, body))
            if (failed := await self._failure(name)) is not None:
                return failed
            dies = self.behaviour.get(name) == "dies"
            chunks = self.chunks_for(str(body.get("input", "")))
            return StreamingResponse(self._pcm(dies, chunks), media_type="audio/pcm")

        return app

    async def _failure(self, name: str) -> Response | None:
        """The answer of a replica that fails, or None for one that answers."""
        behaviour = self.behaviour.get(name, "normal")
        if behaviour == "silent":
            await self.never.wait()  # until the test ends
        if behaviour == "garbage":
            return PlainTextResponse("<html>gateway</html>!", 200)
        if behaviour in FAILURES:
            status, message = FAILURES[behaviour]
            return JSONResponse({"error": {"message": message}}, status)
        return None

    def chunks_for(self, text: str) -> int:
        if not self.seconds_per_word:
            return CHUNKS
        return max(1, round(len(text.split()) * self.seconds_per_word / 0.1))

    async def _pcm(self, dies: bool, chunks: int) -> AsyncIterator[bytes]:
        ended = False
        try:
            await self.pause(self.first_byte_s)
            for i in range(chunks):
                if i and dies:
                    raise ConnectionError("the fake speech server dies mid-sentence")
                if i:
                    await self.permit()
                    await self.pause(self.chunk_s)
                self.stamp("tts_chunk")
                yield CHUNK
                self.first_chunk_sent.set()
            ended = True
            self.finished += 1
        finally:
            if not ended and not dies:
                self._closed_early()

    def _closed_early(self) -> None:
        self.closed += 1
        self.stream_closed.set()

    async def let_go(self) -> None:
        """Silent and held handlers return, so that the server can stop."""
        self.never.set()
        await self.free()


@contextlib.asynccontextmanager
async def running_fake_speech(**pacing: Any) -> AsyncIterator[FakeSpeech]:
    """The fake on a free port of 127.0.0.1, in this event loop, paced by `pacing`
    (FakeSpeech's fields: transcribe_s, first_byte_s, ...)."""
    sock = bound_socket()
    fake = FakeSpeech(port=sock.getsockname()[1], **pacing)
    config = uvicorn.Config(fake.app(), log_level="warning", log_config=None)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(serving(config, sock, name="the fake speech server"))
        stack.push_async_callback(fake.let_go)  # first out: then the server can stop
        yield fake
