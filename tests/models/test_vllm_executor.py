"""The vllm executor against a protocol-level fake of AsyncLLM (tests/support/fake_vllm.py):
DELTA streaming, speech per sentence, aborts, the engine's lifecycle, and the app
and command line around it. vLLM itself is never imported here."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import threading
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from bench.speech import load_wav
from models.base import OutputChunk, Prompt, PromptItem, SpeechHint, Tool
from models.errors import ModelMissing
from models.speech.slots import StageSlots
from models.speech.speaker import Speaker
from models.speech.tts import FliteSynthesizer
from models.vllm_engine import VllmExecutor, VllmOptions
from server.app import create_app
from server.cli import main
from server.config import Settings
from tests.support.fake_vllm import FakeAsyncLLM, FakeVllm, SamplingParams
from tests.support.prompts import function_call, function_output


def make(engine: FakeAsyncLLM | None = None, **options: Any) -> tuple[VllmExecutor, FakeVllm]:
    backend = FakeVllm(engine)
    opts = VllmOptions(model="fake/qwen2-audio", prompt_style="qwen2_audio", **options)
    speaker = Speaker(FliteSynthesizer(), StageSlots("tts", 1))
    return VllmExecutor(opts, speaker, backend=backend), backend


def prompt(rid: str = "resp_1", *, audio: bool = True, **kw: Any) -> Prompt:
    items = (PromptItem("u1", "user", audio=load_wav("weather"), rate=24_000),)
    modalities: tuple[Any, ...] = ("audio",) if audio else ("text",)
    return Prompt(rid, "Be brief.", items, output_modalities=modalities, **kw)


def text(chunks: list[OutputChunk]) -> str:
    return "".join(c.text for c in chunks)


async def test_streams_deltas_as_text_and_counts_tokens() -> None:
    ex, backend = make()
    await ex.start()
    chunks = [c async for c in ex.generate(prompt(audio=False))]
    assert text(chunks) == (
        "I heard 1 clips. The fake engine answers in three sentences. This is the last one."
    )
    assert len(chunks) == 16  # one per word: the token-only delta adds no chunk
    ((engine_prompt, params, rid),) = backend.engine.requests
    assert rid == "resp_1" and isinstance(params, SamplingParams)
    assert params.output_kind == "DELTA" and params.max_tokens == 256
    assert engine_prompt["prompt"].endswith("<|im_start|>assistant\n")
    ((clip, rate),) = engine_prompt["multi_modal_data"]["audio"]
    assert rate == 16_000 and clip.dtype == np.float32
    assert ex.stats.tokens_by_request["resp_1"] == 17  # 16 words + the byte-level piece
    assert backend.engine.running == set() and backend.engine.aborted == []
    # The model is timed in this process: its first token, then the whole reply.
    timed = [(t.stage, t.where, t.phase) for t in ex.stage_timings("resp_1")]
    assert timed == [("llm", "embedded", "first_token"), ("llm", "embedded", "total")]


async def test_speaks_each_sentence_while_the_model_still_writes() -> None:
    engine = FakeAsyncLLM()
    engine.hold()
    ex, _ = make(engine)
    await ex.start()
    stream = ex.generate(prompt())
    await engine.release(5)  # "I heard 1 clips." and the next word
    first = await anext(stream)
    assert first.text == "I heard 1 clips." and first.audio is not None
    assert len(first.audio) > 24_000 // 2  # speech, at the output rate
    assert engine.tokens_sent["resp_1"] <= 6  # the answer is still being written
    await engine.free()
    rest = [c async for c in stream]
    assert [c.text for c in rest] == [
        " The fake engine answers in three sentences.",
        " This is the last one.",
    ]
    assert all(c.audio is not None for c in rest)


async def held_stream(
    engine: FakeAsyncLLM,
) -> tuple[VllmExecutor, AsyncGenerator[OutputChunk, None]]:
    """A started executor's text-only stream, the engine held after its first token."""
    engine.hold()
    ex, _ = make(engine)
    await ex.start()
    stream = ex.generate(prompt(audio=False))
    await engine.release(1)
    return ex, stream


