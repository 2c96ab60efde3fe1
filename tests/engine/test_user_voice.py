"""The user's own voice, learned from their turns: held speech at their level that keeps
their voice's peaks counts as one voice, so a recorded voice whose kurtosis falls in
the "background talk" band interrupts on its first sure words; background talk
quieter than the user, or less peaky, still does not."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from bench.speech import load_wav, silence
from engine.user_voice import VoiceProfile, learned, level_of, profile_of, sounds_like
from models.scripted import ScriptedExecutor
from tests.support.audio import append_chunked
from tests.support.fake_hearing import FakeHearing
from tests.support.harness import Harness
from tests.support.held import babble_heard_as_words, finish, handled, speaking, squashed


def test_a_turn_teaches_its_voice_without_the_silence_around_it() -> None:
    voice = load_wav("lights")
    padded = np.concatenate([silence(300), voice, silence(900)]).astype(np.int16)
    profile = profile_of(padded)
    assert profile is not None
    assert profile == profile_of(voice)  # the padding and the pause are left out
    assert profile.kurtosis > 6.0  # espeak: peaky
    assert profile_of(silence(1000)) is None
    assert profile_of(voice[:2400]) is None  # 100 ms of speech teaches nothing


def test_the_profile_follows_the_turns() -> None:
    first = VoiceProfile(-20.0, 10.0)
    assert learned(None, first) == first
    assert learned(first, VoiceProfile(-10.0, 4.0)) == VoiceProfile(-15.0, 7.0)


def test_held_speech_is_the_user_at_their_level_with_their_peaks() -> None:
    user = VoiceProfile(level_db=-20.0, kurtosis=5.0)  # a recorded voice: excess 2
    assert sounds_like(user, -20.0, 4.5)
    assert sounds_like(user, -23.0, 4.5)  # a little quieter, most of the excess
    assert not sounds_like(user, -25.0, 5.0)  # quieter: background talk, or farther
    assert not sounds_like(user, -13.0, 5.0)  # far louder than they ever were
    assert not sounds_like(user, -20.0, 4.0)  # someone as loud over them: half
    peaky = VoiceProfile(level_db=-20.0, kurtosis=11.0)  # espeak
    assert not sounds_like(peaky, -20.0, 4.6)  # babble as loud: far less peaky
    flat = VoiceProfile(level_db=-20.0, kurtosis=2.5)  # a turn squashed flat
    assert not sounds_like(flat, -20.0, 2.8)  # tonal: no voice, whoever taught what


def test_a_squashed_voice_measures_as_background_talk_by_the_default_bands() -> None:
    """Why the bands alone fail it: the stand-in for a recorded voice."""
    user = profile_of(squashed(load_wav("weather")))
    assert user is not None and 3.0 < user.kurtosis < 6.0
    assert level_of(squashed(load_wav("weather"))) == pytest.approx(user.level_db, abs=1.0)


def quiet_update() -> dict[str, Any]:
    """Qualified interruption on; no answer of its own after a turn (the test asks)."""
    detection = {
        "type": "server_vad",
        "create_response": False,
        "interruption": {"max_backchannel_ms": 5000},
    }
    return {
        "type": "session.update",
        "session": {"type": "realtime", "audio": {"input": {"turn_detection": detection}}},
    }


async def earlier_turn(h: Harness, voice: npt.NDArray[np.int16]) -> None:
    """The user says a turn while the assistant is silent: committed, voice learned."""
    await append_chunked(h, np.concatenate([silence(300), voice, silence(900)]))
    await handled(h)
    assert len(h.of("input_audio_buffer.committed")) == 1


@pytest.mark.parametrize("calibrated", [True, False])
async def test_a_user_whose_turn_taught_their_voice_interrupts_on_the_first_words(
    calibrated: bool,
) -> None:
    """A compressed voice (kurtosis ~4: background talk by the default bands) said
    "Wait, stop." over the answer: after an earlier turn of theirs, the first sure
    hearing releases it; without one, it waits (max_backchannel_ms is 5 s here)."""
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await h.send(quiet_update())
        if calibrated:
            await earlier_turn(h, squashed(load_wav("lights")))
        await speaking(h)
        await append_chunked(h, np.concatenate([silence(300), squashed(load_wav("weather"))]))
        await handled(h)
        assert hearing.answer("Wait, stop.")
        await handled(h)
        # Calibrated: released on the first hearing. Else its words wait: heard again.
        assert len(hearing.calls) == (1 if calibrated else 2)
        started = h.of("input_audio_buffer.speech_started")
        assert len(started) == (2 if calibrated else 0)  # the earlier turn's, then this
        assert [r["status"] for r in h.responses_done()] == (["cancelled"] if calibrated else [])
        finish(executor)


@pytest.mark.parametrize(
    ("user", "why"),
    [
        (lambda: squashed(load_wav("lights")), "quieter than the user"),
        (lambda: load_wav("lights"), "as loud as the user but far less peaky"),
    ],
)
async def test_background_talk_still_never_interrupts_a_calibrated_session(
    user: Any, why: str
) -> None:
    """After the user's turn taught the session their voice, babble heard as sure words
    hearing after hearing still never interrupts: it is not the user's voice."""
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await h.send(quiet_update())
        await earlier_turn(h, user())
        assert h.session.user_turns.held.user is not None, why
        await speaking(h)
        await babble_heard_as_words(h, hearing)
        assert len(hearing.calls) >= 10, why  # heard again as it grew, then whole
        assert len(h.of("input_audio_buffer.speech_started")) == 1, why  # the earlier turn
        assert len(h.of("input_audio_buffer.committed")) == 1
        finish(executor)
        await h.settle()
        assert [r["status"] for r in h.responses_done()] == ["completed"], why
