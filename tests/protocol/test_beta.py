"""The beta protocol (engine/protocol/beta.py), checked against the SDK's beta types.

Every GA event a real session emits (a VAD turn with input transcription, a
text-only response, refusals, a manual turn and a truncate, a barge-in, a failed
transcription and a failed response), and a synthetic GA event for each type the
session does not emit yet, is translated and validated STRICTLY against
`openai.types.beta.realtime.RealtimeServerEvent`: the discriminated union, then no
field the beta types do not declare, at any depth.
"""

from __future__ import annotations

import asyncio
import base64
import json
import typing
from collections.abc import AsyncGenerator
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai import AsyncOpenAI
from openai.resources.beta.realtime.realtime import AsyncRealtimeConnection
from openai.types.beta.realtime import RealtimeServerEvent as BetaServerEvent
from openai.types.beta.realtime.session import Session as BetaSession
from openai.types.realtime import (
    RealtimeServerEvent,
    ResponseAudioDeltaEvent,
    ResponseAudioTranscriptDeltaEvent,
    ResponseTextDeltaEvent,
)

from bench.speech import PCM_RATE as RATE
from bench.speech import load_wav, silence
from engine.emitter import build
from engine.protocol.beta import BETA_MODELS, RENAMED, to_beta, to_beta_text, wants_beta
from models.base import OutputChunk, Prompt, PromptItem
from models.scripted import ScriptedExecutor
from tests.support.audio import append_chunked
from tests.support.harness import Harness
from tests.support.sdk_check import assert_beta_event, assert_sdk_event, event_types
from tests.support.servers import RunningServer, ServerFactory

TIMEOUT_S = 10.0


def _types(union: Any) -> set[str]:
    return set(event_types(union).values())


GA_TYPES = _types(RealtimeServerEvent)
BETA_TYPES = _types(BetaServerEvent)
# Every GA server event type of the SDK -> its beta type (None: dropped): renamed as
# the translation's table says, else kept where beta has the same type.
EXPECTED: dict[str, str | None] = {
    ga: RENAMED.get(ga, ga if ga in BETA_TYPES else None) for ga in GA_TYPES
}

# What the scenarios below make a session emit.
EMITTED = {
    "session.created",
    "session.updated",
    "conversation.created",
    "input_audio_buffer.speech_started",
    "input_audio_buffer.speech_stopped",
    "input_audio_buffer.committed",
    "input_audio_buffer.cleared",
    "conversation.item.added",
    "conversation.item.done",
    "conversation.item.truncated",
    "conversation.item.input_audio_transcription.completed",
    "conversation.item.input_audio_transcription.failed",
    "response.created",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_audio_transcript.delta",
    "response.output_audio.delta",
    "response.output_audio.done",
    "response.output_audio_transcript.done",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.done",
    "error",
}


# --- GA events from real sessions ------------------------------------------------------


class TextHarness(Harness):
    """Also keeps each event's text exactly as the writer would send it."""

    def __init__(self, executor: ScriptedExecutor | None = None) -> None:
        super().__init__(executor)
        self.texts: list[str] = []

    async def _collect(self) -> None:
        while (event := await self.session.outbox.get()) is not None:
            raw = json.loads(event.text)
            assert_sdk_event(raw)
            self.events.append(raw)
            self.texts.append(event.text)


class Broken(ScriptedExecutor):
    """Transcription and generation both fail."""

    async def transcribe(self, item: PromptItem) -> str | None:
        raise RuntimeError("no recognizer")

    async def generate(self, prompt: Prompt) -> AsyncGenerator[OutputChunk, None]:
        raise RuntimeError("model down")
        yield OutputChunk()  # an async generator, never reached


def session_update(vad: bool, transcription: bool = False) -> dict[str, Any]:
    audio_in: dict[str, Any] = {"turn_detection": {"type": "server_vad"} if vad else None}
    if transcription:
        audio_in["transcription"] = {"model": "whisper-1", "language": "en"}
    return {
        "type": "session.update",
        "session": {"type": "realtime", "instructions": "Be brief.", "audio": {"input": audio_in}},
    }


def speech(name: str) -> np.ndarray:
    return np.concatenate([silence(300), load_wav(name), silence(1000)])


