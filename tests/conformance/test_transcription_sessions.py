"""Transcription sessions (`session.type: "transcription"`) against a real server, from
the official SDK's GA client: every event validated strictly against the SDK's types
(tests/support/sdk_check.py), the session events against its transcription shape.

The scripted executor's recognizer says how many samples a turn held, so a transcript
tells exactly which audio was committed; tests/models/test_cascade_ws.py hears the
spoken words with the embedded recognizer."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI
from openai.types.realtime import (
    ClientSecretCreateResponse,
    RealtimeTranscriptionSessionCreateRequest,
    RealtimeTranscriptionSessionCreateResponse,
)
from websockets.asyncio.client import connect

from bench.rtc_client import CallRefused
from tests.support.audio import sdk_append_chunked, utterance
from tests.support.events import TIMEOUT_S, Events
from tests.support.refusals import handshake_refusal
from tests.support.sdk_check import assert_beta_event
from tests.support.servers import RunningServer, ServerFactory
from tests.support.webrtc_client import rtc_call

SERVER_VAD = {"type": "server_vad", "silence_duration_ms": 500}


@pytest.fixture
async def server(serve: ServerFactory) -> RunningServer:
    return await serve()


def sdk(server: RunningServer, key: str = "x") -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{server.http_url}/v1", api_key=key)


@pytest.fixture
async def transcribing(server: RunningServer) -> AsyncIterator[tuple[Any, Events]]:
    """A GA SDK connection opened with `intent=transcription` (what the SDK documents
    for transcription sessions), read up to its session.created."""
    manager = sdk(server).realtime.connect(extra_query={"intent": "transcription"})
    async with manager as conn:
        events = Events(conn.recv_bytes)
        created = await events.until("session.created")
        session = RealtimeTranscriptionSessionCreateRequest.model_validate(created["session"])
        assert session.type == "transcription"
        yield conn, events


def transcription_update(**audio_input: Any) -> dict[str, Any]:
    return {"type": "transcription", "audio": {"input": audio_input}}


@pytest.mark.parametrize("vad", [SERVER_VAD, {"type": "semantic_vad", "eagerness": "high"}])
async def test_a_spoken_turn_is_committed_and_transcribed(
    transcribing: tuple[Any, Events], vad: dict[str, Any]
) -> None:
    conn, events = transcribing
    await conn.session.update(
        session=transcription_update(
            turn_detection=vad,
            transcription={"model": "gpt-4o-transcribe", "language": "en"},
            noise_reduction={"type": "near_field"},
        )
    )
    updated = (await events.until("session.updated"))["session"]
    assert RealtimeTranscriptionSessionCreateRequest.model_validate(updated).type == "transcription"
    assert set(updated) == {"type", "audio", "include"}
    assert updated["audio"]["input"]["transcription"]["model"] == "gpt-4o-transcribe"
    assert updated["audio"]["input"]["noise_reduction"] == {"type": "near_field"}
    assert updated["audio"]["input"]["turn_detection"]["type"] == vad["type"]

    await sdk_append_chunked(conn, utterance("weather", lead_ms=300), 100)
    completed = await events.until("conversation.item.input_audio_transcription.completed")
    (started,) = events.of("input_audio_buffer.speech_started")
    (stopped,) = events.of("input_audio_buffer.speech_stopped")
    (committed,) = events.of("input_audio_buffer.committed")
    item_id = committed["item_id"]
    assert started["item_id"] == stopped["item_id"] == completed["item_id"] == item_id
    # The transcript is of exactly the committed turn: start to stop.
    turn_samples = (stopped["audio_end_ms"] - started["audio_start_ms"]) * 24
    assert completed["transcript"] == f"audio of {turn_samples} samples"
    deltas = events.of("conversation.item.input_audio_transcription.delta")
    assert "".join(d["delta"] for d in deltas) == completed["transcript"]
    types = events.types()
    assert not [t for t in types if t.startswith(("response.", "output_audio_buffer."))]
    assert "error" not in types


async def test_manual_commit_without_turn_detection(transcribing: tuple[Any, Events]) -> None:
    conn, events = transcribing
    await conn.session.update(session=transcription_update(turn_detection=None))
    updated = (await events.until("session.updated"))["session"]
    assert updated["audio"]["input"]["turn_detection"] is None
    await sdk_append_chunked(conn, utterance("weather"), 100)
    await conn.input_audio_buffer.commit()
    committed = await events.until("input_audio_buffer.committed")
    completed = await events.until("conversation.item.input_audio_transcription.completed")
    assert completed["item_id"] == committed["item_id"]
    assert completed["transcript"] == f"audio of {len(utterance('weather'))} samples"
    assert not events.of("input_audio_buffer.speech_started")


async def test_responses_are_refused_and_the_session_lives_on(
    transcribing: tuple[Any, Events],
) -> None:
    conn, events = transcribing
    await conn.response.create(event_id="ask")
    error = (await events.until("error"))["error"]
    assert error["type"] == "invalid_request_error"
    assert error["event_id"] == "ask" and error["param"] == "type"
    assert "'response.create'" in error["message"]
    await conn.conversation.item.create(
        item={
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "hi"}],
        },
        event_id="add",
    )
    assert (await events.until("error"))["error"]["event_id"] == "add"
    # A realtime-only field and a change of type are refused; the session is unchanged.
    await conn.send(
        {
            "type": "session.update",
            "event_id": "voice",
            "session": {"type": "transcription", "instructions": "be brief"},
        }
    )
    error = (await events.until("error"))["error"]
    assert (error["event_id"], error["param"]) == ("voice", "session.instructions")
    await conn.session.update(session={"type": "realtime"}, event_id="retype")
    error = (await events.until("error"))["error"]
    assert (error["event_id"], error["param"]) == ("retype", "session.type")
    # Still transcribing.
    await conn.session.update(session=transcription_update(turn_detection=None))
    await events.until("session.updated")
    await sdk_append_chunked(conn, utterance("weather"), 100)
    await conn.input_audio_buffer.commit()
    await events.until("conversation.item.input_audio_transcription.completed")
    assert not [t for t in events.types() if t.startswith("response.")]


async def test_beta_transcription_session_update_is_an_alias(
    transcribing: tuple[Any, Events],
) -> None:
    conn, events = transcribing
    await conn.send(
        {
            "type": "transcription_session.update",
            "session": {
                "input_audio_transcription": {"model": "whisper-1"},
                "input_audio_noise_reduction": {"type": "far_field"},
                "turn_detection": None,
            },
        }
    )
    updated = (await events.until("session.updated"))["session"]
    assert updated["type"] == "transcription"
    assert updated["audio"]["input"]["turn_detection"] is None
    assert updated["audio"]["input"]["transcription"] == {"model": "whisper-1"}
    assert updated["audio"]["input"]["noise_reduction"] == {"type": "far_field"}


async def test_a_realtime_session_cannot_become_a_transcription_session(
    server: RunningServer,
) -> None:
    async with sdk(server).realtime.connect(model="gpt-realtime") as conn:
        events = Events(conn.recv_bytes)
        assert (await events.until("session.created"))["session"]["type"] == "realtime"
        await conn.session.update(session={"type": "transcription"}, event_id="retype")
        error = (await events.until("error"))["error"]
        assert (error["event_id"], error["param"]) == ("retype", "session.type")
        assert "intent=transcription" in error["message"]


async def mint(server: RunningServer, session: dict[str, Any]) -> ClientSecretCreateResponse:
    async with httpx.AsyncClient() as http:
        reply = await http.post(
            f"{server.http_url}/v1/realtime/client_secrets",
            headers={"Authorization": "Bearer x"},
            json={"session": session},
        )
    assert reply.status_code == 200, reply.text
    return ClientSecretCreateResponse.model_validate(reply.json())


async def test_an_ephemeral_key_is_bound_to_its_session_type(server: RunningServer) -> None:
    secret = await mint(server, transcription_update(turn_detection=None))
    assert isinstance(secret.session, RealtimeTranscriptionSessionCreateResponse)
    assert secret.session.object == "realtime.transcription_session"
    # The key opens a transcription session with its preset, without asking for one.
    async with sdk(server, secret.value).realtime.connect(model="gpt-realtime") as conn:
        events = Events(conn.recv_bytes)
        created = (await events.until("session.created"))["session"]
        assert created["type"] == "transcription"
        assert created["audio"]["input"]["turn_detection"] is None
        await conn.session.update(session={"type": "realtime"}, event_id="retype")
        assert (await events.until("error"))["error"]["param"] == "session.type"
    # A realtime key cannot open a transcription session.
    realtime = await mint(server, {"type": "realtime"})
    status, error = await handshake_refusal(
        connect(
            server.ws_url + "?intent=transcription",
            additional_headers={"Authorization": f"Bearer {realtime.value}"},
            open_timeout=TIMEOUT_S,
        )
    )
    assert (status, error["param"]) == (400, "session.type")


# --- over WebRTC ------------------------------------------------------------------------


async def test_a_webrtc_call_with_a_transcription_session(server: RunningServer) -> None:
    """The offer's `session` makes the call a transcription session: the same events on
    the data channel (each validated), and the track the server sends stays silent."""
    session = transcription_update(turn_detection=SERVER_VAD)
    async with rtc_call(server, session=session) as call:
        created = (await call.events.until("session.created"))["session"]
        assert RealtimeTranscriptionSessionCreateRequest.model_validate(created).type == (
            "transcription"
        )
        call.mic.say(utterance("weather", lead_ms=300))
        completed = await call.events.until("conversation.item.input_audio_transcription.completed")
        (committed,) = call.events.of("input_audio_buffer.committed")
        assert completed["item_id"] == committed["item_id"]
        assert completed["transcript"].startswith("audio of ")
        # A second of the track after the turn was transcribed, where a realtime
        # session's answer would play: frames arrive, none of them audible.
        after = time.monotonic()
        await call.until_heard(lambda: bool(call.heard) and call.heard[-1].at > after + 1, 10)
        assert call.audible_since(call.mic.spoke_at[0]) == []
        types = call.events.types()
        assert not [t for t in types if t.startswith(("response.", "output_audio_buffer."))]
        assert "error" not in types


async def test_a_webrtc_call_with_a_transcription_key(server: RunningServer) -> None:
    secret = await mint(server, transcription_update(turn_detection=None))
    async with rtc_call(server, key=secret.value) as call:
        created = (await call.events.until("session.created"))["session"]
        assert created["type"] == "transcription"
        call.send({"type": "response.create", "event_id": "ask"})
        error = (await call.events.until("error"))["error"]
        assert (error["event_id"], error["param"]) == ("ask", "type")
    # The key's type binds the call too: an offer asking for a realtime session is refused.
    other = await mint(server, transcription_update(turn_detection=None))
    with pytest.raises(CallRefused) as refused:
        async with rtc_call(server, key=other.value, session={"type": "realtime"}):
            pass
    assert refused.value.status == 400 and "session.type" in refused.value.body


async def test_a_beta_client_transcribes_in_beta_shapes(server: RunningServer) -> None:
    """The beta SDK client (`OpenAI-Beta: realtime=v1`): every event in the beta union,
    its transcription_session.update read as session.update."""
    client = AsyncOpenAI(
        base_url=f"{server.http_url}/v1",
        websocket_base_url=f"ws://127.0.0.1:{server.port}/v1",
        api_key="x",
    )
    manager = client.beta.realtime.connect(
        model="gpt-realtime", extra_query={"intent": "transcription"}
    )
    async with manager as conn:
        events = Events(conn.recv_bytes, assert_beta_event)
        created = (await events.until("session.created"))["session"]
        assert "voice" not in created and "instructions" not in created
        await conn.transcription_session.update(
            session={"input_audio_transcription": {"model": "whisper-1"}, "turn_detection": None}
        )
        updated = (await events.until("session.updated"))["session"]
        assert updated["turn_detection"] is None
        await sdk_append_chunked(conn, utterance("weather"), 100)
        await conn.input_audio_buffer.commit()
        committed = await events.until("input_audio_buffer.committed")
        completed = await events.until("conversation.item.input_audio_transcription.completed")
        assert completed["item_id"] == committed["item_id"]
        assert "error" not in events.types()
