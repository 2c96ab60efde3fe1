"""Qualified interruption in a session: speech while the assistant is audible is held
(no speech_started, no barge-in) until it qualifies; a backchannel or a burst is no
turn at all and the answer plays on; a real interruption goes out with its true
audio_start_ms and cancels the answer."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from bench.speech import load_wav, silence
from bench.turns.scenarios import make_scenarios
from models.listening.vad import SileroOnnxBackend
from models.scripted import ScriptedExecutor
from tests.support.audio import append_chunked
from tests.support.fake_hearing import FakeHearing
from tests.support.harness import Harness
from tests.support.held import (
    babble,
    babble_heard_as_words,
    finish,
    handled,
    speaking,
    squashed,
)


def update(**interruption: Any) -> dict[str, Any]:
    detection = {"type": "server_vad", "interruption": {"max_backchannel_ms": 5000, **interruption}}
    return {
        "type": "session.update",
        "session": {"type": "realtime", "audio": {"input": {"turn_detection": detection}}},
    }


def spoken(*names: str, gap_ms: int = 900) -> npt.NDArray[np.int16]:
    parts = [silence(300)]
    for name in names:
        parts += [load_wav(name), silence(gap_ms)]
    return np.concatenate(parts).astype(np.int16)


async def answer_all(h: Harness, hearing: FakeHearing, text: str, *, sure: bool = True) -> int:
    """Answer every hearing the session asks for, as it asks; how many there were."""
    n = 0
    while hearing.answer(text, sure=sure):
        n += 1
        await handled(h)
    return n


async def speech_during_an_answer(h: Harness, **interruption: Any) -> None:
    """Qualified interruption on, an answer streaming, and a question said over it:
    held, its first hearing asked for."""
    await h.send(update(**interruption))
    await speaking(h)
    await append_chunked(h, np.concatenate([silence(300), load_wav("weather")]))
    await handled(h)


async def plays_on(h: Harness, executor: ScriptedExecutor) -> None:
    """Nothing of the held speech reached the wire, and the answer plays to its end."""
    assert h.of("input_audio_buffer.speech_started") == []
    assert h.of("input_audio_buffer.committed") == [] and h.responses_done() == []
    finish(executor)
    await h.settle()
    assert [r["status"] for r in h.responses_done()] == ["completed"]


async def test_a_backchannel_is_no_turn_and_the_answer_plays_on() -> None:
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await h.send(update())
        await speaking(h)
        await append_chunked(h, spoken("weather"))
        await handled(h)
        assert await answer_all(h, hearing, "Mm-hm.") >= 2  # as it grew, then whole
        assert h.of("input_audio_buffer.speech_started") == []
        assert h.of("input_audio_buffer.committed") == []
        assert h.responses_done() == []  # still answering
        finish(executor)
        await h.settle()
        assert [r["status"] for r in h.responses_done()] == ["completed"]
        assert h.of("input_audio_buffer.speech_started") == []


async def test_a_real_interruption_goes_out_with_its_true_start_and_cancels() -> None:
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await speech_during_an_answer(h)
        assert h.of("input_audio_buffer.speech_started") == []  # held
        [_] = hearing.pending()  # one hearing at a time
        heard_pcm = hearing.calls[0][0]
        assert len(heard_pcm) >= 24_000 // 5  # at least min_speech_ms of the speech
        hearing.answer("Wait, stop.")
        await handled(h)
        [started] = h.of("input_audio_buffer.speech_started")
        assert 0 <= started["audio_start_ms"] <= 300  # before the speech, not at release
        [done] = h.responses_done()
        assert done["status"] == "cancelled"
        types = [e["type"] for e in h.events]
        assert types.index("input_audio_buffer.speech_started") < types.index("response.done")
        await append_chunked(h, silence(900))
        finish(executor)
        await h.settle()
        [committed] = h.of("input_audio_buffer.committed")
        assert committed["item_id"] == started["item_id"]


async def test_speech_that_ends_while_heard_commits_once_it_is_heard_as_words() -> None:
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await h.send(update())
        await speaking(h)
        await append_chunked(h, spoken("weather"))  # the speech and the silence that ends it
        await handled(h)
        assert h.of("input_audio_buffer.speech_stopped") == []  # nothing yet
        await answer_all(h, hearing, "what is the weather like")
        types = [e["type"] for e in h.events]
        order = ["speech_started", "speech_stopped", "committed"]
        at = [types.index(f"input_audio_buffer.{t}") for t in order]
        assert at == sorted(at)
        assert h.responses_done()[0]["status"] == "cancelled"
        finish(executor)


async def test_without_a_recognizer_duration_decides() -> None:
    executor = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0))
    async with Harness(executor, vad=SileroOnnxBackend()) as h:
        await h.send(update(min_speech_ms=250))
        await speaking(h)
        # A 120 ms burst of speech: held, then dropped.
        burst = load_wav("weather")[: 24_000 * 12 // 100]
        await append_chunked(h, np.concatenate([silence(300), burst, silence(900)]))
        await handled(h)
        assert h.of("input_audio_buffer.speech_started") == []
        assert h.of("input_audio_buffer.committed") == [] and h.responses_done() == []
        # Real speech: out once it has lasted 250 ms, and the answer is cancelled.
        await append_chunked(h, spoken("weather"))
        await handled(h)
        assert len(h.of("input_audio_buffer.speech_started")) == 1
        assert [r["status"] for r in h.responses_done()] == ["cancelled"]
        finish(executor)


async def test_nothing_is_held_while_the_assistant_is_silent() -> None:
    hearing = FakeHearing()
    async with Harness(hearing=hearing) as h:
        await h.send(update())
        await h.settle()
        await append_chunked(h, spoken("weather"))
        await h.settle()
        assert len(h.of("input_audio_buffer.speech_started")) == 1
        assert len(h.of("input_audio_buffer.committed")) == 1
        assert hearing.calls == []


async def test_two_held_utterances_in_one_append_are_two_turns() -> None:
    # Both end inside one large append, before the recognizer can answer: the first is
    # decided by its duration when the second starts; each turn holds its own speech.
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await h.send(update())
        await speaking(h)
        first, second = load_wav("weather"), load_wav("lights")
        await h.append(spoken("weather", "lights"))
        await handled(h)
        await answer_all(h, hearing, "tell me more about it")
        finish(executor)
        await h.settle()
        committed = h.of("input_audio_buffer.committed")
        assert len(committed) == 2
        last_prompt = executor.prompts[-1]
        [turn] = [i for i in last_prompt.items if i.id == committed[1]["item_id"]]
        assert turn.audio is not None
        assert len(second) <= len(turn.audio) < len(first) + len(second)


# What Whisper tiny heard of background babble, hearing after hearing (make eval-turns).
BABBLE = ["You're not able to...", "", "You are the only one", "", "The only one that went"]


async def test_words_the_recognizer_is_unsure_of_are_heard_again_then_dropped() -> None:
    """Background talk heard as words: each hearing of the growing speech is unsure
    and no two in a row share a word, so it never interrupts; once ended it is heard
    whole, and dropped."""
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await h.send(update())
        await speaking(h)
        audio, step = spoken("weather"), 24_000 * 3 // 10
        heard = 0
        for at in range(0, len(audio), step):  # answered as it comes, 300 ms at a time
            await append_chunked(h, audio[at : at + step])
            await handled(h)
            while hearing.answer(BABBLE[heard % len(BABBLE)], sure=False):
                heard += 1
                await handled(h)
        lengths = [len(pcm) for pcm, _ in hearing.calls]
        assert len(lengths) >= 4 and lengths == sorted(lengths)  # heard again as it grew
        await plays_on(h, executor)


async def test_a_long_run_of_unsure_words_interrupts() -> None:
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await h.send(update(max_backchannel_ms=800))
        await speaking(h)
        await append_chunked(h, spoken("weather"))  # about 1.5 s of speech
        await handled(h)
        await answer_all(h, hearing, "I think that the weather", sure=False)
        assert len(h.of("input_audio_buffer.speech_started")) == 1
        assert [r["status"] for r in h.responses_done()] == ["cancelled"]
        finish(executor)


async def test_two_unsure_hearings_in_a_row_that_agree_interrupt() -> None:
    """A real interruption the recognizer is unsure of ("No." in a Scottish voice, three
    times over): two hearings in a row that share a strong word qualify it."""
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await speech_during_an_answer(h)
        hearing.answer("No.", sure=False)
        await handled(h)
        assert h.of("input_audio_buffer.speech_started") == []
        hearing.answer("No, that's", sure=False)
        await handled(h)
        assert len(h.of("input_audio_buffer.speech_started")) == 1
        assert [r["status"] for r in h.responses_done()] == ["cancelled"]
        finish(executor)


async def test_a_sure_hearing_of_very_short_speech_waits_for_the_next() -> None:
    """First heard at 100 ms of speech (below SURE_ALONE_MS): sure words there are not
    trusted alone; the next hearing that agrees releases the speech."""
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await speech_during_an_answer(h, min_speech_ms=100)
        hearing.answer("Run.")
        await handled(h)
        assert h.of("input_audio_buffer.speech_started") == []
        hearing.answer("Run, stop.")
        await handled(h)
        assert len(hearing.calls) == 2
        assert len(h.of("input_audio_buffer.speech_started")) == 1
        finish(executor)


@pytest.mark.parametrize(
    ("count", "interrupts"),
    [({}, False), ({"crowd_kurtosis": 0, "one_voice_kurtosis": 0}, True)],
)
async def test_background_talk_never_interrupts_however_sure_its_words(
    count: dict[str, float], interrupts: bool
) -> None:
    """Background talk heard, hearing after hearing, as sure words two hearings share
    (Whisper heard one of these talkers' "No" over and over): it sounds like several
    voices, so its words never count, and once it ends it is dropped. With the voice
    count off (both thresholds 0) the same words interrupt at the first hearing."""
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await h.send(update(**count))
        await speaking(h)
        await babble_heard_as_words(h, hearing)
        if interrupts:
            assert len(hearing.calls) == 1
            assert len(h.of("input_audio_buffer.speech_started")) == 1
            assert [r["status"] for r in h.responses_done()] == ["cancelled"]
            finish(executor)
            return
        assert len(hearing.calls) >= 10  # heard again as it grew, then whole
        await plays_on(h, executor)


@pytest.mark.parametrize(("clarity", "interrupts"), [(0.75, True), (0.0, False)])
async def test_a_clear_pitch_makes_a_flat_voice_one_voice(clarity: float, interrupts: bool) -> None:
    """A voice squashed flat (a kurtosis of ~4, the background-talk band) says "Wait,
    stop." over the answer, with no earlier turn to learn it from: its pitch clarity
    over its held speech (0.78 for this espeak voice squashed; recorded voices measure
    0.8-0.99) reaches `one_voice_clarity` 0.75, so it is one voice and the first sure
    hearing releases it. With the clarity off its words wait (max_backchannel_ms is 5 s
    here) and it is heard again."""
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await h.send(update(one_voice_clarity=clarity))
        await speaking(h)
        await append_chunked(h, np.concatenate([silence(300), squashed(load_wav("weather"))]))
        await handled(h)
        assert hearing.answer("Wait, stop.")
        await handled(h)
        assert len(hearing.calls) == (1 if interrupts else 2)
        assert len(h.of("input_audio_buffer.speech_started")) == (1 if interrupts else 0)
        assert [r["status"] for r in h.responses_done()] == (["cancelled"] if interrupts else [])
        finish(executor)


async def test_sure_words_count_once_the_speech_sounds_like_one_voice() -> None:
    """Held speech that begins in background talk: its first hearing's sure words wait
    while it sounds like several voices; once the user's own voice carries it, those
    words release it at once, without waiting for the next hearing."""
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await h.send(update())
        await speaking(h)
        await append_chunked(h, np.concatenate([silence(300), babble()[: 24_000 * 3 // 10]]))
        await handled(h)
        assert hearing.answer("Wait.")  # sure, but of what sounds like several voices
        await handled(h)
        assert h.of("input_audio_buffer.speech_started") == []
        user = load_wav("weather")
        for at in range(0, len(user), 480):
            await h.append(user[at : at + 480])
            await handled(h)
            if h.of("input_audio_buffer.speech_started"):
                break
        assert len(h.of("input_audio_buffer.speech_started")) == 1
        assert [r["status"] for r in h.responses_done()] == ["cancelled"]
        # Released on the first hearing's words: the next one, under way, was cancelled.
        assert [f.cancelled() for _, f in hearing.calls] == [False, True]
        finish(executor)


@pytest.mark.parametrize(
    ("count", "interrupts"),
    [({}, False), ({"crowd_kurtosis": 0, "one_voice_kurtosis": 0}, True)],
)
async def test_music_is_no_voice_however_long(count: dict[str, float], interrupts: bool) -> None:
    """Two seconds of tones, which webrtcvad calls speech and Whisper hears as unsure
    hums and words: held longer than max_backchannel_ms, but tonal (a kurtosis below a
    Gaussian's), so no voice at all, and never an interruption; with the voice count off
    it interrupts by its length."""
    music = next(it.audio for it in make_scenarios(15).items if it.text == "music")
    executor, hearing = ScriptedExecutor(chunk_gate=asyncio.Semaphore(0)), FakeHearing()
    async with Harness(executor, hearing=hearing) as h:
        await h.send(update(max_backchannel_ms=800, **count))
        await speaking(h)
        audio, step = np.concatenate([silence(300), music, silence(900)]), 24_000 // 10
        heard = ["In the middle.", "Let's go.", "Come on.", "Big day."]  # no two agree
        for at in range(0, len(audio), step):
            await append_chunked(h, audio[at : at + step])
            await handled(h)
            while hearing.answer(heard[len(hearing.calls) % len(heard)], sure=False):
                await handled(h)
        started = len(h.of("input_audio_buffer.speech_started"))
        assert started == (1 if interrupts else 0)
        assert len(hearing.calls) >= (3 if interrupts else 10)
        finish(executor)
        await h.settle()
        first = h.responses_done()[0]  # the answer (an interruption gets its own)
        assert first["status"] == ("cancelled" if interrupts else "completed")
