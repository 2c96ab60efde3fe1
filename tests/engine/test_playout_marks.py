"""The session marks on the outgoing event where playback is flushed and which
response an event belongs to (engine/emitter.py `OutEvent.flush`, `response_id`):
the transports read the barge-in off the event, never the session's config or JSON."""

from __future__ import annotations

import pytest

from engine.emitter import Flush
from tests.support.audio import CHUNK, utterance
from tests.support.harness import Harness


@pytest.mark.parametrize(("interrupt", "flush"), [(True, Flush.ALL), (False, Flush.CLIENT)])
async def test_speech_started_flushes_every_playout_only_when_it_interrupts(
    interrupt: bool, flush: Flush
) -> None:
    async with Harness() as h:
        detection = {"type": "server_vad", "interrupt_response": interrupt}
        await h.update_audio(input={"turn_detection": detection})
        pcm = utterance("weather")
        for i in range(0, len(pcm), CHUNK):
            await h.session.feed(pcm[i : i + CHUNK])
        await h.settle()
        [started] = [e for e in h.out if e.type == "input_audio_buffer.speech_started"]
        assert started.flush is flush
        assert [e for e in h.out if e.flush is not None] == [started]


async def test_response_events_name_their_response_without_parsing() -> None:
    async with Harness() as h:
        await h.send({"type": "response.create"})
        await h.settle()
        (done,) = h.responses_done()
        [created_event, done_event] = [
            e for e in h.out if e.type in ("response.created", "response.done")
        ]
        assert created_event.response_id == done_event.response_id == done["id"]
        assert all(e.response_id is None for e in h.out if e.type == "session.created")
