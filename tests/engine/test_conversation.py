"""Conversation cuts: the transcript at a sample, and truncation clamped to what was sent."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.conversation import TranscriptMark, clamp_audio_end_ms, transcript_at

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
