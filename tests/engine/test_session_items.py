"""Conversation items, tools, out-of-band responses and the other GA client events."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np

from bench.speech import load_wav, silence
from engine.limits import EngineLimits
from models.scripted import ScriptedExecutor
from tests.support.audio import append_chunked
from tests.support.harness import Harness

MANUAL = {
    "type": "session.update",
    "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
}
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def text_item(text: str, role: str = "user", item_id: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "message",
        "role": role,
        "content": [{"type": "input_text" if role != "assistant" else "output_text", "text": text}],
    }
    if item_id:
        item["id"] = item_id
    return item


async def test_item_create_retrieve_delete_and_ordering() -> None:
    async with Harness() as h:
        await h.send({"type": "conversation.item.create", "item": text_item("one", item_id="a")})
        await h.send({"type": "conversation.item.create", "item": text_item("two", item_id="b")})
        await h.send(
            {
                "type": "conversation.item.create",
                "item": text_item("zero", item_id="z"),
                "previous_item_id": "root",
            }
        )
        await h.send(
            {
                "type": "conversation.item.create",
                "item": text_item("half", item_id="h"),
                "previous_item_id": "a",
            }
        )
        audio = base64.b64encode(load_wav("joke").tobytes()).decode()
        await h.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "id": "v",
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_audio", "audio": audio}],
                },
            }
        )
        await h.send({"type": "conversation.item.retrieve", "item_id": "v"})
        await h.send({"type": "conversation.item.delete", "item_id": "b"})
        await h.settle()
        assert [i.id for i in h.session.conversation.items] == ["z", "a", "h", "v"]
        added = h.of("conversation.item.added")
        assert [(e["item"]["id"], e["previous_item_id"]) for e in added] == [
            ("a", None),
            ("b", "a"),
            ("z", None),
            ("h", "a"),
            ("v", "b"),
        ]
        (retrieved,) = h.of("conversation.item.retrieved")
        part = retrieved["item"]["content"][0]
        assert part["type"] == "input_audio"
        assert np.array_equal(
            np.frombuffer(base64.b64decode(part["audio"]), "<i2"), load_wav("joke")
        )
        assert h.of("conversation.item.deleted")[0]["item_id"] == "b"
        assert not h.errors()

        # The created items are the prompt: the audio item is the latest user turn.
        await h.send({"type": "response.create"})
        await h.settle()
        prompt = h.scripted.prompts[-1]
        assert [i.id for i in prompt.items] == ["z", "a", "h", "v"]
        assert len(prompt.items[-1].audio) == len(load_wav("joke"))


async def test_item_refusals() -> None:
    async with Harness() as h:
        await h.send({"type": "conversation.item.create", "item": text_item("x", item_id="a")})
        bad = [
            (
                {"type": "conversation.item.create", "item": text_item("y", item_id="a")},
                "invalid_value",
                "item.id",
            ),
            (
                {
                    "type": "conversation.item.create",
                    "item": text_item("y"),
                    "previous_item_id": "nope",
                },
                "item_not_found",
                "previous_item_id",
            ),
            (
                {"type": "conversation.item.create", "item": {"type": "message", "role": "user"}},
                "missing_required_parameter",
                "item.content",
            ),
            (
                {
                    "type": "conversation.item.create",
                    "item": {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_audio", "audio": "%%%"}],
                    },
                },
                "invalid_value",
                "item.content[0].audio",
            ),
            (
                {
                    "type": "conversation.item.create",
                    "item": {"type": "function_call_output", "output": "1"},
                },
                "missing_required_parameter",
                "item.call_id",
            ),
            (
                {"type": "conversation.item.retrieve", "item_id": "nope"},
                "item_not_found",
                "item_id",
            ),
            ({"type": "conversation.item.delete", "item_id": "nope"}, "item_not_found", "item_id"),
        ]
        for event, _, _ in bad:
            await h.send({**event, "event_id": "e"})
        await h.settle()
        assert [(e["code"], e["param"]) for e in h.errors()] == [(c, p) for _, c, p in bad]
        assert all(e["event_id"] == "e" for e in h.errors())
        assert [i.id for i in h.session.conversation.items] == ["a"]


async def test_function_call_round_trip() -> None:
    async with Harness() as h:
        await h.send(
            {"type": "session.update", "session": {"type": "realtime", "tools": [WEATHER_TOOL]}}
        )
        await h.send(MANUAL)
        await h.append(load_wav("weather"))
        await h.send({"type": "input_audio_buffer.commit"})
        await h.send({"type": "response.create"})
        await h.settle()
        done = h.responses_done()[0]
        assert done["status"] == "completed"
        (call,) = done["output"]  # no empty message beside the call
        assert call["type"] == "function_call" and call["name"] == "get_weather"
        assert json.loads(call["arguments"]) == {"samples": len(load_wav("weather"))}
        (args,) = h.of("response.function_call_arguments.done")
        assert args["call_id"] == call["call_id"] and args["arguments"] == call["arguments"]
        assert (
            "".join(e["delta"] for e in h.of("response.function_call_arguments.delta"))
            == (call["arguments"])
        )
        assert h.session.conversation.items[-1].id == call["id"]

        await h.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "function_call_output",
                    "call_id": call["call_id"],
                    "output": "sunny",
                },
            }
        )
        await h.send({"type": "response.create"})
        await h.settle()
        answer = h.responses_done()[1]["output"][0]
        assert answer["content"][0]["transcript"] == "The tool said sunny."
        kinds = [i.kind for i in h.scripted.prompts[-1].items]
        assert kinds == ["message", "function_call", "function_call_output"]
        assert not h.errors()


async def test_per_response_tools_choice_none_and_session_tools_cleared() -> None:
    async with Harness() as h:
        await h.send(
            {
                "type": "response.create",
                "response": {"tools": [WEATHER_TOOL], "tool_choice": "none"},
            }
        )
        await h.settle()
        assert h.responses_done()[0]["output"][0]["type"] == "message"
        await h.send({"type": "response.create", "response": {"tools": [WEATHER_TOOL]}})
        await h.settle()
        assert h.responses_done()[1]["output"][0]["type"] == "function_call"
        await h.send({"type": "session.update", "session": {"tools": [WEATHER_TOOL]}})
        await h.send({"type": "session.update", "session": {"tools": []}})
        await h.send({"type": "response.create"})
        await h.settle()
        assert h.of("session.updated")[-1]["session"]["tools"] == []
        assert h.responses_done()[2]["output"][0]["type"] == "message"


async def test_max_output_tokens_makes_the_response_incomplete() -> None:
    async with Harness() as h:
        await h.send({"type": "response.create", "response": {"max_output_tokens": 2}})
        await h.settle()
        done = h.responses_done()[0]
        assert done["status"] == "incomplete"
        assert done["status_details"] == {"type": "incomplete", "reason": "max_output_tokens"}
        assert done["output"][0]["content"][0]["transcript"] == "I heard"
        assert done["output"][0]["status"] == "incomplete"


async def test_out_of_band_response_runs_beside_the_active_one() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        await h.send({"type": "conversation.item.create", "item": text_item("hi", item_id="a")})
        await h.send({"type": "response.create"})
        await h.run_until(lambda: len(h.of("response.created")) == 1)
        await h.send(
            {
                "type": "response.create",
                "response": {
                    "conversation": "none",
                    "output_modalities": ["text"],
                    "metadata": {"topic": "x"},
                    "input": [
                        {"type": "item_reference", "id": "a"},
                        text_item("summarize", item_id="s"),
                    ],
                },
            }
        )
        await h.run_until(lambda: len(h.of("response.created")) == 2)
        oob_id = h.of("response.created")[1]["response"]["id"]
        assert executor.chunk_gate is not None
        for _ in range(40):
            executor.chunk_gate.release()
        await h.settle()
        done = {r["id"]: r for r in h.responses_done()}
        oob = done[oob_id]
        assert oob["status"] == "completed" and oob["conversation_id"] is None
        assert oob["metadata"] == {"topic": "x"}
        assert [i.id for i in executor.prompts[1].items] == ["a", "s"]
        # Out of band: nothing joined the conversation but the in-band answer.
        assert [i.role for i in h.session.conversation.items] == ["user", "assistant"]
        assert not h.errors()


async def test_cancel_an_out_of_band_response_by_id() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        await h.send({"type": "response.create", "response": {"conversation": "none"}})
        await h.run_until(lambda: len(h.of("response.created")) == 1)
        oob_id = h.of("response.created")[0]["response"]["id"]
        assert executor.chunk_gate is not None
        executor.chunk_gate.release()
        await h.run_until(lambda: len(h.of("response.output_audio.delta")) == 1)
        await h.send({"type": "response.cancel", "response_id": oob_id})
        await h.run_until(lambda: len(h.responses_done()) == 1)
        for _ in range(20):
            executor.chunk_gate.release()
        await h.settle()
        (done,) = h.responses_done()
        assert done["status"] == "cancelled" and executor.aborted == [oob_id]
        at = h.index("response.done")
        assert not [e for e in h.events[at:] if e["type"] == "response.output_audio.delta"]


async def test_output_audio_buffer_clear_stops_the_answer() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        await h.send({"type": "output_audio_buffer.clear", "event_id": "c0"})
        await h.send({"type": "response.create"})
        await h.run_until(lambda: len(h.of("response.created")) == 1)
        await h.send({"type": "output_audio_buffer.clear"})
        await h.run_until(lambda: len(h.of("output_audio_buffer.cleared")) == 1)
        assert h.errors()[0]["event_id"] == "c0"  # nothing to clear yet
        done = h.responses_done()[0]
        assert done["status"] == "cancelled"
        cleared = h.of("output_audio_buffer.cleared")[0]
        assert cleared["response_id"] == done["id"]
        assert h.index("response.done") < h.index("output_audio_buffer.cleared")


async def test_idle_timeout_prompts_after_silence() -> None:
    async with Harness() as h:
        await h.update_audio(
            input={"turn_detection": {"type": "server_vad", "idle_timeout_ms": 2000}}
        )
        pcm = np.concatenate([silence(300), load_wav("weather"), silence(900)])
        await append_chunked(h, pcm, 2400)
        await h.settle()
        assert len(h.responses_done()) == 1
        answer_ms = h.session.conversation.items[-1].audio_ms
        # Silence: the answer plays, then 2 s more; only then the timeout fires.
        for _ in range((answer_ms + 1900) // 100):
            await h.append(silence(100))
        await h.settle()
        assert h.of("input_audio_buffer.timeout_triggered") == []
        for _ in range(3):
            await h.append(silence(100))
        await h.settle()
        (timeout,) = h.of("input_audio_buffer.timeout_triggered")
        assert timeout["audio_end_ms"] > timeout["audio_start_ms"]
        assert h.of("input_audio_buffer.committed")[-1]["item_id"] == timeout["item_id"]
        assert len(h.responses_done()) == 2
        assert not h.errors()


async def test_g711_in_and_out_with_real_speech() -> None:
    """μ-law in, A-law out, through a server_vad turn: the turn is found in the 8 kHz
    input, and the answer's audio arrives as 8 kHz A-law."""
    from engine.audio_format import PCMA, PCMU, InputDecoder, OutputEncoder, alaw_decode

    async with Harness() as h:
        await h.update_audio(
            input={"format": {"type": "audio/pcmu"}},
            output={"format": {"type": "audio/pcma"}},
        )
        speech = np.concatenate([silence(600), load_wav("weather"), silence(1000)])
        ulaw = OutputEncoder(PCMU)
        data = ulaw.encode(speech) + ulaw.flush()
        for i in range(0, len(data), 160):  # 20 ms at 8 kHz, one byte a sample
            await h.send(
                {
                    "type": "input_audio_buffer.append",
                    "audio": base64.b64encode(data[i : i + 160]).decode(),
                }
            )
        await h.settle()
        session = h.of("session.updated")[-1]["session"]["audio"]
        assert session["input"]["format"] == {"type": "audio/pcmu"}
        assert session["output"]["format"] == {"type": "audio/pcma"}
        started = h.of("input_audio_buffer.speech_started")[0]
        assert 200 <= started["audio_start_ms"] <= 400  # speech at 600 ms, less 300 padding
        done = h.responses_done()[0]
        assert done["status"] == "completed"
        assert done["audio"]["output"]["format"] == {"type": "audio/pcma"}
        out = b"".join(base64.b64decode(e["delta"]) for e in h.of("response.output_audio.delta"))
        words = len(done["output"][0]["content"][0]["transcript"].split())
        assert len(out) == words * 800  # 100 ms chunks of 8 kHz A-law
        tone = alaw_decode(out)
        assert np.abs(tone.astype(np.int32)).max() > 500  # the scripted tone, not silence
        # And the decoder the session used hears the same speech length back.
        assert len(InputDecoder(PCMU).decode(data)) > len(speech) - 24 * 80
        assert PCMA.rate == 8000
        assert not h.errors()


