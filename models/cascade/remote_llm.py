"""The cascade's language model on a server (`--llm-url`): any OpenAI-compatible
`POST /v1/chat/completions` serving a text model (vLLM, SGLang, llama.cpp's server,
Ollama), its answer streamed (SSE).

The conversation goes as text: the session's instructions as the system message,
user audio as its transcript, newest kept first within the backend's context
(models/audio_prompt.py, with no audio), function calls and results as
`tool_calls` and `tool` messages, the session's tools and `tool_choice` as
`openai_compat` sends them. The reply comes as text pieces and, at its end, the
calls assembled from the stream's tool-call deltas.

It runs on the event loop, not in a worker thread: closing the reply (a barge-in,
`response.cancel`, the sentence limit) closes the HTTP stream, and vLLM aborts a
request whose stream is closed. Replicas, stickiness, retries before the first
byte and failover are models/chat_backends.py's, as for `openai_compat`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from models.audio_prompt import build_audio_prompt
from models.base import FunctionCall, Prompt
from models.chat_backends import (
    Attempt,
    CallParts,
    Server,
    ServerOptions,
    event_data,
    function_calls,
    merge_tool_call_deltas,
    parse_event,
    session_key,
)
from models.openai_compat import chat_messages, chat_tools
from models.remote_http import RemoteError, StageFixes, api_base, served_model
from models.speech.files import ModelInfo

LLM_FIXES = StageFixes(
    unreachable="start the server, or fix --llm-url / PARLEY_LLM_URL (e.g. http://host:8000/v1)",
    key="set PARLEY_LLM_API_KEY",
    model="name a model the server lists with --llm-model / PARLEY_LLM_MODEL",
)


@dataclass(frozen=True)
class RemoteLLMOptions(ServerOptions):
    stage: str = "llm"
    temperature: float = 0.7
    max_context_tokens: int = 4096  # the server's context length, for the history


def text_prompt(prompt: Prompt, transcripts: Mapping[str, str]) -> Prompt:
    """The prompt with every user clip replaced by its transcript."""
    items = tuple(
        replace(item, audio=None, text=transcripts.get(item.id, ""))
        if item.audio is not None and item.text is None
        else item
        for item in prompt.items
    )
    return replace(prompt, items=items)


def request_body(
    prompt: Prompt,
    transcripts: Mapping[str, str],
    *,
    model: str,
    max_tokens: int,
    options: RemoteLLMOptions,
) -> dict[str, Any]:
    """The chat completions request for a response."""
    conversation = build_audio_prompt(
        text_prompt(prompt, transcripts),
        style="qwen2_audio",  # for counting only: the server renders the template
        budget=options.max_context_tokens - max_tokens,
        max_audio=0,
    )
    return {
        "model": model,
        "messages": chat_messages(conversation),
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": options.temperature,
    } | chat_tools(prompt)


class RemoteLanguageModel:
    calls_tools = True  # the server's tool parser reads the calls

    def __init__(
        self, options: RemoteLLMOptions, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not options.urls:
            raise ValueError("a remote language model needs at least one URL")
        self.options = options
        self.model = options.model
        self.name = options.model or "remote"
        self.server = Server(options, clock)
        self.replicas = self.server.replicas
        self.open_client = self.server.open_client

    def check(self) -> None:
        """At start: every replica answers `GET /v1/models` and lists the model (or,
        without one named, some model: the first of the first replica's is used).
        Raises ModelMissing naming the stage and the replica. Blocking."""
        self.model = self.name = served_model(self.options, LLM_FIXES, must_list=True)

    async def reply(
        self, prompt: Prompt, transcripts: Mapping[str, str], *, max_tokens: int
    ) -> AsyncGenerator[str | FunctionCall, None]:
        """The answer's text pieces as they stream, then its function calls. Until
        the first byte of an answer a failed attempt is retried, on the next replica
        when there are several; closing this generator closes the stream."""
        if self.model is None:
            raise RemoteError("the llm stage has no model: check() was not run")
        body = request_body(
            prompt, transcripts, model=self.model, max_tokens=max_tokens, options=self.options
        )
        tries = self.server.replicas.attempts(prompt.session_id or session_key(prompt.request_id))
        for url in tries:
            with tries.retrying(url):
                attempt = self._attempt(Attempt(self.options, url), body, prompt.request_id)
                async with contextlib.aclosing(attempt):  # closed here, not by the GC
                    async for piece in attempt:
                        yield piece
                return
        raise tries.gave_up()

    async def _attempt(
        self, attempt: Attempt, body: dict[str, Any], request_id: str
    ) -> AsyncGenerator[str | FunctionCall, None]:
        calls: dict[int, CallParts] = {}
        with attempt.failures():
            endpoint = api_base(attempt.url) + "/chat/completions"
            async with self.server.http().stream("POST", endpoint, json=body) as response:
                await attempt.check_status(response)
                async for data in event_data(response):
                    if data is None:
                        for call in function_calls(calls, request_id):
                            yield call
                        return
                    text = self._delta(attempt.who, data, calls)
                    attempt.heard = attempt.heard or bool(text) or bool(calls)
                    if text:
                        yield text
                raise attempt.broken("closed the stream before the answer ended")

    @staticmethod
    def _delta(who: str, data: str, calls: dict[int, CallParts]) -> str:
        """One event's text; its tool-call deltas are folded into `calls`."""
        choices = parse_event(who, data).get("choices") or []
        if not choices:
            return ""  # the usage event
        delta = choices[0].get("delta") or {}
        if tool_calls := delta.get("tool_calls"):
            merge_tool_call_deltas(calls, tool_calls)
        return str(delta.get("content") or "")

    def describe(self) -> ModelInfo:
        return ModelInfo(
            "llm",
            self.model or "(the first the server lists)",
            ", ".join(self.options.urls),
            0,
            "see the model's card",
            "remote: OpenAI-compatible /v1/chat/completions (--llm-url)",
        )

    async def aclose(self) -> None:
        await self.server.aclose()
