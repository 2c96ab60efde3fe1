"""The cascade's stages on real vLLM servers: its language model (`--llm-url`) on
`python -m vllm.entrypoints.openai.api_server` serving a tiny random Qwen2 text
model, and its recognizer (`--asr-url`) on one serving a tiny random Whisper
(`/v1/audio/transcriptions`). A Parley server is built from settings as
`parley serve --executor cascade --llm-url URL` builds it, and a client talks to it
on its WebSocket; the speech stages not under test are on
tests/support/fake_speech.py (the embedded ones are not in this venv, and the fake
keeps them fast). A named tool call round-trips; a barge-in closes the stream, and
vLLM's own counters show the request aborted, well short of its length; a spoken
turn is heard by vLLM's Whisper and answered. One start of each server per module.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from bench.fakes.speech import FakeSpeech, running_fake_speech
from models.base import FunctionCall
from models.cascade.pipeline import CascadeExecutor
from models.cascade.remote_llm import RemoteLanguageModel, RemoteLLMOptions
from models.chat_backends import Attempt
from server.app import make_executor
from server.config import Settings
from tests.support.executor_contract import LOOKUP_TOOL
from tests.support.scrape import Samples
from tests.vllm.conftest import (
    COUNTS,
    FIGURES,
    NEWLINE_BIAS,
    SHORT,
    newline_id,
    speakable_ids,
)
from tests.vllm.served import NAMED_TOOL_CHOICE, Counters, in_flight, total, vllm_server
from tests.vllm.session import connected, running_app
from tests.vllm.tiny_model import WORDS, build_tiny_qwen2, build_tiny_whisper

# The long answer: on the 2 cores of a small runner this model writes about 3000
# tokens a second, and the barge-in scene lasts up to several seconds (0.6k to 34k
# tokens were made in it); at this length a request cut short is plain.
LONG = 250_000
MAX_MODEL_LEN = 262_144  # ~256 MiB of KV cache for the tiny model
LONG_QUESTION = FakeSpeech.transcript  # what the fake recognizer hears by default
SHORT_QUESTION = "Tell me a joke."


def steered(body: dict[str, Any], newline: int, allowed: list[int]) -> dict[str, Any]:
    """A request body with vLLM's extra sampling parameters for a random model: only
    speakable tokens, a newline about every ten (sentences for the TTS stage), and
    no end before SHORT tokens. The long question runs to max_tokens (LONG: longer
    than any scene); any other answer stops at its first newline after SHORT. A
    forced call is left as it is: its grammar's end is what ends it."""
    if isinstance(body.get("tool_choice"), dict):
        return body
    last = body["messages"][-1]
    extra: dict[str, Any] = {
        "min_tokens": SHORT,
        "ignore_eos": True,
        "logit_bias": {str(newline): NEWLINE_BIAS},
        "allowed_token_ids": allowed,
    }
    if (last["role"], last["content"]) != ("user", LONG_QUESTION):
        extra["stop_token_ids"] = [newline]
    return body | extra


class SteeredLLM(RemoteLanguageModel):
    """The remote language model, each request steered (and kept) as it leaves."""

    def __init__(self, options: RemoteLLMOptions, newline: int, allowed: list[int]) -> None:
        super().__init__(options)
        self.newline, self.allowed = newline, allowed
        self.bodies: list[dict[str, Any]] = []

    async def _attempt(
        self, attempt: Attempt, body: dict[str, Any], request_id: str
    ) -> AsyncGenerator[str | FunctionCall, None]:
        body = steered(body, self.newline, self.allowed)
        self.bodies.append(body)
        inner = super()._attempt(attempt, body, request_id)
        try:
            async for piece in inner:
                yield piece
        finally:
            await inner.aclose()  # now, not when collected: this closes the stream


@pytest.fixture(scope="module")
def text_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"), max_positions=MAX_MODEL_LEN)


