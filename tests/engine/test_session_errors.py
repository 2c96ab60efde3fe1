"""Refusals: each is an OpenAI-style error event and the session carries on."""

from __future__ import annotations

import asyncio
import base64
import json

import numpy as np
import pytest

from bench.speech import load_wav, silence
from models.scripted import ScriptedExecutor
from tests.support.harness import Harness

MANUAL = {
    "type": "session.update",
    "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
}


async def assert_usable(h: Harness) -> None:
    """A manual turn and a response still work."""
    before = len(h.of("response.done"))
    await h.send(MANUAL)
    await h.append(load_wav("joke"))
    await h.send({"type": "input_audio_buffer.commit"})
    await h.send({"type": "response.create"})
    await h.settle()
    assert len(h.of("response.done")) == before + 1
    assert h.responses_done()[-1]["status"] == "completed"


BAD_FRAMES = [
    ("{not json", "invalid_json", None),
    ("[1, 2]", "invalid_json", None),
    ('{"type": "no.such.event", "event_id": "e1"}', "invalid_value", "type"),
    ('{"event_id": "e1"}', "missing_required_parameter", "type"),
    (
        '{"type": "input_audio_buffer.append", "audio": "@@@", "event_id": "e1"}',
        "invalid_value",
        "audio",
    ),
    (
        '{"type": "input_audio_buffer.append", "audio": "AAE=AA", "event_id": "e1"}',
        "invalid_value",
        "audio",
    ),
    (
        '{"type": "input_audio_buffer.append", "audio": "AA==", "event_id": "e1"}',
        "invalid_value",
        "audio",
    ),
    (
        '{"type": "input_audio_buffer.append", "event_id": "e1"}',
        "missing_required_parameter",
        "audio",
    ),
    (
        '{"type": "input_audio_buffer.append", "audio": 5, "event_id": "e1"}',
        "invalid_type",
        "audio",
    ),
    (
        '{"type": "conversation.item.truncate", "item_id": "x", "content_index": 0,'
        ' "audio_end_ms": "abc", "event_id": "e1"}',
        "invalid_type",
        "audio_end_ms",
    ),
    (
        '{"type": "conversation.item.truncate", "event_id": "e1"}',
        "missing_required_parameter",
        "item_id",
    ),
    (
        '{"type": "session.update", "session": {"audio": {"input": {"turn_detection":'
        ' {"type": "server_vad", "threshold": 7}}}}, "event_id": "e1"}',
        "invalid_value",
        "session.audio.input.turn_detection.threshold",
    ),
    (
        '{"type": "session.update", "session": {"audio": {"input": {"turn_detection":'
        ' {"type": "semantic_vad", "eagerness": "eager"}}}}, "event_id": "e1"}',
        "invalid_value",
        "session.audio.input.turn_detection.eagerness",
    ),
    (
        '{"type": "session.update", "session": {"audio": {"input": {"format":'
        ' {"type": "audio/pcm", "rate": 16000}}}}, "event_id": "e1"}',
        "unsupported_audio_format",
        "session.audio.input.format",
    ),
    (
        json.dumps({"type": "response.create", "response": {"x": "y" * (2 << 20)}}),
        "message_too_large",
        None,
    ),
]


@pytest.mark.parametrize(("frame", "code", "param"), BAD_FRAMES)
async def test_bad_frames_get_an_error_and_the_session_lives(
    frame: str, code: str, param: str | None
) -> None:
    async with Harness() as h:
        await h.append(silence(200))  # accepted audio must survive the refusal
        h.max_bytes = 1 << 20
        await h.send_raw(frame)
        await h.settle()
        (error,) = h.errors()
        assert error["type"] == "invalid_request_error"
        assert error["code"] == code
        assert error["param"] == param
        assert error["message"]
        if '"event_id": "e1"' in frame:
            assert error["event_id"] == "e1"
        assert len(h.session.buffer) == 200 * 24
        await assert_usable(h)


async def test_response_cancel_with_nothing_active() -> None:
    async with Harness() as h:
        await h.send({"type": "response.cancel", "event_id": "c1"})
        await h.send({"type": "response.cancel", "response_id": "resp_nope", "event_id": "c2"})
        await h.settle()
        errors = h.errors()
        assert [e["code"] for e in errors] == ["response_cancel_not_active"] * 2
        assert [e["event_id"] for e in errors] == ["c1", "c2"]
        assert errors[1]["param"] == "response_id"
        await assert_usable(h)