async def test_out_of_band_responses_end_with_their_session() -> None:
    """A client that starts answers outside the conversation and leaves: every model
    request is aborted and every response task ends with the session."""
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        await h.send({"type": "response.create"})
        for _ in range(2):
            await h.send({"type": "response.create", "response": {"conversation": "none"}})
        await h.run_until(lambda: len(h.of("response.created")) == 3)
        ids = [e["response"]["id"] for e in h.of("response.created")]
        tasks = [
            task
            for task in asyncio.all_tasks()
            if task.get_name() in {f"response:{i}" for i in ids}
        ]
        assert len(tasks) == 3
    assert sorted(executor.aborted) == sorted(ids)
    assert all(task.done() for task in tasks)


async def test_out_of_band_responses_are_bounded_per_session() -> None:
    """One more out-of-band response than the limit is refused with an error and
    nothing else changes; once one ends, another is accepted."""
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor, limits=EngineLimits(max_out_of_band_responses=2)) as h:
        oob = {"type": "response.create", "response": {"conversation": "none"}}
        await h.send(oob)
        await h.send(oob)
        await h.run_until(lambda: len(h.of("response.created")) == 2)
        await h.send({**oob, "event_id": "third"})
        await h.run_until(lambda: len(h.errors()) == 1)
        (error,) = h.errors()
        assert error["type"] == "invalid_request_error"
        assert error["code"] == "too_many_active_responses"
        assert error["param"] == "response.conversation" and error["event_id"] == "third"
        assert len(h.of("response.created")) == 2 and h.responses_done() == []
        # The conversation's own response is not limited by out-of-band ones.
        await h.send({"type": "response.create"})
        await h.run_until(lambda: len(h.of("response.created")) == 3)
        first = h.of("response.created")[0]["response"]["id"]
        await h.send({"type": "response.cancel", "response_id": first})
        await h.run_until(lambda: len(h.responses_done()) == 1)
        await h.send(oob)
        await h.run_until(lambda: len(h.of("response.created")) == 4)
        assert len(h.errors()) == 1
        assert executor.chunk_gate is not None
        for _ in range(200):
            executor.chunk_gate.release()
        await h.settle()
        statuses = sorted(r["status"] for r in h.responses_done())
        assert statuses == ["cancelled", "completed", "completed", "completed"]
        assert len(h.errors()) == 1