async def run_scenarios() -> tuple[list[dict[str, Any]], list[str]]:
    """The GA events (and their texts) of every scenario, in order."""
    events: list[dict[str, Any]] = []
    texts: list[str] = []

    # A VAD turn with input transcription; a text-only response; refusals; a clear;
    # a manual turn whose spoken answer is then truncated.
    async with TextHarness() as h:
        await h.send(session_update(vad=True, transcription=True))
        await append_chunked(h, speech("weather"))
        await h.settle()
        await h.send({"type": "response.create", "response": {"output_modalities": ["text"]}})
        await h.settle()
        await h.send({"type": "response.cancel", "event_id": "evt_client_1"})
        await h.send({"type": "no.such.event"})
        await h.send({"type": "input_audio_buffer.clear"})
        await h.send(session_update(vad=False))
        await h.append(load_wav("joke"))
        await h.send({"type": "input_audio_buffer.commit"})
        await h.send({"type": "response.create"})
        await h.settle()
        answer = h.of("response.done")[-1]["response"]["output"][0]["id"]
        await h.truncate(answer, 300)
        await h.settle()
    events += h.events
    texts += h.texts

    # Barge-in: the user talks over a streaming answer.
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with TextHarness(executor) as h:
        await append_chunked(h, speech("weather"))
        await h.run_until(lambda: len(h.of("response.created")) == 1)
        assert executor.chunk_gate is not None
        executor.chunk_gate.release()
        executor.chunk_gate.release()
        await h.run_until(lambda: len(h.of("response.output_audio.delta")) == 2)
        await append_chunked(h, speech("joke"))
        await h.run_until(lambda: len(h.responses_done()) == 1)
        for _ in range(50):
            executor.chunk_gate.release()
        await h.settle()
    events += h.events
    texts += h.texts

    # Failures: the transcription and the response.
    async with TextHarness(Broken()) as h:
        await h.send(session_update(vad=False, transcription=True))
        await h.append(load_wav("timer"))
        await h.send({"type": "input_audio_buffer.commit"})
        await h.send({"type": "response.create"})
        await h.settle()
    events += h.events
    texts += h.texts
    return events, texts


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def test_expected_names_every_ga_server_event() -> None:
    # A new GA event type in the SDK needs a decision in engine/protocol/beta.py.
    assert set(EXPECTED) == _types(RealtimeServerEvent)
    assert {t for t in EXPECTED.values() if t} <= _types(BetaServerEvent)
    assert set(RENAMED) <= GA_TYPES - BETA_TYPES


def test_renames_are_the_sdks() -> None:
    """Where the SDK models one event under one class name in both unions, with two
    types, the table renames exactly that; its one other rename is Parley's choice:
    beta announced an item once, as `conversation.item.created`."""
    ga, beta = event_types(RealtimeServerEvent), event_types(BetaServerEvent)
    twins = {ga[name]: beta[name] for name in ga.keys() & beta.keys() if ga[name] != beta[name]}
    assert twins == {k: v for k, v in RENAMED.items() if k != "conversation.item.added"}
    assert RENAMED["conversation.item.added"] == "conversation.item.created"


def test_beta_models_are_the_sdks() -> None:
    annotation = BetaSession.model_fields["model"].annotation
    (literal,) = [a for a in typing.get_args(annotation) if a is not type(None)]
    assert set(typing.get_args(literal)) == BETA_MODELS


async def test_every_event_a_session_emits_is_strict_beta() -> None:
    events, _ = await run_scenarios()
    kinds = {e["type"] for e in events}
    assert kinds >= EMITTED
    assert kinds <= set(EXPECTED)
    for event in events:
        beta = to_beta(event)
        if EXPECTED[event["type"]] is None:
            assert beta is None, event["type"]
            continue
        assert beta is not None, event["type"]
        assert beta["type"] == EXPECTED[event["type"]]
        assert beta["event_id"] == event["event_id"]
        assert_beta_event(beta)


