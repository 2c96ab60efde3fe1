"""Unit tests of the small pure pieces: session config, conversation cuts, buffers."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.conversation import TranscriptMark, clamp_audio_end_ms, transcript_at
from engine.emitter import Outbox, OutboxOverflow, OutEvent
from engine.input_buffer import InputBuffer
from engine.protocol import ProtocolError, SessionUpdate, parse_client_event
from engine.session_config import SessionConfig, apply_update, to_wire
from engine.turns import ServerVadParams
from tests.sdk_check import assert_sdk_event


def update(session: dict[str, object]) -> SessionUpdate:
    event = parse_client_event(json.dumps({"type": "session.update", "session": session}), 1 << 20)
    assert isinstance(event, SessionUpdate)
    return event


BASE = SessionConfig(model="m")


def test_ga_nested_turn_detection_is_merged_with_defaults() -> None:
    patch = update(
        {
            "type": "realtime",
            "audio": {
                "input": {
                    "turn_detection": {
                        "type": "server_vad",
                        "silence_duration_ms": 800,
                        "interrupt_response": False,
                    }
                }
            },
        }
    )
    config = apply_update(BASE, patch.session, audio_started=False)
    assert config.turn_detection == ServerVadParams(
        silence_duration_ms=800, interrupt_response=False
    )


def test_beta_flat_fields_are_accepted() -> None:
    patch = update(
        {
            "modalities": ["text"],
            "voice": "verse",
            "input_audio_format": "pcm16",
            "turn_detection": {"type": "server_vad", "threshold": 0.7},
            "max_response_output_tokens": 50,
            "instructions": "be brief",
        }
    )
    config = apply_update(BASE, patch.session, audio_started=False)
    assert config.output_modalities == ("text",)
    assert config.voice == "verse"
    assert config.turn_detection == ServerVadParams(threshold=0.7)
    assert config.max_output_tokens == 50
    assert config.instructions == "be brief"


def test_null_turn_detection_disables_and_absent_keeps() -> None:
    off = apply_update(
        BASE, update({"audio": {"input": {"turn_detection": None}}}).session, audio_started=False
    )
    assert off.turn_detection is None
    kept = apply_update(off, update({"instructions": "x"}).session, audio_started=False)
    assert kept.turn_detection is None
    assert (
        apply_update(kept, update({"instructions": ""}).session, audio_started=False).instructions
        == ""
    )


@pytest.mark.parametrize(
    ("session", "code", "param"),
    [
        ({"model": "other"}, "invalid_value", "session.model"),
        ({"output_modalities": ["text", "text"]}, "invalid_value", "session.output_modalities"),
        (
            {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
            "unsupported_audio_format",
            "session.audio.input.format",
        ),
    ],
)
def test_session_update_refusals(session: dict[str, object], code: str, param: str) -> None:
    with pytest.raises(ProtocolError) as info:
        apply_update(BASE, update(session).session, audio_started=False)
    assert (info.value.code, info.value.param) == (code, param)


def test_beta_text_and_audio_modalities_mean_audio() -> None:
    patch = update({"modalities": ["text", "audio"], "output_audio_format": "g711_alaw"})
    config = apply_update(BASE, patch.session, audio_started=False)
    assert config.output_modalities == ("audio",)
    assert config.output_format.kind == "pcma"


def test_voice_is_fixed_once_the_assistant_spoke() -> None:
    with pytest.raises(ProtocolError):
        apply_update(BASE, update({"voice": "ash"}).session, audio_started=True)
    assert apply_update(BASE, update({"voice": "alloy"}).session, audio_started=True) == BASE


@pytest.mark.parametrize("vad", [ServerVadParams(), None])
def test_session_wire_shape_is_sdk_valid(vad: ServerVadParams | None) -> None:
    config = SessionConfig(model="m", turn_detection=vad)
    assert_sdk_event({"type": "session.updated", "event_id": "e", "session": to_wire(config)})


MARKS = [TranscriptMark(100, 5), TranscriptMark(200, 11), TranscriptMark(300, 18)]


@pytest.mark.parametrize(
    ("samples", "text"),
    [
        (0, ""),
        (99, ""),
        (100, "Hello"),
        (250, "Hello world"),
        (300, "Hello world again"),
        (10_000, "Hello world again"),
    ],
)
def test_transcript_at(samples: int, text: str) -> None:
    assert transcript_at("Hello world again", MARKS, samples) == text


@given(st.integers(-10, 10**7), st.integers(0, 10**6))
def test_clamp_never_exceeds_what_was_sent(requested: int, available: int) -> None:
    ms = clamp_audio_end_ms(requested, available, 24_000)
    assert 0 <= ms <= available * 1000 // 24_000
    if 0 <= requested <= available * 1000 // 24_000:
        assert ms == requested


@given(st.lists(st.integers(1, 5000), min_size=1, max_size=20), st.data())
def test_input_buffer_take_is_exact(chunks: list[int], data: st.DataObject) -> None:
    buffer = InputBuffer()
    total = 0
    for n in chunks:
        buffer.append(np.arange(total, total + n, dtype=np.int64).astype(np.int16))
        total += n
    begin = data.draw(st.integers(0, total))
    end = data.draw(st.integers(begin, total))
    out = buffer.take(begin, end)
    assert np.array_equal(out, np.arange(begin, end, dtype=np.int64).astype(np.int16))
    assert buffer.start == end and len(buffer) == total - end


@given(
    st.lists(
        st.tuples(st.sampled_from(["append", "discard", "take"]), st.integers(0, 3000)),
        max_size=40,
    )
)
def test_input_buffer_matches_a_flat_reference(ops: list[tuple[str, int]]) -> None:
    # The buffer keeps chunks and trims them lazily; a flat array is the reference.
    buffer, flat, start, total = InputBuffer(), np.zeros(0, np.int16), 0, 0
    for op, n in ops:
        if op == "append":
            buffer.append(np.arange(total, total + n, dtype=np.int64).astype(np.int16))
            flat = np.concatenate([flat, np.arange(total, total + n).astype(np.int16)])
            total += n
        elif op == "discard":
            pos = min(max(start + n, start), total)
            buffer.discard_before(start + n)
            flat, start = flat[pos - start :], pos
        else:
            begin, end = start + n // 3, start + n
            want_begin, want_end = min(begin, total), min(end, total)
            got = buffer.take(begin, end)
            assert np.array_equal(got, flat[want_begin - start : want_end - start])
            flat, start = flat[want_end - start :], want_end
        assert (buffer.start, buffer.end, len(buffer)) == (start, total, total - start)
    assert np.array_equal(buffer.take(start, total), flat)


async def test_outbox_drops_stale_output_and_keeps_control() -> None:
    epoch = 0
    box = Outbox(limit=4, reserve=2)
    box.current_epoch = lambda lane: epoch
    await box.put(OutEvent("a1", "d", epoch=0, item_id="i", samples=10))
    await box.put(OutEvent("a2", "d", epoch=0, item_id="i", samples=10))
    first = await box.get()
    assert first is not None and first.text == "a1"
    epoch = 1  # a cancel
    box.put_control(OutEvent("done", "response.done"))
    second = await box.get()
    assert second is not None and second.text == "done"  # a2 never reaches the wire
    assert box.sent_samples == {"i": 10}


async def test_outbox_backpressure_and_reserve() -> None:
    box = Outbox(limit=2, reserve=1)
    await box.put(OutEvent("1", "d", epoch=0))
    await box.put(OutEvent("2", "d", epoch=0))
    blocked = asyncio.ensure_future(box.put(OutEvent("3", "d", epoch=0)))
    await asyncio.sleep(0)
    assert not blocked.done()  # output waits for the reader
    box.put_control(OutEvent("c", "error"))  # control uses the reserve
    with pytest.raises(OutboxOverflow):
        box.put_control(OutEvent("c2", "error"))
    texts = []
    for _ in range(4):
        event = await box.get()
        assert event is not None
        texts.append(event.text)
        await asyncio.sleep(0)
    await blocked
    assert texts[:3] == ["1", "2", "c"] and texts[3] == "3"
    box.close()
    assert await box.get() is None


@pytest.mark.parametrize(
    "frame",
    [
        "[" * 100_000 + "]" * 100_000,  # nesting deeper than the parser's recursion
        '{"type": "input_audio_buffer.commit", "n": ' + "1" * 5000 + "}",  # int too long
        b"\xff\xfe not utf-8",
    ],
)
def test_pathological_json_is_invalid_json(frame: str | bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_client_event(frame, 1 << 24)
    assert info.value.code == "invalid_json"


def test_size_limit_counts_bytes_not_characters() -> None:
    frame = json.dumps({"type": "response.create", "pad": "é" * 40}, ensure_ascii=False)
    assert len(frame) < 100 < len(frame.encode())
    with pytest.raises(ProtocolError) as info:
        parse_client_event(frame, 100)
    assert info.value.code == "message_too_large"