async def test_abort_mid_stream_calls_engine_abort_and_stops() -> None:
    engine = FakeAsyncLLM()
    ex, stream = await held_stream(engine)
    assert (await anext(stream)).text == "I"
    assert ex.running == 1
    await ex.abort("resp_1")
    assert engine.aborted == ["resp_1"]
    assert [c async for c in stream] == []  # the final "abort" output ends it quietly
    assert engine.running == set() and ex.running == 0
    assert ex.stats.aborted == ["resp_1"]
    # A reply cut short has a first token, and no time for the whole reply.
    assert [t.phase for t in ex.stage_timings("resp_1")] == ["first_token"]


async def test_a_stream_closed_early_is_aborted_in_the_engine() -> None:
    engine = FakeAsyncLLM()
    _, stream = await held_stream(engine)
    await anext(stream)
    await stream.aclose()  # the consumer went away without abort()
    assert engine.aborted == ["resp_1"] and engine.running == set()


async def test_a_cancelled_consumer_task_still_aborts() -> None:
    engine = FakeAsyncLLM()
    engine.hold()
    ex, _ = make(engine)
    await ex.start()
    got = asyncio.Event()

    async def consume() -> None:
        async for _ in ex.generate(prompt(audio=False)):
            got.set()

    task = asyncio.create_task(consume())
    await engine.release(1)
    await got.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.aborted == ["resp_1"] and engine.running == set()


async def test_cancel_before_start_never_reaches_the_engine() -> None:
    ex, backend = make()
    await ex.start()
    await ex.abort("resp_1")
    assert [c async for c in ex.generate(prompt())] == []
    assert backend.engine.requests == []


async def test_length_limit_and_engine_failure() -> None:
    ex, backend = make(max_output_tokens=3)
    await ex.start()
    chunks = [c async for c in ex.generate(prompt(audio=False))]
    assert text(chunks) == "I heard 1" and chunks[-1].finish == "length"
    assert backend.engine.requests[0][1].max_tokens == 3
    backend.engine.fail = "EngineDeadError: the engine core died"
    with pytest.raises(RuntimeError, match="engine core died"):
        [c async for c in ex.generate(prompt("resp_2"))]


async def test_not_started_is_a_clear_error_and_aclose_shuts_down() -> None:
    ex, backend = make()
    with pytest.raises(RuntimeError, match="not running"):
        await anext(ex.generate(prompt()))
    await ex.start()
    await ex.start()  # idempotent: one engine
    assert len(backend.started) == 1
    options, style = backend.started[0]
    assert style == "qwen2_audio" and options.max_audio_items == 4
    await ex.aclose()
    assert backend.engine.shut_down and ex.engine is None


def test_style_comes_from_the_model_dir(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "ultravox"}))
    speaker = Speaker(FliteSynthesizer(), StageSlots("tts", 1))
    ex = VllmExecutor(VllmOptions(model=str(tmp_path)), speaker, backend=FakeVllm())
    assert ex.style == "ultravox"
    with pytest.raises(ModelMissing, match="PARLEY_PROMPT_STYLE"):
        VllmExecutor(VllmOptions(model=str(tmp_path / "none")), speaker, backend=FakeVllm())


def test_the_engine_starts_and_stops_with_the_app() -> None:
    ex, backend = make()
    app = create_app(Settings(executor="scripted", log_level="warning"), executor=ex)
    with TestClient(app) as client:
        assert len(backend.started) == 1  # started by the lifespan
        assert client.get("/healthz").json()["status"] == "ok"
    # An executor passed in belongs to the caller: the app leaves it running.
    assert not backend.engine.shut_down


def test_vllm_is_never_imported_by_the_core() -> None:
    assert importlib.util.find_spec("vllm") is None  # this venv must stay without it
    import models.hosted
    import models.openai_compat
    import models.vllm_engine  # noqa: F401

    assert "vllm" not in sys.modules and "torch" not in sys.modules


def test_serve_vllm_without_vllm_installed_says_how_to_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["serve", "--port", "1", "--executor", "vllm", "--model", "/models/x"])
    err = capsys.readouterr().err
    assert code == 2 and "vLLM is not installed" in err and "parley-realtime[vllm]" in err
    code = main(["serve", "--port", "1", "--executor", "vllm"])
    assert code == 2 and "--model PATH" in capsys.readouterr().err


