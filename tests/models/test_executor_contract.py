"""One contract, every executor: a turn, a barge-in mid-stream, a cancel before the
first token, a backend failure, a function call (or, where the model calls no tools
yet, tools kept and a spoken answer), each driven through an in-process Session.

- scripted: the deterministic executor;
- cascade: the embedded pipeline with its real models (loaded once per module); a
  scripted story stands in for the language model where a scene needs it held;
- vllm: the vllm executor over the protocol-level fake of AsyncLLM;
- openai_compat: the HTTP executor against the local fake OpenAI server;
- cascade_remote_speech: the cascade with its recognizer and synthesizer on the fake
  speech server (models/speech/remote_asr.py, remote_tts.py), its language model
  embedded;
- cascade_remote_llm: the cascade with its language model on the fake OpenAI server
  (models/cascade/remote_llm.py), Whisper and Piper embedded;
- cascade_remote: every stage on a fake server, no embedded model.

Each kit can hold the model before its first token, let exactly the first sentence
out, and make the next request fail; a scene waits on those gates, and on real
model work with `wait_until` (a safety limit, not a pace).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, get_args

import pytest

from bench.fakes.openai import FakeOpenAI, running_fake_openai
from bench.fakes.speech import running_fake_speech
from models.base import Executor, Prompt
from models.cascade.llm import Ct2LanguageModel
from models.cascade.pipeline import CascadeExecutor
from models.cascade.remote_llm import RemoteLanguageModel, RemoteLLMOptions
from models.cascade.text import ChatMessage
from models.openai_compat import BackendOptions, OpenAICompatExecutor
from models.remote_http import RemoteOptions
from models.scripted import ScriptedExecutor
from models.speech.asr import SpeechRecognizer, WhisperRecognizer
from models.speech.files import ModelInfo
from models.speech.remote_asr import RemoteRecognizer
from models.speech.remote_tts import RemoteSynthesizer
from models.speech.slots import StageSlots
from models.speech.speaker import Speaker
from models.speech.tts import FliteSynthesizer, PiperSynthesizer, Synthesizer
from models.vllm_engine import VllmExecutor, VllmOptions
from server.config import ExecutorName
from tests.support import executor_contract as contract
from tests.support.executor_contract import FAILURE, Kit
from tests.support.fake_vllm import FakeAsyncLLM, FakeVllm
from tests.support.harness import Harness

KINDS = ["scripted", "cascade", "vllm", "openai_compat"]
# Executors in a second shape: the cascade with stages on servers (all three: the
# GPU deployment of docs/deploy.md, "GPU cascade").
SHAPES = ["cascade_remote_speech", "cascade_remote_llm", "cascade_remote"]


# --- scripted ------------------------------------------------------------------------


class FailingScripted(ScriptedExecutor):
    failing: bool = False

    async def generate(self, prompt: Prompt) -> Any:
        if self.failing:
            self.failing = False
            raise RuntimeError(FAILURE)
        async for chunk in super().generate(prompt):
            yield chunk


def scripted_kit() -> Kit:
    ex = FailingScripted()

    def hold() -> None:
        ex.chunk_gate = asyncio.Semaphore(0)

    async def first_sentence() -> None:
        assert ex.chunk_gate is not None
        ex.chunk_gate.release()  # one word, one chunk: the first one out

    async def free() -> None:
        gate, ex.chunk_gate = ex.chunk_gate, None
        if gate is not None:
            for _ in range(1000):
                gate.release()

    def fail() -> None:
        ex.failing = True

    async def stopped(rid: str, h: Harness) -> None:
        assert rid in ex.aborted

    return Kit(
        ex, hold, first_sentence, free, fail, lambda: len(ex.prompts), stopped, calls_tools=True
    )


# --- cascade -------------------------------------------------------------------------


class ControlledModel:
    """The real language model, or while held a gated story (so a scene can stop it
    mid-answer whatever the real model would say), or a failure."""

    name = "controlled"

    def __init__(self, real: Ct2LanguageModel, *, calls_tools: bool = False) -> None:
        self.real = real
        # Standing in for a model you bring whose template has tools (Qwen2.5): it
        # calls the tool it is given, then answers from the result.
        self.calls_tools = calls_tools
        self.story = False
        self.failing = False
        self.calls = 0
        self.gate = threading.Semaphore(0)
        self.free = threading.Event()

    def stream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int, stop: threading.Event
    ) -> Iterator[str]:
        self.calls += 1
        if self.failing:
            self.failing = False
            raise RuntimeError(FAILURE)
        if self.calls_tools and "<tools>" in messages[0].content:
            yield from tool_reply(messages)
            return
        if not self.story:
            yield from self.real.stream(messages, max_tokens=max_tokens, stop=stop)
            return
        words = "It is sunny today. The sky is clear and the wind is calm. Enjoy it.".split()
        for i, word in enumerate(words[:max_tokens]):
            # The model thread waits for a permit, and notices an abort meanwhile.
            while not self.free.is_set() and not self.gate.acquire(timeout=0.01):
                if stop.is_set():
                    return
            yield word if i == 0 else " " + word

    def describe(self) -> ModelInfo:
        return ModelInfo("llm", self.name, "-", 0, "-", "test")

    def close(self) -> None:
        pass


def tool_reply(messages: Sequence[ChatMessage]) -> Iterator[str]:
    """A tools-capable model's reply, five characters a token: after a result, an
    answer that reads it back; else a few words and a call to the first tool listed."""
    last = messages[-1].content
    if last.startswith("<tool_response>"):
        text = f"Your order is {last.split(chr(10))[1]}."
    else:
        name = re.search(r'"name": "([^"]+)"', messages[0].content)
        assert name is not None
        call = {"name": name[1], "arguments": {"order_id": "A-17"}}
        text = f"One moment. <tool_call>\n{json.dumps(call)}\n</tool_call>"
    for i in range(0, len(text), 5):
        yield text[i : i + 5]


@dataclass
class CascadeModels:
    asr: WhisperRecognizer
    llm: Ct2LanguageModel
    tts: PiperSynthesizer


@pytest.fixture(scope="module")
def cascade_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CascadeModels]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PARLEY_CACHE_DIR", str(tmp_path_factory.mktemp("parley-cache")))
        models = CascadeModels(WhisperRecognizer("tiny.en"), Ct2LanguageModel(), PiperSynthesizer())
        yield models
    models.llm.close()
    models.tts.close()


def cascade_kit(
    models: CascadeModels,
    *,
    calls_tools: bool = False,
    asr: SpeechRecognizer | None = None,
    tts: Synthesizer | None = None,
) -> Kit:
    llm = ControlledModel(models.llm, calls_tools=calls_tools)
    ex = CascadeExecutor(asr or models.asr, llm, tts or models.tts)

    def hold() -> None:
        llm.story = True
        llm.free.clear()

    async def first_sentence() -> None:
        for _ in range(5):  # "It is sunny today." and the word that ends it
            llm.gate.release()

    async def free() -> None:
        llm.free.set()

    def fail() -> None:
        llm.failing = True

    async def stopped(rid: str, h: Harness) -> None:
        await h.wait_until(lambda: not ex.running(rid))  # within one token

    return Kit(
        ex,
        hold,
        first_sentence,
        free,
        fail,
        lambda: llm.calls,
        stopped,
        recognizes=True,
        calls_tools=calls_tools,
    )


async def remote_speech(
    stack: contextlib.AsyncExitStack,
) -> tuple[RemoteRecognizer, RemoteSynthesizer]:
    """A recognizer and a synthesizer on a fake speech server."""
    fake = await stack.enter_async_context(running_fake_speech())
    asr = await asyncio.to_thread(RemoteRecognizer, RemoteOptions("asr", (fake.url("asr"),)))
    tts = await asyncio.to_thread(RemoteSynthesizer, RemoteOptions("tts", (fake.url("tts"),)))
    return asr, tts


async def cascade_remote_llm_kit(
    stack: contextlib.AsyncExitStack,
    asr: SpeechRecognizer,
    tts: Synthesizer,
) -> Kit:
    """The cascade with its language model on a fake chat server."""
    fake = await stack.enter_async_context(running_fake_openai())
    options = RemoteLLMOptions(urls=(fake.url("llm"),), model="model-llm", retries=0)
    llm = RemoteLanguageModel(options)
    ex = CascadeExecutor(asr, llm, tts)
    stack.push_async_callback(llm.aclose)

    async def stopped(rid: str, h: Harness) -> None:
        await asyncio.wait_for(fake.stream_closed.wait(), 10)  # the HTTP stream closed
        await h.wait_until(lambda: not ex.running(rid))

    return fake_server_kit(ex, fake, "llm", stopped, recognizes=True)


# --- vllm (fake engine) ----------------------------------------------------------------


async def vllm_kit() -> Kit:
    engine = FakeAsyncLLM()
    speaker = Speaker(FliteSynthesizer(), StageSlots("tts", 1))
    options = VllmOptions(model="fake/qwen2-audio", prompt_style="qwen2_audio")
    ex = VllmExecutor(options, speaker, backend=FakeVllm(engine))
    await ex.start()

    async def first_sentence() -> None:
        await engine.release(5)  # "I heard 1 clips." and the word that ends it

    def fail() -> None:
        engine.fail = FAILURE

    async def stopped(rid: str, h: Harness) -> None:
        assert rid in engine.aborted and rid not in engine.running

    return Kit(
        ex,
        engine.hold,
        first_sentence,
        engine.free,
        fail,
        lambda: len(engine.requests),
        stopped,
        calls_tools=True,
    )


# --- openai_compat (fake server) -------------------------------------------------------


async def openai_kit(stack: contextlib.AsyncExitStack) -> Kit:
    fake = await stack.enter_async_context(running_fake_openai())
    url = fake.url("backend")
    speaker = Speaker(FliteSynthesizer(), StageSlots("tts", 1))
    ex = OpenAICompatExecutor(BackendOptions(urls=(url,), retries=0, down_for_s=0), speaker)

    async def stopped(rid: str, h: Harness) -> None:
        assert rid in ex.stats.aborted
        await asyncio.wait_for(fake.stream_closed.wait(), 10)  # the HTTP stream closed

    return fake_server_kit(ex, fake, "backend", stopped)


def fake_server_kit(
    ex: Executor,
    fake: FakeOpenAI,
    backend: str,
    stopped: Callable[[str, Harness], Awaitable[None]],
    *,
    recognizes: bool = False,
) -> Kit:
    """A kit steering an executor whose model is the fake OpenAI server's `backend`."""

    async def first_sentence() -> None:
        await fake.release(9)  # "I heard N audio parts in 2 messages." and one more word

    def fail() -> None:
        fake.behaviour[backend] = "error"

    async def free() -> None:
        fake.behaviour[backend] = "normal"
        await fake.free()

    return Kit(
        ex,
        fake.hold,
        first_sentence,
        free,
        fail,
        lambda: len(fake.requests),
        stopped,
        failure_text="HTTP 500",
        recognizes=recognizes,
        calls_tools=True,
    )


