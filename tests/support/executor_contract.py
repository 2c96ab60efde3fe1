"""The executor contract: scenes every executor must play the same way, each driven
through an in-process Session by a `Kit` that steers the executor's model.

tests/models/test_executor_contract.py plays them on every executor Parley ships;
tests/vllm/ plays them on a real vLLM engine.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.speech import load_wav, silence
from models.base import Executor
from tests.support.audio import say
from tests.support.harness import Harness

FAILURE = "the model backend is down for the test"


@dataclass
class Kit:
    executor: Executor
    hold: Callable[[], None]  # the model stalls before its next token
    first_sentence: Callable[[], Awaitable[None]]  # lets exactly the first sentence out
    free: Callable[[], Awaitable[None]]  # lets everything flow
    fail: Callable[[], None]  # the next request fails at the backend
    requests: Callable[[], int]  # requests that reached the model
    # Returns once that request is stopped at the model (waits on `Harness.wait_until`).
    stopped: Callable[[str, Harness], Awaitable[None]]
    failure_text: str = FAILURE
    recognizes: bool = False  # the executor runs Parley's speech recognizer
    # Its model calls function tools; else the tools are kept and it answers in speech.
    calls_tools: bool = False
    reads_results: bool = True  # its answer after a call says what the call returned
    # How long `stopped` may take: a safety net, not a target (an overloaded runner
    # serving a real model may notice the closed stream late; the kit reports the
    # time it took as a figure).
    stop_within_s: float = 30.0


def done(h: Harness) -> list[dict[str, Any]]:
    return h.responses_done()


def audio_deltas(h: Harness, response_id: str) -> list[int]:
    return [
        i
        for i, e in enumerate(h.events)
        if e["type"] == "response.output_audio.delta" and e["response_id"] == response_id
    ]


async def a_turn_is_answered_in_speech(kit: Kit) -> None:
    async with Harness(kit.executor) as h:
        await say(h, "weather")
        await h.wait_until(lambda: len(done(h)) == 1)
        response = done(h)[0]
        assert response["status"] == "completed", response
        assert audio_deltas(h, response["id"])
        assert response["output"][0]["content"][0]["transcript"].strip()
        assert kit.requests() == 1
        assert not h.errors()
        # An executor with Parley's recognizer began on the turn in its final pause, and
        # the committed turn used that recognition rather than running another.
        speculation = getattr(kit.executor, "speculation", None)
        if speculation is not None and kit.recognizes:
            assert (speculation.started, speculation.used) == (1, 1), speculation


async def barge_in_mid_stream_aborts_the_model(kit: Kit) -> None:
    kit.hold()
    async with Harness(kit.executor) as h:
        await say(h, "weather")
        await h.wait_until(lambda: len(h.of("response.created")) == 1)
        first = h.of("response.created")[0]["response"]["id"]
        await kit.first_sentence()
        await h.wait_until(lambda: bool(audio_deltas(h, first)))
        # The answer may be the one begun early in the turn's final pause, adopted: the
        # model knows it by that one's id.
        model_id = kit.executor.model_request_id(first)
        await say(h, "joke")  # the user talks over the answer
        await h.wait_until(lambda: len(done(h)) >= 1)
        cancelled = done(h)[0]
        assert cancelled["id"] == first and cancelled["status"] == "cancelled"
        assert cancelled["status_details"]["reason"] == "turn_detected"
        await asyncio.wait_for(kit.stopped(model_id, h), kit.stop_within_s)
        await kit.free()
        await h.wait_until(lambda: len(done(h)) == 2)
        assert done(h)[1]["status"] == "completed"
        done_at = h.index("response.done", **{"response.id": first})
        assert all(i < done_at for i in audio_deltas(h, first))
        assert not h.errors()


async def cancel_before_the_first_token(kit: Kit) -> None:
    kit.hold()
    async with Harness(kit.executor) as h:
        await h.send(
            {
                "type": "session.update",
                "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
            }
        )
        await h.append(np.concatenate([load_wav("weather"), silence(300)]))
        await h.send({"type": "input_audio_buffer.commit"})
        await h.send({"type": "response.create"})
        await h.wait_until(lambda: kit.requests() == 1)  # at the model, nothing out yet
        rid = h.of("response.created")[0]["response"]["id"]
        await h.send({"type": "response.cancel"})
        await h.wait_until(lambda: len(done(h)) == 1)
        cancelled = done(h)[0]
        assert cancelled["status"] == "cancelled"
        assert cancelled["status_details"]["reason"] == "client_cancelled"
        assert audio_deltas(h, rid) == [] and cancelled["output"] == []
        await asyncio.wait_for(kit.stopped(rid, h), kit.stop_within_s)
        await kit.free()
        await h.send({"type": "response.create"})
        await h.wait_until(lambda: len(done(h)) == 2)
        assert done(h)[1]["status"] == "completed"
        assert not h.errors()


async def a_token_limit_cuts_the_answer(kit: Kit) -> None:
    """`max_output_tokens` is honoured: the spoken answer stops at the limit (a token
    is a word or part of one), incomplete for that reason, what was said kept."""
    async with Harness(kit.executor) as h:
        session = {"type": "realtime", "max_output_tokens": 3}
        await h.send({"type": "session.update", "session": session})
        await say(h, "weather")
        await h.wait_until(lambda: len(done(h)) == 1)
        response = done(h)[0]
        assert response["status"] == "incomplete", response
        assert response["status_details"] == {"type": "incomplete", "reason": "max_output_tokens"}
        transcript = response["output"][0]["content"][0]["transcript"]
        assert 0 < len(transcript.split()) <= 3, transcript
        assert audio_deltas(h, response["id"])
        assert not h.errors()


async def a_backend_failure_fails_the_response_and_the_session_lives(kit: Kit) -> None:
    kit.fail()
    async with Harness(kit.executor) as h:
        await say(h, "weather")
        await h.wait_until(lambda: len(done(h)) == 1)
        failed = done(h)[0]
        assert failed["status"] == "failed"
        assert kit.failure_text in failed["status_details"]["error"]["message"]
        await kit.free()  # the backend is back
        await say(h, "joke")
        await h.wait_until(lambda: len(done(h)) == 2)
        assert done(h)[1]["status"] == "completed"
        assert audio_deltas(h, done(h)[1]["id"])


LOOKUP_TOOL = {
    "type": "function",
    "name": "lookup_order",
    "description": "Looks up an order by its id.",
    # The enum leaves a random model nothing to invent under structured outputs.
    "parameters": {
        "type": "object",
        "properties": {"order_id": {"type": "string", "enum": ["A-17"]}},
        "required": ["order_id"],
        "additionalProperties": False,
    },
}


async def a_function_call_round_trips_or_the_tools_are_kept(kit: Kit) -> None:
    """Told to call a tool: an executor whose model calls tools makes the call, takes
    the client's output and speaks an answer; any other keeps the tools in the
    session and answers in speech, with no error."""
    async with Harness(kit.executor) as h:
        choice = {"type": "function", "name": LOOKUP_TOOL["name"]}
        update = {"type": "realtime", "tools": [LOOKUP_TOOL], "tool_choice": choice}
        await h.send({"type": "session.update", "session": update})
        await say(h, "weather")
        await h.wait_until(lambda: len(done(h)) == 1)
        (updated,) = h.of("session.updated")
        assert [t["name"] for t in updated["session"]["tools"]] == [LOOKUP_TOOL["name"]]
        first = done(h)[0]
        assert first["status"] == "completed", first
        if not kit.calls_tools:
            assert [o["type"] for o in first["output"]] == ["message"]
            assert audio_deltas(h, first["id"])
            assert not h.errors()
            return
        (call,) = [o for o in first["output"] if o["type"] == "function_call"]
        assert call["name"] == LOOKUP_TOOL["name"]
        assert isinstance(json.loads(call["arguments"]), dict)
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "shipped"}
        await h.send({"type": "conversation.item.create", "item": output})
        await h.send({"type": "response.create", "response": {"tool_choice": "auto"}})
        await h.wait_until(lambda: len(done(h)) == 2)
        answer = done(h)[1]
        assert answer["status"] == "completed", answer
        assert audio_deltas(h, answer["id"])
        if kit.reads_results:
            assert "shipped" in answer["output"][0]["content"][0]["transcript"]
        assert kit.requests() == 2
        assert not h.errors()


Scene = Callable[[Kit], Awaitable[None]]
# Every scene, in order: test_executor_contract.py plays each on every executor.
SCENES: list[Scene] = [
    a_turn_is_answered_in_speech,
    barge_in_mid_stream_aborts_the_model,
    cancel_before_the_first_token,
    a_backend_failure_fails_the_response_and_the_session_lives,
    a_token_limit_cuts_the_answer,
    a_function_call_round_trips_or_the_tools_are_kept,
]
