from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from bench.speech import load_wav, silence
from engine.turns import (
    FrameKind,
    ServerVadParams,
    SpeechStarted,
    SpeechStopped,
    TurnDetector,
    classify,
    counts_as_silence,
    is_speech,
    padded_start,
    silence_level,
)
from engine.vad import FrameScore, VadStream
from models.listening.vad import WebRtcVadBackend

DEFAULTS = ServerVadParams()
S, Q = 1.0, 0.0  # speech, quiet


def frames(scores: Sequence[float], start_ms: int = 0, frame_ms: int = 30) -> list[FrameScore]:
    return [
        FrameScore(start_ms + i * frame_ms, start_ms + (i + 1) * frame_ms, s)
        for i, s in enumerate(scores)
    ]


def feed_one_by_one(det: TurnDetector, fs: list[FrameScore]) -> dict[int, list[object]]:
    """Events keyed by the index of the frame whose feed produced them."""
    out: dict[int, list[object]] = {}
    for i, f in enumerate(fs):
        if events := det.feed([f]):
            out[i] = list(events)
    return out


# --- pure rules ---------------------------------------------------------------


def test_silence_level() -> None:
    assert silence_level(0.5) == pytest.approx(0.35)
    assert silence_level(0.1) == 0.01


@pytest.mark.parametrize(
    ("score", "in_speech", "kind"),
    [
        (0.5, False, FrameKind.SPEECH),
        (0.49, False, FrameKind.SILENCE),  # no band before a turn starts
        (0.5, True, FrameKind.SPEECH),
        (0.4, True, FrameKind.UNCERTAIN),
        (0.35, True, FrameKind.UNCERTAIN),
        (0.34, True, FrameKind.SILENCE),
    ],
)
def test_classify(score: float, in_speech: bool, kind: FrameKind) -> None:
    assert classify(score, 0.5, in_speech) is kind
    assert is_speech(score, 0.5, in_speech) == (kind is FrameKind.SPEECH)


def test_uncertain_frames_only_continue_a_running_silence_clock() -> None:
    assert counts_as_silence(FrameKind.SILENCE, silence_running=False)
    assert counts_as_silence(FrameKind.UNCERTAIN, silence_running=True)
    assert not counts_as_silence(FrameKind.UNCERTAIN, silence_running=False)
    assert not counts_as_silence(FrameKind.SPEECH, silence_running=True)


def test_padded_start() -> None:
    assert padded_start(1000, 300, 0) == 700
    assert padded_start(200, 300, 0) == 0
    assert padded_start(1000, 300, 900) == 900


# --- scripted sequences -------------------------------------------------------


def test_single_utterance() -> None:
    det = TurnDetector(DEFAULTS)
    fs = frames([Q] * 20 + [S] * 20 + [Q] * 30)
    events = feed_one_by_one(det, fs)
    # Started on the 3rd speech frame (90 ms), onset at the 1st.
    # Stopped on the 17th quiet frame: 510 ms >= 500 ms of silence.
    assert events == {
        22: [SpeechStarted(audio_start_ms=300, onset_ms=600)],
        56: [SpeechStopped(audio_end_ms=1200 + 510)],
    }
    assert not det.in_speech
    assert det.floor_ms == 1710


def test_in_speech_tracks_the_turn() -> None:
    det = TurnDetector(DEFAULTS)
    det.feed(frames([S] * 3))
    assert det.in_speech
    det.feed(frames([Q] * 17, start_ms=90))
    assert not det.in_speech


def test_blip_shorter_than_min_speech_is_ignored() -> None:
    det = TurnDetector(DEFAULTS)
    assert det.feed(frames([Q, S, S, Q, S, S, Q] + [Q] * 20)) == []
    assert not det.in_speech


def test_blip_does_not_become_the_onset() -> None:
    events = TurnDetector(DEFAULTS).feed(frames([S, S, Q, S, S, S]))
    assert events == [SpeechStarted(audio_start_ms=0, onset_ms=90)]


def test_min_speech_is_measured_in_time() -> None:
    det = TurnDetector(ServerVadParams(min_speech_ms=50))
    assert det.feed(frames([S] * 4, frame_ms=10)) == []
    assert det.feed(frames([S], start_ms=40, frame_ms=10)) == [SpeechStarted(0, 0)]


def test_two_utterances_in_one_feed() -> None:
    det = TurnDetector(DEFAULTS)
    # Utterance 2 starts 90 ms after turn 1 ended: its padding stops at that end.
    scores = [Q] * 10 + [S] * 10 + [Q] * 20 + [S] * 10
    assert det.feed(frames(scores)) == [
        SpeechStarted(audio_start_ms=0, onset_ms=300),
        SpeechStopped(audio_end_ms=600 + 510),
        SpeechStarted(audio_start_ms=1110, onset_ms=1200),
    ]
    assert det.in_speech
    assert det.feed(frames([Q] * 17, start_ms=1500)) == [SpeechStopped(audio_end_ms=2010)]


def test_prefix_padding_clamped_at_session_start() -> None:
    events = TurnDetector(DEFAULTS).feed(frames([Q] * 4 + [S] * 3))
    assert events == [SpeechStarted(audio_start_ms=0, onset_ms=120)]