def test_serve_flags_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_BACKEND_URL", "http://a:8000, http://b:8000")
    monkeypatch.setenv("PARLEY_GPU_MEMORY_UTILIZATION", "0.3")
    settings = Settings()
    assert settings.backend_url == ["http://a:8000", "http://b:8000"]
    assert settings.gpu_memory_utilization == 0.3
    seen: dict[str, Settings] = {}

    def capture(s: Settings, **_: Any) -> Any:
        seen["s"] = s
        raise ModelMissing("stop here.", "none")

    monkeypatch.setattr("server.cli.uvicorn_config", capture)
    flags = ["--executor", "openai_compat", "--backend-url", "http://x:1"]
    flags += ["--backend-url", "http://y:2", "--max-model-len", "8192"]
    main(["serve", *flags, "--gpu-memory-utilization", "0.5"])
    s = seen["s"]
    assert s.executor == "openai_compat" and s.backend_url == ["http://x:1", "http://y:2"]
    assert s.max_model_len == 8192 and s.gpu_memory_utilization == 0.5


def test_serve_openai_compat_needs_a_backend(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "--port", "1", "--executor", "openai_compat"])
    err = capsys.readouterr().err
    assert code == 2 and "--backend-url" in err


class CountingRecognizer:
    name = "counting"

    def __init__(self) -> None:
        self.calls = 0
        self.gate = threading.Event()

    def transcribe(self, pcm: np.ndarray, rate: int, hint: SpeechHint | None = None) -> str:
        self.gate.wait(30)
        self.calls += 1
        return "what is the weather like"

    def describe(self) -> Any:
        raise NotImplementedError


async def test_turns_are_transcribed_once_in_the_background_and_used_as_history() -> None:
    recognizer = CountingRecognizer()
    backend = FakeVllm()
    speaker = Speaker(FliteSynthesizer(), StageSlots("tts", 1))
    options = VllmOptions(model="m", prompt_style="qwen2_audio", max_audio_items=1)
    ex = VllmExecutor(options, speaker, backend=backend, recognizer=recognizer)
    await ex.start()
    first = PromptItem("u1", "user", audio=load_wav("weather"), rate=24_000)
    await ex.prepare(first)  # returns at once: the recognizer is still held
    assert recognizer.calls == 0
    pending = asyncio.ensure_future(ex.transcribe(first))
    recognizer.gate.set()
    assert await pending == "what is the weather like"
    assert await ex.transcribe(first) == "what is the weather like" and recognizer.calls == 1
    items = (
        first,
        PromptItem("a1", "assistant", text="Sunny."),
        PromptItem("u2", "user", audio=load_wav("joke"), rate=24_000),
    )
    [c async for c in ex.generate(Prompt("resp_9", "", items, output_modalities=("text",)))]
    sent = backend.engine.requests[0][0]
    assert "what is the weather like" in sent["prompt"]  # the older turn, as its text
    assert len(sent["multi_modal_data"]["audio"]) == 1
    await ex.aclose()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def speculating(engine: FakeAsyncLLM) -> VllmExecutor:
    """A started executor that sent "resp_spec" to `engine` before the turn's end."""
    ex, _ = make(engine)
    await ex.start()
    ex.answer_early(prompt("resp_spec", audio=False))
    await settle()
    return ex


async def test_a_speculative_request_is_adopted_by_the_same_conversation() -> None:
    engine = FakeAsyncLLM()
    ex = await speculating(engine)
    assert [rid for _, _, rid in engine.requests] == ["resp_spec"]  # begun at the model
    # The committed turn's response: the same conversation under its own id.
    chunks = [c async for c in ex.generate(prompt("resp_real", audio=False))]
    assert text(chunks).startswith("I heard 1 clips.")
    assert [rid for _, _, rid in engine.requests] == ["resp_spec"]  # no second request
    assert ex.speculation.responses_used == 1
    await ex.aclose()


async def test_a_speculative_request_is_aborted_when_the_user_goes_on() -> None:
    engine = FakeAsyncLLM()
    engine.hold()
    ex = await speculating(engine)
    ex.discard_speculation("u1")
    for _ in range(100):
        if "resp_spec" in engine.aborted:
            break
        await asyncio.sleep(0)
    assert "resp_spec" in engine.aborted and "resp_spec" not in engine.running
    await engine.free()
    await ex.aclose()


