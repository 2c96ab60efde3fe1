"""The one clock of when the answer stops being audible (engine/playback.py)."""

from __future__ import annotations

from engine.playback import Playback, PlaybackClock


def test_an_answer_is_audible_for_its_length_from_when_it_ended() -> None:
    clock = PlaybackClock()
    assert not clock.audible(0) and not clock.spoke
    clock.answer_ended("resp_1", now_ms=1000, audio_ms=2500, spoke=True)
    assert clock.audible(1000) and clock.audible(3499) and not clock.audible(3500)
    assert clock.spoke
    # An answer with no audio (text only, or cancelled before any) changes nothing.
    clock.answer_ended("resp_2", now_ms=1200, audio_ms=None, spoke=False)
    assert clock.answer == "resp_1" and clock.end_ms == 3500 and clock.spoke


def test_a_playout_that_ended_moves_the_clock_back_to_then() -> None:
    clock = PlaybackClock()
    clock.answer_ended("resp_1", now_ms=1000, audio_ms=2500, spoke=True)
    clock.reported(Playback("started", "resp_1"), now_ms=1100)
    assert clock.end_ms == 3500  # started says nothing of the end
    clock.reported(Playback("stopped", "resp_0"), now_ms=1200)
    assert clock.end_ms == 3500  # another answer's playout
    clock.reported(Playback("cleared", "resp_1", "item_1", 300), now_ms=1300)
    assert clock.end_ms == 1300 and clock.idle_from_ms == 1300 and not clock.audible(1300)
    clock.reported(Playback("stopped", "resp_1"), now_ms=1400)
    assert clock.end_ms == 1300  # never later than it was


def test_the_idle_timeout_counts_from_the_end_and_the_user_stops_it() -> None:
    clock = PlaybackClock()
    assert clock.idle_since(10_000, 1000) is None  # no answer yet
    clock.answer_ended("resp_1", now_ms=1000, audio_ms=500, spoke=True)
    assert clock.idle_since(2499, 1000) is None
    assert clock.idle_since(2500, 1000) == 1500
    assert clock.idle_since(9000, 1000) is None  # spent
    clock.answer_ended("resp_2", now_ms=3000, audio_ms=500, spoke=True)
    clock.user_spoke()
    assert clock.idle_since(9000, 1000) is None
