"""The room's noise level and the cap it puts on semantic_vad's silence: pure."""

from __future__ import annotations

import pytest

from engine.room_noise import (
    MAX_FRAME_SCORE,
    NOISY_LEVEL,
    SETTLE_MS,
    RoomNoise,
    is_noisy,
    next_level,
    noisy_room_silence_ms,
)
from engine.vad import FrameScore


def test_the_level_moves_toward_each_score() -> None:
    assert 0.0 < next_level(0.0, 0.2) < 0.2
    assert 0.1 < next_level(0.2, 0.1) < 0.2
    assert next_level(0.05, 0.05) == pytest.approx(0.05)
    # A loud frame counts as MAX_FRAME_SCORE.
    assert next_level(0.0, 0.9) == pytest.approx(next_level(0.0, MAX_FRAME_SCORE))


def test_a_room_is_noisy_only_above_the_level() -> None:
    assert not is_noisy(0.0)
    assert not is_noisy(NOISY_LEVEL)
    assert is_noisy(NOISY_LEVEL + 0.01)


def test_in_a_noisy_room_no_pause_needs_more_than_server_vads_silence() -> None:
    noisy, quiet = NOISY_LEVEL * 2, 0.0
    assert noisy_room_silence_ms(3600, noisy, 500) == 500
    assert noisy_room_silence_ms(150, noisy, 500) == 150  # a sure score stays quick
    assert noisy_room_silence_ms(3600, quiet, 500) == 3600


def test_only_settled_silence_counts_toward_the_level() -> None:
    room = RoomNoise(threshold=0.5)
    room.hear(FrameScore(0, 32, 0.9))  # speech
    room.hear(FrameScore(32, 64, 0.3))  # the word's fading tail
    assert room.level == 0.0
    room.hear(FrameScore(32 + SETTLE_MS, 64 + SETTLE_MS, 0.3))
    assert room.level > 0.0


def test_babble_scores_make_a_noisy_room_and_silence_a_quiet_one() -> None:
    noisy, quiet = RoomNoise(threshold=0.5), RoomNoise(threshold=0.5)
    for i in range(60):  # about 2 s of 32 ms frames
        noisy.hear(FrameScore(i * 32, (i + 1) * 32, [0.05, 0.2, 0.1, 0.3][i % 4]))
        quiet.hear(FrameScore(i * 32, (i + 1) * 32, 0.01))
    assert is_noisy(noisy.level)
    assert not is_noisy(quiet.level)


def test_a_speakers_rising_next_word_does_not_make_a_quiet_room_noisy() -> None:
    room = RoomNoise(threshold=0.5)
    for i in range(30):  # a quiet room
        room.hear(FrameScore(i * 32, (i + 1) * 32, 0.005))
    for i, score in enumerate([0.13, 0.3, 0.38]):  # the onset of the next word
        room.hear(FrameScore((30 + i) * 32, (31 + i) * 32, score))
    assert not is_noisy(room.level)
