"""The OpenAI Agents SDK's realtime model against a real Parley server.

`agents.realtime.OpenAIRealtimeWebSocketModel` validates every server event with a
pydantic TypeAdapter over the SDK's `RealtimeServerEvent` and turns a failure into
an `error` event of the session (an exception into one raised by the iterator), so a
turn that ends without either is a turn the SDK read in full. It is pointed at us
with the `url` and `headers` connect options.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from agents import FunctionTool, function_tool
from agents.realtime import (
    OpenAIRealtimeWebSocketModel,
    RealtimeAgent,
    RealtimeRunner,
    RealtimeSession,
    RealtimeSessionEvent,
)
from agents.realtime.items import (
    AssistantMessageItem,
    InputAudio,
    RealtimeItem,
    RealtimeToolCallItem,
    UserMessageItem,
)

from bench.speech import load_wav, silence
from models.scripted import ScriptedExecutor
from tests.support.servers import RunningServer, ServerFactory

TIMEOUT_S = 15.0
MODEL = "parley-scripted"
CHUNK = 480  # 20 ms at 24 kHz


async def start(server: RunningServer, tools: list[FunctionTool] | None = None) -> RealtimeSession:
    runner = RealtimeRunner(
        RealtimeAgent(name="assistant", instructions="Answer briefly.", tools=tools or []),
        model=OpenAIRealtimeWebSocketModel(),
    )
    return await runner.run(
        model_config={
            "url": f"{server.ws_url}?model={MODEL}",
            "headers": {"Authorization": "Bearer x"},
            "initial_model_settings": {
                "model_name": MODEL,
                # Turn detection left to the SDK's default: semantic_vad.
            },
        }
    )


async def send_speech(session: RealtimeSession, name: str) -> None:
    # Then silence, as a microphone keeps sending: semantic_vad (the SDK's default)
    # waits longer than server_vad when its model is unsure the speaker is done, up to
    # 4 s at its default eagerness.
    pcm = np.concatenate([load_wav(name), silence(4500)]).astype("<i2")
    for i in range(0, len(pcm), CHUNK):
        await session.send_audio(pcm[i : i + CHUNK].tobytes())


async def events_until(
    session: RealtimeSession, seen: list[RealtimeSessionEvent], done: Callable[[], bool]
) -> None:
    """Collect session events into `seen` until `done()`; TIMEOUT_S in all."""

    async def collect() -> None:
        async for event in session:
            seen.append(event)
            if done():
                return

    await asyncio.wait_for(collect(), TIMEOUT_S)


async def spoken_turn(
    server: RunningServer,
    caplog: pytest.LogCaptureFixture,
    agent_ends: int,
    tools: list[FunctionTool] | None = None,
) -> list[RealtimeSessionEvent]:
    """Say "weather" to an agent; every session event up to its `agent_ends`-th end and
    the input transcript (which arrives on its own schedule: wait for both)."""
    caplog.set_level(logging.ERROR, logger="openai.agents")
    seen: list[RealtimeSessionEvent] = []
    async with await start(server, tools) as session:
        sender = asyncio.create_task(send_speech(session, "weather"))
        await events_until(
            session,
            seen,
            lambda: count(seen, "agent_end") == agent_ends and user_transcript(seen) is not None,
        )
        await asyncio.wait_for(sender, TIMEOUT_S)
    return seen


def count(seen: list[RealtimeSessionEvent], kind: str) -> int:
    return sum(e.type == kind for e in seen)


def history(seen: list[RealtimeSessionEvent]) -> list[RealtimeItem]:
    updates = [e.history for e in seen if e.type == "history_updated"]
    return updates[-1] if updates else []


def user_transcript(seen: list[RealtimeSessionEvent]) -> str | None:
    users = [i for i in history(seen) if isinstance(i, UserMessageItem)]
    content = users[0].content[0] if users and users[0].content else None
    return content.transcript if isinstance(content, InputAudio) else None


def responses_done(seen: list[RealtimeSessionEvent]) -> list[dict[str, Any]]:
    """The `response` of every `response.done` the model received, in order."""
    return [
        e.data.data["response"]
        for e in seen
        if e.type == "raw_model_event"
        and e.data.type == "raw_server_event"
        and e.data.data["type"] == "response.done"
    ]


def server_event_types(seen: list[RealtimeSessionEvent]) -> list[str]:
    """The raw server events the model passed through, by type."""
    return [
        e.data.data["type"]
        for e in seen
        if e.type == "raw_model_event" and e.data.type == "raw_server_event"
    ]


def assert_no_errors(seen: list[RealtimeSessionEvent], caplog: pytest.LogCaptureFixture) -> None:
    errors: list[Any] = [e.error for e in seen if e.type == "error"]
    assert errors == []
    assert "error" not in server_event_types(seen)
    failed = [r.getMessage() for r in caplog.records if "Failed to validate" in r.getMessage()]
    assert failed == []


async def test_agents_sdk_completes_a_voice_turn(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    seen = await spoken_turn(server, caplog, agent_ends=1)
    items = history(seen)

    assert_no_errors(seen, caplog)
    types = server_event_types(seen)
    for kind in (
        "session.created",
        "session.updated",
        "input_audio_buffer.speech_started",
        "input_audio_buffer.committed",
        "response.output_audio.delta",
        "response.done",
    ):
        assert kind in types
    audio = [e.audio.data for e in seen if e.type == "audio"]
    assert audio and all(len(chunk) > 0 for chunk in audio)
    assert [e.type for e in seen].count("audio_end") == 1

    # The SDK built the conversation from our items: the user's audio turn (with the
    # transcript its default input transcription asked for) and our spoken answer.
    user = [i for i in items if isinstance(i, UserMessageItem)]
    assistant = [i for i in items if isinstance(i, AssistantMessageItem)]
    assert len(user) == 1 and len(assistant) == 1
    assert user[0].content[0].type == "input_audio"
    heard = user[0].content[0].transcript
    assert heard is not None and heard.startswith("audio of ")
    answer = assistant[0].content[0]
    assert answer.type == "audio" and answer.transcript is not None
    assert answer.transcript.endswith(" samples in 1 items.")
    assert ScriptedExecutor.samples_heard(answer.transcript) == int(heard.split()[2])
    assert assistant[0].status == "completed"


async def test_agents_sdk_barge_in_truncates_and_answers_again(
    serve: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # Slow chunks: the first answer streams for seconds, long enough to talk over.
    server = await serve(scripted_chunk_delay_s=0.5)
    caplog.set_level(logging.ERROR, logger="openai.agents")
    seen: list[RealtimeSessionEvent] = []
    async with await start(server) as session:
        await send_speech(session, "weather")
        await events_until(session, seen, lambda: count(seen, "audio") > 0)
        # The user talks over the answer: the SDK stops playback and truncates it.
        await send_speech(session, "joke")
        await events_until(session, seen, lambda: count(seen, "agent_end") == 2)

    assert_no_errors(seen, caplog)
    assert any(e.type == "audio_interrupted" for e in seen)
    types = server_event_types(seen)
    assert types.count("response.done") == 2
    assert "conversation.item.truncated" in types
    dones = responses_done(seen)
    assert [d["status"] for d in dones] == ["cancelled", "completed"]
    assert dones[0]["status_details"]["reason"] == "turn_detected"


async def test_agents_sdk_runs_a_function_tool_and_answers_with_its_output(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    # The SDK sends the agent's tools in its session.update; the scripted executor
    # calls the first one with {"samples": <samples of the user turn>}, the SDK runs
    # it here, sends a function_call_output item and asks for the answer itself.
    forecast = "sunny and 21 degrees"
    calls: list[int] = []

    @function_tool
    def get_weather(samples: int) -> str:
        """Tell the weather where the user is."""
        calls.append(samples)
        return forecast

    seen = await spoken_turn(server, caplog, agent_ends=2, tools=[get_weather])
    items = history(seen)

    assert_no_errors(seen, caplog)
    heard = user_transcript(seen)
    assert heard is not None and heard.startswith("audio of ")
    samples = int(heard.split()[2])
    assert samples > 0
    # The tool ran once, with the arguments the server sent.
    assert calls == [samples]
    starts = [e for e in seen if e.type == "tool_start"]
    ends = [e for e in seen if e.type == "tool_end"]
    assert len(starts) == 1 and len(ends) == 1
    assert starts[0].tool.name == "get_weather"
    assert json.loads(starts[0].arguments) == {"samples": samples}
    assert ends[0].output == forecast

    types = server_event_types(seen)
    assert "response.function_call_arguments.done" in types
    assert types.count("response.done") == 2
    dones = responses_done(seen)
    assert [d["status"] for d in dones] == ["completed", "completed"]
    assert [o["type"] for o in dones[0]["output"]] == ["function_call"]

    # History: the user's turn, the completed call with its output, then the answer.
    tool_items = [i for i in items if isinstance(i, RealtimeToolCallItem)]
    assert len(tool_items) == 1
    assert tool_items[0].name == "get_weather"
    assert json.loads(tool_items[0].arguments) == {"samples": samples}
    assert tool_items[0].output == forecast
    assert tool_items[0].status == "completed"
    assistant = [i for i in items if isinstance(i, AssistantMessageItem)]
    assert len(assistant) == 1
    answer = assistant[0].content[0]
    assert answer.type == "audio" and answer.transcript == f"The tool said {forecast}."
    assert assistant[0].status == "completed"
    assert [type(i) for i in items] == [UserMessageItem, RealtimeToolCallItem, AssistantMessageItem]
