"""A small OpenAI-compatible server on 127.0.0.1 for the openai_compat executor:
`/v1/models` and `/v1/chat/completions` streaming SSE, under any number of base
paths, each a "backend" with its own behaviour (`http://127.0.0.1:PORT/NAME`):

- normal: streams a reply word by word, then `[DONE]`;
- dies: streams two words, then drops the connection mid-stream;
- silent: accepts the request and never answers;
- error: HTTP 500 with an error body;
- audio: streams pcm16 audio deltas with their transcript (as vLLM-Omni/OpenAI).
- garbage: answers 200 with an event stream whose data is not JSON.

With `tools` and a `tool_choice` that names a function (or is `required`), any
backend calls it instead, streaming `tool_calls` deltas as vLLM's OpenAI server does
(the id and name first, the arguments in pieces, `finish_reason: "tool_calls"`);
once the messages hold a `tool` result, the reply reads it back.

Paced like a real server when asked (bench/stage_servers.py; every pause 0 by
default): the first word `first_token_s` after the request, then one every
`token_s`; `reply` (if set) is what every backend answers in place of the words
above. Each request and word is stamped (`stamps`).

`hold()` makes every chunk wait for a permit (`release(n)`); `closed` counts
streams that the client closed before they ended (`stream_closed` is set then).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from bench.fakes.serving import bound_socket, serving
from bench.fakes.throttle import Throttled

TOOL_ARGUMENTS = ['{"order', '_id": ', '"A-1', '7"}']  # how the arguments stream


def forced_tool(body: dict[str, Any]) -> str | None:
    """The function a request must call now, if any."""
    messages = body.get("messages", [])
    choice = body.get("tool_choice")
    if not body.get("tools") or any(m.get("role") == "tool" for m in messages):
        return None
    if isinstance(choice, dict):
        return str(choice["function"]["name"])
    if choice == "required":
        return str(body["tools"][0]["function"]["name"])
    return None


def tool_call_chunks(name: str) -> list[dict[str, Any]]:
    first = {"index": 0, "id": "chatcmpl-tool-1", "type": "function"}
    deltas = [first | {"function": {"name": name, "arguments": ""}}]
    deltas += [{"index": 0, "function": {"arguments": piece}} for piece in TOOL_ARGUMENTS]
    return [
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [d]} | ({"role": "assistant"} if i == 0 else {}),
                    "finish_reason": "tool_calls" if i == len(deltas) - 1 else None,
                }
            ],
        }
        for i, d in enumerate(deltas)
    ]


def reply_for(body: dict[str, Any]) -> str:
    messages = body.get("messages", [])
    results = [m for m in messages if m.get("role") == "tool"]
    if results:
        return f"The order tool said {results[-1]['content']}."
    parts = [
        p
        for m in messages
        if isinstance(m.get("content"), list)
        for p in m["content"]
        if p.get("type") == "input_audio"
    ]
    return (
        f"I heard {len(parts)} audio parts in {len(messages)} messages. "
        "The fake server answers in three sentences. This is the last one."
    )


@dataclass
class FakeOpenAI(Throttled):
    port: int = 0
    behaviour: dict[str, str] = field(default_factory=dict)  # backend name → behaviour
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    model_lookups: list[str] = field(default_factory=list)
    closed: int = 0  # streams the client closed early
    finished: int = 0
    never: asyncio.Event = field(default_factory=asyncio.Event)
    stream_closed: asyncio.Event = field(default_factory=asyncio.Event)  # `closed` went up
    requested: asyncio.Event = field(default_factory=asyncio.Event)  # a request came in
    first_token_s: float = 0.0
    token_s: float = 0.0
    reply: str | None = None

    def url(self, name: str, behaviour: str = "normal") -> str:
        self.behaviour.setdefault(name, behaviour)
        return f"http://127.0.0.1:{self.port}/{name}"

    def hits(self, name: str) -> int:
        return sum(1 for n, _ in self.requests if n == name)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/{name}/v1/models")
        async def models(name: str) -> dict[str, Any]:
            self.model_lookups.append(name)
            return {"object": "list", "data": [{"id": f"model-{name}", "object": "model"}]}

        @app.post("/{name}/v1/chat/completions", response_model=None)
        async def chat(name: str, request: Request) -> Any:
            self.stamp("llm_request")
            body = await request.json()
            self.requests.append((name, body))
            self.requested.set()
            behaviour = self.behaviour.get(name, "normal")
            if behaviour == "silent":
                await self.never.wait()
                return JSONResponse({"error": {"message": "late"}}, 503)
            if behaviour == "error":
                return JSONResponse({"error": {"message": "model overloaded"}}, 500)
            return StreamingResponse(self._stream(body, behaviour), media_type="text/event-stream")

        return app

    async def _stream(self, body: dict[str, Any], behaviour: str) -> AsyncIterator[str]:
        if behaviour == "garbage":
            yield "data: <html>502 Bad Gateway</html>\n\n"
            return
        if (tool := forced_tool(body)) is not None:
            for chunk in tool_call_chunks(tool):
                await self.permit()
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"
            self.finished += 1
            return
        words = (self.reply or reply_for(body)).split(" ")
        limit = body.get("max_tokens") or len(words)
        cut = len(words) > limit
        words = words[:limit]
        ended = False
        try:
            for i, word in enumerate(words):
                await self.permit()
                await self.pause(self.token_s if i else self.first_token_s)
                if behaviour == "dies" and i == 2:
                    raise ConnectionError("the fake backend dies mid-stream")
                text = word if i == 0 else " " + word
                delta: dict[str, Any] = {"content": text}
                if behaviour == "audio":
                    tone = (800 * np.sin(np.arange(2400) / 10)).astype("<i2")
                    audio = base64.b64encode(tone.tobytes()).decode()
                    delta = {"audio": {"id": "a1", "data": audio, "transcript": text}}
                last = i == len(words) - 1
                finish = ("length" if cut else "stop") if last else None
                chunk = {
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
                self.stamp("llm_token", text)
                yield f"data: {json.dumps(chunk)}\n\n"
            yield f"data: {json.dumps({'choices': [], 'usage': {'completion_tokens': 1}})}\n\n"
            yield "data: [DONE]\n\n"
            ended = True
            self.finished += 1
        finally:
            if not ended and behaviour != "dies":
                self.closed += 1
                self.stream_closed.set()


@contextlib.asynccontextmanager
async def running_fake_openai(**pacing: Any) -> AsyncIterator[FakeOpenAI]:
    """The fake on a free port of 127.0.0.1, in this event loop, paced by `pacing`
    (FakeOpenAI's fields: first_token_s, token_s, reply)."""
    fake = FakeOpenAI(**pacing)
    sock = bound_socket()
    fake.port = sock.getsockname()[1]
    config = uvicorn.Config(fake.app(), log_level="warning", log_config=None)
    async with serving(config, sock, name="the fake OpenAI server"):
        try:
            yield fake
        finally:
            fake.never.set()  # silent handlers return, so the server can stop
            await fake.free()
