"""Shared by the real-engine tests (`make test-vllm`): the tiny model, built once per
session, and the pieces that let the executor contract run on a real engine.

A real engine cannot be paused between tokens, so the tests steer it otherwise: the
sampling parameters of each request come from a plan (a long answer, which keeps the
request running in the engine while a scene barges in or cancels; a short one
after), `ignore_eos` so a random model never stops at once, and a logit bias on the
newline so its random text has sentence breaks the TTS stage can speak. Holding
"before the first token" happens between the engine and the executor: the engine
keeps generating, nothing reaches the session until the gate opens (or the request
is aborted).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.vllm.tiny_model import build_tiny_qwen2_audio

LONG = 30_000  # tokens (~50 s at ~600 tokens/s on 2 cores): longer than any scene
SHORT = 24
NEWLINE_BIAS = 4.0  # about one newline in ten tokens: a sentence for the TTS stage
MAX_MODEL_LEN = 32_768
GPU_MEMORY_UTILIZATION = 0.3  # on CPU: the fraction of RAM for the KV cache

FIGURES: dict[str, float] = {}  # seconds
COUNTS: dict[str, int] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.vllm)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FIGURES or COUNTS:
        terminalreporter.section("vLLM figures (tiny models, CPU)")
        for name, value in FIGURES.items():
            terminalreporter.write_line(f"{name}: {value:.3f} s")
        for name, count in COUNTS.items():
            terminalreporter.write_line(f"{name}: {count}")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen2_audio(tmp_path_factory.mktemp("tiny-qwen2-audio"))


def newline_id(model: Path) -> int:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    ids = tokenizer.encode("\n", add_special_tokens=False).ids
    assert len(ids) == 1, ids
    return ids[0]


def speakable_ids(model: Path) -> list[int]:
    """Tokens of plain words, punctuation and newlines: the random model samples only
    these (vLLM's allowed_token_ids), so its answers are text a TTS engine reads. (A
    run-on answer once kept flite busy 30 s on one huge "sentence"; split_sentences
    now caps a piece at SENTENCE_MAX_CHARS.)"""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    ids = []
    for i in range(tokenizer.get_vocab_size()):
        text = tokenizer.decode([i], skip_special_tokens=True)
        if text and re.fullmatch(r"[A-Za-z ,.!?'\n]+", text):
            ids.append(i)
    return ids


class Plan:
    """max_tokens for the next requests (then SHORT), and a failure to inject."""

    def __init__(self) -> None:
        self.lengths: list[int] = []
        self.failing = False

    def next_length(self) -> int:
        return self.lengths.pop(0) if self.lengths else SHORT


class Gate:
    """Outputs wait here while closed, unless their request was aborted."""

    def __init__(self) -> None:
        self.open = True
        self.aborted: set[str] = set()

    async def wait(self, request_id: str) -> None:
        while not self.open and request_id not in self.aborted:  # noqa: ASYNC110
            await asyncio.sleep(0.005)


class Steering:
    """A contract kit's hold, first_sentence, free and fail: the gate holds what the
    model writes, the plan sets the next request's length and failure."""

    def __init__(self, gate: Gate, plan: Plan) -> None:
        self.gate = gate
        self.plan = plan

    def hold(self) -> None:
        self.gate.open = False
        self.plan.lengths = [LONG]  # the held request keeps running at the model

    async def first_sentence(self) -> None:
        self.gate.open = True  # the long answer flows, sentence by sentence

    async def free(self) -> None:
        self.gate.open = True
        self.plan.lengths = []
        self.plan.failing = False

    def fail(self) -> None:
        self.plan.failing = True


class GatedEngine:
    """The real AsyncLLM behind a gate, counting requests and aborts."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.gate = Gate()
        self.calls = 0
        self.aborted: list[str] = []
        self.abort_latency: list[float] = []
        self.running_at_abort: list[int] = []  # engine requests when each abort came

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[Any]:
        self.calls += 1
        stream = self.real.generate(prompt, sampling_params, request_id)
        try:
            async for output in stream:
                await self.gate.wait(request_id)
                yield output
        finally:
            await stream.aclose()

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)
        self.gate.aborted.add(request_id)
        self.running_at_abort.append(self.unfinished)
        start = time.monotonic()
        await self.real.abort(request_id)
        self.abort_latency.append(time.monotonic() - start)

    def shutdown(self) -> None:
        self.real.shutdown()

    @property
    def unfinished(self) -> int:
        return unfinished_requests(self.real)


def unfinished_requests(engine: Any) -> int:
    """Requests the engine front end still tracks (vLLM 0.32: the output processor)."""
    count: int = engine.output_processor.get_num_unfinished_requests()
    return count


@pytest.fixture(scope="session")
def figures() -> Iterator[dict[str, float]]:
    yield FIGURES
