"""Smoke test of bench/partial_transcripts.py: one espeak fixture streamed at real time,
with partials and without; the figures it reports are there and consistent."""

from __future__ import annotations

from bench.partial_transcripts import _framed, measure, summary
from bench.speech import load_wav
from models.speech.asr import WhisperRecognizer


async def test_one_fixture_gives_a_first_partial_and_its_cpu_per_second_of_speech() -> None:
    pcm = load_wav("lights")
    clip = _framed("lights", "espeak", pcm, 0, len(pcm) * 1000 // 24000)
    (row,) = await measure([clip], WhisperRecognizer("tiny.en"), 500)
    assert row["adds_up"] and "kitchen" in row["transcript"].lower()
    assert row["partial_recognitions"] >= 2
    assert row["deltas_before_speech_stopped"] >= 1
    assert row["first_partial_ms"] is not None and row["first_partial_ms"] > 0
    assert row["cpu_s_with"] > 0 and row["cpu_s_without"] > 0
    total = summary([row])
    assert total["first_partial_ms_p50"] == row["first_partial_ms"]
    assert total["clips_with_partials_before_speech_stopped"] == 1
