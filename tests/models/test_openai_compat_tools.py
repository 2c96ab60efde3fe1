"""Function calling through the openai_compat executor, against a fake backend that
streams `tool_calls` as vLLM's OpenAI server does (bench/fakes/openai.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from bench.fakes.openai import FakeOpenAI, running_fake_openai
from bench.speech import load_wav
from models.base import FunctionCall, OutputChunk, Prompt, PromptItem, Tool
from models.openai_compat import (
    BackendOptions,
    OpenAICompatExecutor,
    _CallParts,
    chat_tool_choice,
    function_calls,
    merge_tool_call_deltas,
)
from models.speech.slots import StageSlots
from models.speech.speaker import Speaker
from models.speech.tts import FliteSynthesizer
from tests.support.audio import say
from tests.support.harness import Harness
from tests.support.prompts import function_call, function_output

SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}}}
LOOKUP = Tool("lookup_order", "Looks up an order by its id.", json.dumps(SCHEMA))
ARGUMENTS = '{"order_id": "A-17"}'
TURN = PromptItem("item_1", "user", audio=load_wav("weather"), rate=24_000)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with running_fake_openai() as server:
        yield server


def executor(fake: FakeOpenAI) -> OpenAICompatExecutor:
    speaker = Speaker(FliteSynthesizer(), StageSlots("tts", 1))
    return OpenAICompatExecutor(BackendOptions(urls=(fake.url("a"),)), speaker)


async def collect(ex: OpenAICompatExecutor, p: Prompt) -> list[OutputChunk]:
    return [chunk async for chunk in ex.generate(p)]


def test_streamed_tool_call_pieces_fold_into_whole_calls() -> None:
    parts: dict[int, _CallParts] = {}
    merge_tool_call_deltas(parts, [{"index": 0, "id": "c1", "function": {"name": "f"}}])
    merge_tool_call_deltas(parts, [{"index": 1, "id": "c2", "function": {"name": "g"}}])
    merge_tool_call_deltas(parts, [{"index": 0, "function": {"arguments": '{"a": '}}])
    merge_tool_call_deltas(parts, [{"index": 0, "function": {"arguments": "1}"}}])
    assert function_calls(parts, "resp_1") == [
        FunctionCall("f", '{"a": 1}', "c1"),
        FunctionCall("g", "{}", "c2"),  # no arguments streamed: an empty object
    ]
    assert chat_tool_choice("auto") == "auto"
    assert chat_tool_choice("lookup_order") == {
        "type": "function",
        "function": {"name": "lookup_order"},
    }


async def test_a_tool_call_and_its_result_round_trip(fake: FakeOpenAI) -> None:
    ex = executor(fake)
    try:
        asked = Prompt(
            "resp_abcdef000001", "Be brief.", (TURN,), tools=(LOOKUP,), tool_choice=LOOKUP.name
        )
        chunks = await collect(ex, asked)
        calls = [c.function_call for c in chunks if c.function_call is not None]
        assert calls == [FunctionCall("lookup_order", ARGUMENTS, "chatcmpl-tool-1")]
        assert "".join(c.text for c in chunks) == ""  # nothing said besides the call
        _, body = fake.requests[-1]
        assert body["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "lookup_order",
                    "description": "Looks up an order by its id.",
                    "parameters": SCHEMA,
                },
            }
        ]
        assert body["tool_choice"] == {"type": "function", "function": {"name": "lookup_order"}}

        history = (
            TURN,
            function_call("item_2", "chatcmpl-tool-1", "lookup_order", ARGUMENTS),
            function_output("item_3", "chatcmpl-tool-1", '{"status": "shipped"}'),
        )
        answered = Prompt("resp_abcdef000002", "Be brief.", history, tools=(LOOKUP,))
        chunks = await collect(ex, answered)
        said = "".join(c.text for c in chunks)
        assert said == 'The order tool said {"status": "shipped"}.'
        assert any(c.audio is not None and len(c.audio) for c in chunks)  # spoken
        _, body = fake.requests[-1]
        assistant, tool = body["messages"][-2:]
        assert assistant["role"] == "assistant" and assistant["content"] is None
        assert assistant["tool_calls"] == [
            {
                "id": "chatcmpl-tool-1",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": ARGUMENTS},
            }
        ]
        assert tool == {
            "role": "tool",
            "tool_call_id": "chatcmpl-tool-1",
            "content": '{"status": "shipped"}',
        }
        assert body["tool_choice"] == "auto"
    finally:
        await ex.aclose()


async def test_tool_choice_none_sends_no_tools(fake: FakeOpenAI) -> None:
    ex = executor(fake)
    try:
        quiet = Prompt(
            "resp_abcdef000001",
            "",
            (TURN,),
            output_modalities=("text",),
            tools=(LOOKUP,),
            tool_choice="none",
        )
        chunks = await collect(ex, quiet)
        assert not any(c.function_call for c in chunks)
        _, body = fake.requests[-1]
        assert "tools" not in body and "tool_choice" not in body
    finally:
        await ex.aclose()


async def test_a_session_s_function_call_round_trip_on_openai_compat(fake: FakeOpenAI) -> None:
    """The events a client sees: the call's arguments streamed and done, the client's
    output, and a spoken answer that reads it, as on the scripted executor."""
    ex = executor(fake)
    tool = {
        "type": "function",
        "name": "lookup_order",
        "description": LOOKUP.description,
        "parameters": SCHEMA,
    }
    try:
        async with Harness(executor=ex) as h:
            await h.send(
                {
                    "type": "session.update",
                    "session": {
                        "type": "realtime",
                        "tools": [tool],
                        "tool_choice": {"type": "function", "name": "lookup_order"},
                    },
                }
            )
            await say(h, "weather")
            await h.wait_until(lambda: len(h.responses_done()) == 1)
            (args,) = h.of("response.function_call_arguments.done")
            assert (args["name"], args["arguments"]) == ("lookup_order", ARGUMENTS)
            assert (
                "".join(d["delta"] for d in h.of("response.function_call_arguments.delta"))
                == ARGUMENTS
            )
            (done,) = h.responses_done()
            assert [o["type"] for o in done["output"]] == ["function_call"]
            output = {
                "type": "function_call_output",
                "call_id": args["call_id"],
                "output": '{"status": "shipped"}',
            }
            await h.send({"type": "conversation.item.create", "item": output})
            await h.send({"type": "response.create", "response": {"tool_choice": "auto"}})
            await h.wait_until(lambda: len(h.responses_done()) == 2)
            answer = h.responses_done()[1]
            assert answer["status"] == "completed"
            transcript = answer["output"][0]["content"][0]["transcript"]
            assert transcript == 'The order tool said {"status": "shipped"}.'
            assert not h.errors()
    finally:
        await ex.aclose()
