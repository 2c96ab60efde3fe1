"""semantic_vad's decisions and detector, driven frame by frame (no clock)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from engine.end_of_turn import END_OF_TURN_RATE
from engine.semantic_turns import (
    CURVES,
    FALLBACK_SILENCE_MS,
    MAX_WAIT_MS,
    NEVER,
    SemanticTurnDetector,
    SemanticVadParams,
    TurnCurve,
    max_wait_ms,
    silence_needed_ms,
    turn_audio,
)
from engine.turns import PauseCandidate, SpeechStarted, SpeechStopped
from engine.vad import FrameScore

S, Q = 1.0, 0.0  # speech, quiet
FRAME_MS = 20
# The detector's tests use curves of their own, so the tuned ones can change freely.
CANDIDATE_PAUSE_MS = 200
TEST_CURVES = {
    "low": TurnCurve(CANDIDATE_PAUSE_MS, 0.5, 300),
    "medium": TurnCurve(CANDIDATE_PAUSE_MS, 0.5, 250),
    "high": TurnCurve(CANDIDATE_PAUSE_MS, 0.5, 200),
}


def frames(scores: Sequence[float], start_ms: int = 0) -> list[FrameScore]:
    return [
        FrameScore(start_ms + i * FRAME_MS, start_ms + (i + 1) * FRAME_MS, s)
        for i, s in enumerate(scores)
    ]


def speak(det: SemanticTurnDetector, ms: int = 600, start_ms: int = 0) -> int:
    """Speech from start_ms for ms; returns the time after it."""
    events = det.feed(frames([S] * (ms // FRAME_MS), start_ms))
    assert any(isinstance(e, SpeechStarted) for e in events) or det.in_speech
    return start_ms + ms


def quiet(det: SemanticTurnDetector, ms: int, start_ms: int) -> list[object]:
    return list(det.feed(frames([Q] * (ms // FRAME_MS), start_ms)))


# --- the pure decision ----------------------------------------------------------


def test_max_waits_are_openais() -> None:
    assert [max_wait_ms(e) for e in ("low", "medium", "high", "auto")] == [8000, 4000, 2000, 4000]


@pytest.mark.parametrize("eagerness", ["low", "medium", "high", "auto"])
def test_silence_needed_is_short_when_confident_and_grows_with_doubt(eagerness: str) -> None:
    e = eagerness  # type: ignore[assignment]
    sure = CURVES["medium" if e == "auto" else e].confident_probability
    short = silence_needed_ms(e, 1.0)
    assert short == silence_needed_ms(e, sure) < max_wait_ms(e)
    assert silence_needed_ms(e, sure - 0.05) > short
    assert silence_needed_ms(e, 0.1) > silence_needed_ms(e, sure - 0.05)
    # The longest wait: the curve's unsure wait (medium's 1 s), never past OpenAI's cap.
    longest = min(max_wait_ms(e), CURVES["medium" if e == "auto" else e].unsure_wait_ms or NEVER)
    assert silence_needed_ms(e, 0.0) == longest
    assert silence_needed_ms(e, -1.0) == longest  # out-of-range scores clamp
    assert silence_needed_ms(e, None) == FALLBACK_SILENCE_MS == 500


def test_lower_eagerness_waits_at_least_as_long() -> None:
    for p in (0.0, 0.2, 0.45, 0.6, 0.8, 0.99):
        assert silence_needed_ms("low", p) >= silence_needed_ms("medium", p)
        assert silence_needed_ms("medium", p) >= silence_needed_ms("high", p)
        assert silence_needed_ms("auto", p) == silence_needed_ms("medium", p)
    assert CURVES["low"].confident_probability >= CURVES["medium"].confident_probability
    assert CURVES["medium"].confident_probability >= CURVES["high"].confident_probability


def test_an_explicit_curve_overrides_the_eagerness_one() -> None:
    curve = TurnCurve(200, 0.5, 250)
    assert silence_needed_ms("auto", 0.5, curve) == 250
    assert silence_needed_ms("auto", 0.25, curve) == 250 + (4000 - 250) // 2


def test_turn_audio_is_the_last_8_s_at_16_khz() -> None:
    pcm = np.arange(24_000 * 10, dtype=np.int64).astype(np.int16)
    out = turn_audio(pcm, 24_000)
    assert out.dtype == np.int16
    assert abs(len(out) - 8 * END_OF_TURN_RATE) <= 1
    short = np.ones(16_000, dtype=np.int16)
    assert len(turn_audio(short, 16_000)) == 16_000


# --- the detector ------------------------------------------------------------------


def detector(eagerness: str = "auto", scoring: bool = True) -> SemanticTurnDetector:
    curve = TEST_CURVES["medium" if eagerness == "auto" else eagerness]
    params = SemanticVadParams(eagerness=eagerness)  # type: ignore[arg-type]
    return SemanticTurnDetector(params, scoring=scoring, curve=curve)


def test_candidate_after_the_pause_then_confident_score_commits_at_once() -> None:
    det = detector()
    t = speak(det)
    events = quiet(det, CANDIDATE_PAUSE_MS, t)
    assert events == [PauseCandidate(pause_id=1, audio_end_ms=t + CANDIDATE_PAUSE_MS)]
    assert det.pending_pause == 1
    # The score comes back after 60 ms more silence (260 >= 250): confident ends now.
    assert quiet(det, 60, t + CANDIDATE_PAUSE_MS) == []
    stop = det.decide(1, 0.9)
    assert stop == SpeechStopped(audio_end_ms=t + CANDIDATE_PAUSE_MS + 60)
    assert not det.in_speech


def test_confident_score_before_the_short_silence_waits_for_it() -> None:
    det = detector("low")  # confident silence 300 ms
    t = speak(det)
    quiet(det, CANDIDATE_PAUSE_MS, t)
    assert det.decide(1, 0.95) is None
    assert det.in_speech
    events = quiet(det, 100, t + CANDIDATE_PAUSE_MS)
    assert events == [SpeechStopped(audio_end_ms=t + 300)]


def test_unsure_score_waits_longer() -> None:
    det = detector("auto")
    t = speak(det)
    quiet(det, CANDIDATE_PAUSE_MS, t)
    assert det.decide(1, 0.2) is None
    needed = silence_needed_ms("auto", 0.2, TEST_CURVES["medium"])
    assert needed == 2500  # a whole number of frames, for the exact check below
    assert quiet(det, needed - CANDIDATE_PAUSE_MS - FRAME_MS, t + CANDIDATE_PAUSE_MS) == []
    assert det.in_speech
    assert quiet(det, FRAME_MS, t + needed - FRAME_MS) == [SpeechStopped(audio_end_ms=t + needed)]


def test_speech_resuming_cancels_the_candidate_and_its_score_is_stale() -> None:
    det = detector()
    t = speak(det)
    quiet(det, CANDIDATE_PAUSE_MS, t)
    t = speak(det, 200, t + CANDIDATE_PAUSE_MS)  # the user goes on
    assert det.pending_pause is None
    assert det.decide(1, 1.0) is None  # stale: for the pause that ended
    assert det.in_speech
    # The next pause is a new candidate; only its own score counts.
    assert quiet(det, CANDIDATE_PAUSE_MS, t) == [
        PauseCandidate(pause_id=2, audio_end_ms=t + CANDIDATE_PAUSE_MS)
    ]
    assert quiet(det, 60, t + CANDIDATE_PAUSE_MS) == []  # 260 ms: long enough if sure
    assert det.decide(1, 1.0) is None  # still stale: it must not end this pause
    assert det.in_speech
    assert det.decide(2, 1.0) == SpeechStopped(audio_end_ms=t + 260)


def test_max_wait_ends_the_turn_while_the_score_is_outstanding() -> None:
    det = detector("high")
    t = speak(det)
    events = quiet(det, 2000, t)
    assert events == [
        PauseCandidate(pause_id=1, audio_end_ms=t + CANDIDATE_PAUSE_MS),
        SpeechStopped(audio_end_ms=t + 2000),
    ]
    assert det.decide(1, 0.99) is None  # arrives too late: ignored


@pytest.mark.parametrize("eagerness", ["low", "medium", "high"])
def test_an_unsure_score_never_waits_past_the_cap(eagerness: str) -> None:
    det = detector(eagerness)
    t = speak(det)
    quiet(det, CANDIDATE_PAUSE_MS, t)
    det.decide(1, 0.0)
    cap = MAX_WAIT_MS[eagerness]
    events = quiet(det, cap - CANDIDATE_PAUSE_MS + 1000, t + CANDIDATE_PAUSE_MS)
    assert events == [SpeechStopped(audio_end_ms=t + cap)]


def test_without_a_model_a_fixed_silence_ends_the_turn() -> None:
    det = detector(scoring=False)
    t = speak(det)
    events = quiet(det, 1000, t)
    assert events == [SpeechStopped(audio_end_ms=t + FALLBACK_SILENCE_MS)]  # no candidate


def test_a_score_of_none_falls_back_to_fixed_silence() -> None:
    det = detector()
    t = speak(det)
    quiet(det, CANDIDATE_PAUSE_MS, t)
    assert det.decide(1, None) is None
    events = quiet(det, 1000, t + CANDIDATE_PAUSE_MS)
    assert events == [SpeechStopped(audio_end_ms=t + FALLBACK_SILENCE_MS)]


def test_reset_makes_a_pending_score_stale() -> None:
    det = detector()
    t = speak(det)
    quiet(det, CANDIDATE_PAUSE_MS, t)
    det.reset(t + CANDIDATE_PAUSE_MS)
    assert det.pending_pause is None
    assert det.decide(1, 1.0) is None


def test_an_unsure_pause_is_scored_again_as_the_silence_grows() -> None:
    curve = TurnCurve(200, 0.5, 250, rescore_ms=200)
    det = SemanticTurnDetector(SemanticVadParams(eagerness="auto"), curve=curve)
    t = speak(det)
    assert quiet(det, 200, t) == [PauseCandidate(pause_id=1, audio_end_ms=t + 200)]
    # No second candidate while the first is being scored.
    assert quiet(det, 300, t + 200) == []
    assert det.decide(1, 0.1) is None  # unsure: a long wait, and a rescore 200 ms on
    assert quiet(det, 180, t + 500) == []
    assert quiet(det, 20, t + 680) == [PauseCandidate(pause_id=2, audio_end_ms=t + 700)]
    stop = det.decide(2, 0.9)  # surer with more silence: ends now
    assert stop == SpeechStopped(audio_end_ms=t + 700)
    # A new turn starts its pauses from the first candidate again.
    t = speak(det, start_ms=t + 700)
    assert quiet(det, 200, t) == [PauseCandidate(pause_id=3, audio_end_ms=t + 200)]


def test_without_rescoring_a_pause_is_scored_once() -> None:
    det = SemanticTurnDetector(SemanticVadParams(), curve=TurnCurve(200, 0.5, 250))
    t = speak(det)
    quiet(det, CANDIDATE_PAUSE_MS, t)
    assert det.decide(1, 0.1) is None
    assert quiet(det, 1000, t + CANDIDATE_PAUSE_MS) == []