async def test_response_create_while_active_is_refused_and_cancel_ends_it_once() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor) as h:
        await h.send({"type": "response.create"})
        await h.run_until(lambda: len(h.of("response.created")) == 1)
        await h.send({"type": "response.create", "event_id": "dup"})
        await h.run_until(lambda: len(h.errors()) == 1)
        assert h.errors()[0]["code"] == "conversation_already_has_active_response"
        assert h.errors()[0]["event_id"] == "dup"
        await h.send({"type": "response.cancel"})
        await h.run_until(lambda: len(h.responses_done()) == 1)
        done = h.responses_done()[0]
        assert done["status"] == "cancelled"
        assert done["status_details"]["reason"] == "client_cancelled"
        assert executor.chunk_gate is not None
        for _ in range(30):
            executor.chunk_gate.release()
        await h.settle()
        assert len(h.responses_done()) == 1  # nothing more for the cancelled one
        executor.chunk_gate = None
        await assert_usable(h)


async def test_commit_of_an_empty_or_tiny_buffer() -> None:
    async with Harness() as h:
        await h.send(MANUAL)
        await h.send({"type": "input_audio_buffer.commit", "event_id": "k1"})
        await h.append(silence(50))
        await h.send({"type": "input_audio_buffer.commit", "event_id": "k2"})
        await h.settle()
        errors = h.errors()
        assert [e["code"] for e in errors] == ["input_audio_buffer_commit_empty"] * 2
        assert [e["event_id"] for e in errors] == ["k1", "k2"]
        await assert_usable(h)


async def test_manual_buffer_is_bounded() -> None:
    from engine.limits import EngineLimits

    async with Harness(limits=EngineLimits(max_buffer_ms=1000)) as h:
        await h.send(MANUAL)
        await h.append(silence(800))
        await h.append(silence(300), event_id="big")
        await h.settle()
        (error,) = h.errors()
        assert error["code"] == "input_audio_buffer_full"
        assert error["event_id"] == "big"
        assert len(h.session.buffer) == 800 * 24  # the accepted audio is kept


async def test_truncate_clamps_to_audio_sent_and_cuts_the_transcript() -> None:
    async with Harness() as h:
        await h.send({"type": "response.create"})
        await h.settle()
        item = h.responses_done()[0]["output"][0]
        words = item["content"][0]["transcript"].split()
        total_ms = 100 * len(words)  # one 100 ms chunk per word
        await h.truncate(item["id"], 250)
        await h.truncate(item["id"], 10 * total_ms)
        await h.settle()
        first, second = h.of("conversation.item.truncated")
        assert first["audio_end_ms"] == 250
        assert second["audio_end_ms"] == 250  # already shorter: clamped, no error
        stored = h.session.conversation.get(item["id"])
        assert stored is not None and stored.audio is not None
        assert len(stored.audio) == 250 * 24
        assert stored.transcript == " ".join(words[:2])  # two whole chunks were heard
        assert not h.errors()


async def test_truncate_refusals() -> None:
    async with Harness() as h:
        await h.send(MANUAL)
        await h.append(load_wav("joke"))
        await h.send({"type": "input_audio_buffer.commit"})
        await h.settle()
        user_item = h.of("input_audio_buffer.committed")[0]["item_id"]
        for item_id in ["item_missing", user_item]:
            await h.truncate(item_id, 10)
        await h.settle()
        assert [e["code"] for e in h.errors()] == ["item_not_found", "invalid_value"]
        await assert_usable(h)


async def test_clear_drops_uncommitted_audio_only() -> None:
    async with Harness() as h:
        await h.send(MANUAL)
        await h.append(load_wav("joke"))
        await h.send({"type": "input_audio_buffer.commit"})
        await h.append(load_wav("weather"))
        await h.send({"type": "input_audio_buffer.clear"})
        await h.settle()
        assert "input_audio_buffer.cleared" in h.types()
        assert len(h.session.buffer) == 0
        assert len(h.session.conversation.items) == 1
        await h.send({"type": "response.create"})
        await h.settle()
        assert len(h.scripted.prompts[-1].items[-1].audio) == len(load_wav("joke"))


def test_append_audio_round_trip() -> None:
    pcm = np.arange(-5, 5, dtype=np.int16)
    assert np.array_equal(
        np.frombuffer(base64.b64decode(base64.b64encode(pcm.tobytes())), "<i2"), pcm
    )


async def test_endless_speech_is_cut_at_the_buffer_bound() -> None:
    """A VAD that never hears silence (noise it takes for speech) must not grow the
    buffer without bound: the turn is ended at the limit and answered."""
    from engine.limits import EngineLimits
    from engine.vad import ScriptedScorer

    async with Harness(
        vad=ScriptedScorer(lambda i: 1.0), limits=EngineLimits(max_buffer_ms=2000)
    ) as h:
        for _ in range(40):  # 4 s of "speech" in 100 ms appends
            await h.append(silence(100))
        await h.settle()
        assert len(h.of("input_audio_buffer.committed")) >= 1
        stopped = h.of("input_audio_buffer.speech_stopped")[0]
        started = h.of("input_audio_buffer.speech_started")[0]
        assert stopped["audio_end_ms"] - started["audio_start_ms"] <= 2200
        assert len(h.session.buffer) <= 24 * 2200
        assert not h.errors()