@pytest.fixture(scope="module")
def llm_server(text_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("llm-server") / "server.log"
    # The KV cache it needs (MAX_MODEL_LEN tokens of 1 KiB), twice, rather than 30 % of
    # the RAM: two servers run at once, beside other work.
    kv = ("--kv-cache-memory-bytes", str(512 << 20))
    served = vllm_server(
        text_model, log, *NAMED_TOOL_CHOICE, *kv, label="tiny Qwen2", max_model_len=MAX_MODEL_LEN
    )
    with served as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def speech() -> AsyncIterator[FakeSpeech]:
    async with running_fake_speech() as server:
        yield server


@pytest.fixture(scope="module")
def whisper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = build_tiny_whisper(tmp_path_factory.mktemp("tiny-whisper"))
    log = tmp_path_factory.mktemp("whisper-server") / "server.log"
    # A transcript of at most 60 tokens (the random model never ends one itself).
    kv = ("--kv-cache-memory-bytes", str(64 << 20))
    with vllm_server(model, log, *kv, label="tiny Whisper", max_model_len=64) as url:
        yield url


def settings_for(llm_url: str, speech: FakeSpeech, asr_url: str | None = None) -> Settings:
    return Settings(
        executor="cascade",
        llm_url=[llm_url + "/v1"],
        asr_url=[asr_url or speech.url("whisper")],
        tts_url=[speech.url("kokoro")],
        max_model_len=MAX_MODEL_LEN,
        max_output_tokens=LONG,
        max_sentences=0,  # the answer's length is the test's: see steered()
        log_level="warning",
    )


@contextlib.asynccontextmanager
async def parley(settings: Settings, text_model: Path) -> AsyncIterator[tuple[str, SteeredLLM]]:
    """The server's WebSocket URL, and its language model."""
    # Built and checked as `parley serve` does it, in a thread: the fake is in this loop.
    ex = await asyncio.to_thread(make_executor, settings)
    assert isinstance(ex, CascadeExecutor) and isinstance(ex.llm, RemoteLanguageModel)
    built = ex.llm
    llm = SteeredLLM(built.options, newline_id(text_model), speakable_ids(text_model))
    llm.model = llm.name = built.model
    ex.llm = llm
    await built.aclose()
    try:
        async with running_app(ex, settings) as url:
            yield url, llm
    finally:
        await ex.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(
    llm_server: str, speech: FakeSpeech, text_model: Path
) -> AsyncIterator[tuple[str, SteeredLLM]]:
    async with parley(settings_for(llm_server, speech), text_model) as made:
        yield made


@pytest_asyncio.fixture(loop_scope="module")
async def counters(llm_server: str) -> AsyncIterator[Counters]:
    made = Counters(llm_server)
    yield made
    await made.aclose()


def finished(samples: Samples, reason: str) -> float:
    return total(samples, "vllm:request_success_total", finished_reason=reason)


def ended(samples: Samples) -> float:
    """Requests the server finished, for any reason."""
    return total(samples, "vllm:request_success_total")


@pytest.mark.asyncio(loop_scope="module")
async def test_a_named_tool_call_round_trips_through_the_server(
    served: tuple[str, SteeredLLM], counters: Counters
) -> None:
    url, llm = served
    before = await counters.read()
    async with connected(url) as c:
        choice = {"type": "function", "name": LOOKUP_TOOL["name"]}
        update = {"type": "realtime", "tools": [LOOKUP_TOOL], "tool_choice": choice}
        await c.send({"type": "session.update", "session": update})
        question = {"type": "input_text", "text": "Where is my order A-17?"}
        item = {"type": "message", "role": "user", "content": [question]}
        await c.send({"type": "conversation.item.create", "item": item})
        await c.send({"type": "response.create"})
        await c.until(lambda: len(c.of("response.done")) == 1)
        (arguments,) = c.of("response.function_call_arguments.done")
        # Forced by vLLM's structured outputs: JSON by grammar from a random model.
        assert json.loads(arguments["arguments"]) == {"order_id": "A-17"}
        first = c.of("response.done")[0]["response"]
        assert first["status"] == "completed", first
        (call,) = [o for o in first["output"] if o["type"] == "function_call"]
        assert call["name"] == "lookup_order" and call["call_id"] == arguments["call_id"]

        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "shipped"}
        await c.send({"type": "conversation.item.create", "item": output})
        await c.send({"type": "response.create", "response": {"tool_choice": "auto"}})
        await c.until(lambda: len(c.of("response.done")) == 2)
        answer = c.of("response.done")[1]["response"]
        assert answer["status"] == "completed", answer
        assert answer["output"][0]["content"][0]["transcript"].strip()
        # The call and its result went back to the server as tool_calls and a tool message.
        called, result = llm.bodies[-1]["messages"][-2:]
        assert called["tool_calls"][0]["id"] == call["call_id"]
        assert called["tool_calls"][0]["function"]["name"] == "lookup_order"
        assert result == {"role": "tool", "tool_call_id": call["call_id"], "content": "shipped"}
        assert c.audio(answer["id"])
        assert not c.of("error"), c.of("error")
    after = await counters.read()
    # The server answered both requests to their end: nothing aborted.
    assert finished(after, "stop") - finished(before, "stop") == 2
    assert finished(after, "abort") == finished(before, "abort")


