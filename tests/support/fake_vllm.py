"""A protocol-level fake of vLLM's `AsyncLLM`, with the same call shapes:
`generate(prompt, sampling_params, request_id)` is an async generator of
RequestOutput-like objects carrying DELTA text and token ids, `abort(request_id)` is
async, and a request aborted mid-stream ends with one last output whose
`finish_reason` is "abort". As in vLLM 0.32, closing the generator alone does NOT
end the request: it stays in `running` until aborted, so a test catches a missing
abort.

Staging: `hold()` makes each token wait for a permit (`release(n)`), `free()` lets
them flow; `fail` makes the next `generate` raise, as a dead engine does.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from bench.fakes.throttle import Throttled
from models.audio_prompt import PromptStyle
from models.tool_text import hermes_calls
from models.vllm_engine import Decoding, EngineLike, InstalledVllm, VllmOptions


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    prompt_logprobs: Any
    outputs: list[CompletionOutput]
    finished: bool


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float
    output_kind: str = "DELTA"
    json_schema: dict[str, Any] | None = None  # vLLM's structured_outputs.json
    skip_special_tokens: bool = True


_RESULT = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)


def default_reply(prompt: dict[str, Any]) -> str:
    """Says how many clips it heard, and reads back the last function result in the
    prompt, as a model answering from it would."""
    clips = len(prompt.get("multi_modal_data", {}).get("audio", []))
    results = _RESULT.findall(prompt.get("prompt", ""))
    if results:
        return f"I heard {clips} clips. The function said {results[-1]}. That is all."
    return (
        f"I heard {clips} clips. The fake engine answers in three sentences. This is the last one."
    )


def forced_reply(schema: dict[str, Any]) -> str:
    """What structured outputs lets a model write for `schema`: an object with each
    property its enum's first value, else a string (the shapes the tests ask for)."""
    properties = schema.get("properties", {})
    return json.dumps({k: v.get("enum", [f"{k}-1"])[0] for k, v in properties.items()})


@dataclass
class FakeAsyncLLM(Throttled):
    reply: Callable[[dict[str, Any]], str] = default_reply
    fail: str | None = None  # the next generate raises this, before any output
    requests: list[tuple[Any, SamplingParams, str]] = field(default_factory=list)
    running: set[str] = field(default_factory=set)
    aborted: list[str] = field(default_factory=list)
    tokens_sent: dict[str, int] = field(default_factory=dict)
    shut_down: bool = False
    _abort: set[str] = field(default_factory=set)

    async def generate(
        self, prompt: Any, sampling_params: SamplingParams, request_id: str
    ) -> AsyncGenerator[RequestOutput, None]:
        if self.shut_down:
            raise RuntimeError("engine is shut down")
        if self.fail is not None:
            message, self.fail = self.fail, None
            raise RuntimeError(message)
        self.requests.append((prompt, sampling_params, request_id))
        self.running.add(request_id)
        schema = sampling_params.json_schema
        reply = self.reply(prompt) if schema is None else forced_reply(schema)
        words = reply.split(" ")
        cut = len(words) > sampling_params.max_tokens
        words = words[: sampling_params.max_tokens]
        token = 0

        def output(text: str, ids: list[int], finish: str | None) -> RequestOutput:
            completion = CompletionOutput(0, text, ids, finish_reason=finish)
            return RequestOutput(request_id, None, None, None, [completion], finish is not None)

        for i, word in enumerate(words):
            await self.permit(lambda: request_id in self._abort)
            if request_id in self._abort:
                self.running.discard(request_id)
                yield output("", [], "abort")
                return
            text = word if i == 0 else " " + word
            last = i == len(words) - 1
            finish = ("length" if cut else "stop") if last else None
            if i == 1:
                # A byte-level piece: token ids, no text yet (vLLM does this).
                yield output("", [token], None)
                token += 1
            self.tokens_sent[request_id] = token + 1
            if last:
                self.running.discard(request_id)  # finished before its last output
            yield output(text, [token], finish)
            token += 1

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)
        async with self.cond:
            if request_id in self.running:
                self._abort.add(request_id)
            self.cond.notify_all()
        # Like vLLM: the engine forgets the request now, whoever reads its stream.
        self.running.discard(request_id)

    def shutdown(self) -> None:
        self.shut_down = True


class FakeVllm(InstalledVllm):
    """The real backend's prompt code around a fake engine."""

    def __init__(self, engine: FakeAsyncLLM | None = None) -> None:
        super().__init__()
        self.engine = engine if engine is not None else FakeAsyncLLM()
        self.started: list[tuple[VllmOptions, PromptStyle]] = []

    def start_engine(self, options: VllmOptions, style: PromptStyle) -> EngineLike:
        self.started.append((options, style))
        return self.engine

    def sampling_params(self, decoding: Decoding) -> Any:
        return SamplingParams(
            max_tokens=decoding.max_tokens,
            temperature=decoding.temperature,
            json_schema=decoding.json_schema,
            skip_special_tokens=not decoding.keep_special,
        )

    def tool_calls(self, text: str) -> list[tuple[str, str]]:
        return hermes_calls(text)  # what vLLM's hermes parser makes of it