def test_silence_shorter_than_duration_does_not_end_turn() -> None:
    det = TurnDetector(DEFAULTS)
    scores = [S] * 5 + [Q] * 16 + [S] + [Q] * 16  # 480 ms gaps
    assert det.feed(frames(scores)) == [SpeechStarted(0, 0)]
    assert det.in_speech
    # The clock restarted at the speech frame: one more quiet frame ends it.
    assert det.feed(frames([Q], start_ms=len(scores) * 30)) == [SpeechStopped(1170)]


def test_hysteresis_band_does_not_start_the_silence_clock() -> None:
    det = TurnDetector(DEFAULTS)
    # 0.4 is below the threshold but above the silence level 0.35.
    assert det.feed(frames([S] * 3 + [0.4] * 100)) == [SpeechStarted(0, 0)]
    assert det.in_speech


def test_hysteresis_band_continues_a_running_silence_clock() -> None:
    det = TurnDetector(DEFAULTS)
    # 10 quiet frames start the clock; 7 band frames finish the 510 ms.
    events = det.feed(frames([S] * 3 + [Q] * 10 + [0.4] * 7))
    assert events == [SpeechStarted(0, 0), SpeechStopped(600)]


def test_just_below_silence_level_is_silence() -> None:
    events = TurnDetector(DEFAULTS).feed(frames([S] * 3 + [0.34] * 17))
    assert events == [SpeechStarted(0, 0), SpeechStopped(600)]


def test_reset_drops_turn_and_moves_floor() -> None:
    det = TurnDetector(DEFAULTS)
    det.feed(frames([S] * 10))
    det.reset(now_ms=1000)
    assert not det.in_speech
    assert det.floor_ms == 1000
    # Late frames from before the floor are ignored; later speech pads to the floor.
    assert det.feed(frames([S] * 10, start_ms=300)) == []
    assert det.feed(frames([S] * 3, start_ms=1100)) == [SpeechStarted(1000, 1100)]
    assert det.feed(frames([Q] * 17, start_ms=1190)) == [SpeechStopped(1700)]


def test_reset_clears_a_partial_run() -> None:
    det = TurnDetector(DEFAULTS)
    det.feed(frames([S, S]))
    det.reset(now_ms=60)
    assert det.feed(frames([S], start_ms=60)) == []


def test_run_straddling_the_floor_starts_at_the_floor() -> None:
    det = TurnDetector(DEFAULTS)
    det.reset(now_ms=45)
    assert det.feed(frames([S] * 5, start_ms=30)) == [SpeechStarted(45, 45)]


def test_force_stop() -> None:
    det = TurnDetector(DEFAULTS)
    assert det.force_stop(100) is None
    det.feed(frames([S] * 10))
    assert det.force_stop(320) == SpeechStopped(320)
    assert not det.in_speech
    assert det.force_stop(330) is None
    # The user keeps talking: a new turn starts at the cut.
    assert det.feed(frames([S] * 4, start_ms=300)) == [SpeechStarted(320, 320)]


# --- real speech --------------------------------------------------------------


def speech_extent_ms(pcm: npt.NDArray[np.int16]) -> tuple[int, int]:
    """First and last 10 ms block with audible energy in a fixture."""
    blocks = pcm[: len(pcm) // 240 * 240].astype(float).reshape(-1, 240)
    loud = np.flatnonzero(np.sqrt((blocks**2).mean(axis=1)) > 100)
    return int(loud[0]) * 10, int(loud[-1] + 1) * 10


@pytest.mark.parametrize("chunk_ms", [None, 20])
def test_real_speech_gives_two_turns(chunk_ms: int | None) -> None:
    weather, joke = load_wav("weather"), load_wav("joke")
    audio = np.concatenate([weather, silence(1000), joke, silence(1000)])
    joke_at = (len(weather) + len(silence(1000))) // 24
    w0, w1 = speech_extent_ms(weather)
    j0, j1 = speech_extent_ms(joke)
    utterances = [(w0, w1), (joke_at + j0, joke_at + j1)]

    stream, det = VadStream(WebRtcVadBackend()), TurnDetector(DEFAULTS)
    step = len(audio) if chunk_ms is None else chunk_ms * 24
    events = []
    for i in range(0, len(audio), step):
        events += det.feed(stream.process(audio[i : i + step]))

    assert [type(e) for e in events] == [SpeechStarted, SpeechStopped] * 2
    floor = 0
    turns = list(zip(events[::2], events[1::2], strict=True))
    for (start, stop), (t0, t1) in zip(turns, utterances, strict=True):
        assert isinstance(start, SpeechStarted) and isinstance(stop, SpeechStopped)
        assert abs(start.onset_ms - t0) <= 100
        assert start.audio_start_ms == max(start.onset_ms - 300, floor)
        # Stops 500 ms of silence after the speech, plus webrtcvad's own
        # hangover (~150 ms) and frame rounding.
        assert 0 <= stop.audio_end_ms - 500 - t1 <= 200
        floor = stop.audio_end_ms
    if chunk_ms is not None:
        assert events == TurnDetector(DEFAULTS).feed(VadStream(WebRtcVadBackend()).process(audio))
