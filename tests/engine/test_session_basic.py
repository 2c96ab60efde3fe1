"""A server_vad turn end to end through the session, in-process."""

from __future__ import annotations

import asyncio

import numpy as np

from bench.speech import load_wav, silence
from models.scripted import ScriptedExecutor
from tests.support.audio import append_chunked
from tests.support.harness import Harness


async def test_vad_turn_gets_committed_and_answered() -> None:
    async with Harness() as h:
        speech = load_wav("weather")
        await append_chunked(h, np.concatenate([silence(400), speech, silence(1000)]))
        await h.settle()
        types = h.types()
        assert types[:2] == ["session.created", "conversation.created"]
        expected = [
            "input_audio_buffer.speech_started",
            "input_audio_buffer.speech_stopped",
            "input_audio_buffer.committed",
            "conversation.item.added",
            "conversation.item.done",
            "response.created",
            "rate_limits.updated",
            "response.output_item.added",
            "conversation.item.added",
            "response.content_part.added",
        ]
        assert types[2 : 2 + len(expected)] == expected
        tail = [
            "response.output_audio.done",
            "response.output_audio_transcript.done",
            "response.content_part.done",
            "response.output_item.done",
            "conversation.item.done",
            "response.done",
        ]
        assert types[-len(tail) :] == tail
        assert not h.errors()
        started = h.of("input_audio_buffer.speech_started")[0]
        committed = h.of("input_audio_buffer.committed")[0]
        assert started["item_id"] == committed["item_id"]
        # The speech begins 400 ms in; the start includes 300 ms of prefix padding.
        assert 50 <= started["audio_start_ms"] <= 150
        stopped = h.of("input_audio_buffer.speech_stopped")[0]
        turn_ms = stopped["audio_end_ms"] - started["audio_start_ms"]
        (prompt,) = h.scripted.prompts
        assert len(prompt.items[-1].audio) == turn_ms * 24
        done = h.of("response.done")[0]["response"]
        assert done["status"] == "completed"
        transcript = done["output"][0]["content"][0]["transcript"]
        assert ScriptedExecutor.samples_heard(transcript) == turn_ms * 24
        deltas = h.of("response.output_audio.delta")
        assert len(deltas) == len(transcript.split())


async def test_text_only_response_streams_text_events() -> None:
    async with Harness() as h:
        await h.send({"type": "response.create", "response": {"output_modalities": ["text"]}})
        await h.settle()
        assert h.of("response.output_audio.delta") == []
        deltas = "".join(e["delta"] for e in h.of("response.output_text.delta"))
        (done,) = h.of("response.output_text.done")
        assert done["text"] == deltas == "I heard no audio in 0 items."
        response = h.responses_done()[0]
        assert response["output_modalities"] == ["text"]
        assert response["output"][0]["content"][0] == {"type": "output_text", "text": deltas}


async def test_cancel_by_id_and_disconnect_abort_the_model() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    h = Harness(executor)
    async with h:
        await h.send({"type": "response.create"})
        await h.run_until(lambda: len(h.of("response.created")) == 1)
        first = h.of("response.created")[0]["response"]["id"]
        await h.send({"type": "response.cancel", "response_id": "resp_other"})
        await h.run_until(lambda: len(h.errors()) == 1)
        assert h.errors()[0]["code"] == "response_cancel_not_active"
        await h.send({"type": "response.cancel", "response_id": first})
        await h.run_until(lambda: len(h.responses_done()) == 1)
        assert executor.aborted == [first]

        await h.send({"type": "response.create"})
        await h.run_until(lambda: len(h.of("response.created")) == 2)
        second = h.of("response.created")[1]["response"]["id"]
    # Leaving the harness closes the session as a disconnect does.
    assert executor.aborted == [first, second]
    assert h.session.responder.active is None
    assert all(r.task.done() for r in h.session.prepares.tracked())


async def test_input_transcription_events_when_asked_for() -> None:
    async with Harness() as h:
        await h.update_audio(
            input={"turn_detection": None, "transcription": {"model": "whisper-1"}}
        )
        await h.append(load_wav("joke"))
        await h.send({"type": "input_audio_buffer.commit"})
        await h.settle()
        updated = h.of("session.updated")[-1]["session"]
        assert updated["audio"]["input"]["transcription"] == {"model": "whisper-1"}
        (done,) = h.of("conversation.item.input_audio_transcription.completed")
        item_id = h.of("input_audio_buffer.committed")[0]["item_id"]
        assert done["item_id"] == item_id
        assert done["transcript"] == f"audio of {len(load_wav('joke'))} samples"
        assert done["usage"] == {
            "type": "duration",
            "seconds": round(len(load_wav("joke")) / 24000, 3),
        }
        stored = h.session.conversation.get(item_id)
        assert stored is not None and stored.transcript == done["transcript"]

        # Turned off again (beta flat spelling): no more transcription events.
        await h.send({"type": "session.update", "session": {"input_audio_transcription": None}})
        await h.append(load_wav("joke"))
        await h.send({"type": "input_audio_buffer.commit"})
        await h.settle()
        assert len(h.of("conversation.item.input_audio_transcription.completed")) == 1
        assert not h.errors()
