from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.vad import FrameScore, ScriptedScorer, VadStream, WebRtcVadBackend
from tests.audio_fixtures import load_wav, silence

FIXTURES = ["weather", "joke", "timer", "lights"]
# soxr HQ 24k -> 16k holds back 6-37 ms of output depending on block phase;
# frame counts are checked against the middle of that range, +-1 frame.
RESAMPLER_LAG_MS = 21

# Speech, a pause, then the start of more speech: exercises both scores.
CLIP = np.concatenate([load_wav("joke"), silence(300), load_wav("timer")[:12000]])


def chunked(pcm: npt.NDArray[np.int16], sizes: list[int]) -> list[npt.NDArray[np.int16]]:
    """Split pcm into pieces of the given sizes (cycled), covering all of it."""
    pieces, i, k = [], 0, 0
    while i < len(pcm):
        n = sizes[k % len(sizes)]
        pieces.append(pcm[i : i + n])
        i, k = i + n, k + 1
    return pieces


def run(stream: VadStream, pieces: list[npt.NDArray[np.int16]]) -> list[FrameScore]:
    return [score for piece in pieces for score in stream.process(piece)]


def at_rate(pcm: npt.NDArray[np.int16], rate: int) -> npt.NDArray[np.int16]:
    if rate == 24000:
        return pcm
    out: npt.NDArray[np.int16] = soxr.resample(pcm, 24000, rate)
    return out


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=3000), min_size=1, max_size=20).filter(any),
    rate=st.sampled_from([24000, 16000, 48000]),
)
def test_chunking_does_not_change_scores(sizes: list[int], rate: int) -> None:
    pcm = at_rate(CLIP, rate)
    whole = VadStream(WebRtcVadBackend(), input_rate=rate).process(pcm)
    pieces = run(VadStream(WebRtcVadBackend(), input_rate=rate), chunked(pcm, sizes))
    assert pieces == whole
    assert {s.score for s in whole} >= {0.0, 1.0}  # the clip really has both


@settings(max_examples=60, deadline=None)
@given(n_ms=st.integers(min_value=0, max_value=4000), chunk_ms=st.sampled_from([1, 20, 100]))
def test_frame_count_follows_input_minus_resampler_lag(n_ms: int, chunk_ms: int) -> None:
    pcm = np.tile(CLIP, 3)[: n_ms * 24]
    frames = run(VadStream(WebRtcVadBackend()), chunked(pcm, [chunk_ms * 24]))
    expected = max(n_ms - RESAMPLER_LAG_MS, 0) // 30
    assert abs(len(frames) - expected) <= 1
    assert [(f.start_ms, f.end_ms) for f in frames] == [
        (30 * k, 30 * k + 30) for k in range(len(frames))
    ]


def test_no_resampler_lag_at_16k() -> None:
    frames = VadStream(WebRtcVadBackend(), input_rate=16000).process(np.zeros(16 * 1000, np.int16))
    assert len(frames) == 33  # 990 ms in frames, 10 ms left pending


@pytest.mark.parametrize("name", FIXTURES)
def test_webrtc_finds_speech_in_fixtures(name: str) -> None:
    pcm = load_wav(name)
    scores = [f.score for f in VadStream(WebRtcVadBackend()).process(pcm)]
    # espeak speech is clean: most frames are called speech by every mode.
    assert np.mean(np.array(scores) == 1.0) > 0.6
    assert set(scores) <= {0.0, 0.25, 0.5, 0.75, 1.0}


def test_webrtc_scores_digital_silence_zero() -> None:
    frames = VadStream(WebRtcVadBackend()).process(silence(2000))
    assert len(frames) >= 60
    assert all(f.score == 0.0 for f in frames)


def test_webrtc_sessions_do_not_share_state() -> None:
    backend = WebRtcVadBackend()
    a, b = VadStream(backend), VadStream(backend)
    a.process(load_wav("weather")[: 24 * 1400])  # stops mid-word
    # webrtcvad's hangover keeps calling speech just after it ends, but only
    # in the session that heard it.
    assert b.process(silence(300))[0].score == 0.0
    assert a.process(silence(300))[0].score > 0.0


def test_scripted_scorer_sequence() -> None:
    script = [0.1, 0.9, 0.5]
    frames = VadStream(ScriptedScorer(script)).process(silence(150))
    assert [f.score for f in frames] == [0.1, 0.9, 0.5, 0.0]  # 0.0 past the end
    assert [f.start_ms for f in frames] == [0, 30, 60, 90]


def test_scripted_scorer_callable_counts_per_session() -> None:
    backend = ScriptedScorer(lambda i: i / 100, frame_ms=10)
    a, b = VadStream(backend, input_rate=16000), VadStream(backend, input_rate=16000)
    assert [f.score for f in a.process(np.zeros(16 * 30, np.int16))] == [0.0, 0.01, 0.02]
    assert [f.score for f in b.process(np.zeros(16 * 20, np.int16))] == [0.0, 0.01]
    assert [f.score for f in a.process(np.zeros(16 * 10, np.int16))] == [0.03]


def test_reset_keeps_clock_and_restarts_scoring() -> None:
    tail = np.concatenate([load_wav("joke"), silence(500)])
    fresh = VadStream(WebRtcVadBackend()).process(tail)

    stream = VadStream(WebRtcVadBackend())
    stream.process(load_wav("weather")[: 24 * 1010])  # ends mid-frame, mid-word
    stream.reset()
    assert stream.position_ms == 1010
    after = stream.process(tail)
    assert after == [FrameScore(f.start_ms + 1010, f.end_ms + 1010, f.score) for f in fresh]


def test_rejects_non_int16() -> None:
    with pytest.raises(ValueError):
        VadStream(WebRtcVadBackend()).process(np.zeros(480, np.float32))