async def test_an_out_of_band_response_keeps_the_session_busy() -> None:
    """A graceful shutdown waits for `idle()`: answers outside the conversation count."""
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        await h.send({"type": "response.create", "response": {"conversation": "none"}})
        await h.run_until(lambda: len(h.of("response.created")) == 1)
        await h.steps(20)
        assert not h.session.idle()
        assert executor.chunk_gate is not None
        for _ in range(40):
            executor.chunk_gate.release()
        await h.settle()
        assert h.session.idle() and h.responses_done()[0]["status"] == "completed"


async def test_ended_out_of_band_responses_leave_nothing_behind() -> None:
    """Each out-of-band response has an output lane and a sent-ledger entry; once it
    has ended and its output is sent they go, so a long session does not pile them up.
    All of its audio still reaches the client."""
    async with Harness() as h:
        for _ in range(10):
            await h.send({"type": "response.create", "response": {"conversation": "none"}})
            await h.settle()
        await h.send({"type": "response.create", "response": {"conversation": "none"}})
        await h.settle()
        done = h.responses_done()
        assert [r["status"] for r in done] == ["completed"] * 11
        for response in done:
            words = response["output"][0]["content"][0]["transcript"].split()
            deltas = [
                e for e in h.of("response.output_audio.delta") if e["response_id"] == response["id"]
            ]
            assert len(deltas) == len(words)
        assert all(h.session.responder.lane_epoch(r["id"]) == -1 for r in done[:10])
        assert len(h.session.playback.sent_items()) <= 1
        assert not h.errors()