async def test_translated_content() -> None:
    events, _ = await run_scenarios()
    beta = [b for b in map(to_beta, events) if b is not None]

    # The session, flat.
    created = of(beta, "session.created")[0]["session"]
    assert created["modalities"] == ["text", "audio"]  # beta pairs audio with text
    assert created["input_audio_format"] == created["output_audio_format"] == "pcm16"
    assert created["voice"] == "alloy"
    assert created["max_response_output_tokens"] == "inf"
    assert created["turn_detection"]["type"] == "server_vad"
    assert "idle_timeout_ms" not in created["turn_detection"]
    assert "model" not in created  # "test" is not a beta model name
    updated = [e["session"] for e in of(beta, "session.updated")]
    assert updated[0]["instructions"] == "Be brief."
    assert updated[0]["input_audio_transcription"] == {"model": "whisper-1", "language": "en"}
    assert updated[1]["turn_detection"] is None  # manual turns

    # Items: created once (GA's `.done` dropped), beta content types.
    assert len(of(beta, "conversation.item.created")) == len(of(events, "conversation.item.added"))
    user = of(beta, "conversation.item.created")[0]["item"]
    assert user["role"] == "user"
    assert user["content"] == [{"type": "input_audio", "transcript": None}]

    # Responses: spoken, text-only, cancelled by barge-in, failed.
    ga_done = [e["response"] for e in of(events, "response.done")]
    done = [e["response"] for e in of(beta, "response.done")]
    spoken = done[0]
    assert spoken["status"] == "completed"
    assert spoken["modalities"] == ["text", "audio"]
    assert spoken["output_audio_format"] == "pcm16" and spoken["voice"] == "alloy"
    transcript = ga_done[0]["output"][0]["content"][0]["transcript"]
    assert transcript.startswith("I heard ")
    assert spoken["output"][0]["content"] == [{"type": "audio", "transcript": transcript}]
    text_only = done[1]
    text = of(events, "response.output_text.done")[0]["text"]
    assert text.endswith(" in 2 items.")
    assert text_only["modalities"] == ["text"]
    assert "voice" not in text_only and "output_audio_format" not in text_only
    assert text_only["output"][0]["content"] == [{"type": "text", "text": text}]
    (cancelled,) = [d for d in done if d["status"] == "cancelled"]
    assert cancelled["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    (failed,) = [d for d in done if d["status"] == "failed"]
    assert failed["status_details"]["error"]["code"] == "model_error"

    # Streams renamed, payloads untouched.
    ga_audio = of(events, "response.output_audio.delta")
    assert [e["delta"] for e in of(beta, "response.audio.delta")] == [e["delta"] for e in ga_audio]
    assert of(beta, "response.text.done")[0]["text"] == text
    assert of(beta, "response.audio_transcript.done")[0]["transcript"] == transcript

    # The rest, as GA sent them.
    (truncated,) = of(beta, "conversation.item.truncated")
    assert truncated["audio_end_ms"] == 300
    codes = [e["error"]["code"] for e in of(beta, "error")]
    assert codes[:2] == ["response_cancel_not_active", "invalid_value"]
    assert of(beta, "error")[0]["error"]["event_id"] == "evt_client_1"
    (failure,) = of(beta, "conversation.item.input_audio_transcription.failed")
    assert "no recognizer" in failure["error"]["message"]
    completed = of(beta, "conversation.item.input_audio_transcription.completed")[0]
    assert completed["transcript"].startswith("audio of ")
    assert completed["usage"]["type"] == "duration"


async def test_to_beta_text_is_to_beta_on_the_wire_text() -> None:
    _, texts = await run_scenarios()
    for text in texts:
        expected = to_beta(json.loads(text))
        out = to_beta_text(text)
        assert (None if out is None else json.loads(out)) == expected
    # Audio deltas keep their exact bytes, only renamed.
    deltas = [t for t in texts if '"type":"response.output_audio.delta"' in t]
    assert deltas
    for text in deltas:
        assert to_beta_text(text) == text.replace(
            '"type":"response.output_audio.delta"', '"type":"response.audio.delta"'
        )


TRICKY = st.sampled_from(
    [
        '"type":"response.output_text.delta"}',
        '", "type":"error"}',
        '\\"type\\":\\"x\\"',
        "é ü 中文 \U0001f600",
        "",
    ]
)


@given(delta=st.one_of(st.text(), TRICKY))
def test_to_beta_text_on_any_delta_text(delta: str) -> None:
    for cls in (ResponseTextDeltaEvent, ResponseAudioTranscriptDeltaEvent):
        event = build(
            cls,
            "event_1",
            response_id="resp_1",
            item_id="item_1",
            output_index=0,
            content_index=0,
            delta=delta,
        )
        text = event.model_dump_json(exclude_unset=True)
        out = to_beta_text(text)
        assert out is not None
        beta = json.loads(out)
        assert beta == to_beta(json.loads(text))
        assert beta["delta"] == delta
        assert_beta_event(beta)


def test_to_beta_text_refusals() -> None:
    assert to_beta_text("not json") is None
    assert to_beta_text("[1, 2]") is None
    assert to_beta_text('{"type": "conversation.item.done"}') is None
    assert to_beta({"type": 3}) is None
    assert to_beta({}) is None
    assert to_beta({"type": "response.mcp_call.completed", "event_id": "e"}) is None
    # Not the compact form the SDK writes: the full path still renames it.
    spaced = '{"type": "response.output_audio.delta", "event_id": "e", "response_id": "r",'
    spaced += ' "item_id": "i", "output_index": 0, "content_index": 0, "delta": "AAAA"}'
    out = to_beta_text(spaced)
    assert out is not None
    assert assert_beta_event(json.loads(out)).type == "response.audio.delta"


def test_audio_delta_fast_path_matches_full_translation() -> None:
    event = build(
        ResponseAudioDeltaEvent,
        "event_9",
        response_id="resp_1",
        item_id="item_1",
        output_index=0,
        content_index=0,
        delta=base64.b64encode(bytes(range(256))).decode(),
    )
    text = event.model_dump_json(exclude_unset=True)
    out = to_beta_text(text)
    assert out is not None
    assert json.loads(out) == to_beta(json.loads(text))


@pytest.mark.parametrize(
    ("header", "subprotocols", "beta"),
    [
        ("realtime=v1", [], True),
        ("assistants=v2, Realtime=V1", [], True),
        (None, ["realtime", "openai-beta.realtime-v1"], True),
        (None, ["realtime", "openai-insecure-api-key.x"], False),
        ("realtime=v2", [], False),
        ("", [], False),
        (None, [], False),
    ],
)
def test_wants_beta(header: str | None, subprotocols: list[str], beta: bool) -> None:
    assert wants_beta(header, subprotocols) is beta


# --- GA events the session does not emit (yet) -------------------------------------------

AUDIO_B64 = base64.b64encode(b"\x00\x01" * 8).decode()
FUNCTION_CALL = {
    "id": "item_fc",
    "object": "realtime.item",
    "type": "function_call",
    "status": "completed",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city": "Paris"}',
}
SYNTHETIC: list[dict[str, Any]] = [
    {
        "type": "session.updated",
        "event_id": "e1",
        "session": {
            "type": "realtime",
            "model": "gpt-realtime",
            "output_modalities": ["text"],
            "max_output_tokens": 200,
            "tool_choice": {"type": "function", "name": "get_weather"},
            "tools": [
                {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
                {"type": "mcp", "server_label": "docs"},
            ],
            "tracing": {"workflow_name": "w"},
            "truncation": "auto",
            "audio": {
                "input": {
                    "format": {"type": "audio/pcmu"},
                    "noise_reduction": {"type": "near_field"},
                    "turn_detection": {
                        "type": "semantic_vad",
                        "eagerness": "high",
                        "create_response": True,
                    },
                    "transcription": {"model": "gpt-4o-transcribe", "keywords": ["Paris"]},
                },
                "output": {"format": {"type": "audio/pcma"}, "voice": {"id": "voice_1"}},
            },
        },
    },
    {
        "type": "conversation.item.retrieved",
        "event_id": "e2",
        "item": {
            "id": "item_u",
            "object": "realtime.item",
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [
                {"type": "input_audio", "audio": AUDIO_B64, "transcript": "hi"},
                {"type": "input_image", "image_url": "data:image/png;base64,AA=="},
                {"type": "input_text", "text": "and this"},
            ],
        },
    },
    {
        "type": "conversation.item.added",
        "event_id": "e3",
        "previous_item_id": None,
        "item": {
            "id": "item_s",
            "type": "message",
            "role": "system",
            "content": [{"type": "input_text", "text": "Be kind."}],
        },
    },
    {"type": "conversation.item.added", "event_id": "e4", "item": FUNCTION_CALL},
    {
        "type": "conversation.item.created",
        "event_id": "e5",
        "previous_item_id": "item_fc",
        "item": {
            "id": "item_fo",
            "type": "function_call_output",
            "call_id": "call_1",
            "output": "sunny",
        },
    },
    {
        "type": "conversation.item.added",
        "event_id": "e6",
        "item": {
            "id": "item_mcp",
            "type": "mcp_call",
            "arguments": "{}",
            "name": "search",
            "server_label": "docs",
        },
    },
    {"type": "conversation.item.deleted", "event_id": "e7", "item_id": "item_u"},
    {
        "type": "conversation.item.input_audio_transcription.delta",
        "event_id": "e8",
        "item_id": "item_u",
        "content_index": 0,
        "delta": "hi",
    },
    {
        "type": "conversation.item.input_audio_transcription.completed",
        "event_id": "e9",
        "item_id": "item_u",
        "content_index": 0,
        "transcript": "hi",
        "languages": [{"code": "en"}],
        "usage": {"type": "tokens", "input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
    },
    {
        "type": "response.function_call_arguments.delta",
        "event_id": "e10",
        "response_id": "resp_1",
        "item_id": "item_fc",
        "output_index": 0,
        "call_id": "call_1",
        "delta": '{"city"',
    },
    {
        "type": "response.function_call_arguments.done",
        "event_id": "e11",
        "response_id": "resp_1",
        "item_id": "item_fc",
        "output_index": 0,
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    },
    {
        "type": "response.done",
        "event_id": "e12",
        "response": {
            "id": "resp_1",
            "object": "realtime.response",
            "status": "incomplete",
            "status_details": {"type": "incomplete", "reason": "max_output_tokens"},
            "output_modalities": ["audio"],
            "audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "ash"}},
            "output": [
                FUNCTION_CALL,
                {"id": "item_m", "type": "mcp_list_tools", "server_label": "d", "tools": []},
            ],
            "usage": {
                "total_tokens": 10,
                "input_tokens": 6,
                "output_tokens": 4,
                "input_token_details": {
                    "audio_tokens": 5,
                    "text_tokens": 1,
                    "image_tokens": 0,
                    "cached_tokens": 0,
                    "cached_tokens_details": {"text_tokens": 0},
                },
                "output_token_details": {"audio_tokens": 3, "text_tokens": 1},
            },
        },
    },
    {
        "type": "rate_limits.updated",
        "event_id": "e13",
        "rate_limits": [{"name": "tokens", "limit": 100, "remaining": 90, "reset_seconds": 1.5}],
    },
    {
        "type": "input_audio_buffer.timeout_triggered",
        "event_id": "e14",
        "item_id": "item_t",
        "audio_start_ms": 0,
        "audio_end_ms": 500,
    },
    {"type": "output_audio_buffer.started", "event_id": "e15", "response_id": "resp_1"},
    {"type": "mcp_list_tools.completed", "event_id": "e16", "item_id": "item_m"},
]


def test_synthetic_ga_events_translate_to_strict_beta() -> None:
    out: dict[str, dict[str, Any] | None] = {}
    for event in SYNTHETIC:
        assert_sdk_event(event)  # a real GA event
        beta = to_beta(event)
        out[event["event_id"]] = beta
        expected = EXPECTED[event["type"]]
        if beta is None:
            assert expected is None or event["event_id"] == "e6", event
            continue
        assert beta["type"] == expected
        assert_beta_event(beta)

    session = out["e1"]
    assert session is not None
    assert session["session"] == {
        "model": "gpt-realtime",
        "modalities": ["text"],
        "max_response_output_tokens": 200,
        "input_audio_format": "g711_ulaw",
        "input_audio_noise_reduction": {"type": "near_field"},
        "turn_detection": {"type": "semantic_vad", "eagerness": "high", "create_response": True},
        "input_audio_transcription": {"model": "gpt-4o-transcribe"},
        "output_audio_format": "g711_alaw",
        "voice": "voice_1",
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
        "tracing": {"workflow_name": "w"},
    }
    retrieved = out["e2"]
    assert retrieved is not None
    assert retrieved["item"]["content"] == [
        {"type": "input_audio", "audio": AUDIO_B64, "transcript": "hi"},
        {"type": "input_text", "text": "and this"},
    ]
    function_call = out["e4"]
    assert function_call is not None and function_call["item"] == FUNCTION_CALL
    assert out["e6"] is None  # an MCP item: no beta equivalent
    done = out["e11"]
    assert done is not None and "name" not in done
    response = out["e12"]
    assert response is not None
    assert response["response"]["modalities"] == ["text", "audio"]
    assert response["response"]["voice"] == "ash"
    assert response["response"]["output"] == [FUNCTION_CALL]
    assert response["response"]["usage"]["input_token_details"] == {
        "audio_tokens": 5,
        "text_tokens": 1,
        "cached_tokens": 0,
    }
    assert out["e14"] is None and out["e16"] is None


# --- the SDK's beta client against a real server --------------------------------------


def beta_client(server: RunningServer) -> AsyncOpenAI:
    # The beta client forces wss unless told where the WebSocket is.
    return AsyncOpenAI(
        base_url=f"{server.http_url}/v1",
        websocket_base_url=f"ws://127.0.0.1:{server.port}/v1",
        api_key="x",
    )


async def send_speech(conn: AsyncRealtimeConnection, name: str) -> None:
    pcm = np.concatenate([load_wav(name), silence(1000)]).astype("<i2")
    step = 20 * RATE // 1000
    for i in range(0, len(pcm), step):
        await conn.input_audio_buffer.append(
            audio=base64.b64encode(pcm[i : i + step].tobytes()).decode()
        )


async def beta_turn(conn: AsyncRealtimeConnection, translate: bool) -> list[dict[str, Any]]:
    """A server-VAD turn from the beta client; every frame (passed through
    `to_beta_text` first when `translate`) validated strictly as beta, until
    `response.done`."""
    await conn.session.update(session={"turn_detection": {"type": "server_vad"}})
    sender = asyncio.create_task(send_speech(conn, "weather"))
    events: list[dict[str, Any]] = []
    try:
        while not events or events[-1]["type"] != "response.done":
            frame = (await asyncio.wait_for(conn.recv_bytes(), TIMEOUT_S)).decode()
            text = to_beta_text(frame) if translate else frame
            if text is None:
                continue
            event = json.loads(text)
            assert_beta_event(event)
            events.append(event)
        await asyncio.wait_for(sender, TIMEOUT_S)
    finally:
        sender.cancel()
    return events


def assert_beta_turn(events: list[dict[str, Any]]) -> None:
    types = [e["type"] for e in events]
    assert "error" not in types
    for kind in (
        "session.created",
        "input_audio_buffer.speech_started",
        "input_audio_buffer.committed",
        "conversation.item.created",
        "response.created",
        "response.audio.delta",
        "response.audio_transcript.done",
        "response.done",
    ):
        assert kind in types
    done = events[-1]["response"]
    assert done["status"] == "completed"
    assert done["output"][0]["content"][0]["type"] == "audio"
    assert done["output"][0]["content"][0]["transcript"].endswith(" samples in 1 items.")


async def test_beta_client_through_the_writer_translation(serve: ServerFactory) -> None:
    """What the writer has to do for a beta client: see its header, and send every
    frame through `to_beta_text`. (Idempotent enough to hold once it does.)"""
    server = await serve(model="parley-scripted")
    async with beta_client(server).beta.realtime.connect(model="parley-scripted") as conn:
        handshake = conn._connection.request
        assert handshake is not None
        assert wants_beta(handshake.headers.get("OpenAI-Beta"), [])
        assert_beta_turn(await beta_turn(conn, translate=True))


async def test_beta_client_end_to_end(serve: ServerFactory) -> None:
    server = await serve(model="parley-scripted")
    async with beta_client(server).beta.realtime.connect(model="parley-scripted") as conn:
        assert_beta_turn(await beta_turn(conn, translate=False))
