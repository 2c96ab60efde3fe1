"""What the client hears (engine/playback.py): what was sent of each answer, and
until when the last one is audible."""

from __future__ import annotations

import numpy as np

from engine.emitter import Flush, OutEvent
from engine.playback import Playback, PlaybackReport
from models.listening.echo import FarEnd, wall_index
from tests.support.clock import FakeClock


def test_an_answer_is_audible_for_its_length_from_when_it_ended() -> None:
    playback = Playback()
    assert not playback.audible(0) and not playback.spoke
    playback.answer_ended("resp_1", now_ms=1000, audio_ms=2500, spoke=True)
    assert playback.audible(1000) and playback.audible(3499) and not playback.audible(3500)
    assert playback.spoke
    # An answer with no audio (text only, or cancelled before any) changes nothing.
    playback.answer_ended("resp_2", now_ms=1200, audio_ms=None, spoke=False)
    assert playback.answer == "resp_1" and playback.end_ms == 3500 and playback.spoke


def test_a_playout_that_ended_moves_the_clock_back_to_then() -> None:
    playback = Playback()
    playback.answer_ended("resp_1", now_ms=1000, audio_ms=2500, spoke=True)
    playback.reported(PlaybackReport("started", "resp_1"), now_ms=1100)
    assert playback.end_ms == 3500  # started says nothing of the end
    playback.reported(PlaybackReport("stopped", "resp_0"), now_ms=1200)
    assert playback.end_ms == 3500  # another answer's playout
    playback.reported(PlaybackReport("cleared", "resp_1", "item_1", 300), now_ms=1300)
    assert playback.end_ms == 1300 and playback.idle_from_ms == 1300 and not playback.audible(1300)
    playback.reported(PlaybackReport("stopped", "resp_1"), now_ms=1400)
    assert playback.end_ms == 1300  # never later than it was


def test_the_idle_timeout_counts_from_the_end_and_the_user_stops_it() -> None:
    playback = Playback()
    assert playback.idle_since(10_000, 1000) is None  # no answer yet
    playback.answer_ended("resp_1", now_ms=1000, audio_ms=500, spoke=True)
    assert playback.idle_since(2499, 1000) is None
    assert playback.idle_since(2500, 1000) == 1500
    assert playback.idle_since(9000, 1000) is None  # spent
    playback.answer_ended("resp_2", now_ms=3000, audio_ms=500, spoke=True)
    playback.user_spoke()
    assert playback.idle_since(9000, 1000) is None


def test_what_the_writer_takes_is_counted_per_item_and_laid_on_the_far_end() -> None:
    clock = FakeClock()
    far, firsts, queued = FarEnd(clock), [], {"item_2"}
    playback = Playback(lambda: far, firsts.append, queued=lambda item: item in queued)
    pcm = np.full(2400, 1000, np.int16)
    delta = "response.output_audio.delta"
    for item in ("item_1", "item_1", "item_2"):
        playback.taken(OutEvent("{}", delta, 0, item_id=item, samples=2400, pcm=pcm))
    assert (playback.sent_samples("item_1"), playback.sent_samples("item_2")) == (4800, 2400)
    assert firsts == ["item_1", "item_2"]  # each item's first audio, once
    assert far.playing_until() == wall_index(clock.t) + 3 * 1600  # 16 kHz on the far end
    playback.taken(OutEvent("{}", "input_audio_buffer.speech_started", flush=Flush.CLIENT))
    assert far.playing_until() == wall_index(clock.t)  # the client flushed its playback
    playback.forget("item_1")
    playback.forget("item_2")  # its audio is still queued: kept
    assert list(playback.sent_items()) == ["item_2"] and playback.sent_samples("item_1") == 0
