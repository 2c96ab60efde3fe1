"""Failures the session state machine (tests/engine/test_session_machine.py) found,
each kept as the shortest example that showed it."""

from __future__ import annotations

import numpy as np

from engine.history import text_chars
from engine.limits import EngineLimits
from tests.support.harness import Harness


async def test_truncate_of_client_created_assistant_audio_item() -> None:
    """An assistant audio item the client created has a transcript but no audio; its
    truncation hit an assert (`internal_error`). It clamps to 0 ms (no audio was
    heard) and keeps the text the client wrote."""
    item = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_audio", "transcript": "as written"}],
    }
    async with Harness() as h:
        await h.send({"type": "conversation.item.create", "item": item})
        await h.settle()
        item_id = h.of("conversation.item.added")[-1]["item"]["id"]
        await h.truncate(item_id, 500)
        await h.send({"type": "conversation.item.retrieve", "item_id": item_id})
        await h.settle()
        assert h.errors() == []
        truncated = h.of("conversation.item.truncated")
        assert [(e["item_id"], e["audio_end_ms"]) for e in truncated] == [(item_id, 0)]
        retrieved = h.of("conversation.item.retrieved")[-1]["item"]
        assert retrieved["content"][0]["transcript"] == "as written"


async def test_a_burst_of_client_events_does_not_close_a_reading_client() -> None:
    """The session handled every queued client event without letting the writer run,
    so a burst whose control events outgrew the outbox reserve closed a client that
    reads everything as one that does not (OutboxOverflow, close 1008)."""
    limits = EngineLimits(outbox_limit=8, outbox_reserve=4)
    text = [{"type": "input_text", "text": "hi"}]
    item = {"type": "message", "role": "user", "content": text}
    async with Harness(limits=limits) as h:
        for _ in range(20):  # each makes two control events: item added and done
            await h.send({"type": "conversation.item.create", "item": item})
        await h.settle()  # the session lives on (a closed one never settles)
        assert len(h.of("conversation.item.done")) == 20
        assert h.errors() == []


async def test_a_transcript_that_arrives_later_is_held_to_the_text_bound() -> None:
    """The history bounds ran at a commit, an item create and a response's end, but a
    turn's transcript lands later (its transcription runs in the background): the
    conversation then held more text than max_history_text_chars until the next."""
    limits = EngineLimits(max_history_text_chars=30)
    transcribe = {"input": {"turn_detection": None, "transcription": {"model": "whisper-1"}}}
    async with Harness(limits=limits) as h:
        await h.update_audio(**transcribe)
        for _ in range(2):  # each transcript: "audio of 4800 samples", 21 characters
            await h.append(np.zeros(4800, dtype=np.int16))
            await h.send({"type": "input_audio_buffer.commit"})
            await h.settle()
        items = h.session.conversation.items
        assert sum(text_chars(item) for item in items) <= 30
        first = h.of("input_audio_buffer.committed")[0]["item_id"]
        assert [e["item_id"] for e in h.of("conversation.item.deleted")] == [first]
