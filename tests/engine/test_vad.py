"""VadStream, the engine's framing of any backend: chunking never changes a score,
frames follow the input on the session clock, and a reset keeps the clock; the app's
choice of backend; the scripted scorer. The backends themselves:
tests/models/test_vad_backends.py."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
import numpy.typing as npt
import pytest
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.speech import load_wav, silence
from engine.vad import FrameScore, ScriptedScorer, VadBackend, VadStream
from models.listening.vad import SileroOnnxBackend, WebRtcVadBackend
from models.listening.vad_batch import VadBatcher
from server.app import create_app
from server.config import Settings
from tests.support.audio import split

# soxr HQ 24k -> 16k holds back 6-37 ms of output depending on block phase;
# frame counts are checked against the middle of that range, +-1 frame.
RESAMPLER_LAG_MS = 21

# Speech, a pause, then the start of more speech: exercises both scores.
CLIP = np.concatenate([load_wav("joke"), silence(300), load_wav("timer")[:12000]])


@cache
def silero() -> SileroOnnxBackend:
    # One model for the whole module, as in the server: loading takes ~0.1 s,
    # and sharing it is what the per-session state is for.
    return SileroOnnxBackend()


# Fresh per-session state for every stream, whichever backend object is used.
BACKENDS: dict[str, Callable[[], VadBackend]] = {"webrtc": WebRtcVadBackend, "silero": silero}


def run(stream: VadStream, pieces: list[npt.NDArray[np.int16]]) -> list[FrameScore]:
    return [score for piece in pieces for score in stream.process(piece)]


def at_rate(pcm: npt.NDArray[np.int16], rate: int) -> npt.NDArray[np.int16]:
    if rate == 24000:
        return pcm
    out: npt.NDArray[np.int16] = soxr.resample(pcm, 24000, rate)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=3000), min_size=1, max_size=20).filter(any),
    rate=st.sampled_from([24000, 16000, 48000]),
)
def test_chunking_does_not_change_scores(backend: str, sizes: list[int], rate: int) -> None:
    make = BACKENDS[backend]
    pcm = at_rate(CLIP, rate)
    whole = VadStream(make(), input_rate=rate).process(pcm)
    pieces = run(VadStream(make(), input_rate=rate), split(pcm, sizes))
    assert pieces == whole
    scores = [s.score for s in whole]
    assert min(scores) < 0.05 and max(scores) > 0.95  # the clip really has both


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, deadline=None)
@given(n_ms=st.integers(min_value=0, max_value=4000), chunk_ms=st.sampled_from([1, 20, 100]))
def test_frame_count_follows_input_minus_resampler_lag(
    backend: str, n_ms: int, chunk_ms: int
) -> None:
    vad = BACKENDS[backend]()
    step = vad.frame_ms
    pcm = np.tile(CLIP, 3)[: n_ms * 24]
    frames = run(VadStream(vad), split(pcm, [chunk_ms * 24]))
    expected = max(n_ms - RESAMPLER_LAG_MS, 0) // step
    assert abs(len(frames) - expected) <= 1
    assert [(f.start_ms, f.end_ms) for f in frames] == [
        (step * k, step * k + step) for k in range(len(frames))
    ]


def test_no_resampler_lag_at_16k() -> None:
    frames = VadStream(WebRtcVadBackend(), input_rate=16000).process(np.zeros(16 * 1000, np.int16))
    assert len(frames) == 33  # 990 ms in frames, 10 ms left pending


@pytest.mark.parametrize(
    ("name", "cls"), [("silero", SileroOnnxBackend), ("webrtc", WebRtcVadBackend)]
)
def test_app_uses_configured_backend(name: str, cls: type) -> None:
    app = create_app(Settings(vad_backend=name))
    vad = app.state.hub.vad
    # Silero scores in batches across sessions, off the event loop.
    assert isinstance(vad.backend if isinstance(vad, VadBatcher) else vad, cls)
    assert isinstance(vad, VadBatcher) == (name == "silero")


def test_default_backend_is_silero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARLEY_VAD_BACKEND", raising=False)
    assert Settings().vad_backend == "silero"
    monkeypatch.setenv("PARLEY_VAD_BACKEND", "webrtc")
    assert Settings().vad_backend == "webrtc"


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
