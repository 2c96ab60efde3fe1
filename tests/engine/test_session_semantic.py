"""semantic_vad in a session: real speech, Silero-style speech finding by the test
VAD, and a fake end-of-turn model whose answers the test releases."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.speech import load_wav, silence
from engine.end_of_turn import END_OF_TURN_RATE, EndOfTurnModel
from engine.pause_scoring import EndOfTurnScored
from engine.semantic_turns import FALLBACK_SILENCE_MS
from engine.turn_fusion import SoundAndWords
from models.scripted import ScriptedExecutor
from tests.support.audio import append_chunked
from tests.support.end_of_turn import FakeEndOfTurn
from tests.support.harness import Harness


def semantic_update(**extra: Any) -> dict[str, Any]:
    turn_detection = {"type": "semantic_vad", **extra}
    return {
        "type": "session.update",
        "session": {"type": "realtime", "audio": {"input": {"turn_detection": turn_detection}}},
    }


async def send_all(h: Harness, pcm: npt.NDArray[np.int16]) -> None:
    """Append `pcm` and let the session handle every append (the model may be waiting)."""
    await append_chunked(h, pcm)
    await handled(h)


async def handled(h: Harness) -> None:
    """Until the session has handled every message and its events are read (settle
    would also wait for the model, which may be waiting on the test)."""
    session = h.session
    await h.run_until(lambda: session.handled() and len(session.outbox) == 0)
    await h.steps(5)  # the reader appends what it took


async def test_a_spoken_turn_commits_once_the_model_is_sure() -> None:
    model = FakeEndOfTurn()
    async with Harness(end_of_turn=model) as h:
        await h.send(semantic_update())
        await h.settle()
        speech = load_wav("weather")
        await send_all(h, np.concatenate([silence(300), speech, silence(1000)]))
        # The pause after the question is being scored; nothing is committed yet.
        assert len(h.of("input_audio_buffer.speech_started")) == 1
        assert h.of("input_audio_buffer.committed") == []
        pending = await model.asked(h)
        pcm = model.calls[-1][0]
        assert pcm.dtype == np.int16
        # The turn so far at 16 kHz: at least the speech itself.
        assert len(pcm) >= len(speech) * END_OF_TURN_RATE // 24_000
        pending.set_result(0.9)
        await h.settle()
        assert len(h.of("input_audio_buffer.speech_stopped")) == 1
        [committed] = h.of("input_audio_buffer.committed")
        assert len(h.of("response.created")) == 1
        [prompt] = [p for p in h.scripted.prompts]
        user = [i for i in prompt.items if i.id == committed["item_id"]]
        assert len(user[0].audio) >= len(speech)


async def test_speech_after_a_hesitation_drops_the_pending_score() -> None:
    model = FakeEndOfTurn()
    async with Harness(end_of_turn=model) as h:
        await h.send(semantic_update(eagerness="high"))
        await h.settle()
        first, second = load_wav("weather"), load_wav("lights")
        await send_all(h, np.concatenate([silence(300), first, silence(600)]))
        hesitation = await model.asked(h)  # scoring the pause after the first half
        await send_all(h, second)
        assert hesitation.cancelled()  # the user went on: that score is moot
        await send_all(h, silence(1000))
        # Pauses inside the second half may have been scored too (a 120 ms pause is a
        # candidate); each was dropped when speech went on, so one call is left.
        final = await model.asked(h)
        assert all(f.cancelled() for _, f in model.calls if f is not final)
        final.set_result(0.95)
        await h.settle()
        # One turn holding both halves.
        assert len(h.of("input_audio_buffer.committed")) == 1
        [started] = h.of("input_audio_buffer.speech_started")
        [stopped] = h.of("input_audio_buffer.speech_stopped")
        span_ms = stopped["audio_end_ms"] - started["audio_start_ms"]
        assert span_ms * 24 >= len(first) + len(second)


async def test_an_unsure_model_is_overruled_by_the_maximum_wait() -> None:
    model = FakeEndOfTurn()
    async with Harness(end_of_turn=model) as h:
        # low: its curve keeps OpenAI's wait (medium and high stop at 1 s, below it)
        await h.send(semantic_update(eagerness="low"))
        await h.settle()
        await send_all(h, np.concatenate([silence(300), load_wav("weather"), silence(1000)]))
        pending = await model.asked(h)
        pending.set_result(0.0)  # "not finished": wait up to the cap (8 s for low)
        await h.settle()
        assert h.of("input_audio_buffer.committed") == []
        await send_all(h, silence(7200))
        await h.settle()
        [stopped] = h.of("input_audio_buffer.speech_stopped")
        assert len(h.of("input_audio_buffer.committed")) == 1
        assert stopped["audio_end_ms"] <= 300 + len(load_wav("weather")) // 24 + 8000 + 100


async def stop_ms(update: dict[str, Any]) -> int:
    async with Harness() as h:
        await h.send(update)
        await h.settle()
        await append_chunked(h, np.concatenate([silence(300), load_wav("weather"), silence(1000)]))
        await h.settle()
        assert len(h.of("input_audio_buffer.committed")) == 1
        [stopped] = h.of("input_audio_buffer.speech_stopped")
        return int(stopped["audio_end_ms"])


async def test_without_a_model_semantic_vad_ends_turns_as_server_vad_does() -> None:
    server_vad = {"type": "server_vad", "silence_duration_ms": FALLBACK_SILENCE_MS}
    fixed = await stop_ms(
        {
            "type": "session.update",
            "session": {"type": "realtime", "audio": {"input": {"turn_detection": server_vad}}},
        }
    )
    assert await stop_ms(semantic_update()) == fixed


async def test_a_score_for_another_request_is_ignored() -> None:
    # A scoring task cancelled after it had already posted its answer (turn detection
    # changed, pause ids started over): the answer names the right pause id but not
    # the request in flight, and must not end the turn.
    model = FakeEndOfTurn()
    async with Harness(end_of_turn=model) as h:
        await h.send(semantic_update())
        await h.settle()
        await send_all(h, np.concatenate([silence(300), load_wav("weather"), silence(1000)]))
        pending = await model.asked(h)
        scoring = h.session.user_turns.detection.scoring
        assert scoring.in_flight is not None
        request, pause_id = scoring.in_flight
        assert not scoring.answered(EndOfTurnScored(request + 1, pause_id, 1.0))
        assert scoring.in_flight == (request, pause_id)  # still waited on
        await handled(h)
        assert h.of("input_audio_buffer.committed") == []
        pending.set_result(1.0)  # the answer to the request in flight does end it
        await h.settle()
        assert len(h.of("input_audio_buffer.committed")) == 1


class SureSounding:
    """Smart Turn as sure of an unfinished phrase as it often is (0.75: auto ends
    the turn after its 150 ms)."""

    async def probability(self, pcm: npt.NDArray[np.int16]) -> float | None:
        return 0.75


class Unfinished:
    """The text model on "I would like to book a table for"."""

    async def probability(self, text: str) -> float | None:
        return 1e-5 if text.endswith("for") else None


@dataclass
class Transcribing(ScriptedExecutor):
    """A scripted executor whose speculative recognition heard an unfinished phrase."""

    asked: list[str] = field(default_factory=list)

    async def speculative_text(self, item_id: str) -> str | None:
        self.asked.append(item_id)
        return "I would like to book a table for"


async def pause_commits(end_of_turn: EndOfTurnModel) -> tuple[bool, Transcribing]:
    """Whether 0.7 s of silence after a phrase ends the turn (semantic_vad auto)."""
    executor = Transcribing()
    async with Harness(executor=executor, end_of_turn=end_of_turn) as h:
        await h.send(semantic_update())
        await h.settle()
        await append_chunked(h, np.concatenate([silence(300), load_wav("weather")]))
        await append_chunked(h, silence(700))
        await h.settle()
        return bool(h.of("input_audio_buffer.committed")), executor


async def test_the_words_hold_a_turn_the_sound_alone_would_end() -> None:
    committed, executor = await pause_commits(SureSounding())
    assert committed and executor.asked == []  # the sound alone: ended at 150 ms
    reading = SoundAndWords(SureSounding(), Unfinished(), budget_s=60)
    committed, executor = await pause_commits(reading)
    assert not committed  # the unfinished phrase needs auto's unsure wait, 1 s
    assert executor.asked and reading.stats.fused >= 1