@pytest.mark.asyncio(loop_scope="module")
async def test_a_barge_in_aborts_the_request_at_the_server(
    served: tuple[str, SteeredLLM], counters: Counters, speech: FakeSpeech
) -> None:
    url, _ = served
    before = await counters.read()
    async with connected(url) as c:
        await c.say("weather")  # heard as LONG_QUESTION: an answer of LONG tokens
        await c.until(lambda: len(c.of("response.output_audio.delta")) > 0)
        first = c.of("response.created")[0]["response"]["id"]
        # The long answer runs at the server (beside it, at times, an answer begun early
        # in the turn's final pause and not taken, on its way out).
        assert in_flight(await counters.read()) >= 1
        speech.transcript = SHORT_QUESTION
        try:
            await c.say("joke")  # the user talks over the answer
            await c.until(lambda: len(c.of("response.done")) >= 1)
            cancelled = c.of("response.done")[0]["response"]
            assert cancelled["id"] == first and cancelled["status"] == "cancelled"
            assert cancelled["status_details"]["reason"] == "turn_detected"
            FIGURES["barge-in to server idle (--llm-url, upper bound)"] = await counters.until_idle(
                deadline_s=30
            )
            await c.until(lambda: len(c.of("response.done")) == 2)
            answered = c.of("response.done")[1]["response"]
            assert answered["status"] == "completed", answered
            assert not c.of("error"), c.of("error")
        finally:
            speech.transcript = LONG_QUESTION
    after = await counters.read()
    assert in_flight(after) == 0
    # vLLM 0.32 counts a request its client aborted under no finished_reason (the
    # "abort" one is for aborts inside the engine): the long answer, seen running,
    # is gone and not among the finished, which are the answer to the joke alone.
    assert ended(after) - ended(before) == finished(after, "stop") - finished(before, "stop") == 1
    made = total(after, "vllm:generation_tokens_total") - total(
        before, "vllm:generation_tokens_total"
    )
    COUNTS["tokens vLLM made in the barge-in scene (--llm-url), of LONG"] = int(made)
    assert made < LONG / 2


@pytest.mark.asyncio(loop_scope="module")
async def test_a_turn_heard_by_vllms_whisper_is_answered(
    llm_server: str, whisper_server: str, speech: FakeSpeech, text_model: Path
) -> None:
    """The recognizer on vLLM's transcription endpoint: what the random Whisper
    heard (words, as it was built to write) is the user's transcript and what the
    language model is asked."""
    whisper = Counters(whisper_server)
    before, uploads = await whisper.read(), len(speech.uploads)
    settings = settings_for(llm_server, speech, asr_url=whisper_server)
    async with parley(settings, text_model) as (ws_url, llm), connected(ws_url) as c:
        transcription = {"model": "whisper-1"}
        update = {"type": "realtime", "audio": {"input": {"transcription": transcription}}}
        await c.send({"type": "session.update", "session": update})
        await c.say("weather")
        await c.until(lambda: len(c.of("response.done")) == 1)
        answered = c.of("response.done")[0]["response"]
        assert answered["status"] == "completed", answered
        assert c.audio(answered["id"])
        kind = "conversation.item.input_audio_transcription.completed"
        await c.until(lambda: bool(c.of(kind)))
        heard = c.of(kind)[0]["transcript"]
        assert heard.strip() and WORDS.fullmatch(heard), heard
        assert llm.bodies[-1]["messages"][-1] == {"role": "user", "content": heard}
        assert not c.of("error"), c.of("error")
    after = await whisper.read()
    await whisper.aclose()
    assert finished(after, "length") - finished(before, "length") >= 1  # it transcribed
    assert len(speech.uploads) == uploads  # nothing went to the fake recognizer
