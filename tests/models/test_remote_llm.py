"""The cascade's language model on a server (models/cascade/remote_llm.py) against
the local fake OpenAI server (SSE over HTTP on 127.0.0.1): the request it sends,
streamed text, a tool call round trip, retries, failover, stalls, garbage, and an
abort closing the stream (the fake's own count of closed streams). Waits are on
the fake's gates, never on sleeping."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from bench.fakes.openai import FakeOpenAI, running_fake_openai
from models.base import FunctionCall, OutputChunk, Prompt, PromptItem, SpeechHint, Tool
from models.cascade.build import CascadeOptions, make_language_model
from models.cascade.pipeline import CascadeExecutor
from models.cascade.remote_llm import (
    RemoteLanguageModel,
    RemoteLLMOptions,
    request_body,
    text_prompt,
)
from models.chat_backends import session_key
from models.errors import ModelMissing
from models.remote_http import RemoteError, listed_models, rendezvous
from models.speech.files import ModelInfo
from models.speech.tts import FliteSynthesizer
from server.cli import main
from server.config import Settings

REPLY = (
    "I heard 0 audio parts in 2 messages. "
    "The fake server answers in three sentences. This is the last one."
)
TOOL = Tool("lookup_order", "Looks up an order by its id.", '{"type": "object"}')


async def failure(llm: RemoteLanguageModel, got: list[str | FunctionCall] | None = None) -> str:
    """The error a reply ends in (what came before it into `got`); `llm` closed."""
    got = [] if got is None else got
    try:
        with pytest.raises(RemoteError) as caught:
            async for piece in llm.reply(prompt(), {}, max_tokens=50):
                got.append(piece)
    finally:
        await llm.aclose()
    return str(caught.value)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with running_fake_openai() as server:
        yield server


class NoRecognizer:
    """The prompts here are typed: nothing to recognize."""

    name = "none"

    def transcribe(self, pcm: np.ndarray, rate: int, hint: SpeechHint | None = None) -> str:
        raise AssertionError("nothing to transcribe")

    def describe(self) -> ModelInfo:
        return ModelInfo("asr", self.name, "-", 0, "-", "test")


def remote(*urls: str, **options: Any) -> RemoteLanguageModel:
    return RemoteLanguageModel(RemoteLLMOptions(urls=urls, model="m", **options))


def prompt(request_id: str = "resp_abcdef000001", **kw: Any) -> Prompt:
    items = kw.pop("items", (PromptItem("item_1", "user", text="What is the weather?"),))
    return Prompt(request_id, "Be brief.", items, output_modalities=("text",), **kw)


async def pieces(llm: RemoteLanguageModel, p: Prompt) -> list[str | FunctionCall]:
    return [piece async for piece in llm.reply(p, {}, max_tokens=50)]


def executor(llm: RemoteLanguageModel) -> CascadeExecutor:
    return CascadeExecutor(NoRecognizer(), llm, FliteSynthesizer(), max_sentences=0)


async def collect(ex: CascadeExecutor, p: Prompt) -> list[OutputChunk]:
    return [chunk async for chunk in ex.generate(p)]


# --- the request ---------------------------------------------------------------------


def test_the_conversation_goes_as_text_with_native_tool_calls() -> None:
    items = (
        PromptItem("u1", "user", audio=np.zeros(2400, np.int16)),  # spoken: its transcript
        PromptItem(
            "c1",
            "assistant",
            kind="function_call",
            call_id="call_1",
            name="lookup_order",
            arguments='{"order_id": "A-17"}',
        ),
        PromptItem("o1", "user", kind="function_call_output", call_id="call_1", output="shipped"),
    )
    p = Prompt("resp_1", "Be brief.", items, tools=(TOOL,), tool_choice="lookup_order")
    options = RemoteLLMOptions(urls=("http://x",), temperature=0.2)
    body = request_body(p, {"u1": "Where is my order?"}, model="m", max_tokens=40, options=options)
    assert body["model"] == "m" and body["stream"] is True and body["max_tokens"] == 40
    assert body["temperature"] == 0.2
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Where is my order?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"order_id": "A-17"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "shipped"},
    ]
    assert [t["function"]["name"] for t in body["tools"]] == ["lookup_order"]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "lookup_order"}}
    none = request_body(
        Prompt("r", "", p.items, tools=(TOOL,), tool_choice="none"),
        {},
        model="m",
        max_tokens=40,
        options=options,
    )
    assert "tools" not in none and "tool_choice" not in none


def test_the_history_is_kept_within_the_backend_context() -> None:
    items = tuple(
        PromptItem(f"i{n}", "user" if n % 2 == 0 else "assistant", text=f"turn {n} " + "word " * 50)
        for n in range(41)
    )
    options = RemoteLLMOptions(urls=("http://x",), max_context_tokens=600)
    body = request_body(Prompt("r", "", items), {}, model="m", max_tokens=100, options=options)
    messages = body["messages"]
    assert 2 < len(messages) < 42
    assert messages[-1]["content"].startswith("turn 40")
    assert messages[1]["role"] == "user"


def test_text_prompt_reads_clips_as_their_transcripts() -> None:
    typed = PromptItem("t", "user", text="typed")
    spoken = PromptItem("s", "user", audio=np.zeros(10, np.int16))
    items = text_prompt(Prompt("r", "", (typed, spoken)), {"s": "heard"}).items
    assert [(i.text, i.audio) for i in items] == [("typed", None), ("heard", None)]


def test_listed_models_reads_only_a_models_list() -> None:
    assert listed_models({"data": [{"id": "a"}, {"id": "b"}]}) == ["a", "b"]
    assert listed_models({"data": "x"}) == [] and listed_models(["a"]) == []


# --- streaming -----------------------------------------------------------------------


async def test_streams_the_text_as_the_server_writes_it(fake: FakeOpenAI) -> None:
    llm = remote(fake.url("a"))
    try:
        got = await pieces(llm, prompt())
    finally:
        await llm.aclose()
    assert len(got) == len(REPLY.split(" ")) and "".join(map(str, got)) == REPLY
    (_, body) = fake.requests[0]
    assert body["messages"][1] == {"role": "user", "content": "What is the weather?"}


async def test_the_cascade_speaks_a_remote_answer_and_cuts_it_at_max_tokens(
    fake: FakeOpenAI,
) -> None:
    ex = executor(remote(fake.url("a")))
    try:
        chunks = await collect(ex, prompt(max_output_tokens=3))
    finally:
        await ex.aclose()
    assert "".join(c.text for c in chunks) == "I heard 0"
    assert chunks[-1].finish == "length"
    assert fake.requests[0][1]["max_tokens"] == 3


async def test_a_tool_call_round_trips(fake: FakeOpenAI) -> None:
    ex = executor(remote(fake.url("a")))
    try:
        first = await collect(ex, prompt(tools=(TOOL,), tool_choice="lookup_order"))
        calls = [c.function_call for c in first if c.function_call is not None]
        assert calls == [FunctionCall("lookup_order", '{"order_id": "A-17"}', "chatcmpl-tool-1")]
        # A reply that is only a call has its first output in the call.
        timed = {(t.stage, t.where, t.phase) for t in ex.stage_timings("resp_abcdef000001")}
        assert timed == {("llm", "remote", "first_token"), ("llm", "remote", "total")}
        call, output = (
            PromptItem(
                "c",
                "assistant",
                kind="function_call",
                call_id="chatcmpl-tool-1",
                name="lookup_order",
                arguments=calls[0].arguments,
            ),
            PromptItem(
                "o",
                "user",
                kind="function_call_output",
                call_id="chatcmpl-tool-1",
                output="shipped",
            ),
        )
        items = (*prompt().items, call, output)
        answer = await collect(ex, prompt("resp_abcdef000002", items=items, tools=(TOOL,)))
    finally:
        await ex.aclose()
    assert "".join(c.text for c in answer) == "The order tool said shipped."
    assert not any(c.function_call for c in answer)
    assert fake.requests[1][1]["messages"][-1]["role"] == "tool"


# --- cancellation --------------------------------------------------------------------


async def test_an_abort_closes_the_stream(fake: FakeOpenAI) -> None:
    fake.hold()
    ex = executor(remote(fake.url("a")))
    p = prompt()
    stream = ex.generate(p)
    try:
        await fake.release(9)  # the first sentence and the word after it
        first = await anext(stream)
        assert first.text == "I heard 0 audio parts in 2 messages."
        await ex.abort(p.request_id)  # the server holds the next word meanwhile
        await asyncio.wait_for(fake.stream_closed.wait(), 10)
        assert [c async for c in stream] == []
        assert (fake.closed, fake.finished) == (1, 0)
        assert not ex.running(p.request_id)
    finally:
        await stream.aclose()
        await ex.aclose()


async def test_closing_the_response_closes_the_stream(fake: FakeOpenAI) -> None:
    fake.hold()
    ex = executor(remote(fake.url("a")))
    stream = ex.generate(prompt())
    try:
        await fake.release(9)
        await anext(stream)
        await stream.aclose()  # the session dropped the response (a barge-in)
        await asyncio.wait_for(fake.stream_closed.wait(), 10)
        assert (fake.closed, fake.finished) == (1, 0)
    finally:
        await ex.aclose()


async def test_the_sentence_limit_closes_the_stream(fake: FakeOpenAI) -> None:
    fake.hold()
    ex = CascadeExecutor(NoRecognizer(), remote(fake.url("a")), FliteSynthesizer(), max_sentences=1)
    try:
        await fake.release(9)  # the first sentence and the word after it; the rest held
        chunks = await asyncio.wait_for(collect(ex, prompt()), 10)
        await asyncio.wait_for(fake.stream_closed.wait(), 10)
    finally:
        await ex.aclose()
    assert [c.text for c in chunks] == ["I heard 0 audio parts in 2 messages."]
    assert (fake.closed, fake.finished) == (1, 0)


async def test_an_abort_before_the_first_token_closes_the_stream(fake: FakeOpenAI) -> None:
    fake.hold()
    ex = executor(remote(fake.url("a")))
    p = prompt()
    task = asyncio.ensure_future(collect(ex, p))
    try:
        await asyncio.wait_for(fake.requested.wait(), 10)  # at the server, nothing out yet
        await ex.abort(p.request_id)
        assert await asyncio.wait_for(task, 10) == []
        await asyncio.wait_for(fake.stream_closed.wait(), 10)
        assert fake.closed == 1
    finally:
        task.cancel()
        await ex.aclose()


# --- failures ------------------------------------------------------------------------


async def test_a_failing_replica_is_retried_on_the_next_and_passed_over(
    fake: FakeOpenAI,
) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening
    try:
        for bad in (dead, fake.url("e", "error")):
            good = fake.url("ok")
            llm = remote(bad, good, retries=2)
            rid = next(  # a request whose session prefers the bad replica
                f"resp_{n:06x}000001"
                for n in range(1000)
                if rendezvous(session_key(f"resp_{n:06x}000001"), (bad, good))[0] == bad
            )
            try:
                assert "".join(map(str, await pieces(llm, prompt(rid)))) == REPLY
                before = fake.hits("ok")
                await pieces(llm, prompt(rid[:-6] + "000002"))  # straight to the good one
                assert fake.hits("ok") == before + 1
            finally:
                await llm.aclose()
    finally:
        sock.close()
    assert fake.hits("e") == 1


async def test_a_session_sticks_to_its_replica(fake: FakeOpenAI) -> None:
    urls = (fake.url("r1"), fake.url("r2"))
    llm = remote(*urls)
    try:
        for n in range(3):
            await pieces(llm, prompt(f"resp_abcdef00000{n}"))
    finally:
        await llm.aclose()
    preferred = rendezvous(session_key("resp_abcdef000001"), urls)[0].rsplit("/", 1)[1]
    assert fake.hits(preferred) == 3


async def test_a_replica_that_stalls_times_out_with_a_clear_error(fake: FakeOpenAI) -> None:
    url = fake.url("s", "silent")
    message = await failure(remote(url, read_timeout_s=0.2, retries=1))
    assert "the llm stage did not answer after 2 attempts" in message
    assert f"{url} did not answer within 0.2 s" in message
    assert fake.hits("s") == 2


async def test_a_stream_that_dies_midway_fails_without_a_retry(fake: FakeOpenAI) -> None:
    got: list[str | FunctionCall] = []
    assert "in the middle of the answer" in await failure(remote(fake.url("d", "dies")), got)
    assert got == ["I", " heard"] and fake.hits("d") == 1


async def test_garbage_is_a_clear_error(fake: FakeOpenAI) -> None:
    message = await failure(remote(fake.url("g", "garbage")))
    assert "sent a malformed event: <html>502 Bad Gateway</html>" in message


async def test_a_failure_fails_the_response_and_the_next_one_is_answered(fake: FakeOpenAI) -> None:
    url = fake.url("a", "error")
    ex = executor(remote(url, retries=0))
    try:
        with pytest.raises(RemoteError, match="HTTP 500"):
            await collect(ex, prompt())
        fake.behaviour["a"] = "normal"
        chunks = await collect(ex, prompt("resp_abcdef000002"))
    finally:
        await ex.aclose()
    assert "".join(c.text for c in chunks) == REPLY


# --- at start ------------------------------------------------------------------------


async def test_start_checks_the_replicas_list_the_model(fake: FakeOpenAI) -> None:
    listed = RemoteLanguageModel(RemoteLLMOptions(urls=(fake.url("a"),), model="model-a"))
    await asyncio.to_thread(listed.check)
    first = RemoteLanguageModel(RemoteLLMOptions(urls=(fake.url("a"),)))
    await asyncio.to_thread(first.check)
    assert first.model == first.name == "model-a"
    assert first.describe().path == fake.url("a")
    assert "remote" in first.describe().source

    missing = RemoteLanguageModel(RemoteLLMOptions(urls=(fake.url("a"),), model="llama"))
    with pytest.raises(ModelMissing) as caught:
        await asyncio.to_thread(missing.check)
    assert f"The LLM server {fake.url('a')}" in caught.value.problem
    assert "does not serve llama (it lists model-a)" in caught.value.problem

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        with pytest.raises(ModelMissing) as caught:
            await asyncio.to_thread(make_language_model, CascadeOptions(llm_url=(dead,)))
    finally:
        sock.close()
    assert f"remote LLM stage is unreachable: llm server {dead} refused" in caught.value.problem


async def test_the_cascade_options_choose_the_remote_model(fake: FakeOpenAI) -> None:
    options = CascadeOptions(llm_url=(fake.url("a"),), llm_model=None, llm_api_key="k")
    llm = await asyncio.to_thread(make_language_model, options)
    try:
        assert isinstance(llm, RemoteLanguageModel)
        assert llm.model == "model-a" and llm.options.api_key == "k"
        await pieces(llm, prompt())
    finally:
        await llm.aclose()
    assert json.loads(json.dumps(fake.requests[0][1]))["model"] == "model-a"


def test_serve_flags_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_LLM_URL", "http://a:8000/v1, http://b:8000/v1")
    monkeypatch.setenv("PARLEY_LLM_API_KEY", "secret")
    settings = Settings()
    assert settings.llm_url == ["http://a:8000/v1", "http://b:8000/v1"]
    assert settings.llm_api_key == "secret" and settings.llm_timeout_s == 60.0
    assert Settings(llm_url=["http://x:1/v1", "http://y:2/v1"]).llm_url == [
        "http://x:1/v1",
        "http://y:2/v1",
    ]


def test_serve_with_an_unreachable_llm_server_names_the_stage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    try:
        code = main(["serve", "--port", "1", "--llm-url", dead, "--llm-model", "llama"])
    finally:
        sock.close()
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"remote LLM stage is unreachable: llm server {dead} refused" in err
    assert "fix:" in err and "PARLEY_LLM_URL" in err