async def test_aborting_the_adopting_response_aborts_the_speculative_request() -> None:
    engine = FakeAsyncLLM()
    engine.hold()
    ex = await speculating(engine)
    stream = ex.generate(prompt("resp_real", audio=False))
    await engine.release(2)
    first = await anext(stream)
    assert first.text
    await ex.abort("resp_real")  # a barge-in on the response that adopted it
    assert "resp_spec" in engine.aborted
    await stream.aclose()
    await engine.free()
    await ex.aclose()


# --- function calling ------------------------------------------------------------------

ORDER_TOOL = Tool(
    "lookup_order",
    "Look up an order.",
    json.dumps({"type": "object", "properties": {"order_id": {"type": "string"}}}),
)


async def test_auto_tools_are_in_the_prompt_and_a_call_follows_the_words_said() -> None:
    call = '<tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "A1"}}\n</tool_call>'
    engine = FakeAsyncLLM(reply=lambda _: "Let me look that up. " + call)
    ex, _ = make(engine)
    await ex.start()
    chunks = [c async for c in ex.generate(prompt(tools=(ORDER_TOOL,)))]
    ((engine_prompt, params, _),) = engine.requests
    assert (
        "<tools>\n" in engine_prompt["prompt"]
        and '"name": "lookup_order"' in engine_prompt["prompt"]
    )
    assert params.json_schema is None and not params.skip_special_tokens
    spoken = [c for c in chunks if c.audio is not None]
    assert text(spoken) == "Let me look that up."
    calls = [c.function_call for c in chunks if c.function_call is not None]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("lookup_order", {"order_id": "A1"})
    ]
    assert chunks[-1].function_call is not None  # after the speech
    assert calls[0].call_id == "call_resp_1_0"


async def test_a_named_tool_choice_is_forced_json_and_never_spoken() -> None:
    ex, backend = make()
    await ex.start()
    chunks = [c async for c in ex.generate(prompt(tools=(ORDER_TOOL,), tool_choice="lookup_order"))]
    ((_, params, _),) = backend.engine.requests
    assert params.json_schema == json.loads(ORDER_TOOL.parameters)
    assert [c.audio for c in chunks if c.audio is not None] == []
    assert text(chunks) == ""
    (call,) = [c.function_call for c in chunks if c.function_call is not None]
    assert call.name == "lookup_order" and json.loads(call.arguments) == {"order_id": "order_id-1"}


async def test_a_forced_call_cut_at_the_token_limit_is_a_length_finish() -> None:
    ex, backend = make(max_output_tokens=1)
    backend.engine.reply = lambda _: "unused"
    await ex.start()
    many = Tool("f", parameters=json.dumps({"type": "object", "properties": {"a": {}, "b": {}}}))
    chunks = [c async for c in ex.generate(prompt(tools=(many,), tool_choice="f"))]
    assert [c.function_call for c in chunks if c.function_call] == []
    assert chunks[-1].finish == "length"


async def test_tool_choice_none_leaves_the_tools_out_and_a_call_result_is_read_back() -> None:
    items = (
        PromptItem("u1", "user", text="Where is my order?"),
        function_call("c1", "call_1", "lookup_order", '{"order_id": "A1"}'),
        function_output("o1", "call_1", "shipped"),
    )
    ex, backend = make()
    await ex.start()
    with_tools = Prompt("r1", "", items, output_modalities=("text",), tools=(ORDER_TOOL,))
    chunks = [c async for c in ex.generate(with_tools)]
    assert "The function said shipped." in text(chunks)
    rendered = backend.engine.requests[0][0]["prompt"]
    assert "<|im_start|>assistant\n<tool_call>\n" in rendered
    assert "<|im_start|>user\n<tool_response>\nshipped\n</tool_response><|im_end|>" in rendered
    none = Prompt(
        "r2", "", items, output_modalities=("text",), tools=(ORDER_TOOL,), tool_choice="none"
    )
    [c async for c in ex.generate(none)]
    rendered = backend.engine.requests[1][0]["prompt"]
    assert "<tools>" not in rendered and "<tool_call>" not in rendered
    assert "returned: shipped" in rendered  # as prose
    assert backend.engine.requests[1][1].skip_special_tokens