@pytest.fixture(params=KINDS + SHAPES)
async def kit(request: pytest.FixtureRequest) -> AsyncIterator[Kit]:
    async with contextlib.AsyncExitStack() as stack:
        kind = request.param
        if kind == "scripted":
            made = scripted_kit()
        elif kind == "cascade":
            made = cascade_kit(request.getfixturevalue("cascade_models"))
        elif kind == "cascade_remote_speech":
            asr, tts = await remote_speech(stack)
            made = cascade_kit(request.getfixturevalue("cascade_models"), asr=asr, tts=tts)
        elif kind == "cascade_remote_llm":
            models = request.getfixturevalue("cascade_models")
            made = await cascade_remote_llm_kit(stack, models.asr, models.tts)
        elif kind == "cascade_remote":  # every stage on a server: no embedded model
            made = await cascade_remote_llm_kit(stack, *await remote_speech(stack))
        elif kind == "vllm":
            made = await vllm_kit()
        else:
            made = await openai_kit(stack)
        try:
            yield made
        finally:
            await made.free()
            # The embedded cascade's models are the module's.
            if kind == "cascade_remote" or not kind.startswith("cascade"):
                await made.executor.aclose()


# --- scenes ------------------------------------------------------------------------------


@pytest.mark.parametrize("scene", contract.SCENES, ids=lambda scene: scene.__name__)
async def test_the_scene(kit: Kit, scene: contract.Scene) -> None:
    await scene(kit)


async def test_the_cascade_with_a_model_that_calls_tools_round_trips(
    cascade_models: CascadeModels,
) -> None:
    """The cascade's `cascade` kit is the bundled model, which calls no tools; with a
    model whose template has tools (a Qwen2.5 GGUF you bring) the call goes through."""
    kit = cascade_kit(cascade_models, calls_tools=True)
    await contract.a_function_call_round_trips_or_the_tools_are_kept(kit)


def test_every_executor_is_in_the_contract() -> None:
    assert set(get_args(ExecutorName)) == set(KINDS)
