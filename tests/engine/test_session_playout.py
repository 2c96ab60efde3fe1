"""A session fed by a WebRTC call: audio from the track (`Session.feed`, already
decoded) and the transport's playout reports (`Session.report_playback`)."""

from __future__ import annotations

import numpy as np

from engine.limits import EngineLimits
from engine.playback import PlaybackReport
from tests.support.audio import CHUNK, utterance
from tests.support.harness import Harness


async def feed(h: Harness, pcm: np.ndarray) -> None:
    for i in range(0, len(pcm), CHUNK):
        await h.session.feed(pcm[i : i + CHUNK])
    await h.settle()


async def test_track_audio_makes_turns_as_appends_do() -> None:
    async with Harness() as h:
        await feed(h, utterance("weather"))
        for kind in ("input_audio_buffer.speech_started", "input_audio_buffer.committed"):
            assert kind in h.types()
        (done,) = h.responses_done()
        assert done["status"] == "completed" and not h.errors()


async def test_the_server_s_playout_ends_the_answer_s_audible_time_when_it_ends() -> None:
    async with Harness() as h:
        await feed(h, utterance("weather"))
        (done,) = h.responses_done()
        # Until told, the session counts the answer audible for its whole length.
        clock, now_ms = h.session.playback, h.session.buffer.pos_to_ms(h.session.buffer.end)
        assert clock.answer == done["id"] and clock.audible(now_ms)
        h.session.report_playback(PlaybackReport("started", done["id"]))
        h.session.report_playback(PlaybackReport("stopped", done["id"]))
        await h.settle()
        assert h.types()[-2:] == ["output_audio_buffer.started", "output_audio_buffer.stopped"]
        assert h.of("output_audio_buffer.stopped")[0]["response_id"] == done["id"]
        assert not clock.audible(now_ms) and clock.end_ms == now_ms


async def test_a_cleared_playout_truncates_the_item_to_what_was_played() -> None:
    async with Harness() as h:
        await feed(h, utterance("weather"))
        (done,) = h.responses_done()
        item_id = done["output"][0]["id"]
        h.session.report_playback(PlaybackReport("cleared", done["id"], item_id, played_ms=300))
        await h.settle()
        (cleared,) = h.of("output_audio_buffer.cleared")
        (truncated,) = h.of("conversation.item.truncated")
        assert cleared["response_id"] == done["id"]
        assert (truncated["item_id"], truncated["audio_end_ms"]) == (item_id, 300)
        # A client's own clear already had its event: truncation only, no second one.
        h.session.report_playback(PlaybackReport("dropped", done["id"], item_id, played_ms=200))
        await h.settle()
        assert len(h.of("output_audio_buffer.cleared")) == 1
        assert h.of("conversation.item.truncated")[-1]["audio_end_ms"] == 200
        assert not h.errors()


async def test_track_audio_past_the_buffer_bound_is_dropped_and_said_once() -> None:
    async with Harness(limits=EngineLimits(max_buffer_ms=1000)) as h:
        await h.send(
            {
                "type": "session.update",
                "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
            }
        )
        await h.settle()
        await feed(h, utterance("weather"))  # longer than a second
        (error,) = h.errors()
        assert error["code"] == "input_audio_buffer_full"
        await h.send({"type": "input_audio_buffer.commit"})
        await h.settle()
        (committed,) = h.of("input_audio_buffer.committed")
        # What was kept is the bound's worth: the first second, nothing lost before it.
        item = h.session.conversation.get(committed["item_id"])
        assert item is not None and item.audio_ms == 1000
