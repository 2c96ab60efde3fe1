"""The echo guard's pieces (models/listening/echo.py): the far end's playout timeline
by the send clock, and the own-voice score."""

from __future__ import annotations

import io
import subprocess
import wave

import numpy as np
import numpy.typing as npt
import soxr

from bench.speech import load_wav
from models.listening.echo import FarEnd, own_voice_score, wall_index
from models.listening.frame_stage import RATE
from tests.support.clock import FakeClock


def tone(ms: int, level: int = 1000) -> npt.NDArray[np.int16]:
    """A 24 kHz constant, so where it lands at 16 kHz is easy to see."""
    return np.full(ms * 24, level, np.int16)


def test_a_burst_of_deltas_plays_back_to_back_from_the_first() -> None:
    clock = FakeClock(100.0)
    far = FarEnd(clock)
    t0 = wall_index(clock.t)
    far.sent(tone(100, 1000))
    far.sent(tone(100, 2000))  # sent at once: plays after the first
    assert far.playing_until() == t0 + 2 * 1600
    heard = far.read(t0 - 160, 3 * 1600)
    assert np.all(heard[:160] == 0)  # nothing before the first was sent
    assert np.allclose(heard[160 + 100 : 160 + 1500], 1000, atol=20)
    assert np.allclose(heard[160 + 1700 : 160 + 3100], 2000, atol=40)
    assert np.all(heard[160 + 3200 :] == 0)


def test_after_an_underrun_a_delta_plays_when_it_is_sent() -> None:
    clock = FakeClock(100.0)
    far = FarEnd(clock)
    t0 = wall_index(clock.t)
    far.sent(tone(100))
    clock.t += 0.3  # the next delta comes 200 ms after the first ran out
    far.sent(tone(100))
    assert far.playing_until() == t0 + round(0.3 * RATE) + 1600
    gap = far.read(t0 + 1600, round(0.2 * RATE))
    assert np.all(gap == 0)
    assert np.allclose(far.read(t0 + 4800 + 100, 1400), 1000, atol=20)


def test_a_barge_in_cuts_what_was_still_to_play() -> None:
    clock = FakeClock(100.0)
    far = FarEnd(clock)
    t0 = wall_index(clock.t)
    far.sent(tone(1000))
    clock.t += 0.25
    far.cut()
    assert far.playing_until() == t0 + 4000
    assert np.all(far.read(t0 + 4000, RATE) == 0)
    assert np.allclose(far.read(t0 + 100, 3800), 1000, atol=20)
    far.sent(tone(100, 3000))  # the next answer plays from now
    assert np.allclose(far.read(t0 + 4100, 1400), 3000, atol=60)


def test_the_past_is_kept_a_few_seconds_only() -> None:
    clock = FakeClock(100.0)
    far = FarEnd(clock, keep_s=1.0)
    t0 = wall_index(clock.t)
    far.sent(tone(100))
    clock.t += 5.0
    far.sent(tone(100))
    assert np.all(far.read(t0, 1600) == 0)


# --- the own-voice score ------------------------------------------------------------


def espeak(text: str, voice: str) -> npt.NDArray[np.float32]:
    wav = subprocess.run(["espeak-ng", "-v", voice, "--stdout", text], capture_output=True)
    with wave.open(io.BytesIO(wav.stdout)) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32)
        rate = w.getframerate()
    return np.asarray(soxr.resample(pcm, rate, RATE), np.float32)


FAR = np.asarray(
    soxr.resample(
        np.concatenate([load_wav("joke"), load_wav("weather")]).astype(np.float32), 24_000, RATE
    ),
    np.float32,
)
LAG = RATE // 2
N = RATE  # a second of near end, from 2 s into the answer
START = 2 * RATE


def echo(gain_db: float, delay_ms: int) -> npt.NDArray[np.float32]:
    d = delay_ms * RATE // 1000
    late = np.concatenate([np.zeros(d, np.float32), FAR])[: len(FAR)]
    return np.asarray(late * 10 ** (gain_db / 20), np.float32)


def score(near: npt.NDArray[np.float32]) -> float:
    return own_voice_score(near[START : START + N], FAR[START - LAG : START + N], LAG)


def test_the_assistants_own_voice_scores_high_at_any_level_and_delay() -> None:
    for gain_db in (-10, -20):
        for delay_ms in (50, 100, 200):
            assert score(echo(gain_db, delay_ms)) > 0.9, (gain_db, delay_ms)


def test_another_voice_saying_other_words_scores_low_alone_or_over_the_echo() -> None:
    user = espeak("Wait, stop, I want to ask you about something else entirely.", "en-us+f3")
    user = np.pad(user, (0, max(0, len(FAR) - len(user))))[: len(FAR)]
    assert score(user) < 0.45
    for gain_db in (-10, -20):
        assert score(user + echo(gain_db, 100)) < 0.45, gain_db


def jittered_echo(gain_db: float, delay_ms: int, jitter_ms: int) -> npt.NDArray[np.float32]:
    """The echo as the server sees it: each 20 ms append placed in wall time by when
    it arrived, a few milliseconds early or late."""
    rng = np.random.default_rng(7)
    out = np.zeros_like(FAR)
    chunk = RATE // 50
    for i in range(0, len(FAR) - chunk, chunk):
        j = i + (delay_ms + int(rng.integers(-jitter_ms, jitter_ms + 1))) * RATE // 1000
        if 0 <= j <= len(out) - chunk:
            out[j : j + chunk] = FAR[i : i + chunk]
    return np.asarray(out * 10 ** (gain_db / 20), np.float32)


def test_the_echo_scores_high_when_appends_arrive_a_few_milliseconds_off() -> None:
    for gain_db in (-10, -20):
        for delay_ms in (50, 200):
            assert score(jittered_echo(gain_db, delay_ms, 3)) > 0.85, (gain_db, delay_ms)
            assert score(jittered_echo(gain_db, delay_ms, 8)) > 0.75, (gain_db, delay_ms)
