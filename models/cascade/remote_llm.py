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
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import httpx

from models.audio_prompt import build_audio_prompt
from models.base import FunctionCall, Prompt
from models.chat_backends import (
    Attempt,
    BackendError,
    CallParts,
    Retryable,
    Server,
    ServerOptions,
    api_base,
    auth_headers,
    broken,
    check_status,
    event_data,
    function_calls,
    http_failures,
    merge_tool_call_deltas,
    parse_event,
    session_key,
)
from models.errors import ModelMissing
from models.openai_compat import chat_messages, chat_tools
from models.speech.files import ModelInfo

log = logging.getLogger(__name__)

STAGE = "the cascade's language model (--llm-url)"


@dataclass(frozen=True)
class RemoteLLMOptions(ServerOptions):
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


def listed_models(payload: Any) -> list[str]:
    """The model ids of a `GET /v1/models` answer; [] when it is not one."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        return []
    return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]


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

    def check(self) -> None:
        """At start: every replica answers `GET /v1/models` and lists the model (or,
        without one named, some model: the first of the first replica's is used).
        Raises ModelMissing naming the stage and the replica. Blocking."""
        o = self.options
        timeout = httpx.Timeout(o.read_timeout_s, connect=o.connect_timeout_s)
        with httpx.Client(timeout=timeout, headers=auth_headers(o.api_key)) as client:
            for url in self.options.urls:
                try:
                    response = client.get(api_base(url) + "/models")
                    response.raise_for_status()
                    models = listed_models(response.json())
                except (httpx.HTTPError, ValueError) as exc:
                    raise ModelMissing(
                        f"{STAGE}: {url} did not list its models ({exc}).",
                        "start the server, or fix --llm-url / PARLEY_LLM_URL "
                        "(e.g. http://host:8000/v1) and PARLEY_LLM_API_KEY",
                    ) from None
                if self.model is None and models:
                    self.model = self.name = models[0]
                if self.model not in models:
                    raise ModelMissing(
                        f"{STAGE}: {url} does not serve {self.model or 'any model'} "
                        f"(it lists {', '.join(models) or 'none'}).",
                        "name a listed model with --llm-model / PARLEY_LLM_MODEL",
                    )

    async def reply(
        self, prompt: Prompt, transcripts: Mapping[str, str], *, max_tokens: int
    ) -> AsyncGenerator[str | FunctionCall, None]:
        """The answer's text pieces as they stream, then its function calls. Until
        the first byte of an answer a failed attempt is retried, on the next replica
        when there are several; closing this generator closes the stream."""
        if self.model is None:
            raise BackendError(f"{STAGE} has no model: check() was not run")
        body = request_body(
            prompt, transcripts, model=self.model, max_tokens=max_tokens, options=self.options
        )
        key = prompt.session_id or session_key(prompt.request_id)
        tried: list[str] = []
        failures: list[str] = []
        for number in range(1, self.options.retries + 2):
            url = self.server.replicas.pick(key, tried)
            tried.append(url)
            try:
                attempt = self._attempt(Attempt(url), body, prompt.request_id)
                async with contextlib.aclosing(attempt):  # closed here, not by the GC
                    async for piece in attempt:
                        yield piece
                return
            except Retryable as exc:
                self.server.replicas.mark_down(url)
                failures.append(str(exc))
                log.warning("request %s: attempt %d: %s", prompt.request_id, number, exc)
        raise BackendError(
            f"{STAGE} did not answer after {len(tried)} attempts: " + "; ".join(failures)
        )

    async def _attempt(
        self, attempt: Attempt, body: dict[str, Any], request_id: str
    ) -> AsyncGenerator[str | FunctionCall, None]:
        url = attempt.url
        calls: dict[int, CallParts] = {}
        with http_failures(attempt, self.options.read_timeout_s):
            endpoint = api_base(url) + "/chat/completions"
            async with self.server.http().stream("POST", endpoint, json=body) as response:
                await check_status(url, response)
                async for data in event_data(response):
                    if data is None:
                        for call in function_calls(calls, request_id):
                            yield call
                        return
                    text = self._delta(url, data, calls)
                    attempt.heard = attempt.heard or bool(text) or bool(calls)
                    if text:
                        yield text
                raise broken(url, attempt.heard, "closed the stream before the answer ended")

    @staticmethod
    def _delta(url: str, data: str, calls: dict[int, CallParts]) -> str:
        """One event's text; its tool-call deltas are folded into `calls`."""
        choices = parse_event(url, data).get("choices") or []
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
