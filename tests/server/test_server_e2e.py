"""End to end over a real server, with the official `openai` SDK as the client.

Every server event is read raw (`recv_bytes`) and validated strictly against the
SDK's types (tests/support/sdk_check.py) before the test looks at it.
"""

from __future__ import annotations

import asyncio
import base64

import httpx
import pytest
from openai.types.realtime import RealtimeSessionCreateRequestParam

from models.scripted import ScriptedExecutor
from tests.support.audio import sdk_append_chunked, utterance
from tests.support.events import TIMEOUT_S, Events
from tests.support.servers import RunningServer, ServerFactory, sdk_connect

SKELETON = [
    "session.created",
    "session.updated",
    "input_audio_buffer.speech_started",
    "input_audio_buffer.speech_stopped",
    "input_audio_buffer.committed",
    "response.created",
    "response.output_audio.delta",
    "response.done",
]
SERVER_VAD: RealtimeSessionCreateRequestParam = {
    "type": "realtime",
    "audio": {"input": {"turn_detection": {"type": "server_vad"}}},
}


@pytest.mark.parametrize("chunk_ms", [20, 100])
async def test_sdk_vad_turn_is_answered(server: RunningServer, chunk_ms: int) -> None:
    async with sdk_connect(server) as conn:
        events = Events(conn.recv_bytes)
        await conn.session.update(session=SERVER_VAD)
        sender = asyncio.create_task(sdk_append_chunked(conn, utterance("weather"), chunk_ms))

        done = await events.until("response.done")
        await asyncio.wait_for(sender, TIMEOUT_S)

        # The skeleton of the turn, in order (consecutive audio deltas collapsed).
        skeleton: list[str] = []
        for kind in events.types():
            if kind in SKELETON and (not skeleton or kind != skeleton[-1]):
                skeleton.append(kind)
        assert skeleton == SKELETON
        (started,) = events.of("input_audio_buffer.speech_started")
        (stopped,) = events.of("input_audio_buffer.speech_stopped")
        (committed,) = events.of("input_audio_buffer.committed")
        (response,) = events.of("response.created")
        vad = events.of("session.updated")[0]["session"]["audio"]["input"]["turn_detection"]
        assert vad["type"] == "server_vad"
        assert "error" not in events.types()
        assert started["item_id"] == stopped["item_id"] == committed["item_id"]
        rid = response["response"]["id"]
        assert done["response"]["id"] == rid
        assert done["response"]["status"] == "completed"
        deltas = events.of("response.output_audio.delta")
        assert deltas and all(d["response_id"] == rid for d in deltas)
        assert all(len(base64.b64decode(d["delta"])) > 0 for d in deltas)

        transcript = done["response"]["output"][0]["content"][0]["transcript"]
        turn_ms = stopped["audio_end_ms"] - started["audio_start_ms"]
        assert turn_ms > 500  # real speech, not a blip
        assert transcript == f"I heard {turn_ms * 24} samples in 1 items."
        assert ScriptedExecutor.samples_heard(transcript) == turn_ms * 24


async def test_sdk_barge_in_cancels_the_streaming_response(serve: ServerFactory) -> None:
    # Slow chunks: the first response streams for seconds, long enough to talk over.
    server = await serve(scripted_chunk_delay_s=0.5)
    async with sdk_connect(server) as conn:
        events = Events(conn.recv_bytes)
        await conn.session.update(session=SERVER_VAD)
        await events.until("session.updated")
        await sdk_append_chunked(conn, utterance("weather"), 20)
        first = await events.until("response.created")
        first_id = first["response"]["id"]
        await events.until("response.output_audio.delta", response_id=first_id)

        # The user talks again while the answer is still streaming.
        await sdk_append_chunked(conn, utterance("joke"), 20)
        barge = await events.until("input_audio_buffer.speech_started")
        cancelled = await events.until("response.done", id=first_id)
        second = await events.until("response.created")
        second_done = await events.until("response.done", id=second["response"]["id"])

        assert events.index(barge) < events.index(cancelled)
        assert cancelled["response"]["status"] == "cancelled"
        assert cancelled["response"]["status_details"] == {
            "type": "cancelled",
            "reason": "turn_detected",
        }
        late = [
            e for e in events.all[events.index(cancelled) + 1 :] if e.get("response_id") == first_id
        ]
        assert late == []
        # The new turn gets its own answer, which sees both turns and the cut answer.
        second_id = second["response"]["id"]
        assert second_id != first_id
        assert second_done["response"]["status"] == "completed"
        transcript = second_done["response"]["output"][0]["content"][0]["transcript"]
        assert transcript.endswith(" samples in 3 items.")
        assert any(
            e["type"] == "response.output_audio.delta" and e["response_id"] == second_id
            for e in events.all
        )
        assert "error" not in events.types()


async def test_healthz(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        response = await http.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "sessions": 0, "model_queue": 0}


async def test_healthz_counts_open_sessions(server: RunningServer) -> None:
    async with sdk_connect(server) as conn:
        events = Events(conn.recv_bytes)
        await events.until("session.created")
        async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
            response = await http.get("/healthz")
        assert response.json() == {"status": "ok", "sessions": 1, "model_queue": 0}


async def test_models_lists_the_served_model(serve: ServerFactory) -> None:
    server = await serve(model="parley-test-model")
    async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        response = await http.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    (model,) = body["data"]
    assert model["id"] == "parley-test-model"
    assert model["object"] == "model"
    assert model["owned_by"] == "parley"
    assert isinstance(model["created"], int)
